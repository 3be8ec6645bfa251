"""What a flag's value may be: the checks flags.py gives each flag where it defines it
(check(name, value) returns what is wrong with --name=value as one line, else None; the
value lists come from config/choices), and the parsers of the flags whose text holds
several values (--profile_steps, --pr_curve_classes)."""
import math

from mlimages.config import choices


def positive(name, value):
    return None if value > 0 else '--%s must be positive, got %d' % (name, value)


def at_least(low, meaning=''):
    """value >= low; meaning, what the lowest value means (said in the message)."""
    def check(name, value):
        if value >= low:
            return None
        return '--%s must be >= %d%s, got %s' % (name, low, ' (%s)' % meaning if meaning else '',
                                                 '%g' % value if isinstance(value, float) else value)
    return check


def fraction(name, value):
    return None if 0.0 <= value <= 1.0 else '--%s must be in [0, 1], got %g' % (name, value)


def fraction_or(word):
    """A string flag: `word`, or a number in [0, 1] (fraction)."""
    def check(name, value):
        if value == word:
            return None
        try:
            return fraction(name, float(value))
        except ValueError:
            return '--%s must be a number in [0, 1] or %s, got %r' % (name, word, value)
    return check


def finite(low, inclusive=False, high=None, meaning=''):
    """A float that is finite and > low (>= low when inclusive), and < high if given."""
    def check(name, value):
        above = value >= low if inclusive else value > low
        if math.isfinite(value) and above and (high is None or value < high):
            return None
        bound = ('in [%g, %g)' % (low, high) if high is not None
                 else '%s %g' % ('>=' if inclusive else '>', low))
        return '--%s must be %s and finite%s, got %g' % (
            name, bound, ' (%s)' % meaning if meaning else '', value)
    return check


def one_of(choices, message=None):
    """choices: the valid values; message: the whole text, with %r for the value
    (default: --NAME must be one of ...)."""
    def check(name, value):
        if value in choices:
            return None
        if message:
            return message % value
        return '--%s must be one of %s, got %r' % (name, ', '.join(choices), value)
    return check


def between(low, high, meaning=''):
    """An integer in [low, high]; meaning, what the lowest value means."""
    def check(name, value):
        if low <= value <= high:
            return None
        return '--%s must be in [%d, %d]%s, got %d' % (name, low, high,
                                                     ' (%s)' % meaning if meaning else '', value)
    return check


def area_fraction(name, value):
    """A share of the image's area: in (0, 1] (a crop needs some area)."""
    return fraction(name, value) or (
        None if value > 0 else '--%s must be > 0 (the crop needs some area), got %g'
        % (name, value))


def steps_or_forever(name, value):
    """A step count > 0, or -1 for no end."""
    return None if value > 0 or value == -1 else (
        '--%s must be positive or -1 (forever), got %d' % (name, value))


def parsed(parse):
    """The check of a flag whose text parse(value) reads: what parse raises, as the line."""
    def check(name, value):
        try:
            parse(value)
        except ValueError as e:
            return str(e)
        return None
    return check


def profile_span(text):
    """(A, B) of --profile_steps=A,B, or None for ''; raises ValueError with the one line
    of what is wrong."""
    if not text:
        return None
    parts = text.split(',')
    try:
        first, last = (int(p) for p in parts)
    except ValueError:
        raise ValueError('--profile_steps must be A,B (the first and last global step to '
                         'trace, e.g. 10,12), got %r' % text)
    if not 1 <= first <= last or last - first + 1 > choices.MAX_PROFILE_STEPS:
        raise ValueError('--profile_steps=%s must be A,B with 1 <= A <= B and at most %d '
                         'steps (B - A + 1), e.g. 10,12' % (text, choices.MAX_PROFILE_STEPS))
    return first, last


def class_list(text):
    """The class indices of --pr_curve_classes ('' = none); raises ValueError."""
    try:
        return tuple(int(part) for part in text.split(',') if part.strip())
    except ValueError:
        raise ValueError('--pr_curve_classes must be class indices separated by commas '
                         '(e.g. 0,17,230), got %r' % text)
