"""Files that appear only when complete: written under a temporary name beside the target
and renamed over it at the end (os.replace, atomic on POSIX), the temporary removed on any
error; so an interrupted or failed write (a signal, a full disk) leaves the earlier file or
none, never half of one, and no leftover. atomic_directory does the same for a directory.
"""
import contextlib
import os
import shutil
import sys
import tempfile

from mlimages.errors import UsageError


@contextlib.contextmanager
def atomic_output(path, binary=False):
    """A file object whose content appears at `path` only when the block completes: it is
    written under a temporary name beside `path` and renamed at the end (removed on error
    or when the block calls `discard()` on the yielded object). None or '-' = stdout."""
    if path in (None, '-'):
        stream = sys.stdout.buffer if binary else sys.stdout
        yield _Unowned(stream)
        stream.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError('output directory %s does not exist' % directory)
    fd, temp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), suffix='.tmp',
                                dir=directory)
    stream = os.fdopen(fd, 'wb' if binary else 'w', **({} if binary else
                                                        {'encoding': 'utf-8'}))
    handle = _Owned(stream)
    try:
        yield handle
        stream.close()
        if handle.discarded:
            os.unlink(temp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
            os.replace(temp, path)
    except BaseException:
        stream.close()
        if os.path.exists(temp):
            os.unlink(temp)
        raise


@contextlib.contextmanager
def atomic_directory(path):
    """The name of an empty temporary directory beside `path` (its parent made if
    missing) that replaces `path` (an earlier one removed) when the block completes; it is
    removed on any error, `path` then left as it was."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    temp = os.path.join(parent, '.%s.tmp-%d' % (os.path.basename(path), os.getpid()))
    shutil.rmtree(temp, ignore_errors=True)
    os.makedirs(temp)
    try:
        yield temp
        if os.path.exists(path):
            shutil.rmtree(path)
        os.rename(temp, path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


class _Owned(object):
    def __init__(self, stream):
        self.stream = stream
        self.discarded = False

    def write(self, data):
        return self.stream.write(data)

    def discard(self):
        self.discarded = True


class _Unowned(_Owned):
    def discard(self):
        pass
