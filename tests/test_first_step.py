"""mlimages/bench/first_step.py (tools/benchmark.py --startup): the parts of a process's
time to its first step from its timestamps, and turns that rotate the variants and take
ratios within a turn. The runs themselves are timing: benchmark.py's, not a test's."""
import pytest

from mlimages.bench import first_step


def timestamps(restored=False):
    """One process's timestamps: spawned at 100, the first step done at 160."""
    t = {'spawned': 100.0, 'process': 100.1, 'imported': 104.0, 'train': 105.0,
         'estimator_start': 106.0, 'finalize_start': 116.0, 'finalize_end': 116.0,
         'prepare_start': 116.5, 'prepare_end': 125.0, 'checkpoint_start': 125.0,
         'checkpoint_end': 131.0, 'step_start': 131.5, 'step_end': 160.0}
    if restored:
        t.update(restore_start=117.0, restore_end=121.0)
    else:
        t.update(init_start=117.0, init_end=123.0)
    return t


@pytest.mark.parametrize('restored', [False, True])
def test_parts_add_up_to_the_total(restored):
    parts = first_step.parts(timestamps(restored))
    assert parts['start'] == 5.0  # spawn to train.run: Python, TensorFlow, the trainer
    assert parts['setup'] == 1.0
    assert parts['graph'] == 10.0  # the Estimator's train to the finalized graph
    assert parts['variables'] == (4.0 if restored else 6.0)
    assert parts['session'] == 9.0 - parts['variables']
    assert parts['checkpoint'] == 6.0
    assert parts['total'] == 60.0
    assert sum(parts[p] for p in first_step.PARTS) == pytest.approx(60.0)
    assert parts['step'] == pytest.approx(29.0)


def test_turns_rotate_and_ratios_are_taken_within_a_turn():
    runs = first_step.variants([1, 8])
    assert [name for name, _, _, _ in runs] == ['single', 'mirrored x8', 'processes x8']
    assert [name for name, _, _, _ in first_step.variants([8], '/before')] == [
        'single', 'mirrored x8', 'processes x8', 'single <', 'mirrored x8 <',
        'processes x8 <']
    calls, speed = [], {1: 3.0, 2: 1.0, 3: 2.0}  # a machine twice as busy in turn 2

    def measure(variant, replicas, checkout):
        calls.append(variant)
        base = {'single': 10.0, 'mirrored': 40.0, 'processes': 20.0}[variant]
        return {'total': base * speed[(len(calls) - 1) // 3 + 1]}
    results, ratios = first_step.run_turns(runs, 3, measure, lambda text: None)
    assert calls == ['single', 'mirrored', 'processes', 'mirrored', 'processes', 'single',
                     'processes', 'single', 'mirrored']
    assert ratios['mirrored x8'] == pytest.approx([4.0] * 3)
    assert ratios['processes x8'] == pytest.approx([2.0] * 3)
    assert [r['total'] for r in results['single']] == [30.0, 10.0, 20.0]


def test_processes_that_would_not_fit_in_memory_are_not_started(tmp_path, monkeypatch):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text('MemTotal:       25165824 kB\nMemAvailable:   10485760 kB\n')
    assert first_step.available_gb(str(meminfo)) == 10.0
    monkeypatch.setattr(first_step, 'available_gb', lambda: 10.0)
    with pytest.raises(RuntimeError, match='8 processes need about 16.0 GB, 10.0 GB'):
        first_step.measure('processes', 8, None, single_gb=2.0)
