"""Settings around a run: the value checks of flags.CHECKS, the run's flags.txt, start-up
before TensorFlow (quiet logs, supported versions), the Python that runs the programs
(interpreter, standard library only: an entry point runs it by path before any import)."""
