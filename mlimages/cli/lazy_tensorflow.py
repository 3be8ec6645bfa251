"""TensorFlow imported on first use, quietly: the commands answer --help and usage errors
at once, and a parent process that only hands out work never loads it. A module that
imports TensorFlow at its top (records, serving, ...) is imported inside the function that
needs it, after tensorflow()."""
import os
import warnings

_tensorflow = None


def tensorflow():
    """tensorflow.compat.v1 in graph mode, imported on first use and quietly (no C++
    start-up lines, no deprecation note): how the tools load TensorFlow, so that --help and
    usage errors answer at once and a parent that only hands out work (check_tfrecords')
    never loads it."""
    global _tensorflow
    if _tensorflow is None:
        quiet_tensorflow()
        warnings.filterwarnings('ignore', message='.*is deprecated', category=UserWarning)
        import tensorflow.compat.v1 as tf
        verbosity = tf.logging.get_verbosity()
        tf.logging.set_verbosity(tf.logging.ERROR)
        tf.disable_v2_behavior()
        tf.logging.set_verbosity(verbosity)
        _tensorflow = tf
    return _tensorflow


def quiet_tensorflow():
    """TensorFlow's C++ start-up chatter (CUDA plugins, ...) would garble the progress
    line; errors that matter reach Python as exceptions. Only before TF is loaded."""
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
