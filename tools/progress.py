"""A progress line on stderr, redrawn in place (the record tools and benchmark)."""
import sys
import time

PROGRESS_INTERVAL = 0.2  # seconds: at most 5 redraws a second


class ProgressLine(object):
    """A line redrawn in place with a carriage return, at most every PROGRESS_INTERVAL.

    Subclasses keep their counters and say what the line shows in `text()`.
    """

    def __init__(self, enabled, stream=None):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._width = 0

    def rate(self, count):
        """count per second since the start."""
        return count / max(time.monotonic() - self.start, 1e-9)

    def tick(self):
        now = time.monotonic()
        if now - self._last_draw >= PROGRESS_INTERVAL:
            self._last_draw = now
            self.draw()

    def finish(self):
        self.draw(end='\n')

    def draw(self, end=''):
        if not self.enabled:
            return
        text = self.text()
        padding = ' ' * max(0, self._width - len(text))  # erase a longer previous line
        self._width = len(text)
        self.stream.write('\r' + text + padding + end)
        self.stream.flush()

    def text(self):
        raise NotImplementedError
