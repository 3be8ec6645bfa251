"""failures.py: the one line of a run that stopped early -- each TensorFlow error, a session
that only restarts, a signal to this task or to another task of a synchronous job."""
import signal
import sys

import pytest
import tensorflow.compat.v1 as tf

from mlimages.distributed import distribute
from mlimages.run import failures
from mlimages.run import preemption
import failing_train
from helpers import settings


def failure(error, step, memory_note=None, **given):
    """failures.describe_failure for train.py's settings with the given flags."""
    run = settings(**given)
    return failures.describe_failure(error, step, run.output.model_dir, run.data, run.devices,
                                     run.model, memory_note)

# The messages train.py's session gave for a corrupt JPEG record (TensorFlow 2.15.1, the
# records of test_train_reliability's corrupt_dataset): on one device, and with two replicas.
BAD_RECORD = ('Graph execution error:\n\njpeg::Uncompress failed. Invalid JPEG data or crop '
              'window.\n\t [[{{node decode_image/DecodeImage}}]]\n\t [[IteratorGetNext]]')
BAD_RECORD_TWO_REPLICAS = (
    'Graph execution error:\n\n2 root error(s) found.\n  (0) INVALID_ARGUMENT: jpeg::Uncompress '
    'failed. Invalid JPEG data or crop window.\n\t [[{{node decode_image/DecodeImage}}]]\n\t '
    '[[MultiDeviceIteratorGetNextFromShard]]\n\t [[RemoteCall]]\n\t [[IteratorGetNext]]\n\t '
    '[[AddN_50/_943]]\n  (1) INVALID_ARGUMENT: jpeg::Uncompress failed. Invalid JPEG data or '
    'crop window.\n\t [[{{node decode_image/DecodeImage}}]]\n\t '
    '[[MultiDeviceIteratorGetNextFromShard]]\n\t [[RemoteCall]]\n\t [[IteratorGetNext]]\n0 '
    'successful operations.\n0 derived errors ignored.')


@pytest.mark.parametrize('error,start', [
    (tf.errors.InvalidArgumentError(None, None, 'non-finite training loss : Tensor had NaN'),
     'the training loss became NaN or Inf at step 4; training stopped'),
    # A histogram summary that meets the NaN first names the same cause.
    (tf.errors.InvalidArgumentError(None, None, 'Nan in summary histogram for: sigmod_ce'),
     'the training loss became NaN or Inf at step 4; training stopped'),
    (tf.errors.DataLossError(None, None, 'corrupted record at 12'),
     'a shard is truncated or corrupt (corrupted record at 12) at step 4; find it with'),
    (tf.errors.InvalidArgumentError(None, None, BAD_RECORD),
     'bad record at step 4: jpeg::Uncompress failed. Invalid JPEG data or crop window.; '
     'find it with tools/check_tfrecords.py'),
    # Two replicas (MirroredStrategy): two root errors, the shard of a MultiDeviceIterator.
    (tf.errors.InvalidArgumentError(None, None, BAD_RECORD_TWO_REPLICAS),
     'bad record at step 4: jpeg::Uncompress failed. Invalid JPEG data or crop window.; '
     'find it with tools/check_tfrecords.py'),
])
def test_each_failure_gets_its_own_message(error, start, tmp_path):
    text = failure(error, 4, model_dir=str(tmp_path))
    assert text.startswith(start), text


def test_a_session_that_only_restarts_gets_its_own_message(tmp_path):
    text = failures.describe_restart_loop(6, str(tmp_path), 3)
    assert text == ('the session failed 6 times in a row at step 3 without completing a '
                    'step, each time with an AbortedError or UnavailableError (logged above '
                    'as "An error was raised"): not a passing preemption; no checkpoint was '
                    'written')


def test_a_placement_error_is_named_as_one_not_as_a_bad_record(tmp_path):
    given = dict(model_dir=str(tmp_path), num_gpus=2, visiable_gpu=0)
    error = tf.errors.InvalidArgumentError(
        None, None, "Cannot assign a device for operation images: Could not satisfy "
        "explicit device specification '/device:GPU:0' because no supported kernel for "
        "GPU devices is available.")
    text = failure(error, 1, **given)
    assert text.startswith('an op could not be placed on the devices') and \
        'bad record' not in text and '--num_gpus=2' in text, text


# TensorFlow 2.15's words for the failures of a first GPU run (its binary holds each text;
# the messages are shaped as its graph-mode session gives them).
OOM = ("Graph execution error:\n\nDetected at node 'resnet/conv2d_3/Conv2D' defined at (most "
       "recent call last):\n    File \"train.py\", line 300\nNode: 'resnet/conv2d_3/Conv2D'\n"
       "OOM when allocating tensor with shape[512,64,112,112] and type float on "
       "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\t [[{{node "
       "resnet/conv2d_3/Conv2D}}]]\nHint: If you want to see a list of allocated tensors when "
       "OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current "
       "allocation info. This isn't available when running in Eager mode.")
MEMORY_NOTE = ('the estimate for ResNet-101, batch 512, fp32 at 224 px is 81.3 GB a replica; '
               '--batch_size=96 fits 16 GB')
E = tf.errors


@pytest.mark.parametrize('error,start', [
    # A cluster's task: the device named with its job.
    (E.ResourceExhaustedError(None, None, OOM.replace('localhost/replica:0/task:0/device:GPU:0',
                                                      'worker/replica:0/task:1/device:GPU:3')),
     'out of memory on GPU:3 of /job:worker/replica:0/task:1 at step 4 (OOM when allocating '
     'tensor with shape[512,64,112,112] and type float): lower --batch_size (512 images'),
    # XLA's allocator names no device.
    (E.ResourceExhaustedError(None, None, 'Out of memory while trying to allocate 3221225472 '
                              'bytes.\n\t [[{{node cluster_3_1/xla_run}}]]'),
     'out of memory on the device at step 4 (Out of memory while trying to allocate '
     '3221225472 bytes.): lower --batch_size (512 images a replica now)'),
    # A full disk is a ResourceExhaustedError too: its own line, checked first.
    (E.ResourceExhaustedError(None, None, '/m/model.ckpt-3_temp/part-00000-of-00001.data-00000-'
                              'of-00001.tempstate1; No space left on device'),
     'no space left on device writing the checkpoint model.ckpt-3 in --model_dir='),
    (E.InvalidArgumentError(None, None, "Graph execution error:\n\nDetected unsupported "
                            "operations when trying to compile graph cluster_0[] on XLA_GPU_JIT: "
                            "StringLength (No registered 'StringLength' OpKernel for "
                            "XLA_GPU_JIT devices compatible with node {{node len}}){{node "
                            "len}}\n\t [[cluster_0_1/xla_compile]]"),
     'XLA could not compile the training step at step 4 (Detected unsupported operations'),
    # tensorflow#55973: auto-clustering's compile op in the trail.
    (E.InvalidArgumentError(None, None, 'Input 1 to node `resnet/Tile` with op Tile must be a '
                            'compile-time constant.\n\nXLA compilation requires that operator '
                            'arguments that represent shapes or dimensions be evaluated to '
                            'concrete values at compile time.\n\t [[{{node resnet/Tile}}]]\n\t '
                            '[[cluster_14_1/xla_compile]]'),
     'XLA could not compile the training step at step 4 (Input 1 to node `resnet/Tile` with op '
     'Tile must be a compile-time constant.): rerun without --xla'),
    (E.InternalError(None, None, 'libdevice not found at ./libdevice.10.bc\n\t [[{{node '
                     'cluster_2_1/xla_compile}}]]'),
     'XLA could not use the CUDA tools ptxas or libdevice at step 4 (libdevice not found at '
     './libdevice.10.bc): set XLA_FLAGS=--xla_gpu_cuda_data_dir='),
    (E.InternalError(None, None, "Can't find ptxas binary.  You can pass the flag "
                     "--xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found to use the GPU "
                     "driver for compiling ptx instead."),
     'XLA could not use the CUDA tools ptxas or libdevice at step 4'),
    (E.InternalError(None, None, "CUDNN_STATUS_EXECUTION_FAILED\nin external/local_xla/xla/"
                     "stream_executor/cuda/cuda_dnn.cc(5750): 'cudnnBatchNormalizationForward"
                     "TrainingEx( cudnn.handle(), mode, bn_ops, ...)'\n\t [[{{node "
                     "resnet/batch_normalization/FusedBatchNormV3}}]]"),
     'cuDNN failed on the GPU at step 4 (CUDNN_STATUS_EXECUTION_FAILED): TensorFlow 2.15.1 '
     'is built for CUDA 12.2 and cuDNN 8.9: check the libraries'),
    (E.NotFoundError(None, None, 'No algorithm worked!  Error messages:\n\t [[{{node '
                     'resnet/conv2d/Conv2D}}]]'),
     'cuDNN failed on the GPU at step 4 (No algorithm worked!  Error messages:)'),
    (E.UnimplementedError(None, None, 'DNN library is not found.\n\t [[{{node '
                          'resnet/conv2d/Conv2D}}]]'),
     'cuDNN failed on the GPU at step 4 (DNN library is not found.)'),
    (E.InternalError(None, None, 'Blas xGEMMBatched launch failed : a.shape=[1,512,2048], '
                     'b.shape=[1,2048,11166], m=512, n=11166, k=2048, batch_size=1\n\t '
                     '[[{{node dense/MatMul}}]]'),
     'cuBLAS failed on the GPU at step 4 (Blas xGEMMBatched launch failed'),
    (E.InternalError(None, None, 'GPU sync failed'),
     'CUDA failed on the GPU at step 4 (GPU sync failed): TensorFlow 2.15.1 is built for'),
    (E.InvalidArgumentError(None, None, "No registered 'CheckNumerics' OpKernel for 'GPU' "
                            "devices compatible with node {{node loss/CheckNumerics}}"),
     'an op has no GPU kernel for its type at step 4'),
    # Not the input pipeline's op: named as what it is (the message TF 2.15.1 gave).
    (E.InvalidArgumentError(None, None, "Graph execution error:\n\nDetected at node 'Reshape' "
                            "defined at (most recent call last):\n    File \"x.py\", line 29, "
                            "in <module>\nNode: 'Reshape'\nInput to reshape is a tensor with 4 "
                            "values, but the requested shape has 3\n\t [[{{node Reshape}}]]"),
     'an op of the training step rejected its input at step 4 (Input to reshape is a tensor '
     'with 4 values, but the requested shape has 3, node Reshape): not a bad record'),
])
def test_each_gpu_failure_is_named_with_what_to_do(error, start, tmp_path):
    text = failure(error, 4, model_dir=str(tmp_path))
    assert text.startswith(start), text
    assert text.endswith('no checkpoint was written') and 'skip_bad_records' not in text, text


def test_an_op_without_a_gpu_kernel_names_the_dtype_to_use(tmp_path):
    error = tf.errors.InvalidArgumentError(
        None, None, "No registered 'Conv2D' OpKernel for 'GPU' devices compatible with node "
        "{{node resnet/conv2d/Conv2D}}\n\t (OpKernel was found, but attributes didn't match) "
        "Requested Attributes: T=DT_BFLOAT16")
    text = failure(error, 4, model_dir=str(tmp_path), dtype='bf16')
    assert text.startswith("an op has no GPU kernel for its type at step 4 (No registered "
                           "'Conv2D' OpKernel for 'GPU' devices compatible with node {{node "
                           "resnet/conv2d/Conv2D}}): rerun with --dtype=fp32 (now bf16)"), text


def test_out_of_memory_names_the_batch_size_and_the_estimate(tmp_path):
    given = dict(model_dir=str(tmp_path), batch_size=512)
    error = tf.errors.ResourceExhaustedError(None, None, OOM)
    start = ('out of memory on GPU:0 at step 4 (OOM when allocating tensor with '
             'shape[512,64,112,112] and type float): lower --batch_size (512 images a replica '
             'now)')
    assert failure(error, 4, **given) == start + '; no checkpoint was written'
    assert failure(error, 4, memory_note=MEMORY_NOTE, **given) == (
        start + '; ' + MEMORY_NOTE + '; no checkpoint was written')


def test_a_resource_exhausted_that_is_not_memory_gets_no_batch_hint(tmp_path):
    error = tf.errors.ResourceExhaustedError(
        None, None, 'Received message larger than max (5000000 vs. 4194304)')
    text = failure(error, 4, model_dir=str(tmp_path))
    assert text == ('Received message larger than max (5000000 vs. 4194304) at step 4; no '
                    'checkpoint was written'), text


def test_the_xla_toolchain_line_names_the_cuda_nvcc_wheels_directory(tmp_path, monkeypatch):
    """pip's nvidia-cuda-nvcc-cu12 (12.2.140, tensorflow[and-cuda]'s) installs
    nvidia/cuda_nvcc/{bin/ptxas,nvvm/libdevice/libdevice.10.bc}: that directory is named."""
    nvcc = tmp_path / 'site' / 'nvidia' / 'cuda_nvcc'
    (nvcc / 'bin').mkdir(parents=True)
    for path in (nvcc.parent / '__init__.py', nvcc / '__init__.py', nvcc / 'bin' / 'ptxas'):
        path.write_text('')
    monkeypatch.syspath_prepend(str(tmp_path / 'site'))
    for name in ('nvidia', 'nvidia.cuda_nvcc'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    error = tf.errors.InternalError(None, None, 'libdevice not found at ./libdevice.10.bc')
    text = failure(error, None, model_dir=str(tmp_path))
    assert ('XLA_FLAGS=--xla_gpu_cuda_data_dir=%s ' % nvcc) in text, text
    assert text.startswith('XLA could not use the CUDA tools ptxas or libdevice (libdevice') and \
        'rerun without --xla' in text, text


def real_error(kind):
    """The OpError a graph-mode session raises for a failing op of failing_train's kinds,
    or for 'record', a tf.data pipeline's map that meets a record that is no JPEG."""
    with tf.Graph().as_default(), tf.Session() as session:
        if kind == 'record':
            dataset = tf.data.Dataset.from_tensor_slices([b'\xff\xd8\xff\xe0 no jpeg'])
            fetch = tf.data.make_one_shot_iterator(dataset.map(tf.io.decode_jpeg)).get_next()
            feed = None
        else:
            fetch, feed = failing_train.failing_op(kind)
        with pytest.raises(tf.errors.OpError) as caught:
            session.run(fetch, feed)
    return caught.value


@pytest.mark.parametrize('kind,start', [
    ('record', 'bad record at step 2: '),
    ('reshape', 'an op of the training step rejected its input at step 2 (Input to reshape '),
    ('xla', 'XLA could not compile the training step at step 2 (Detected unsupported '
            'operations when trying to compile graph '),
    # oneDNN's CPU allocator (a BFC one, as a GPU's) waits 10 s for memory before it gives
    # up: on demand here; test_train_reliability runs it in train.py without oneDNN.
    pytest.param('oom', 'out of memory on CPU:0 at step 2 (OOM when allocating tensor with '
                 'shape[1048576,4096,4096,3] and type float): lower --batch_size (512 images',
                 marks=pytest.mark.matrix),
])
def test_real_tensorflow_errors_are_told_apart(kind, start, tmp_path):
    text = failure(real_error(kind), 2, model_dir=str(tmp_path))
    assert text.startswith(start), text


def stopped(signum=None, elsewhere=None):
    preempt = preemption.Preemption('train.py')
    preempt.signum, preempt.elsewhere = signum, elsewhere
    return preempt


def task_plan(task_type):
    environ = {'TF_CONFIG': '{"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, '
                            '"task": {"type": "%s", "index": 0}}' % task_type}
    return distribute.plan('collective', 1, 1, 0, 4, gpu_count=0, environ=environ)


@pytest.mark.parametrize('preempt,task,words', [
    (stopped(signal.SIGTERM), 'chief', 'stopped by SIGTERM at global step 7'),
    (stopped(elsewhere=signal.SIGINT), 'chief',
     'stopped by SIGINT to another task of the job at global step 7'),
    (stopped(signal.SIGTERM), 'worker',
     'worker:0 (worker id 1) stopped by SIGTERM after global step 7'),
    (stopped(elsewhere=signal.SIGTERM), 'worker',
     'worker:0 (worker id 1) stopped by SIGTERM to another task of the job after global step 7'),
])
def test_a_signal_names_itself_the_step_and_the_checkpoint(tmp_path, preempt, task, words):
    error = failures.interrupted(preempt, str(tmp_path), task_plan(task), 7)
    assert error.signum == (preempt.signum or preempt.elsewhere)
    assert str(error).startswith(words), str(error)
    if task == 'chief':
        assert str(error).endswith(': the last checkpoint is none; rerun the same command to '
                                   'resume'), str(error)
    else:
        assert str(error).endswith('; the chief saves the checkpoint; rerun the same command '
                                   'to resume'), str(error)
