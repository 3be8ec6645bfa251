"""The two errors the command lines report as one line, and the text of a TensorFlow error.

UsageError: a bad flag value or input, found before any graph is built (exit status 2).
TrainingError: training, evaluation or prediction started and then stopped (exit status 1).
Bad or missing data is file_db.DataError (exit status 2). Interrupted and Stopped: a
signal (exit status 128 + the signal: 143 for SIGTERM, 130 for SIGINT); stop_raises makes
SIGTERM stop a program as Ctrl-C does, and `stopped` names either for the one line.
"""
import signal

# The signals that stop a program with one line: a container's or a batch system's stop
# (SIGTERM) and Ctrl-C (SIGINT).
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class UsageError(ValueError):
    """A bad flag value or input: reported as one line before any graph is built."""


class TrainingError(RuntimeError):
    """Training started and then stopped on an error: reported as one line, exit 1."""


def op_error_text(error):
    """The cause in a graph-mode OpError message, without TF 2.15's 'Graph execution
    error:' header, node names and stack traces."""
    boilerplate = ('Graph execution error:', 'Detected at node', 'File "', 'Node:', '[[')
    lines = [line.strip() for line in str(getattr(error, 'message', error)).splitlines()]
    text = ' '.join(l for l in lines if l and not l.startswith(boilerplate))
    # TensorFlow adds its out-of-memory hint to every ResourceExhaustedError, a full disk's too.
    return text.split(' Hint: If you want to see a list of allocated tensors')[0].strip() or \
        type(error).__name__


class Interrupted(Exception):
    """Training stopped on SIGTERM or SIGINT after its step in flight (the chief saved a
    checkpoint): reported as one line, exit status 128 + the signal (143, 130)."""

    def __init__(self, signum, message):
        super().__init__(message)
        self.signum = signum


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT outside a training session (start-up, evaluation, prediction):
    raised where the program is, reported as one line, exit status 128 + the signal."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum



def _raise_stopped(signum, frame):
    raise Stopped(signum)


def stop_raises():
    """SIGTERM and SIGINT raise Stopped where the program is (the start of train.py and of
    every tool), so a tool's `except KeyboardInterrupt` handles both."""
    for signum in SIGNALS:
        signal.signal(signum, _raise_stopped)


def stopped(interrupt):
    """('stopped by SIGTERM', 143) for a KeyboardInterrupt: Stopped names its signal,
    Python's own is SIGINT's (130)."""
    signum = getattr(interrupt, 'signum', signal.SIGINT)
    return 'stopped by %s' % signal.Signals(signum).name, 128 + signum