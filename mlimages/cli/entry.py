"""A command's main: its arguments parsed, its work run, and each way it can fail said as
one line on stderr with the exit status that way means."""
from mlimages import errors
from mlimages.cli import arguments


def run(prog, parse, work, expected=(), stopped_note=None, collapse=True):
    """Runs the command `prog`; returns its exit status.

    parse() gives the arguments; its SystemExit (argparse's --help, a usage error it has
    already said) gives its status (2 when it has none). work(args) does the command and
    gives the status. An error of an `expected` type is `<prog>: error: <message>`, status
    the type's (errors' `status`); the message's whitespace is collapsed to one line
    (arguments.error_line) unless collapse is False (errors.report, as it is). With
    stopped_note, a KeyboardInterrupt (Ctrl-C, or SIGTERM as errors.Stopped) is
    `<prog>: error: stopped by <signal>; <stopped_note(args)>`, status 128 + the signal
    (errors.stopped); without it, the interrupt goes on up."""
    try:
        args = parse()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return work(args)
    except expected as exc:
        if not collapse:
            return errors.report(prog, exc)
        arguments.error_line(prog, exc)
        return exc.status
    except KeyboardInterrupt as exc:
        if stopped_note is None:
            raise
        words, status = errors.stopped(exc)
        arguments.error_line(prog, '%s; %s' % (words, stopped_note(args)))
        return status
