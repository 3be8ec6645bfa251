"""What a run remembers of itself: <model_dir>/flags.txt.

The file is an absl flagfile (`.venv/bin/python train.py --flagfile=<model_dir>/flags.txt` reruns
it): one `--name=value` line per flag of train.py (booleans true / false), after
comment lines naming the program, when, TensorFlow's and Python's versions and the code's
git commit (when the code is a git checkout). A run that resumes from a checkpoint
compares its flags with the saved ones and reports each change; the file then holds the
new run's flags.
"""
import datetime
import os
import platform
import subprocess

FILE_NAME = 'flags.txt'
CODE_DIR = os.path.dirname(os.path.abspath(__file__))


def git_commit(directory=CODE_DIR):
    """'<short hash>' of the checkout the code runs from ('+ changes' when it has
    uncommitted changes), None outside a git checkout."""
    try:
        commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=directory,
                                capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                               cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + (' + changes' if dirty.stdout.strip() else '')


def header(program, tensorflow_version, now=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    commit = git_commit()
    return ['# %s run started %s' % (program, now.strftime('%Y-%m-%d %H:%M:%S UTC')),
            '# TensorFlow %s, Python %s%s' % (
                tensorflow_version, platform.python_version(),
                ', code at git commit %s' % commit if commit else '')]


def flag_lines(values):
    """Flagfile lines of {name: value}, in order; booleans as --name=true/false."""
    def text(value):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return ['--%s=%s' % (name, text(value)) for name, value in values.items()]


def parse(lines):
    """{name: value text} of the --name=value lines (comments skipped)."""
    values = {}
    for line in lines:
        if line.startswith('--') and '=' in line:
            name, value = line[2:].split('=', 1)
            values[name] = value
    return values


def changes(saved_lines, lines):
    """['--name old -> new', ...] for every flag whose value differs."""
    old, new = parse(saved_lines), parse(lines)
    return ['--%s %s -> %s' % (name, old[name], new[name])
            for name in new if name in old and old[name] != new[name]]


def read(model_dir):
    path = os.path.join(model_dir, FILE_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().splitlines()


def save(model_dir, header_lines, flag_lines):
    """Writes <model_dir>/flags.txt whole (a temporary file renamed over it)."""
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, FILE_NAME)
    with open(path + '.tmp', 'w') as f:
        f.write('\n'.join(header_lines + flag_lines) + '\n')
    os.replace(path + '.tmp', path)
    return path
