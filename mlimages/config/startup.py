"""What every entry point does before TensorFlow is imported.

- TensorFlow's C++ start-up messages (CUDA factory registrations, CPU-feature notes,
  TensorRT) are hidden by setting TF_CPP_MIN_LOG_LEVEL=3 before the import; errors that
  matter still reach Python as exceptions. --verbose (or a TF_CPP_MIN_LOG_LEVEL of the
  user's) keeps them, TensorFlow's GPU warnings and the fp16 rewrite's count of converted
  nodes with them; the one that matters at start by default (a GPU newer than the build's
  machine code) train.py says itself (config/gpu_env.compute_capability_line).
- After the import, deprecation notices, the Estimator's own per-interval log lines
  ("loss = ..., step = ...", "global_step/sec: ...") and its bookkeeping lines are dropped
  from TensorFlow's logger: the trainer logs one line per interval itself
  (hooks.TrainingLogHook). MonitoredSession's "An error was raised ... Error: <e>" (a
  preempted peer: it creates the session anew) keeps its words but gives the error as
  errors.op_error_text, one line: without the two stack traces of where the failed op was
  built (some 50 lines of TensorFlow's internals each time).
- train.py's kernel library: oneDNN's kernels are turned on where it prefers them
  (config/cpu.py prefer_onednn: an fp32 run on an AVX2/FMA CPU whose TensorFlow default
  leaves them off); TensorFlow reads that setting once, when it loads.
- The Python and TensorFlow versions are checked: this code runs on Python 3.9-3.11 with
  TensorFlow 2.15 (the last release with tf.estimator).
"""
import logging
import os
import sys
import warnings

from mlimages.config import cpu, interpreter
from mlimages.errors import op_error_text

SUPPORTED_PYTHON = ((3, 9), (3, 11))
SUPPORTED_TENSORFLOW = '2.15.'


def install():
    """The command that installs the requirements into this Python."""
    return '%s install -r requirements.txt (tensorflow==2.15.1)' % interpreter.pip_command()


# The Estimator's own interval lines (its LoggingTensorHook and StepCounterHook) and its
# bookkeeping; checkpoint saves and restores stay in the log.
ESTIMATOR_LINES = ('loss = ', 'global_step/sec: ', 'Using config: ', 'Calling model_fn',
                   'Done calling model_fn', 'Create CheckpointSaverHook',
                   'Graph was finalized', 'Running local_init_op', 'Done running local_init_op',
                   'Calling checkpoint listeners', 'Loss for final step')


def verbose_requested(argv):
    return any(arg in ('--verbose', '--verbose=true', '--verbose=True', '--verbose=1')
               for arg in argv)


def fail(program, message):
    sys.stderr.write('%s: error: %s\n' % (program, message))
    sys.exit(2)


def check_python(program, version=None):
    """Exits with status 2 and one line on a Python outside 3.9-3.11."""
    version = tuple((version or sys.version_info)[:2])
    low, high = SUPPORTED_PYTHON
    if not low <= version <= high:
        fail(program, 'Python %d.%d is not supported: this program runs on Python %d.%d-%d.%d '
             'with TensorFlow 2.15 (the last TensorFlow with tf.estimator)'
             % (version + low + high))


def check_tensorflow(program, version):
    if not version.startswith(SUPPORTED_TENSORFLOW):
        fail(program, 'TensorFlow %s is not supported: this program needs TensorFlow 2.15 '
             '(the last with tf.estimator); %s' % (version, install()))


TENSORFLOW_DISTRIBUTIONS = ('tensorflow', 'tensorflow-cpu', 'tensorflow-intel',
                            'tensorflow-macos', 'tensorflow-gpu')


def installed_tensorflow():
    """The installed TensorFlow's version by its package metadata (no import), or None."""
    from importlib import metadata
    for name in TENSORFLOW_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_versions(program):
    """The tools' check at start, without importing TensorFlow: exits with status 2 and
    one line on an unsupported Python or a missing or other TensorFlow."""
    check_python(program)
    version = installed_tensorflow()
    if version is None:
        fail(program, 'TensorFlow is not installed; %s' % install())
    check_tensorflow(program, version)


# How MonitoredSession's message for a step or session it retries begins (its args: the error).
RETRY_LINE = 'An error was raised'


class _Quiet(logging.Filter):
    def filter(self, record):
        if str(record.msg).startswith(RETRY_LINE) and record.args and \
                isinstance(record.args[0], Exception):
            record.args = (op_error_text(record.args[0]),) + tuple(record.args[1:])
        message = record.getMessage()
        return not message.startswith(ESTIMATOR_LINES) and not (
            record.levelno == logging.WARNING and 'deprecat' in message)


def _expanded(argv, depth=0):
    """argv with each --flagfile's lines in its place, as absl reads them (one argument a
    line; blank lines and #, // comments skipped); an unreadable file is left to the real
    parse, which names it."""
    out, args = [], iter(argv)
    for arg in args:
        path = None
        if arg.startswith(('--flagfile=', '-flagfile=')):
            path = arg.split('=', 1)[1]
        elif arg in ('--flagfile', '-flagfile'):
            path = next(args, None)
        if path is None or depth > 10:
            out.append(arg)
            continue
        try:
            with open(path) as f:
                lines = [line.strip() for line in f]
        except OSError:
            continue
        out.extend(_expanded([line for line in lines if line and
                              not line.startswith(('#', '//'))], depth + 1))
    return out


def requested_dtype(argv):
    """--dtype as the command line gives it (its --flagfile files read; the last one
    wins), or flags.py's default 'fp32'."""
    dtype = 'fp32'
    argv = _expanded(list(argv))
    for i, arg in enumerate(argv):
        if arg.startswith(('--dtype=', '-dtype=')):
            dtype = arg.split('=', 1)[1]
        elif arg in ('--dtype', '-dtype') and i + 1 < len(argv):
            dtype = argv[i + 1]
    return dtype


def before_tensorflow(program, argv=None, choose_kernels=False):
    """Call first in an entry point, before anything imports TensorFlow; returns whether
    --verbose was given. choose_kernels: the entry point trains or runs the model with
    --dtype, and TensorFlow's oneDNN kernels are turned on where train.py prefers them
    (cpu.prefer_onednn)."""
    argv = sys.argv[1:] if argv is None else argv
    check_python(program)
    verbose = verbose_requested(argv)
    if not verbose:
        os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    if choose_kernels:
        cpu.prefer_onednn(cpu.this_cpu(), os.environ, requested_dtype(argv))
    try:
        import tensorflow as tf_root
    except ImportError as e:
        fail(program, 'TensorFlow cannot be imported (%s); %s' % (e, install()))
    check_tensorflow(program, tf_root.__version__)
    if not verbose:
        warnings.filterwarnings('ignore', message='.*is deprecated.*')
        warnings.filterwarnings('ignore', category=DeprecationWarning)
        # --deterministic: the graph seed seeding the input's random ops is the intent.
        warnings.filterwarnings('ignore', message='Seed .* from outer graph might be getting')
        logging.getLogger('tensorflow').addFilter(_Quiet())
    return verbose



def wants_help(argv=None):
    """Whether the command line asks for --help (which needs no TensorFlow)."""
    argv = sys.argv[1:] if argv is None else argv
    return any(arg in ('-h', '--help', '-help', '--helpshort', '--helpfull') for arg in argv)
