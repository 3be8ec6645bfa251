"""What the commands' argument parsing shares: usage errors and failures on one line
('<prog>: error: <message>'), argparse types for bounded integers, the download tools'
missing extras and stop note."""
import argparse
import sys

from mlimages.config import interpreter
from mlimages import errors


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


def missing_download_extras(exc):
    """The UsageError (exit status 2) of a tool of the download path (urls_to_img2dataset,
    img2dataset_to_list) whose img2dataset or pyarrow is missing (the ImportError `exc`):
    it names the download extras."""
    return errors.UsageError('%s; install the download extras: %s install -r '
                             'requirements-download.txt' % (exc, interpreter.pip_command()))


def download_stopped_note(args):
    """What a tool of the download path stopped by SIGTERM or Ctrl-C leaves: OUT
    (args.out_dir), written whole or not at all, as it was (entry.run's stopped_note)."""
    return '%s was left as it was, rerun the same command' % args.out_dir


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
