"""errors.py: TensorFlow's graph-mode error text reduced to its cause."""
import tensorflow.compat.v1 as tf

from mlimages.errors import op_error_text


def test_the_cause_without_tensorflows_header_nodes_and_stack():
    message = ('Graph execution error:\n\nDetected at node \'x\' defined at (most recent call '
               'last):\n  File "train.py", line 3\nNode: \'x\'\nrecord label length differs '
               'from --class_num=5\n\t [[{{node x}}]]')
    error = tf.errors.InvalidArgumentError(None, None, message)
    assert op_error_text(error) == 'record label length differs from --class_num=5'
    assert op_error_text(tf.errors.InvalidArgumentError(None, None, '')) == \
        'InvalidArgumentError'
