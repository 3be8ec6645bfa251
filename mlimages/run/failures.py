"""The one line of a training run that stopped early, with what to do about it: an error of
TensorFlow's (describe_failure: a full or read-only disk, a NaN loss, an op no device can
run, a damaged shard, memory run out, an XLA compile failure, a GPU library's failure, a bad
record, any other op's rejected input), a session that failed on every restart
(describe_restart_loop), a signal (interrupted). Each names what is kept in --model_dir.
"""
import importlib.util
import os
import re

import tensorflow.compat.v1 as tf

from mlimages.model import memory
from mlimages.run import checkpoints
from mlimages.distributed import devices
from mlimages.run import model_fn
from mlimages.run import preemption
from mlimages.errors import PEER_LOST_STATUS, Interrupted, op_error_text

# TensorFlow's words for an op it cannot put on a device: a placement problem, not data.
PLACEMENT_ERRORS = ('Cannot assign a device for operation',
                    'Could not satisfy explicit device specification',
                    'no supported kernel for GPU devices')


# A file system that refuses a write (a checkpoint, an event file): the fix of each.
DISK_ERRORS = {'No space left on device': 'free space on the disk of --model_dir=%s (or give '
                                          'another --model_dir)',
               'Read-only file system': 'give a --model_dir on a writable disk (not %s)',
               'Permission denied': 'make --model_dir=%s writable for this user'}

# A device's allocator out of memory, in TensorFlow 2.15's words: the BFC allocator's 'OOM
# when allocating tensor ...', XLA's 'Out of memory while trying to allocate N bytes', a
# library's 'failed to allocate memory'. Other ResourceExhaustedErrors (a gRPC message over
# its size limit, too many open files) are not memory.
MEMORY_WORDS = re.compile(r'\bOOM when allocating|out of memory|failed to allocate memory|'
                          r'Cannot allocate memory', re.IGNORECASE)

# The ops a batch of the input pipeline comes out of (tf.data's iterators; under
# MirroredStrategy each replica's IteratorGetNext reads a MultiDeviceIterator's shard). An
# error raised inside the pipeline -- a record that does not parse or decode -- names one of
# them in its node trail ("[[{{node decode_image/DecodeImage}}]] [[IteratorGetNext]]").
INPUT_OPS = ('IteratorGetNext', 'IteratorGetNextSync', 'IteratorGetNextAsOptional',
             'MultiDeviceIteratorGetNextFromShard')

# XLA's compile failures (InvalidArgumentError mostly, tensorflow#55610): tf2xla's words, and
# the node of an auto-clustered compile (cluster_N_M/xla_compile).
XLA_COMPILE_WORDS = ('Detected unsupported operations when trying to compile graph',
                     'tf2xla conversion failed', 'must be a compile-time constant',
                     'XLA compilation requires')
# XLA:GPU without CUDA's ptxas or libdevice (pip's CUDA wheels, tensorflow#58681, #60790).
XLA_TOOLCHAIN_WORDS = ('ptxas', 'libdevice')

# The GPU libraries' failures, in TensorFlow 2.15's words (each checked in its binary), by
# library; no GPU kernel for an op (a dtype without one, XLA off) is the last.
GPU_LIBRARY_WORDS = (
    ('cuDNN', ('CUDNN_STATUS_', 'cuDNN launch failure', 'No algorithm worked',
               'DNN library is not found', 'Could not create cudnn handle',
               'Loaded runtime CuDNN library', 'best cudnn convolution algorithm')),
    ('cuBLAS', ('CUBLAS_STATUS_', 'cuBlas', 'cublas', 'Blas xGEMM', 'Blas GEMM',
                'Blas xGEMV', 'Failed to initialize BLAS support')),
    ('CUDA', ('CUDA_ERROR_', 'CUDA error', 'GPU sync failed', 'GPU memcpy',
              'Failed to load in-memory CUBIN')),
)
NO_GPU_KERNEL = re.compile(r"No registered '[^']+' OpKernel for '?GPU'? devices")
# What TensorFlow 2.15.1's GPU wheel was built with (tf.sysconfig.get_build_info()).
GPU_BUILD = 'CUDA 12.2 and cuDNN 8.9'


def describe_failure(error, step, model_dir, data, devices_group, model, memory_note=None):
    """One line for an error that stopped training, with what to do about it (data, model,
    devices_group: the flags.Data, flags.Model and flags.Devices groups). memory_note:
    a clause on the estimated memory of a replica ("the estimate for ResNet-101, batch 512,
    fp32 at 224 px is 81.3 GB a replica; --batch_size=96 fits 16 GB"), for an out-of-memory
    line."""
    first_line = root_cause(error)
    kept = what_is_kept(model_dir)
    at = ' at step %d' % step if step is not None else ''
    for cause, fix in DISK_ERRORS.items():
        if cause in error.message:
            saving = re.search(r'(model\.ckpt-\d+)_temp', first_line)
            return ('%s writing %s in --model_dir=%s%s: %s, then rerun the same command to '
                    'resume; %s' % (cause.lower(), 'the checkpoint ' + saving.group(1)
                                    if saving else 'a file', model_dir, at,
                                    fix % model_dir, kept))
    if model_fn.NON_FINITE_LOSS in error.message or \
            model_fn.NON_FINITE_SUMMARY in error.message:
        return 'the training loss became NaN or Inf%s; training stopped, %s' % (at, kept)
    if any(text in error.message for text in PLACEMENT_ERRORS):
        return ('an op could not be placed on the devices (%s); --num_gpus=%d and '
                '--visiable_gpu=%d must fit the GPUs this process sees '
                '(CUDA_VISIBLE_DEVICES=%s); %s' % (
                    first_line, devices_group.num_gpus, devices_group.visiable_gpu,
                    os.environ.get(devices.GPU_ENV, '<unset>'), kept))
    if isinstance(error, tf.errors.DataLossError):
        return ('a shard is truncated or corrupt (%s)%s; find it with: python '
                'tools/check_tfrecords.py --class_num=%d %s' % (
                    first_line, at, model.class_num, os.path.join(data.data_dir, 'train')))
    gpu_line = describe_gpu_failure(error, root_cause(error, first_line=True),
                                    data.batch_size, model.dtype, at, memory_note)
    if gpu_line:
        return '%s; %s' % (gpu_line, kept)
    if isinstance(error, tf.errors.InvalidArgumentError):
        if from_input_pipeline(error):
            return ('bad record%s: %s; find it with tools/check_tfrecords.py, or train on '
                    'with --skip_bad_records; %s' % (at, first_line, kept))
        nodes = failing_nodes(error)
        return ('an op of the training step rejected its input%s (%s%s): not a bad record '
                '(the input pipeline did not fail); the log above shows where the op was '
                'built; %s' % (at, first_line, ', node %s' % nodes[0] if nodes else '', kept))
    return '%s%s; %s' % (first_line, at, kept)


def describe_gpu_failure(error, first_line, batch_size, dtype, at, memory_note):
    """The start of the line for memory run out, an XLA compile failure or a GPU library's
    failure (None for any other error)."""
    if isinstance(error, tf.errors.ResourceExhaustedError) and \
            MEMORY_WORDS.search(error.message):
        return ('out of memory on %s%s (%s): lower --batch_size (%d images a replica now)%s'
                % (oom_device(first_line), at, shorten_oom(first_line), batch_size,
                   '; ' + memory_note if memory_note else ''))
    if any(word in error.message for word in XLA_TOOLCHAIN_WORDS):
        return ('XLA could not use the CUDA tools ptxas or libdevice%s (%s): set XLA_FLAGS='
                '--xla_gpu_cuda_data_dir=%s (pip\'s nvidia-cuda-nvcc-cu12 wheel, part of '
                '"tensorflow[and-cuda]==2.15.1", holds bin/ptxas and nvvm/libdevice there), '
                'or rerun without --xla' % (at, first_line, cuda_nvcc_dir()))
    if any(word in error.message for word in XLA_COMPILE_WORDS) or any(
            n.endswith('xla_compile') for n in failing_nodes(error)):
        return ('XLA could not compile the training step%s (%s): rerun without --xla (the '
                'same training, unfused)' % (at, first_line))
    for library, words in GPU_LIBRARY_WORDS:
        if any(word in error.message for word in words):
            return ('%s failed on the GPU%s (%s): TensorFlow 2.15.1 is built for %s: check '
                    'the libraries (pip install "tensorflow[and-cuda]==2.15.1" brings them) '
                    'and the NVIDIA driver (nvidia-smi); if they are right, lower '
                    '--batch_size=%d (the libraries\' workspace shares the GPU\'s memory)' % (
                        library, at, first_line, GPU_BUILD, batch_size))
    if NO_GPU_KERNEL.search(error.message):
        return ('an op has no GPU kernel for its type%s (%s): %s' % (
            at, first_line, 'rerun with --dtype=fp32 (now %s)' % dtype
            if dtype != 'fp32' else 'report it, with the log above'))
    return None


def first_root_error(error):
    """The message of the first of several root errors ('2 root error(s) found. (0)
    INVALID_ARGUMENT: ... (1) ...': one a replica), else the whole message."""
    text = re.split(r'\n\s*\(1\) [A-Z_]+:', error.message)[0]
    return re.sub(r'\d+ root error\(s\) found\.\s*\(0\) [A-Z_]+:\s*', '', text)


def root_cause(error, first_line=False):
    """op_error_text of the first root error; first_line: of its first line only (TF's own
    line, without the details and hints after it)."""
    if not first_line:
        return op_error_text(type(error)(None, None, first_root_error(error)))
    for line in first_root_error(error).splitlines():
        text = op_error_text(type(error)(None, None, line))
        if text != type(error).__name__:
            return text
    return type(error).__name__


def failing_nodes(error):
    """The nodes TensorFlow names for an error, innermost first: the node trail
    ('[[{{node decode_image/DecodeImage}}]] [[IteratorGetNext]]') of its first root error,
    then the graph op TensorFlow found for it."""
    names = re.findall(r'\[\[(?:\{\{node |Node: )?([^\]\}\s=]+)', first_root_error(error))
    return names + ([error.op.name] if error.op is not None else [])


def from_input_pipeline(error):
    """Whether the op that failed belongs to the input pipeline (INPUT_OPS)."""
    if error.op is not None and error.op.type in INPUT_OPS:
        return True
    return any(re.sub(r'_\d+$', '', name.rsplit('/', 1)[-1]) in INPUT_OPS
               for name in failing_nodes(error))


def oom_device(text):
    """'GPU:0' (in a cluster 'GPU:0 of /job:worker/replica:0/task:1') from an allocator's 'OOM
    when allocating ... on /job:localhost/replica:0/task:0/device:GPU:0 by allocator ...'."""
    match = re.search(r' on (/job:[^ ]*?)?/device:([A-Za-z_]+:\d+)', text)
    if not match:
        return 'the device'
    job = match.group(1) or ''
    return match.group(2) + ('' if not job or job.startswith('/job:localhost') else
                             ' of ' + job)


def shorten_oom(text):
    """The allocator's line without the device and allocator (said apart)."""
    return re.sub(r' on (/job:\S*?)?/device:\S+ by allocator \S+', '', text)


def cuda_nvcc_dir():
    """Where pip's nvidia-cuda-nvcc-cu12 wheel put ptxas and libdevice in this Python
    (site-packages/nvidia/cuda_nvcc), or that path in words when it is not installed."""
    spec = importlib.util.find_spec('nvidia.cuda_nvcc') if \
        importlib.util.find_spec('nvidia') else None
    if spec and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return '<site-packages>/nvidia/cuda_nvcc'


# TensorFlow's words for a step that failed because another task of the job went away.
PEER_ERRORS = ('Collective ops is aborted', 'failed to connect to all addresses',
               'Socket closed', 'Connection reset by peer', 'connection refused')


def peer_failure(error, distribution):
    """An error of a cluster job's step that means a peer was lost (the rerun of every task
    resumes), not a fault of this task."""
    if distribution not in ('ps', 'collective'):
        return False
    return isinstance(error, (tf.errors.UnavailableError, tf.errors.CancelledError)) or any(
        text.lower() in error.message.lower() for text in PEER_ERRORS)


def describe_peer_failure(error, step):
    """The one line of errors.PeerLost for peer_failure's errors."""
    return ('a task of the job was lost (%s) %s; exiting with status %d (retryable): rerun '
            'every task of the job with the same command to resume from the last checkpoint'
            % (op_error_text(error), 'after global step %s' % step if step is not None
               else 'before the first step', PEER_LOST_STATUS))


def describe_restart_loop(restarts, model_dir, step):
    """One line for a session that failed on every attempt (hooks.RestartLimitHook)."""
    return ('the session failed %d times in a row%s without completing a step, each time '
            'with an AbortedError or UnavailableError (logged above as "An error was '
            'raised"): not a passing preemption; %s' % (
                restarts, ' at step %d' % step if step is not None else '',
                what_is_kept(model_dir)))


def what_is_kept(model_dir):
    last = checkpoints.latest_checkpoint(model_dir)
    return ('the last checkpoint %s is kept' % os.path.basename(last) if last
            else 'no checkpoint was written')


def interrupted(preempt, model_dir, plan, step):
    """errors.Interrupted for a run a signal stopped after its step in flight (preempt, the
    Preemption: this task's signal, or in a synchronous job another task's)."""
    signum = preempt.signum or preempt.elsewhere
    name = preemption.signal_name(signum)
    cause = name if preempt.signum else '%s to another task of the job' % name
    if plan.task is not None and plan.task.type != 'chief':
        return Interrupted(signum, '%s stopped by %s after global step %s; the chief saves '
                           'the checkpoint; rerun the same command to resume' % (
                               plan.task.label, cause, step))
    last = checkpoints.latest_checkpoint(model_dir)
    saved = ('saved %s' % last if last and last.endswith('-%s' % step)
             else 'the last checkpoint is %s' % (last or 'none'))
    return Interrupted(signum, 'stopped by %s at global step %s: %s; rerun the same '
                       'command to resume' % (cause, step, saved))


def out_of_memory_note(model, batch_size, error):
    """The memory estimate the out-of-memory line names (memory.oom_note; model: the
    flags.Model group), for a ResourceExhaustedError only: the GPU's memory is asked of
    the driver."""
    if not isinstance(error, tf.errors.ResourceExhaustedError):
        return None
    return memory.oom_note(model.resnet_size, model.class_num, batch_size, model.image_size,
                           model.dtype, memory.gpu_memory(devices.gpu_count() > 0))
