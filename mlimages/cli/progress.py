"""A progress line on stderr (the record tools and the benchmark).

On a terminal the line is redrawn in place (a carriage return) at most every
PROGRESS_INTERVAL; into a file or pipe it is written as a plain line every PLAIN_INTERVAL,
so a log holds one readable line per interval instead of a single line of redraws. When
the subclass knows how far it is (`done_total()` = (done, total)) the line ends with
    ETA = elapsed x (total - done) / done.
"""
import sys
import time

PROGRESS_INTERVAL = 0.2  # seconds: at most 5 redraws a second on a terminal
PLAIN_INTERVAL = 30.0    # seconds between plain lines into a file


def eta_text(elapsed, done, total):
    """', ETA h:mm:ss' once something is done, '' otherwise."""
    if not total or done <= 0:
        return ''
    left = int(round(elapsed * max(0, total - done) / done))
    return ', ETA %d:%02d:%02d' % (left // 3600, left // 60 % 60, left % 60)


class ProgressLine(object):
    """Subclasses keep their counters, say what the line shows in `text()` and, when they
    know it, how far they are in `done_total()`."""

    def __init__(self, enabled, stream=None, clock=time.monotonic):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self.start = clock()
        self._last_draw = 0.0 if self.terminal else self.start
        self._width = 0

    @property
    def terminal(self):
        isatty = getattr(self.stream, 'isatty', None)
        return bool(isatty and isatty())

    def rate(self, count):
        """count per second since the start."""
        return count / max(self._clock() - self.start, 1e-9)

    def tick(self):
        now = self._clock()
        interval = PROGRESS_INTERVAL if self.terminal else PLAIN_INTERVAL
        if now - self._last_draw >= interval:
            self._last_draw = now
            self.draw()

    def finish(self):
        self.draw(final=True)

    def done_total(self):
        return None

    def line(self):
        """text() and, when known, the ETA."""
        known = self.done_total()
        return self.text() + (eta_text(self._clock() - self.start, *known) if known else '')

    def draw(self, final=False):
        if not self.enabled:
            return
        text = self.line()
        if self.terminal:
            padding = ' ' * max(0, self._width - len(text))  # erase a longer previous line
            self._width = len(text)
            self.stream.write('\r' + text + padding + ('\n' if final else ''))
        else:
            self.stream.write(text + '\n')
        self.stream.flush()

    def text(self):
        raise NotImplementedError
