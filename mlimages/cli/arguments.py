"""What the commands' argument parsing shares: usage errors and failures on one line
('<prog>: error: <message>'), argparse types for bounded integers."""
import argparse
import sys

from mlimages.config import interpreter
from mlimages.errors import stopped


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: '<prog>: error: <message><hint>'
    (exit status 2)."""

    def __init__(self, *args, error_hint='', **kwargs):
        super(OneLineParser, self).__init__(*args, **kwargs)
        self.error_hint = error_hint

    def error(self, message):
        self.exit(2, '%s: error: %s%s\n' % (self.prog, message, self.error_hint))


def error_line(prog, message):
    """Writes `PROG: error: MESSAGE` to stderr, the message on one line (its whitespace,
    newlines included, collapsed)."""
    sys.stderr.write('%s: error: %s\n' % (prog, ' '.join(str(message).split())))


def download_failure_status(prog, exc, out_dir):
    """The one line and the exit status of a tool of the download path (urls_to_img2dataset,
    img2dataset_to_list) stopped by an ImportError (img2dataset or pyarrow missing: 2, naming
    the download extras) or a KeyboardInterrupt (SIGTERM or Ctrl-C: 128 + the signal; OUT,
    written whole or not at all, left as it was)."""
    if isinstance(exc, ImportError):
        error_line(prog, '%s; install the download extras: %s install -r '
                   'requirements-download.txt' % (exc, interpreter.pip_command()))
        return 2
    words, status = stopped(exc)
    error_line(prog, '%s; %s was left as it was, rerun the same command' % (words, out_dir))
    return status


def int_at_least(minimum, bound):
    """An argparse type: an integer >= minimum; `bound` words the limit in the error."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError('not an integer: %r' % text) from None
        if value < minimum:
            raise argparse.ArgumentTypeError('must be %s, got %d' % (bound, value))
        return value
    return parse


positive_int = int_at_least(1, '> 0')
non_negative_int = int_at_least(0, '>= 0')
