"""The kinds of check in flags.py's table of valid values: each check(name, value) returns
what is wrong with --name=value as one line, or None. Value lists owned by the module that
uses them (resnet's sizes, records' label types, ...) are read from it when a check runs,
after start-up, so that --help needs no TensorFlow."""
import importlib


def owned(module, attr):
    """module.attr, the module imported now."""
    return getattr(importlib.import_module(module), attr)


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


def one_of(module, attr, message=None):
    """module.attr lists the valid values; message: the whole text, with %r for the value
    (default: --NAME must be one of ...)."""
    def check(name, value):
        choices = owned(module, attr)
        if value in choices:
            return None
        if message:
            return message % value
        return '--%s must be one of %s, got %r' % (name, ', '.join(choices), value)
    return check
