"""Settings around a run: the value checks of flags.CHECKS, the run's flags.txt, start-up
before TensorFlow (quiet logs, supported versions)."""
