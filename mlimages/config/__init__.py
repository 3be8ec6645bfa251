"""Settings around a run: the valid values of the flags (choices, flag_checks), the run's
flags.txt, start-up before TensorFlow (quiet logs, supported versions), the Python that
runs the programs (interpreter, standard library only: an entry point runs it by path
before any import)."""
