"""The two errors the command lines report as one line, and the text of a TensorFlow error.

UsageError: a bad flag value or input, found before any graph is built (exit status 2).
TrainingError: training, evaluation or prediction started and then stopped (exit status 1).
Bad or missing data is file_db.DataError (exit status 2).
"""


class UsageError(ValueError):
    """A bad flag value or input: reported as one line before any graph is built."""


class TrainingError(RuntimeError):
    """Training started and then stopped on an error: reported as one line, exit 1."""


def op_error_text(error):
    """The cause in a graph-mode OpError message, without TF 2.15's 'Graph execution
    error:' header, node names and stack traces."""
    boilerplate = ('Graph execution error:', 'Detected at node', 'File "', 'Node:', '[[')
    lines = [line.strip() for line in str(getattr(error, 'message', error)).splitlines()]
    return ' '.join(l for l in lines if l and not l.startswith(boilerplate)) or \
        type(error).__name__
