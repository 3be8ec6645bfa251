"""mlimages/cli/progress.py: redrawn on a terminal, plain periodic lines into a file, and an ETA
when the total is known (a fake clock: no sleeps)."""
import io

from mlimages.cli import progress


class Counting(progress.ProgressLine):
    def __init__(self, total, stream, clock):
        super(Counting, self).__init__(True, stream, clock)
        self.total, self.done = total, 0

    def text(self):
        return '%d/%d' % (self.done, self.total)

    def done_total(self):
        return self.done, self.total


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock(object):
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def run(stream, clock, steps, seconds_a_step):
    line = Counting(len(steps), stream, clock)
    for _ in steps:
        clock.now += seconds_a_step
        line.done += 1
        line.tick()
    line.finish()
    return stream.getvalue()


def test_eta_is_elapsed_times_left_over_done():
    assert progress.eta_text(10.0, 1, 4) == ', ETA 0:00:30'
    assert progress.eta_text(3600.0, 1, 3) == ', ETA 2:00:00'
    assert progress.eta_text(5.0, 0, 4) == ''
    assert progress.eta_text(5.0, 4, 4) == ', ETA 0:00:00'


def test_into_a_file_plain_lines_every_interval_and_the_last():
    clock = Clock()
    # 100 items at 1 s: a line after 30, 60 and 90 s, and the final one.
    text = run(io.StringIO(), clock, range(100), 1.0)
    assert '\r' not in text
    assert text.splitlines() == ['30/100, ETA 0:01:10', '60/100, ETA 0:00:40',
                                 '90/100, ETA 0:00:10', '100/100, ETA 0:00:00']


def test_on_a_terminal_redrawn_in_place():
    clock = Clock()
    text = run(Terminal(), clock, range(4), 1.0)
    assert text.count('\n') == 1 and text.endswith('\n')
    assert text.split('\r')[1:] == ['1/4, ETA 0:00:03', '2/4, ETA 0:00:02',
                                    '3/4, ETA 0:00:01', '4/4, ETA 0:00:00', '4/4, ETA 0:00:00\n']
