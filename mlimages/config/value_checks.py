"""Builders of the checks in flag_checks.CHECKS: check(name, value) returns what is wrong
with --name=value as one line, else None. The value lists come from config/choices."""
import math


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
