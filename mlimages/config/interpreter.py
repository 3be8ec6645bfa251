"""Which Python runs the programs, and how the commands they print name it.

The programs run with the checkout's environment, `.venv/bin/python` (README: `sh
tools/venv.sh && .venv/bin/pip install -r requirements.txt`). Started by another Python
-- the system's `python3`, which has no TensorFlow, absl or Pillow -- a program says so in
one line naming the command to use, exit status 2, before it imports anything the Python
may lack (`require`).

Every entry point (train.py, each tools/*.py) runs this file first, by its path:

    runpy.run_path(<checkout>/mlimages/config/interpreter.py)

A command in tools/ has tools/ as sys.path[0], so without the requirements' editable
install (`-e .`) `mlimages` itself cannot be imported: running the file by its path needs
no import and no sys.path edit, and works the same for train.py (also under `python -I`,
which leaves the script's folder off sys.path). Run that way the file checks at once, for
the program of sys.argv[0]; imported (mlimages.config.interpreter) it only defines. Hence
the standard library only, in syntax any Python 3 parses.
"""
import importlib.util
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, '.venv')
# Import names of what requirements.txt installs (pillow is PIL; absl comes with
# TensorFlow) and of the checkout itself, installed editable by its `-e .`.
REQUIRED = ('tensorflow', 'absl', 'numpy', 'PIL', 'mlimages')
SETUP = 'sh tools/venv.sh && .venv/bin/pip install -r requirements.txt'


def missing(names=REQUIRED):
    """The names of `names` this Python cannot import (found without importing them)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def inside_checkout(path):
    """Whether `path` (links not followed: .venv/bin/python links to its base Python) is
    in the checkout."""
    path = os.path.abspath(path) + os.sep
    return any(path.startswith(root + os.sep)
               for root in (os.path.abspath(ROOT), os.path.realpath(ROOT)))


def shown_path(path, cwd=None):
    """`path` as a command typed in `cwd` names it: relative when both are inside the
    checkout, else as it is."""
    cwd = cwd or os.getcwd()
    if inside_checkout(cwd) and inside_checkout(path):
        return os.path.relpath(path, cwd)
    return path


def python_command(executable=None, cwd=None):
    """The interpreter running this process as a command line names it (`.venv/bin/python`
    from the checkout's root): for the rerun lines the programs print."""
    executable = executable or sys.executable or 'python'
    return shown_path(os.path.abspath(executable), cwd)


def script_command(name, executable=None, cwd=None):
    """A console script of the interpreter running this process (`.venv/bin/tensorboard`),
    else `name` as PATH finds it."""
    executable = os.path.abspath(executable or sys.executable or 'python')
    script = os.path.join(os.path.dirname(executable), name)
    return shown_path(script, cwd) if os.path.exists(script) else name


def pip_command(executable=None, cwd=None):
    """The pip of the interpreter running this process (`.venv/bin/pip`)."""
    pip = script_command('pip', executable, cwd)
    return pip if pip != 'pip' else python_command(executable, cwd) + ' -m pip'


def venv_has_requirements(venv=VENV):
    """Whether `venv` holds requirements.txt's packages (looked up on disk: no process)."""
    for lib in ('lib', 'lib64'):
        base = os.path.join(venv, lib)
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            packages = os.path.join(base, name, 'site-packages')
            if all(os.path.isdir(os.path.join(packages, p)) for p in REQUIRED[:4]):
                return True
    return False


def advice(program, argv, absent, executable=None, prefix=None, cwd=None, venv=VENV):
    """The one line for `program` (its sys.argv `argv`) run by a Python without `absent`:
    the command to run it with, or the set-up command first when the checkout's
    environment does not exist or lacks the requirements too."""
    executable = executable or sys.executable or 'python'
    prefix = prefix or sys.prefix
    cwd = cwd or os.getcwd()
    root_shown = shown_path(ROOT, cwd)
    python = os.path.join(venv, 'bin', 'python')
    rerun = ' '.join([shown_path(python, cwd)] + [shlex.quote(a) for a in argv])
    setup = SETUP if root_shown == '.' else 'cd %s && %s' % (shlex.quote(root_shown), SETUP)
    line = '%s: error: this Python (%s) cannot run it: it has no %s (requirements.txt); ' % (
        program, executable, ', '.join(absent))
    if os.path.realpath(prefix) == os.path.realpath(venv):
        pip = shown_path(os.path.join(venv, 'bin', 'pip'), cwd)
        install = 'cd %s && %s' % (shlex.quote(root_shown), pip) if root_shown != '.' else pip
        return line + 'install them into the checkout\'s environment: %s install -r ' \
            'requirements.txt, then rerun' % install
    if not os.path.exists(python):
        return line + 'set up the checkout\'s environment first (%s), then run: %s' % (
            setup, rerun)
    if not venv_has_requirements(venv):
        return line + 'the checkout\'s environment lacks them too: set it up (%s), then ' \
            'run: %s' % (setup, rerun)
    return line + 'run it with the checkout\'s environment: %s' % rerun


def entry_argv():
    """The command line of the program this process runs, its script as typed from here
    (run_path replaces sys.argv[0] while it runs this file; __main__ is still the script)."""
    script = getattr(sys.modules.get('__main__'), '__file__', None) or sys.argv[0]
    return [shown_path(os.path.abspath(script))] + sys.argv[1:]


def require(argv=None):
    """Exits with status 2 and advice's one line when this Python lacks a requirement;
    argv: the program's command line (default entry_argv())."""
    absent = missing()
    if absent:
        argv = argv or entry_argv()
        sys.stderr.write(advice(os.path.basename(argv[0]), argv, absent) + '\n')
        sys.exit(2)


if __name__ == '<run_path>':  # an entry point ran this file (runpy.run_path): check now
    require()
