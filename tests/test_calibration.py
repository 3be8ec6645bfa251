"""calibration.py: the label codes the evaluation collects, the thresholds and F1 figures it
derives from them (against references.py), and thresholds.txt (written, read, found beside
a checkpoint, refused when it is not one). The end-to-end run (train.py --mode=eval
--threshold=calibrated, then predict and export) is test_export.py's."""
import os

import numpy as np
import pytest

from mlimages.errors import UsageError
from mlimages.run import calibration
from references import f1_optimal_thresholds, multilabel_metrics
from helpers import NO_POSITIVE, THRES, make_split


def collected(y, s, parts=(0, 50, 51, 200)):
    collector = calibration.ScoreCollector(THRES)
    for a, b in zip(parts[:-1], parts[1:]):
        collector.add(y[a:b], s[a:b])
    return collector


def test_label_codes_keep_what_f1_needs():
    """1 for a positive (label >= mask_thres in float32, so 0.7 is one), -1 for an ignored
    entry, 0 otherwise; F1 of the codes at CODE_THRES is F1 of the labels at mask_thres."""
    y = np.array([[1.0, 0.7, 0.69, 0.0, -1.0, 0.3]], np.float32)
    codes, scores = collected(y, np.full_like(y, 0.6), (0, 1)).arrays()
    assert codes.dtype == np.int8 and codes.tolist() == [[1, 1, 0, 0, -1, 0]]
    y, s = make_split(2, 'sigmoid', images=200)
    codes, _ = collected(y, s).arrays()
    for threshold in (0.5, 0.01):
        want = multilabel_metrics(y, s, THRES, threshold)
        got = multilabel_metrics(codes.astype(np.float32), s, calibration.CODE_THRES,
                                 threshold)
        assert got['micro_f1'] == want['micro_f1'] and got['macro_f1'] == want['macro_f1']


def test_calibrate_writes_the_reference_thresholds_and_reports_f1(tmp_path):
    y, s = make_split(4, 'sigmoid', images=200)
    checkpoint = str(tmp_path / 'model.ckpt-9')
    results, path, lines, _ = calibration.calibrate(collected(y, s), checkpoint, '0.4', 'a split')
    assert path == str(tmp_path / calibration.FILE_NAME)
    thresholds, best, positives = f1_optimal_thresholds(y, s, THRES, default=0.4)
    values, chosen_for = calibration.read(path, y.shape[1])
    np.testing.assert_array_equal(values, thresholds)  # '%.9g' reads back the float32
    assert chosen_for == 'model.ckpt-9' and np.all(values[list(NO_POSITIVE)] == np.float32(0.4))
    rows = [line.split('\t') for line in open(path) if not line.startswith('#')]
    assert [int(r[3]) for r in rows] == positives.tolist()
    np.testing.assert_allclose([float(r[2]) for r in rows], best, atol=5e-7)
    for name, at in (('global', 0.4), ('calibrated', thresholds)):
        want = multilabel_metrics(y, s, THRES, at)
        for key in ('micro_f1', 'macro_f1'):
            assert abs(results['%s_%s' % (key, name)] - want[key]) <= 1e-9, (key, name)
    assert lines[0].startswith('thresholds per class: %d of %d classes calibrated on 200 '
                               'images, written to %s' % (y.shape[1] - len(NO_POSITIVE),
                                                          y.shape[1], path))
    assert 'micro F1 %.4f -> %.4f' % (results['micro_f1_global'],
                                      results['micro_f1_calibrated']) in lines[1]


def test_thresholds_beside_a_checkpoint_and_bad_files(tmp_path):
    checkpoint = str(tmp_path / 'model.ckpt-20')
    with pytest.raises(UsageError, match='no thresholds.txt beside .*--mode=eval '
                                         '--threshold=calibrated'):
        calibration.for_checkpoint(checkpoint, 3)
    path = str(tmp_path / calibration.FILE_NAME)
    calibration.write(path, np.float32([0.25, 0.5, 0.875]), [0.5, 0, 1], [3, 0, 1],
                      'model.ckpt-10', ['chosen on a test'])
    values, found, warnings = calibration.for_checkpoint(checkpoint, 3)
    assert values.tolist() == [0.25, 0.5, 0.875] and found == path
    assert warnings == ['warning: %s holds the thresholds chosen for model.ckpt-10, not '
                        'model.ckpt-20 (rerun --mode=eval --threshold=calibrated to choose '
                        'them again)' % path]
    assert calibration.for_checkpoint(str(tmp_path), 3)[0].tolist() == values.tolist()
    with pytest.raises(UsageError, match='holds thresholds of 3 classes, the model has 4'):
        calibration.read(path, 4)
    for text, fragment in (('0\t0.5\n2\t0.5\n', ':3: expected class 1'),
                           ('0\t1.5\n', ':2: expected class 0 with a threshold in'),
                           ('zero\t0.5\n', ':2: expected "class<TAB>threshold')):
        bad = tmp_path / 'bad.txt'
        bad.write_text('# header\n' + text)
        with pytest.raises(UsageError, match=fragment):
            calibration.read(str(bad))
    assert sorted(os.listdir(str(tmp_path))) == ['bad.txt', calibration.FILE_NAME]


def test_global_threshold_of_the_flag():
    assert calibration.global_threshold('0.3') == 0.3
    assert calibration.global_threshold('calibrated') == 0.5
