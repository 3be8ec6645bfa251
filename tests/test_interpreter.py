"""Every program started by a Python without the requirements (a virtual environment made
here without packages, as the system's python3 is) says in one line which command to use,
exit status 2, no traceback; the commands the programs print name the Python that runs
them (mlimages/config/interpreter.py)."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT
from mlimages.config import interpreter

PROGRAMS = ['train.py'] + sorted(os.path.relpath(path, ROOT) for path in
                                 glob.glob(os.path.join(ROOT, 'tools', '*.py')))


@pytest.fixture(scope='module')
def bare_python(tmp_path_factory):
    """A Python of its own environment, made without pip or any package: it lacks every
    requirement, whatever this machine's own python3 has (checked)."""
    venv = tmp_path_factory.mktemp('bare') / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    python = str(venv / 'bin' / 'python')
    found = subprocess.run(
        [python, '-c', 'import importlib.util as u; print([n for n in %r if u.find_spec(n)])'
         % (interpreter.REQUIRED,)], cwd=str(venv), capture_output=True, text=True, check=True)
    assert found.stdout.strip() == '[]'
    return python


def run_bare(python, program, args, cwd=ROOT, flags=()):
    return subprocess.run([python] + list(flags) + [program] + list(args), cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != 'PYTHONPATH'})


def test_every_program_is_covered():
    assert len(PROGRAMS) >= 12 and 'tools/predict.py' in PROGRAMS
    for program in PROGRAMS:
        assert 'runpy.run_path(' in open(os.path.join(ROOT, program)).read(), program


@pytest.mark.parametrize('args', [[], ['--help']], ids=['run', 'help'])
@pytest.mark.parametrize('program', PROGRAMS)
def test_a_bare_python_gets_one_line_naming_the_environment(bare_python, program, args):
    result = run_bare(bare_python, program, args + ['--x', 'a b'])
    name = os.path.basename(program)
    assert result.returncode == 2 and result.stdout == '', result.stderr
    assert result.stderr.count('\n') == 1 and 'Traceback' not in result.stderr, result.stderr
    assert result.stderr.startswith('%s: error: this Python (%s) cannot run it: it has no '
                                    'tensorflow, absl, numpy, PIL' % (name, bare_python))
    # The command that works, arguments quoted: the checkout's environment holds everything.
    assert result.stderr.endswith("run it with the checkout's environment: .venv/bin/python "
                                  "%s %s--x 'a b'\n" % (program, ' '.join(args + [''])))


def test_the_line_is_a_working_command_from_another_folder_and_under_isolation(bare_python):
    result = run_bare(bare_python, 'predict.py', ['--help'], cwd=os.path.join(ROOT, 'tools'))
    assert result.stderr.endswith('environment: ../.venv/bin/python predict.py --help\n')
    # -I leaves the script's folder off sys.path: the file is still run by its path.
    result = run_bare(bare_python, 'train.py', ['--help'], flags=['-I'])
    assert result.returncode == 2 and result.stderr.endswith(
        'environment: .venv/bin/python train.py --help\n'), result.stderr


def test_without_the_environment_the_line_gives_the_set_up_command(bare_python, tmp_path):
    """A checkout without .venv: the README's set-up, then the command."""
    checkout = tmp_path / 'checkout'
    shutil.copytree(os.path.join(ROOT, 'mlimages'), str(checkout / 'mlimages'),
                    ignore=shutil.ignore_patterns('__pycache__'))
    shutil.copytree(os.path.join(ROOT, 'tools'), str(checkout / 'tools'),
                    ignore=shutil.ignore_patterns('__pycache__'))
    result = run_bare(bare_python, 'tools/make_tfrecords.py', ['--help'], cwd=str(checkout))
    assert result.returncode == 2 and result.stderr.endswith(
        "set up the checkout's environment first (sh tools/venv.sh && .venv/bin/pip install "
        "-r requirements.txt), then run: .venv/bin/python tools/make_tfrecords.py --help\n")
    result = run_bare(bare_python, str(checkout / 'tools' / 'make_tfrecords.py'), [],
                      cwd=str(tmp_path))
    assert ('(cd checkout && sh tools/venv.sh && .venv/bin/pip install -r requirements.txt)'
            not in result.stderr)  # outside the checkout: absolute paths
    assert '(cd %s && sh tools/venv.sh' % checkout in result.stderr


def test_advice_inside_an_environment_without_the_packages(tmp_path):
    venv = tmp_path / '.venv'
    (venv / 'bin').mkdir(parents=True)
    (venv / 'bin' / 'python').write_text('')
    line = interpreter.advice('train.py', ['train.py', '--demo'], ['tensorflow'],
                              executable=str(venv / 'bin' / 'python'), prefix=str(venv),
                              cwd=ROOT, venv=str(venv))
    assert line.endswith("install them into the checkout's environment: %s install -r "
                         "requirements.txt, then rerun" % (venv / 'bin' / 'pip'))
    # Another Python, and a .venv that lacks them as well: the set-up first.
    line = interpreter.advice('train.py', ['train.py'], ['tensorflow'],
                              executable='/usr/bin/python3', prefix='/usr', cwd=ROOT,
                              venv=str(venv))
    assert "the checkout's environment lacks them too: set it up (sh tools/venv.sh" in line
    packages = venv / 'lib' / 'python3.11' / 'site-packages'
    for name in ('tensorflow', 'absl', 'numpy', 'PIL'):
        (packages / name).mkdir(parents=True)
    assert interpreter.venv_has_requirements(str(venv))


def test_the_commands_the_programs_print_name_the_python_running_them():
    assert interpreter.python_command(os.path.join(ROOT, '.venv', 'bin', 'python'),
                                      cwd=ROOT) == '.venv/bin/python'
    assert interpreter.python_command('/usr/local/bin/python', cwd=ROOT) == \
        '/usr/local/bin/python'
    assert interpreter.pip_command(os.path.join(ROOT, '.venv', 'bin', 'python'),
                                   cwd=ROOT) == '.venv/bin/pip'
    assert interpreter.pip_command('/nonexistent/bin/python3', cwd='/') == \
        '/nonexistent/bin/python3 -m pip'
