"""errors.py: TensorFlow's graph-mode error text reduced to its cause; each type's exit
status and its one line."""
import signal

import tensorflow.compat.v1 as tf

from mlimages import errors
from mlimages.errors import op_error_text


def test_the_cause_without_tensorflows_header_nodes_and_stack():
    message = ('Graph execution error:\n\nDetected at node \'x\' defined at (most recent call '
               'last):\n  File "train.py", line 3\nNode: \'x\'\nrecord label length differs '
               'from --class_num=5\n\t [[{{node x}}]]')
    error = tf.errors.InvalidArgumentError(None, None, message)
    assert op_error_text(error) == 'record label length differs from --class_num=5'
    assert op_error_text(tf.errors.InvalidArgumentError(None, None, '')) == \
        'InvalidArgumentError'


def test_each_type_carries_its_exit_status_and_report_says_it_in_one_line(capsys):
    assert [errors.UsageError.status, errors.DataError.status, errors.HierarchyError.status,
            errors.TrainingError.status, errors.PeerLost.status] == [2, 2, 2, 1, 200]
    assert errors.Stopped(signal.SIGTERM).status == 143
    assert errors.Interrupted(signal.SIGINT, 'saved').status == 130
    assert errors.AllImagesSkippedError('none', {}).status == 1  # not MakeRecordsError's 2
    assert errors.report('tool.py', errors.DataError('no such file: a')) == 2
    assert capsys.readouterr().err == 'tool.py: error: no such file: a\n'
