"""tools/benchmark.py: a whole run (no timings are asserted)."""
import glob
import os
import subprocess
import sys

import pytest

from helpers import ROOT


@pytest.mark.slow
def test_benchmark_runs_end_to_end_and_prints_the_table(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--shard_dir',
         str(tmp_path / 'shards'), '--num_images', '8', '--class_num', '50',
         '--batch_size', '4', '--image_size', '32', '--shuffle_buffer', '8',
         '--seconds', '0.2', '--repeats', '1', '--warmup_batches', '1',
         '--resnet_size', '18', '--step_image_size', '32', '--step_batch_size', '2',
         '--step_seconds', '0.2', '--step_repeats', '1', '--step_warmup', '1'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ('input_fn(cpu)', 'input_fn(device)', 'spec_literal', 'floor', 'synthetic',
                 'usable cores', 'cores busy'):
        assert name in result.stdout, (name, result.stdout)
    assert len(glob.glob(str(tmp_path / 'shards' / 'train' / '*.tfrecords'))) == 4


def test_bookkeeping_mode_measures_every_cost_before_and_after(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'benchmark.py'), '--bookkeeping',
         '--bk_shards', '40', '--bk_lines', '300', '--bk_per_shard', '20',
         '--bk_cost_images', '10', '--bk_dir', str(tmp_path / 'work')],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for text in ('list parsing, one list, K = 40 shards', 'a shard task scans the whole list',
                 'resume of a run with K = 40 finished shards', 'listing: before',
                 'counting: before', 'check_tfrecords parent over K = 40 files',
                 'short side 320, sparse labels'):
        assert text in result.stdout, (text, result.stdout)


def test_report_cost_mode_measures_the_report_of_many_classes(tmp_path, capsys):
    """--report_cost's measurement, in this process (its TensorFlow already started)."""
    import pandas as pd
    from mlimages.bench import benchmark, report_cost
    args = benchmark.build_parser().parse_args([
        '--report_cost', '--rc_classes', '60', '--rc_images', '400', '--rc_repeats', '1',
        '--rc_dir', str(tmp_path)])
    assert report_cost.main(args) == 0
    out = capsys.readouterr().out
    assert 'the per-class report at 60 classes, histograms of 400 images' in out
    for text in ('the report ', 'then the mAPs ', 'bytes an evaluation'):
        assert text in out, (text, out)
    table = pd.read_csv(tmp_path / 'per_class-1.tsv', sep='\t')
    assert len(table) == 60 and (table['positives'] + table['negatives'] == 400).all()
