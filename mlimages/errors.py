"""Every exception type of the trainer and its tools, the exit status each means, and the
text of a TensorFlow error. A program reports each as one line.

UsageError: a bad flag value or input, found before any graph is built (exit status 2).
TrainingError: training, evaluation or prediction started and then stopped (exit status 1).
Bad or missing data is DataError (exit status 2); the other input errors below (a hierarchy,
a directory, an archive, an image list or image, a TF_CONFIG) are exit status 2 where a
program meets them, too. PeerLost: a task of a cluster job was lost, so this one ends
(exit status 200, retryable). Interrupted and Stopped: a signal (exit status 128 + the signal: 143
for SIGTERM, 130 for SIGINT); stop_raises makes SIGTERM stop a program as Ctrl-C does, and
`stopped` names either for the one line. Each type's `status` is that exit status (the
input errors' 2 is BadInput's), and `report` writes the one line and gives it.
"""
import signal
import sys

# The signals that stop a program with one line: a container's or a batch system's stop
# (SIGTERM) and Ctrl-C (SIGINT).
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class BadInput:
    """What every input error below shares: exit status 2 where a program reports one (a
    mixin of their types, not caught itself)."""
    status = 2


class UsageError(BadInput, ValueError):
    """A bad flag value or input: reported as one line before any graph is built."""


class TrainingError(RuntimeError):
    """Training started and then stopped on an error: reported as one line, exit 1."""
    status = 1


def op_error_text(error):
    """The cause in a graph-mode OpError message, without TF 2.15's 'Graph execution
    error:' header, node names and stack traces."""
    boilerplate = ('Graph execution error:', 'Detected at node', 'File "', 'Node:', '[[')
    lines = [line.strip() for line in str(getattr(error, 'message', error)).splitlines()]
    text = ' '.join(l for l in lines if l and not l.startswith(boilerplate))
    # TensorFlow adds its out-of-memory hint to every ResourceExhaustedError, a full disk's too.
    return text.split(' Hint: If you want to see a list of allocated tensors')[0].strip() or \
        type(error).__name__


# Retryable (128-255, beside 143 / 130) for Kubernetes' ExitCode policy, Slurm's --requeue and
# tools/launch_local_cluster.py, and no signal's number (128 + n for n <= 64).
PEER_LOST_STATUS = 200


class PeerLost(RuntimeError):
    """A task of the job this one cannot go on without was lost (peers.py): reported as one
    line, exit status 200, retryable like 143 / 130 (the rerun resumes from the chief's
    last checkpoint)."""
    status = PEER_LOST_STATUS


class Interrupted(Exception):
    """Training stopped on SIGTERM or SIGINT after its step in flight (the chief saved a
    checkpoint): reported as one line, exit status 128 + the signal (143, 130)."""

    def __init__(self, signum, message):
        super().__init__(message)
        self.signum = signum

    @property
    def status(self):
        return 128 + self.signum


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT outside a training session (start-up, evaluation, prediction):
    raised where the program is, reported as one line, exit status 128 + the signal."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum

    @property
    def status(self):
        return 128 + self.signum


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


def report(prog, error):
    """Writes `<prog>: error: <error>` to stderr; returns the exit status of the error's
    type (its `status`)."""
    sys.stderr.write('%s: error: %s\n' % (prog, error))
    return error.status


# ------------------------------------------------- the input errors of each part


class ConfigError(BadInput, ValueError):
    """A TF_CONFIG or flag combination that cannot work; its message is one line."""


class DataError(BadInput, ValueError):
    """Bad or missing input data; its message is one line naming the path."""


class HierarchyError(BadInput, ValueError):
    """A hierarchy file that cannot be used; the message is one line: file:line: what, fix."""

    def __init__(self, path, lineno, problem, fix):
        where = '%s:%d' % (path, lineno) if lineno else str(path)
        super().__init__('%s: %s; %s' % (where, problem, fix))
        self.path, self.lineno = path, lineno


class RestartLoop(Exception):
    """The session failed `restarts` times in a row, each time before completing a step."""
    status = 1

    def __init__(self, restarts):
        super().__init__(restarts)
        self.restarts = restarts


class DirectoryError(BadInput, ValueError):
    """A directory that cannot be used; its message is one line naming it and the fix."""


class ArchiveError(BadInput, Exception):
    """An archive that cannot be read as a tar; str() names it (one line)."""


class ConvertError(BadInput, ValueError):
    """Bad input for the whole run; the message is one line naming the fix."""


class BadRecord(BadInput, ValueError):
    """One record that cannot be converted; str() is the reason."""


class MakeRecordsError(BadInput, Exception):
    """Bad input to build_records(); the CLI prints it as one line and exits 2."""


class InputError(MakeRecordsError, ValueError):
    """A bad argument: no list, a missing list file, class_num <= 0, ..."""


class ListFormatError(MakeRecordsError, ValueError):
    """A bad line in an image list; str() is '<source>:<lineno>: <what is wrong>'."""

    def __init__(self, source, lineno, what):
        super().__init__('%s:%d: %s' % (source, lineno, what))
        self.source = source
        self.lineno = lineno
        self.what = what


class BadImageError(BadInput, ValueError):
    """An image file that is missing or cannot be decoded; str() is the reason."""


class ListError(BadInput, Exception):
    """Bad input; exit 2."""


class IncompleteDownloadError(Exception):
    """img2dataset left shards failed or unfinished; exit 1."""
    status = 1


class AllImagesSkippedError(MakeRecordsError):
    """Every image of the job was skipped; `.summary` holds build_records' summary.

    The report has been written when this is raised. The CLI exits 1 for it.
    """
    status = 1

    def __init__(self, message, summary):
        super().__init__(message)
        self.summary = summary


class UrlListError(BadInput, Exception):
    """Bad input; the CLI prints it as one line and exits 2."""


class ExportError(RuntimeError):
    """An export failed after it started (tools/export_onnx.py: the converter, or the
    converted model that does not compute what TensorFlow computes); one line, exit 1."""
    status = 1
