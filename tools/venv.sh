#!/bin/sh
# Creates the checkout's .venv from a Python that TensorFlow 2.15.1 supports (3.9-3.11),
# the first step of both set-up commands in the README.
#
#   1. A .venv that already runs Python 3.9-3.11 with pip is kept; one of another Python
#      (say a 3.12 one left by a plain `python3 -m venv`) is replaced.
#   2. The first of python3.11, python3.10, python3.9, python3, python on PATH that is 3.9-3.11
#      and has venv and ensurepip makes it: `python -m venv .venv`.
#   3. Otherwise uv provides the interpreter: the uv on PATH, or uv installed from PyPI into
#      a throwaway environment .venv-setup/uv (made by any Python found; where that Python has
#      no ensurepip, as Debian's and Ubuntu's without python3-venv, pip's own wheel is fetched
#      from the index to install it). uv picks a 3.9-3.11 it finds on PATH (without ensurepip
#      too), or downloads CPython 3.11 into .venv-setup/python; `uv venv --seed` makes .venv
#      with pip.
#   4. Otherwise one line names the Pythons found, the ones needed and the commands that
#      install one, and the exit status is 1 (the details are in .venv-setup/venv.log).
#
# Nothing is written outside the checkout but pip's and uv's caches. PIP_INDEX_URL (a mirror)
# is honoured, for the pip wheel too.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="$ROOT/.venv"
SETUP="$ROOT/.venv-setup"
LOG="$SETUP/venv.log"
ME=tools/venv.sh
NEED=3.9-3.11

say() { echo "$ME: $*"; }

HELP="install one and rerun:\
 Ubuntu: sudo add-apt-repository -y ppa:deadsnakes/ppa && sudo apt install python3.11-venv;\
 Debian 12: sudo apt install python3-venv;\
 Fedora: sudo dnf install python3.11;\
 macOS: brew install python@3.11;\
 conda (any system): conda create -y -n mlimages python=3.11 && conda activate mlimages"

fail() {
    echo "$ME: error: $*" >&2
    rm -rf "$SETUP/uv"
    exit 1
}

# "3.11 venv", "3.12 venv" or "3.10 no-ensurepip"; empty for something that is no Python.
PROBE='import sys, importlib.util as u
ok = u.find_spec("venv") and u.find_spec("ensurepip")
print("%d.%d" % sys.version_info[:2], "venv" if ok else "no-ensurepip")'
probe() { "$1" -c "$PROBE" 2>/dev/null | tail -n 1; }
supported() { case "$1" in 3.9|3.10|3.11) return 0 ;; esac; return 1; }

# The log's last error line (uv's "error: ...", pip's "ERROR: ...") and uv's last "cause:"
# after it, else the log's last line.
log_reason() {
    line=$(grep -i '^error' "$LOG" 2>/dev/null | tail -n 1)
    last=$(tail -n 1 "$LOG" 2>/dev/null)
    case "$last" in *cause:*) line="$line: ${last#*cause: }" ;; esac
    printf '%s' "${line:-$last}" | tr -d '\r' | tr '\n' ' ' | cut -c 1-300
}

# Success: the log goes, and .venv-setup too unless it holds uv's Python.
finish() {
    say "$1"
    rm -rf "$LOG" "$SETUP/uv"
    rmdir "$SETUP" 2>/dev/null
    exit 0
}

venv_ok() {
    info=$(probe "$VENV/bin/python")
    supported "${info%% *}" && "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}

mkdir -p "$SETUP" || fail "cannot create $SETUP"
: >"$LOG"

# 1. An existing .venv.
if [ -e "$VENV" ] || [ -L "$VENV" ]; then
    if venv_ok; then
        info=$(probe "$VENV/bin/python")
        finish ".venv (Python ${info%% *}) is kept"
    fi
    [ -f "$VENV/pyvenv.cfg" ] ||
        fail ".venv exists and is no virtual environment: move it away and rerun"
    info=$(probe "$VENV/bin/python")
    version=${info%% *}
    say "replacing .venv (Python ${version:-unknown}; needs $NEED with pip)"
    rm -rf "$VENV" || fail "cannot remove .venv"
fi

# 2. A supported Python on PATH.
found=""
boot=""
for name in python3.11 python3.10 python3.9 python3 python python3.12 python3.13 python3.14; do
    path=$(command -v "$name" 2>/dev/null) || continue
    info=$(probe "$path")
    [ -n "$info" ] || continue
    version=${info%% *}
    found="$found${found:+, }$name $version"
    [ -n "$boot" ] || boot=$path
    if supported "$version" && [ "${info#* }" = venv ]; then
        if "$path" -m venv "$VENV" >>"$LOG" 2>&1 && venv_ok; then
            finish ".venv made by $name (Python $version)"
        fi
        say "$name (Python $version) could not make .venv: $(log_reason)"
        rm -rf "$VENV"
    fi
done
say "no Python $NEED with venv on PATH (found: ${found:-none}); asking uv for one"

# 3. uv.
# The pip wheel from the index (PEP 503 page), for a Python without ensurepip.
FETCH_PIP='import hashlib, html, os, re, sys, urllib.parse, urllib.request
index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
page = index + "/pip/"
text = urllib.request.urlopen(page, timeout=60).read().decode("utf-8")
best = None
for href, attrs, name in re.findall(r"<a\s+href=\"([^\"]+)\"([^>]*)>([^<]+)</a>", text):
    m = re.fullmatch(r"pip-(\d+(?:\.\d+)*)-py3-none-any\.whl", name.strip())
    if not m or "data-yanked" in attrs:
        continue
    floor = re.search(r">=\s*3\.(\d+)", html.unescape(attrs))
    if floor and int(floor.group(1)) > sys.version_info[1]:
        continue
    version = tuple(int(p) for p in m.group(1).split("."))
    if best is None or version > best[0]:
        best = (version, urllib.parse.urljoin(page, html.unescape(href)), name.strip())
if best is None:
    sys.exit("error: no pip wheel for this Python at " + page)
url, _, digest = best[1].partition("#sha256=")
data = urllib.request.urlopen(url, timeout=300).read()
if digest and hashlib.sha256(data).hexdigest() != digest:
    sys.exit("error: the pip wheel from %s does not match its sha256" % url)
path = os.path.join(sys.argv[1], best[2])
with open(path, "wb") as f:
    f.write(data)
print(path)'

bootstrap_uv() {
    [ -n "$boot" ] || { echo "error: no Python at all to install uv with" >>"$LOG"; return 1; }
    rm -rf "$SETUP/uv"
    say "installing uv from the package index into .venv-setup/uv (Python $(probe "$boot" | cut -d ' ' -f 1))"
    if "$boot" -m venv "$SETUP/uv" >>"$LOG" 2>&1; then
        "$SETUP/uv/bin/python" -m pip install -q --disable-pip-version-check uv >>"$LOG" 2>&1 ||
            return 1
    else
        # No ensurepip: a bare environment, and pip run from its own wheel installs uv.
        rm -rf "$SETUP/uv"
        "$boot" -m venv --without-pip "$SETUP/uv" >>"$LOG" 2>&1 || return 1
        wheel=$("$SETUP/uv/bin/python" -c "$FETCH_PIP" "$SETUP" 2>>"$LOG") || return 1
        "$SETUP/uv/bin/python" "$wheel/pip" install -q --disable-pip-version-check uv \
            >>"$LOG" 2>&1 || return 1
        rm -f "$wheel"
    fi
    [ -x "$SETUP/uv/bin/uv" ]
}

if command -v uv >/dev/null 2>&1 && uv --version >/dev/null 2>&1; then
    uv=$(command -v uv)
elif bootstrap_uv; then
    uv="$SETUP/uv/bin/uv"
else
    fail "no Python $NEED found (found: ${found:-none}) and uv could not be installed from the package index ($(log_reason)); $HELP"
fi

# uv's interpreters and links stay in the checkout; a pyproject.toml or .python-version
# above it does not count; it trusts the system's certificates as pip and Python do (a
# proxy's own CA included; UV_NATIVE_TLS is the older uv's name); pip's mirror is its too.
UV_PYTHON_INSTALL_DIR="$SETUP/python"
UV_PYTHON_BIN_DIR="$SETUP/bin"
UV_NO_PROJECT=1
UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-1}
UV_NATIVE_TLS=${UV_NATIVE_TLS:-1}
export UV_PYTHON_INSTALL_DIR UV_PYTHON_BIN_DIR UV_NO_PROJECT UV_SYSTEM_CERTS UV_NATIVE_TLS
if [ -n "${PIP_INDEX_URL:-}" ] && [ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]; then
    UV_DEFAULT_INDEX=$PIP_INDEX_URL
    export UV_DEFAULT_INDEX
fi

python=$("$uv" python find ">=3.9,<3.12" 2>>"$LOG")
if [ -n "$python" ]; then
    say "uv found $python"
else
    say "uv: no Python $NEED on this system; downloading CPython 3.11 into .venv-setup/python"
    "$uv" python install 3.11 >>"$LOG" 2>&1 &&
        python=$("$uv" python find 3.11 2>>"$LOG")
fi
[ -n "$python" ] ||
    fail "no Python $NEED found (found: ${found:-none}) and uv could not provide one ($(log_reason)); $HELP"
if "$uv" venv --seed --python "$python" "$VENV" >>"$LOG" 2>&1 && venv_ok; then
    info=$(probe "$VENV/bin/python")
    finish ".venv made by uv (Python ${info%% *}, $python)"
fi
rm -rf "$VENV" "$SETUP/uv"
fail "uv could not make .venv with $python ($(log_reason)); details in .venv-setup/venv.log"
