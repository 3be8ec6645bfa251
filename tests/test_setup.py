"""The set-up path: tools/venv.sh run in a copy of the checkout with a PATH that holds only
the shell tools and fake interpreters (small scripts that run this Python but report
3.12 or 3.13, with or without ensurepip), a fake uv (a script that answers `python find`,
`python install` and `venv` as told and logs its calls) and a package index on 127.0.0.1;
then the README's two commands against .ci/run, and the container route's pins."""
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from fnmatch import fnmatch

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = sys.executable
TOOLS = ('sh', 'grep', 'tail', 'cut', 'tr', 'rm', 'rmdir', 'mkdir', 'dirname', 'cat')
HELP_COMMANDS = ('apt install python3.11-venv', 'dnf install python3.11',
                 'brew install python@3.11', 'conda create -y -n mlimages python=3.11')

# A Python that runs this one but reports another version (and, if told, has no ensurepip,
# as Debian's without python3-venv: `-m venv` fails unless --without-pip).
FAKE_PYTHON = '''#!/bin/sh
if [ "$1" = -c ]; then
    code=$2
    shift 2
    exec "%(real)s" -c "import sys
sys.version_info = (%(major)d, %(minor)d, 0, 'final', 0)
%(prelude)s
$code" "$@"
fi
%(venv_guard)s
exec "%(real)s" "$@"
'''
NO_ENSUREPIP_GUARD = '''if [ "$1" = -m ] && [ "$2" = venv ] && [ "$3" != --without-pip ]; then
    echo "The virtual environment was not created successfully because ensurepip is not available." >&2
    exit 1
fi'''

# uv as the test tells it through $FAKE_UV_CONFIG (JSON): "system" is what `python find`
# finds, "download" whether `python install` succeeds. Every call goes to calls.jsonl.
FAKE_UV = '''#!%(shebang)s
import json, os, sys
config_path = os.environ["FAKE_UV_CONFIG"]
config = json.load(open(config_path))
args = sys.argv[1:]
with open(os.path.join(os.path.dirname(config_path), "calls.jsonl"), "a") as log:
    log.write(json.dumps({"args": args, "env": {k: v for k, v in os.environ.items()
                                                  if k.startswith("UV_")}}) + "\\n")
managed = os.path.join(os.environ.get("UV_PYTHON_INSTALL_DIR", "/nonexistent"),
                       "cpython-3.11-fake", "bin", "python3.11")
if args == ["--version"]:
    print("uv 0.0.1 (fake)")
elif args[:2] == ["python", "find"]:
    if config.get("system"):
        print(config["system"])
    elif os.path.exists(managed) and args[2] == "3.11":
        print(managed)
    else:
        sys.exit("error: No interpreter found for Python %%s in search path" %% args[2])
elif args[:2] == ["python", "install"]:
    if not config.get("download"):
        sys.exit("error: Failed to install cpython-3.11 (downloads are disabled)")
    os.makedirs(os.path.dirname(managed))
    with open(managed, "w") as f:
        f.write(config["managed_script"])
    os.chmod(managed, 0o755)
elif args[0] == "venv":
    python, target = args[args.index("--python") + 1], args[-1]
    os.makedirs(os.path.join(target, "bin"))
    open(os.path.join(target, "pyvenv.cfg"), "w").write("home = %%s\\n" %% python)
    with open(os.path.join(target, "bin", "python"), "w") as f:
        f.write('#!/bin/sh\\nexec "%%s" "$@"\\n' %% python)
    os.chmod(os.path.join(target, "bin", "python"), 0o755)
else:
    sys.exit("error: fake uv does not know %%s" %% args)
'''


def write_script(path, text):
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, 0o755)
    return str(path)


def fake_python(directory, name, version, ensurepip=True):
    major, minor = version
    return write_script(os.path.join(directory, name), FAKE_PYTHON % dict(
        real=REAL, major=major, minor=minor,
        prelude='' if ensurepip else "sys.modules['ensurepip'] = None",
        venv_guard='' if ensurepip else NO_ENSUREPIP_GUARD))


class Setup:
    """A copy of the checkout's script, a PATH of shell tools and fakes, an empty HOME."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.root = tmp_path / 'checkout'
        (self.root / 'tools').mkdir(parents=True)
        shutil.copy(os.path.join(ROOT, 'tools', 'venv.sh'), self.root / 'tools')
        self.bin = tmp_path / 'bin'
        self.bin.mkdir()
        for tool in TOOLS:
            os.symlink(shutil.which(tool), self.bin / tool)
        self.home = tmp_path / 'home'
        self.home.mkdir()
        self.uv_dir = tmp_path / 'uv'
        self.uv_dir.mkdir()
        self.env = {'PATH': str(self.bin), 'HOME': str(self.home), 'LC_ALL': 'C',
                    'PIP_CONFIG_FILE': os.devnull, 'PIP_CACHE_DIR': str(tmp_path / 'cache'),
                    'PIP_DISABLE_PIP_VERSION_CHECK': '1', 'PIP_NO_INPUT': '1',
                    'FAKE_UV_CONFIG': str(self.uv_dir / 'config.json')}
        self.configure_uv()

    def configure_uv(self, system=None, download=False):
        managed = FAKE_PYTHON % dict(real=REAL, major=3, minor=11, prelude='', venv_guard='')
        with open(self.env['FAKE_UV_CONFIG'], 'w') as f:
            json.dump({'system': system, 'download': download, 'managed_script': managed}, f)

    def uv_on_path(self):
        write_script(self.bin / 'uv', FAKE_UV % dict(shebang=REAL))

    def uv_calls(self):
        path = self.uv_dir / 'calls.jsonl'
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def run(self):
        return subprocess.run([shutil.which('sh'), 'tools/venv.sh'], cwd=self.root,
                              env=self.env, capture_output=True, text=True, timeout=300)

    def venv_version(self):
        out = subprocess.run([str(self.root / '.venv' / 'bin' / 'python'), '-c',
                              'import sys; print("%d.%d" % sys.version_info[:2])'],
                             capture_output=True, text=True, check=True).stdout
        return out.strip()


@pytest.fixture
def setup(tmp_path):
    return Setup(tmp_path)


def only_new_pythons(setup, ensurepip=True):
    fake_python(setup.bin, 'python3', (3, 12), ensurepip)
    fake_python(setup.bin, 'python3.12', (3, 12), ensurepip)
    fake_python(setup.bin, 'python3.13', (3, 13), ensurepip)


def assert_one_line_with_the_commands(result):
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith('tools/venv.sh: error: no Python 3.9-3.11 found (found: python3 3.12')
    assert 'python3.13 3.13' in line
    for command in HELP_COMMANDS:
        assert command in line
    return line


@pytest.mark.slow  # a real venv with pip
def test_a_supported_python_on_path_makes_the_venv_and_replaces_a_312_one(setup):
    only_new_pythons(setup)
    name = 'python3.%d' % sys.version_info[1]
    write_script(setup.bin / name, '#!/bin/sh\nexec "%s" "$@"\n' % REAL)
    setup.uv_on_path()
    stale = setup.root / '.venv'
    (stale / 'bin').mkdir(parents=True)
    (stale / 'pyvenv.cfg').write_text('home = /usr/bin\n')
    fake_python(stale / 'bin', 'python', (3, 12))
    result = setup.run()
    assert result.returncode == 0, result
    assert 'replacing .venv (Python 3.12;' in result.stdout
    assert '.venv made by %s (Python 3.%d)' % (name, sys.version_info[1]) in result.stdout
    assert setup.venv_version() == '3.%d' % sys.version_info[1]
    subprocess.run([str(setup.root / '.venv' / 'bin' / 'pip'), '--version'], check=True,
                   capture_output=True)
    assert setup.uv_calls() == []
    assert not (setup.root / '.venv-setup').exists()
    assert list(setup.home.iterdir()) == []


def test_a_good_venv_is_kept(setup):
    only_new_pythons(setup)
    venv = setup.root / '.venv'
    (venv / 'bin').mkdir(parents=True)
    (venv / 'pyvenv.cfg').write_text('home = /usr/bin\n')
    write_script(venv / 'bin' / 'python', '#!/bin/sh\nexec "%s" "$@"\n' % REAL)
    (venv / 'marker').write_text('installed packages')
    result = setup.run()
    assert result.returncode == 0, result
    assert '.venv (Python 3.%d) is kept' % sys.version_info[1] in result.stdout
    assert (venv / 'marker').exists()


def test_a_venv_that_is_no_virtual_environment_is_left_alone(setup):
    only_new_pythons(setup)
    (setup.root / '.venv').mkdir()
    (setup.root / '.venv' / 'notes.txt').write_text('mine')
    result = setup.run()
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        'tools/venv.sh: error: .venv exists and is no virtual environment: move it away and rerun']
    assert (setup.root / '.venv' / 'notes.txt').read_text() == 'mine'


def test_only_312_and_313_uv_finds_a_system_310(setup, tmp_path):
    """Also a 3.10 without ensurepip on PATH (Ubuntu 22.04 without python3.10-venv): the
    script cannot make the venv with it, uv can."""
    only_new_pythons(setup)
    fake_python(setup.bin, 'python3.10', (3, 10), ensurepip=False)
    elsewhere = tmp_path / 'opt'
    elsewhere.mkdir()
    system = fake_python(elsewhere, 'python3.10', (3, 10))
    setup.uv_on_path()
    setup.configure_uv(system=system)
    result = setup.run()
    assert result.returncode == 0, result
    calls = setup.uv_calls()
    assert [c['args'][:2] for c in calls] == [['--version'], ['python', 'find'],
                                             ['venv', '--seed']]
    assert calls[1]['args'][2] == '>=3.9,<3.12'
    assert calls[2]['args'][-3:] == ['--python', system, str(setup.root / '.venv')]
    assert calls[2]['env']['UV_PYTHON_INSTALL_DIR'] == str(setup.root / '.venv-setup' / 'python')
    assert setup.venv_version() == '3.10'
    assert list(setup.home.iterdir()) == []


def test_only_312_and_313_uv_downloads_311_into_the_checkout(setup):
    only_new_pythons(setup)
    setup.uv_on_path()
    setup.configure_uv(download=True)
    result = setup.run()
    assert result.returncode == 0, result
    calls = setup.uv_calls()
    assert [c['args'] for c in calls[1:3]] == [['python', 'find', '>=3.9,<3.12'],
                                               ['python', 'install', '3.11']]
    python = calls[-1]['args'][calls[-1]['args'].index('--python') + 1]
    assert python.startswith(str(setup.root / '.venv-setup' / 'python') + os.sep)
    for call in calls[1:]:  # all but --version
        for name in ('UV_PYTHON_INSTALL_DIR', 'UV_PYTHON_BIN_DIR'):
            assert call['env'][name].startswith(str(setup.root) + os.sep)
    assert setup.venv_version() == '3.11'
    assert 'downloading CPython 3.11 into .venv-setup/python' in result.stdout
    assert list(setup.home.iterdir()) == []


def test_uv_refusing_gives_one_line_with_the_commands(setup):
    only_new_pythons(setup)
    setup.uv_on_path()
    line = assert_one_line_with_the_commands(setup.run())
    assert 'downloads are disabled' in line
    assert not (setup.root / '.venv').exists()


def fake_uv_wheel():
    """A wheel whose only content is the fake uv as a script, as uv's wheel holds its binary."""
    files = {'uv-0.0.1.data/scripts/uv': FAKE_UV % dict(shebang='python'),
             'uv-0.0.1.dist-info/METADATA': 'Metadata-Version: 2.1\nName: uv\nVersion: 0.0.1\n',
             'uv-0.0.1.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: test\n'
                                         'Root-Is-Purelib: true\nTag: py3-none-any\n'}
    record = ''.join('%s,sha256=%s,%d\n' % (name, hashlib.sha256(text.encode()).hexdigest(),
                                            len(text.encode())) for name, text in files.items())
    files['uv-0.0.1.dist-info/RECORD'] = record + 'uv-0.0.1.dist-info/RECORD,,\n'
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w') as wheel:
        for name, text in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100755 if '/scripts/' in name else 0o100644) << 16
            wheel.writestr(info, text)
    return buffer.getvalue()


@pytest.fixture
def index(tmp_path):
    """A PEP 503 index on 127.0.0.1 with the fake uv and the pip wheel ensurepip bundles;
    yields (url, the paths requested)."""
    import ensurepip
    bundled = [name for name in os.listdir(os.path.join(os.path.dirname(ensurepip.__file__),
                                                        '_bundled')) if name.startswith('pip-')]
    if not bundled:
        pytest.skip('this Python bundles no pip wheel')
    served = tmp_path / 'index'
    wheels = {'uv-0.0.1-py3-none-any.whl': fake_uv_wheel(),
              bundled[0]: open(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled',
                                            bundled[0]), 'rb').read()}
    (served / 'files').mkdir(parents=True)
    for name, data in wheels.items():
        (served / 'files' / name).write_bytes(data)
        project = served / 'simple' / name.split('-')[0]
        project.mkdir(parents=True)
        (project / 'index.html').write_text(
            '<html><body><a href="../../files/%s#sha256=%s">%s</a></body></html>'
            % (name, hashlib.sha256(data).hexdigest(), name))
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args):
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d/simple' % server.server_port, requested
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize('ensurepip', [pytest.param(True, marks=pytest.mark.slow), False],
                         ids=['venv', 'no-ensurepip'])
def test_without_uv_it_is_installed_from_the_index_into_the_checkout(setup, index, tmp_path,
                                                                     ensurepip):
    """No uv on PATH: uv from the index into .venv-setup/uv, by the 3.12's venv and pip or,
    without ensurepip, by pip's own wheel from the index; removed once .venv is made."""
    url, requested = index
    only_new_pythons(setup, ensurepip)
    elsewhere = tmp_path / 'opt'
    elsewhere.mkdir()
    setup.configure_uv(system=fake_python(elsewhere, 'python3.11', (3, 11)))
    setup.env['PIP_INDEX_URL'] = url
    result = setup.run()
    assert result.returncode == 0, result
    assert 'installing uv from the package index into .venv-setup/uv' in result.stdout
    assert [c['args'][0] for c in setup.uv_calls()] == ['python', 'venv']
    assert setup.venv_version() == '3.11'
    assert any(path.startswith('/files/uv-0.0.1') for path in requested)
    assert any(path.startswith('/files/pip-') for path in requested) == (not ensurepip)
    assert not (setup.root / '.venv-setup').exists()
    assert list(setup.home.iterdir()) == []


def test_no_index_reachable_gives_one_line_with_the_commands(setup):
    """A 3.12 without ensurepip: the pip wheel cannot be fetched, nor uv."""
    only_new_pythons(setup, ensurepip=False)
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(('127.0.0.1', 0))
        port = unused.getsockname()[1]
    setup.env.update(PIP_INDEX_URL='http://127.0.0.1:%d/simple' % port, PIP_RETRIES='0',
                     PIP_TIMEOUT='5')
    line = assert_one_line_with_the_commands(setup.run())
    assert 'uv could not be installed from the package index' in line
    assert not (setup.root / '.venv').exists()
    assert not (setup.root / '.venv-setup' / 'uv').exists()


def readme_setup_commands():
    with open(os.path.join(ROOT, 'README.md')) as f:
        text = f.read()
    section = text.split('## Set-up: two commands', 1)[1].split('\n## ', 1)[0]
    return [line.strip() for line in section.splitlines()
            if line.startswith('    ') and 'tools/venv.sh' in line and '.venv/bin/' in line]


def test_the_readme_commands_start_with_the_script_and_ci_runs_the_test_command():
    demo, tests = readme_setup_commands()
    assert demo == ('sh tools/venv.sh && .venv/bin/pip install -r requirements.txt'
                    ' && .venv/bin/python train.py --demo')
    assert tests.startswith('sh tools/venv.sh && .venv/bin/pip install ')
    assert '.venv/bin/python -m pytest' in tests
    with open(os.path.join(ROOT, '.ci', 'run')) as f:
        ci = [line for line in f.read().splitlines() if line and not line.startswith('#')]
    assert ci[-1] == tests
    assert 'set -euo pipefail' in ci


def test_git_ignores_what_the_script_makes():
    with open(os.path.join(ROOT, '.gitignore')) as f:
        patterns = [p.strip().rstrip('/') for p in f if p.strip() and not p.startswith('#')]
    for made in ('.venv', '.venv-setup'):
        assert any(fnmatch(made, p) for p in patterns), made


def test_the_container_route_pins_tensorflow_with_cuda_and_the_readme_runs_it():
    with open(os.path.join(ROOT, 'docs', 'kubernetes', 'Dockerfile')) as f:
        dockerfile = f.read()
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        pin = re.search(r'^tensorflow==(\S+)$', f.read(), re.M).group(1)
    assert pin == '2.15.1'
    base = re.search(r'^FROM python:3\.(\d+)-slim$', dockerfile, re.M)
    assert base and 9 <= int(base.group(1)) <= 11
    install = [line for line in dockerfile.splitlines() if line.startswith('RUN pip install')]
    assert len(install) == 1
    assert '"tensorflow[and-cuda]==%s"' % pin in install[0]
    assert '-r requirements.txt' in install[0]  # numpy<2 and pillow as requirements.txt says
    # requirements.txt installs the checkout (-e .): it must be in the image by then
    assert dockerfile.index('COPY . /app') < dockerfile.index('RUN pip install')
    with open(os.path.join(ROOT, '.dockerignore')) as f:
        ignored = f.read().split()
    assert '.venv*' in ignored and '.git' in ignored
    with open(os.path.join(ROOT, 'README.md')) as f:
        readme = f.read()
    assert 'docker build -f docs/kubernetes/Dockerfile -t ml-images-trainer .' in readme
    commands = readme.replace('\\\n', ' ')  # a command wrapped with a trailing backslash: one line
    runs = [' '.join(line.split()) for line in commands.splitlines()
            if line.strip().startswith('docker run --gpus all')]
    assert len(runs) == 2
    assert runs[0].endswith('ml-images-trainer --demo')
    assert ':/data:ro' in runs[1] and ' --data_dir=/data ' in runs[1]
    flagfile = re.search(r' ml-images-trainer --flagfile=(\S+) ', runs[1]).group(1)
    assert os.path.isfile(os.path.join(ROOT, flagfile))  # in the image: COPY . /app
