"""The directories a run writes: made and checked before anything is written in them (one
line naming the path and the fix), the lock that lets one writer use a directory, and the
temporary leftovers of a killed run.

Lock: fcntl.flock on <dir>/.lock held for the life of the process; the kernel releases it
when the process ends however it ends (SIGKILL included), so a killed run never leaves a
stale lock, and a process that exits through the interpreter removes the file. The holder
writes `pid P on host H since T` into the file for the one line a second writer gets.
(flock works across hosts on NFSv4 and most cluster file systems; where it does not, the
lock only guards one host.)
"""
import atexit
import datetime
import errno
import fcntl
import os
import re
import shutil
import socket
from mlimages.errors import DirectoryError

LOCK_FILE = '.lock'
# What a killed run leaves: TensorFlow's sharded save (model.ckpt-N_temp/), its atomic writes
# (checkpoint.tmp<hex>, graph.pbtxt.tmp<hex>) and ours (flags.txt.tmp).
LEFTOVER = re.compile(r'^(model\.ckpt-\d+_temp.*|checkpoint\.tmp[0-9a-f]+|'
                      r'graph\.pbtxt\.tmp[0-9a-f]+|flags\.txt\.tmp)$')
_held = {}  # directory -> the open lock file, until release_lock (or the process's end)


def check_directory(path, flag):
    """Makes `path` (parents too) and checks that files can be created in it; raises
    DirectoryError naming --flag."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise DirectoryError('--%s=%s is a file, not a directory: give a directory (or move '
                             'the file away)' % (flag, path))
    probe = os.path.join(path, '.write-test-%d' % os.getpid())
    try:
        os.makedirs(path, exist_ok=True)
        with open(probe, 'w'):
            pass
        os.remove(probe)
    except OSError as e:
        raise DirectoryError('--%s=%s cannot be written (%s): give a directory this user can '
                             'write%s' % (flag, path, e.strerror or e,
                                          ' on a disk with free space'
                                          if e.errno == errno.ENOSPC else ''))


def hold_lock(directory, what):
    """Takes the lock of `directory` for this process (what: the writer, e.g. 'trainer'),
    until release_lock or the process's end; raises DirectoryError naming the holder when
    another process has it. Taking it again in the same process is a no-op."""
    if os.path.realpath(directory) in _held:
        return
    path = os.path.join(directory, LOCK_FILE)
    while True:
        fd = _lock_file(path, what, directory)
        try:  # the file may have been removed by a release since we opened it
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    now = datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M:%S %Z')
    os.ftruncate(fd, 0)
    os.pwrite(fd, ('pid %d on host %s since %s\n' % (os.getpid(), socket.gethostname(),
                                                     now)).encode(), 0)
    _held[os.path.realpath(directory)] = fd
    atexit.register(release_lock, directory)  # no .lock left behind after a clean exit


def release_lock(directory):
    """Gives the lock of `directory` back (removing its file) if this process holds it."""
    fd = _held.pop(os.path.realpath(directory), None)
    if fd is not None:
        try:
            os.remove(os.path.join(directory, LOCK_FILE))
        finally:
            os.close(fd)


def _lock_file(path, what, directory):
    """The open lock file at `path`, locked; DirectoryError naming the holder if it is
    locked."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise DirectoryError('cannot create the lock file %s (%s): give a directory this user '
                             'can write' % (path, e.strerror))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise DirectoryError('cannot lock %s (%s)' % (path, e.strerror))
        holder = os.pread(fd, 200, 0).decode('utf-8', 'replace').strip() or 'unknown'
        os.close(fd)
        raise DirectoryError('another %s (%s) is using %s: wait for it to end, stop it, or '
                             'give another directory' % (what, holder, directory))
    return fd


def remove_leftovers(directory):
    """Removes the temporary files and directories a killed or failed run left in
    `directory` (LEFTOVER); returns their names. Only for the lock holder."""
    names = sorted(n for n in os.listdir(directory) if LEFTOVER.match(n))
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
    return names
