"""mlimages/files.py: a file or a directory appears only when complete, and an error leaves
nothing."""
import os

import pytest

from mlimages import files


def test_atomic_output_appears_only_when_complete(tmp_path):
    path = str(tmp_path / 'out.txt')
    with pytest.raises(RuntimeError):
        with files.atomic_output(path) as out:
            out.write('half')
            raise RuntimeError('stop')
    with files.atomic_output(path) as out:
        out.write('nothing')
        out.discard()
    assert os.listdir(str(tmp_path)) == []
    with files.atomic_output(path) as out:
        out.write('done')
        assert 'out.txt' not in os.listdir(str(tmp_path))
    assert open(path).read() == 'done' and os.listdir(str(tmp_path)) == ['out.txt']
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600


def test_atomic_directory_replaces_the_target_only_when_complete(tmp_path):
    path = str(tmp_path / 'new' / 'out')
    with files.atomic_directory(path) as temp:
        open(os.path.join(temp, 'a'), 'w').close()
        assert not os.path.exists(path)
    assert os.listdir(path) == ['a'] and os.listdir(str(tmp_path / 'new')) == ['out']
    with pytest.raises(RuntimeError):
        with files.atomic_directory(path) as temp:
            open(os.path.join(temp, 'b'), 'w').close()
            raise RuntimeError('stop')
    assert os.listdir(path) == ['a'] and os.listdir(str(tmp_path / 'new')) == ['out']
    with files.atomic_directory(path) as temp:
        open(os.path.join(temp, 'c'), 'w').close()
    assert os.listdir(path) == ['c']
