"""mlimages/cli/entry.py: a command's parse, run, one-line errors and their exit status."""
import signal

import pytest

from mlimages import errors
from mlimages.cli import entry


def fail(error):
    def work(args):
        raise error
    return work


def test_parse_exit_is_the_status_and_work_gives_its_own():
    def usage():
        raise SystemExit(2)
    assert entry.run('t.py', usage, None) == 2
    assert entry.run('t.py', lambda: 'args', lambda args: 0 if args == 'args' else 9) == 0


def test_an_expected_error_is_one_line_with_its_types_status(capsys):
    expected = (errors.UsageError, errors.ExportError)
    assert entry.run('t.py', lambda: None, fail(errors.ExportError('bad\n  model')),
                     expected) == 1
    assert capsys.readouterr().err == 't.py: error: bad model\n'
    assert entry.run('t.py', lambda: None, fail(errors.UsageError('a  b')), expected,
                     collapse=False) == 2
    assert capsys.readouterr().err == 't.py: error: a  b\n'
    with pytest.raises(errors.DataError):  # not expected: up as it is
        entry.run('t.py', lambda: None, fail(errors.DataError('x')), expected)


def test_a_stop_is_one_line_with_the_note_and_128_plus_the_signal(capsys):
    note = lambda args: 'nothing written to %s' % args
    assert entry.run('t.py', lambda: 'o', fail(KeyboardInterrupt()), (), note) == 130
    assert capsys.readouterr().err == 't.py: error: stopped by SIGINT; nothing written to o\n'
    assert entry.run('t.py', lambda: 'o', fail(errors.Stopped(signal.SIGTERM)), (), note) == 143
    with pytest.raises(KeyboardInterrupt):  # no note: the command does not say stops
        entry.run('t.py', lambda: 'o', fail(KeyboardInterrupt()))
