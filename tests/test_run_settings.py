"""run_settings.py: <model_dir>/flags.txt written, read back and compared; a resumed run
with other flags says which, and the file reruns the run with --flagfile."""
import os
import re

import pytest

from mlimages.config import run_settings
from helpers import run_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_flag_lines_parse_back_and_changes_are_named():
    lines = run_settings.flag_lines({'lr': 0.1, 'FixBlock2': False, 'piclist': '',
                                     'model_dir': '/a b/c'})
    assert lines == ['--lr=0.1', '--FixBlock2=false', '--piclist=', '--model_dir=/a b/c']
    assert run_settings.parse(['# a comment'] + lines) == {
        'lr': '0.1', 'FixBlock2': 'false', 'piclist': '', 'model_dir': '/a b/c'}
    new = run_settings.flag_lines({'lr': 0.01, 'FixBlock2': True, 'piclist': '',
                                   'model_dir': '/a b/c'})
    assert run_settings.changes(lines, new) == ['--lr 0.1 -> 0.01',
                                                '--FixBlock2 false -> true']


def test_save_and_read(tmp_path):
    header = run_settings.header('train.py', '2.15.1')
    assert header[0].startswith('# train.py run started ')
    assert 'TensorFlow 2.15.1, Python ' in header[1]
    path = run_settings.save(str(tmp_path / 'm'), header, ['--lr=0.1'])
    assert run_settings.read(str(tmp_path / 'm')) == header + ['--lr=0.1']
    assert os.listdir(str(tmp_path / 'm')) == ['flags.txt'] and path.endswith('flags.txt')
    assert run_settings.read(str(tmp_path / 'none')) is None


def test_git_commit_of_a_checkout_and_of_no_checkout(tmp_path, monkeypatch):
    commit = run_settings.git_commit(ROOT)
    if commit is not None:  # a clone: a short hash, maybe with changes
        assert re.fullmatch(r'[0-9a-f]{7,}( \+ changes)?', commit), commit
    # git stops looking upwards at tmp_path's parent, even if the temporary directory
    # lies inside some checkout.
    monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path.parent))
    assert run_settings.git_commit(str(tmp_path)) is None


@pytest.mark.slow
def test_flagfile_round_trip_and_a_resumed_run_with_a_changed_flag(tmp_path):
    model_dir = str(tmp_path / 'model')
    env = dict(os.environ, CUDA_VISIBLE_DEVICES='')

    def run(*args):
        return run_program('train.py', *args, env=env, cwd=str(tmp_path), timeout=300)
    first = run('--use_synthetic_data', '--model_dir=' + model_dir, '--class_num=5',
                '--log_dir=' + str(tmp_path / 'log'), '--resnet_size=18', '--image_size=32',
                '--batch_size=2', '--max_iter=1', '--lr=0.05', '--data_format=NHWC')
    assert first.returncode == 0, first.stderr[-3000:]
    saved = run_settings.read(model_dir)
    assert '--lr=0.05' in saved and '--max_iter=1' in saved and '--resnet_size=18' in saved
    assert 'resuming' not in first.stderr
    # The file reruns the same run (here: it resumes at its last step and stops)...
    again = run('--flagfile=' + os.path.join(model_dir, 'flags.txt'))
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'other flags' not in again.stderr
    # ... and a change is named, old and new, in one warning.
    changed = run('--flagfile=' + os.path.join(model_dir, 'flags.txt'), '--lr=0.01',
                  '--max_iter=2')
    assert changed.returncode == 0, changed.stderr[-3000:]
    warnings = [l for l in changed.stderr.splitlines() if 'other flags than its last run' in l]
    assert len(warnings) == 1
    assert '--lr 0.05 -> 0.01' in warnings[0] and '--max_iter 1 -> 2' in warnings[0]
    assert '--lr=0.01' in run_settings.read(model_dir)
