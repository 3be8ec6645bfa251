"""Every flag of the original train.py (docs/original.md, Flags), plus this program's own,
and the settings they make: one group a concern, each a frozen dataclass whose fields are
its flags. `train.py --help` lists the flags by these groups, and a function takes the
group(s) it reads. Each flag's rule (its choices or bounds) is given where the flag is
defined; the rules across flags are config/flag_checks.py's.

Defaults are the original's except where those are broken (docs/original.md): log_interval
and snapshot (0 did not work), lr_decay_step (0 means "no decay" here) and data_format
('auto' picks the devices' and --dtype's layout). Flags accepted but unused say so in their
help, so that old launch scripts keep working. Only entry points read FLAGS; they turn them
into explicit arguments.
"""
import collections
import dataclasses
import functools
import textwrap
from typing import ClassVar

from absl import flags
from absl import logging as _absl_logging  # noqa: F401 -- defines --log_dir, reused below

from mlimages.config import choices
from mlimages.config import value_checks as checks

FLAGS = flags.FLAGS


# ------------------------------------------------------------------ the groups

class _Group:
    """What every settings group can do."""

    def replace(self, **changes):
        """A copy with these fields changed."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Task(_Group):
    """What the run does: its mode, and the checkpoint or SavedModel it works on."""
    TITLE: ClassVar[str] = 'Task'
    mode: str
    checkpoint_path: str
    export_dir: str
    demo: bool
    demo_dir: str


@dataclasses.dataclass(frozen=True)
class Data(_Group):
    """The records and how the input pipeline reads and augments them."""
    TITLE: ClassVar[str] = 'Data'
    data_dir: str
    file_pattern: str
    batch_size: int
    label_type: str
    num_preprocess_threads: int
    file_shuffle_buffer: int
    shuffle_buffer: int
    object_cover: float
    area_cover: float
    skip_bad_records: bool
    augment_on: str
    private_threads: int
    use_synthetic_data: bool


@dataclasses.dataclass(frozen=True)
class Cluster(_Group):
    """The tasks of a job and how they train together."""
    TITLE: ClassVar[str] = 'Cluster'
    worker_num: int
    worker_id: int
    worker_hosts: str
    ps_hosts: str
    ps_id: int
    slurm_port_base: int
    peer_timeout: int
    distribution: str
    all_reduce_alg: str


@dataclasses.dataclass(frozen=True)
class Model(_Group):
    """The network: its depth, classes, input, batch norm, layout and dtype."""
    TITLE: ClassVar[str] = 'Model'
    class_num: int
    resnet_size: int
    data_format: str
    image_size: int
    image_channels: int
    batch_norm_decay: float
    batch_norm_epsilon: float
    dtype: str


@dataclasses.dataclass(frozen=True)
class Training(_Group):
    """The loss, the optimizer and the seeds."""
    TITLE: ClassVar[str] = 'Training'
    optimizer: str
    opt_momentum: float
    weight_decay: float
    bn_weight_decay: float
    mask_thres: float
    neg_select: float
    random_seed: int
    deterministic: bool


@dataclasses.dataclass(frozen=True)
class Schedule(_Group):
    """The learning rate over the steps, and the last step."""
    TITLE: ClassVar[str] = 'Learning-rate schedule'
    lr: float
    lr_schedule: str
    lr_decay_step: int
    lr_decay_factor: float
    warmup: int
    lr_warmup: float
    lr_warmup_decay_step: int
    lr_warmup_decay_factor: float
    max_iter: int


@dataclasses.dataclass(frozen=True)
class Finetune(_Group):
    """Starting from a pre-trained checkpoint, and what stays frozen."""
    TITLE: ClassVar[str] = 'Fine-tuning'
    restore: bool
    pretrain_ckpt: str
    FixBlock2: bool
    frozen_bn: str


@dataclasses.dataclass(frozen=True)
class Output(_Group):
    """Checkpoints, TensorBoard events, the log and the profile trace."""
    TITLE: ClassVar[str] = 'Logging and checkpoints'
    model_dir: str
    max_to_keep: int
    snapshot: int
    log_dir: str
    log_interval: int
    summary_interval: int
    verbose: bool
    profile_steps: str


@dataclasses.dataclass(frozen=True)
class Devices(_Group):
    """The GPUs a process uses, its threads, XLA and the memory check."""
    TITLE: ClassVar[str] = 'Devices'
    num_gpus: int
    visiable_gpu: int
    tf_gpu_thread_mode: str
    inter_op_threads: int
    intra_op_threads: int
    memory_check: bool
    xla: bool


@dataclasses.dataclass(frozen=True)
class Evaluation(_Group):
    """When and how the val split is evaluated, and what is reported."""
    TITLE: ClassVar[str] = 'Evaluation'
    test_interval: int
    test_iter: int
    eval_throttle_secs: int
    hierarchy: str
    report_classes: int
    pr_curves: int
    pr_curve_classes: str


@dataclasses.dataclass(frozen=True)
class Inference(_Group):
    """Classifying images and exporting a SavedModel."""
    TITLE: ClassVar[str] = 'Inference'
    piclist: str
    top_k: int
    threshold: str
    class_dict: str
    preprocess: str


@dataclasses.dataclass(frozen=True)
class Ignored(_Group):
    """The original's flags that this program accepts and ignores."""
    TITLE: ClassVar[str] = 'Ignored'
    with_bbox: bool
    drop_rate: float
    epoch_iter: int
    tmp_model_dir: str
    prof_interval: int
    interval: int
    start: int


@dataclasses.dataclass(frozen=True)
class Settings(_Group):
    """The settings of a run: one group a concern (settings.data.batch_size)."""
    task: Task
    data: Data
    cluster: Cluster
    model: Model
    training: Training
    schedule: Schedule
    finetune: Finetune
    output: Output
    devices: Devices
    evaluation: Evaluation
    inference: Inference
    ignored: Ignored


# {attribute of Settings: its group}, in --help's order: the one table of the groups
GROUPS = collections.OrderedDict(
    (field.name, field.type) for field in dataclasses.fields(Settings))


# ------------------------------------------------------------------ the flags

# Every flag's name in the order defined below: the original flags.py's order, which
# flags.txt and the checks keep.
ORDER = []
# {flag name: its check(name, value) -> what is wrong as one line, or None}
CHECKS = {}


def _define(kind, group, name, default, help_text, check=None):
    """Defines --name in `group` (a field of that dataclass), with its check."""
    assert name in {f.name for f in dataclasses.fields(group)}, (name, group.__name__)
    ORDER.append(name)
    if check:
        CHECKS[name] = check
    if name == 'log_dir' and name in FLAGS:
        # absl.logging owns --log_dir; reuse it rather than redefine (DuplicateFlagError).
        FLAGS[name].help = help_text
        FLAGS.set_default(name, default)
        return
    getattr(flags, 'DEFINE_' + kind)(name, default, help_text)


# _string(group, name, default, help_text, check=None) defines --name in that group; so
# do _int, _float and _bool.
_string, _int, _float, _bool = (functools.partial(_define, kind)
                                for kind in ('string', 'integer', 'float', 'boolean'))


IGNORED = ' Accepted for compatibility with the original; ignored by this program.'

_string(Task, 'mode', 'train',
        'train: train to --max_iter. eval: evaluate a checkpoint (--checkpoint_path, else '
        'the latest in --model_dir) on <data_dir>/val. train_and_eval: train, evaluating '
        'every --test_interval steps on --test_iter batches of val. predict: classify the '
        'images of --piclist with a checkpoint, TSV on stdout (tools/predict.py has more '
        'options). export: write a checkpoint as a SavedModel to --export_dir.',
        check=checks.one_of(choices.MODES, '--mode=%s is not implemented; use one of '
               + ', '.join(choices.MODES)))
_string(Task, 'checkpoint_path', '', '--mode=eval, predict or export: the checkpoint to use '
        '(default: the latest in --model_dir). Its network settings (image_size, resnet_size, '
        'class_num, ...) are those of the flags.txt beside it, unless given.')
_string(Task, 'export_dir', '',
        'Write a SavedModel as <export_dir>/<version>/ (TensorFlow Serving\'s layout; the '
        'version is the time in seconds, earlier versions stay): with --mode=export from '
        '--checkpoint_path (else the latest in --model_dir), with --mode=train or '
        'train_and_eval from the last checkpoint after training. Signatures serving_default '
        '(encoded images, preprocessed as --preprocess says -> scores, probabilities, top_k, '
        'features, positives, valid) and float_images (docs/inference.md). A version '
        'appears only when complete; a directory holding anything else is an error.')
_int(Output, 'max_to_keep', 200, 'Number of most recent checkpoints kept in --model_dir.',
     check=checks.positive)
_bool(Task, 'demo', False,
      'Build a small synthetic multi-label dataset of JPEG files under --demo_dir, make its '
      'TFRecords and train a small ResNet on it on the CPU (a few minutes). Other flags '
      'given on the command line override the demo\'s settings.')
_string(Task, 'demo_dir', './demo', 'Where --demo writes its images, records and model.')

_string(Data, 'data_dir', './data/train/',
        'Directory holding the shard folders train/ and val/ (see --file_pattern).')
_string(Data, 'file_pattern', '*tfrecords',
        'Glob pattern of the shard files inside <data_dir>/train and <data_dir>/val.')
_int(Data, 'batch_size', 512, 'Images per training step of one replica (per GPU, as in the '
     'original\'s launch scripts): a step with --num_gpus=N trains on N x batch_size '
     'images, a synchronous step of K workers (--distribution=collective) on '
     'K x batch_size.',
     check=checks.positive)
_int(Data, 'num_preprocess_threads', 0,
     'Records parsed and preprocessed in parallel (tf.data map parallelism); 0 = let '
     'tf.data size the pool to the host (AUTOTUNE, up to the cores), N pins it (the '
     'original: 4).',
     check=checks.at_least(0, '0 = AUTOTUNE'))
_int(Data, 'file_shuffle_buffer', 1500, 'Shuffle buffer of the shard file names (training).',
     check=checks.at_least(1, '1 = no shuffle'))
_int(Data, 'shuffle_buffer', 2048, 'Shuffle buffer of the records (training).',
     check=checks.at_least(1, '1 = no shuffle'))
_float(Data, 'object_cover', 0.7,
       'Training crop: least share of the image the random crop window must cover '
       '(min_object_covered of sample_distorted_bounding_box). Fine-tuning used 0.0.',
       check=checks.fraction)
_float(Data, 'area_cover', 0.7,
       'Training crop: least area of the crop window as a share of the image. '
       'Fine-tuning used 0.05.',
       check=checks.area_fraction)
_bool(Ignored, 'with_bbox', True,
      'The original switched to ImageNet records with boxes; records here carry no '
      'boxes.' + IGNORED)
_bool(Data, 'skip_bad_records', False,
      'Drop records that cannot be parsed or decoded (corrupt image, missing feature, wrong '
      'label length) and count them (log and TensorBoard scalar skipped_records) instead of '
      'stopping. Truncated or corrupt shard files always stop the run.')
_int(Cluster, 'worker_num', 1, 'Number of training workers that share the shard files. With '
     '--worker_hosts they train one model; without any cluster (TF_CONFIG, Slurm, '
     '--worker_hosts) N > 1 means N independent runs, each with its own --model_dir.')
_int(Cluster, 'worker_id', 0, 'This worker\'s index in [0, worker_num) (0 = the chief): it reads '
     'shard files worker_id, worker_id + worker_num, ... of the sorted list.')
_string(Cluster, 'worker_hosts', '', 'host:port of every training worker, worker 0 (the chief) '
        'first, the same list for every process: each process is then a task of one '
        'job (collective; ps with --ps_hosts). The cluster comes from TF_CONFIG, then '
        'Slurm (srun), then these flags; two of them at once is an error.')
_string(Cluster, 'ps_hosts', '', 'host:port of every parameter server (asynchronous ps training; '
        'with --worker_hosts).')
_int(Cluster, 'ps_id', -1, 'Run as parameter server k of --ps_hosts (-1: a training worker).')
_int(Cluster, 'slurm_port_base', 8888, 'Under srun: the port of a node\'s first task (the next '
     'tasks of the node take the following ports).',
     check=checks.between(1, 65000))
_int(Cluster, 'peer_timeout', 300, 'A task of a cluster job (collective or ps) ends with exit '
     'status 200 (retryable: rerun every task to resume) when a task it cannot go on without '
     'has not answered for this many seconds (stopped, hung, gone or never started); in a '
     'collective job a task that is gone after a step ends the others at once. A live task '
     'always answers, in a long step, a checkpoint save or its graph build. 0 = wait '
     'forever (TensorFlow\'s behaviour). See docs/distributed.md.',
     check=checks.at_least(0, '0 = wait forever'))

_int(Model, 'class_num', 1000, 'Number of classes (length of every record\'s label).',
     check=checks.positive)
_int(Model, 'resnet_size', 101, 'ResNet depth: 18, 34, 50, 101, 152 or 200.',
     check=checks.one_of(choices.SUPPORTED_SIZES, '--resnet_size=%d is not supported; use one of '
     + ', '.join(map(str, choices.SUPPORTED_SIZES))))
_string(Model, 'data_format', 'auto',
        'Layout of the convolutions: NCHW (or channels_first), NHWC (or channels_last), '
        'or auto: NHWC without a GPU (the only layout of TF\'s CPU convolutions); on GPUs '
        'NCHW for fp32, NHWC for fp16/bf16: what TF 2.15\'s own layout pass converts a GPU '
        'graph to (NHWC when half its convolutions are fp16 on Volta+ or bf16 on Ampere+, '
        'tensor cores), so it adds no transposes.')
_int(Model, 'image_size', 224, 'Height and width of the network input.',
     check=checks.positive)
_int(Model, 'image_channels', 3, 'Channels the images are decoded to; the model takes 3.',
     check=checks.one_of((3,), '--image_channels must be 3 (the model takes RGB), got %d'))
_float(Model, 'batch_norm_decay', 0.997, 'Momentum of the batch-norm moving averages.',
       check=checks.fraction)
_float(Model, 'batch_norm_epsilon', 1e-5, 'Batch-norm epsilon.',
       check=checks.finite(0))
_float(Training, 'mask_thres', 0.7,
       'A label >= this is a positive when counting the classes present in a batch.',
       check=checks.fraction)
_float(Training, 'neg_select', 0.3,
       'Share of the classes without a positive in a batch that are trained as negatives '
       'in that step (drawn anew every step).',
       check=checks.fraction)
_float(Ignored, 'drop_rate', 0.5, 'Dropout rate; the model has no dropout.' + IGNORED,
       check=checks.fraction)

_bool(Finetune, 'restore', False, 'The original fine-tuning script\'s switch to restore '
      '--pretrain_ckpt; here --pretrain_ckpt alone does it, and --restore without it is an '
      'error.')
_int(Devices, 'num_gpus', 1, 'GPUs to train on in this process: N > 1 = synchronous '
     'MirroredStrategy over GPUs --visiable_gpu ... --visiable_gpu + N - 1, --batch_size '
     'images each; the loss counters are of the whole step\'s batch. A collective worker '
     'replicates over its own N GPUs; a ps worker trains on one (N = 1).',
     check=checks.at_least(1))
_string(Cluster, 'distribution', 'auto',
        'How the tasks of a TF_CONFIG cluster train together. ps: asynchronous, variables '
        'on the ps tasks (cluster: chief, worker, ps). collective: synchronous all-reduce '
        '(MultiWorkerMirroredStrategy; cluster: chief and/or worker). none: one process. '
        'auto: ps when TF_CONFIG has ps tasks, collective when it has none, none without '
        'TF_CONFIG. The data is split among the chief (worker 0) and the workers; '
        'tools/launch_local_cluster.py starts a cluster on one machine.')
_string(Cluster, 'all_reduce_alg', 'auto',
        'Gradient all-reduce (TF official\'s flag). --num_gpus > 1 (MirroredStrategy): auto '
        '(TensorFlow\'s choice: NCCL between GPUs), nccl, hierarchical_copy, one_device. '
        'collective: auto (NCCL between GPU workers, RING between CPU ones), nccl, ring. '
        'Gradients go in 32 MB packs; loss counters and the reported loss always by RING '
        'on the host (docs/gpu.md).')
_string(Training, 'optimizer', 'mom', 'mom: momentum SGD (MomentumOptimizer with --opt_momentum). '
        'sgd: plain gradient descent (GradientDescentOptimizer), as the original '
        'fine-tuning script accepted.',
        check=checks.one_of(choices.OPTIMIZERS, '--optimizer=%s is not implemented; use mom '
                '(momentum) or sgd (gradient descent)'))
_float(Training, 'opt_momentum', 0.9, 'Momentum of the optimizer.',
       check=checks.finite(0, inclusive=True, high=1))
_float(Schedule, 'lr', 0.1, 'Learning rate after the warm-up.',
       check=checks.finite(0))
_int(Schedule, 'lr_decay_step', 0,
     'The learning rate is multiplied by lr_decay_factor after every lr_decay_step steps, '
     'four times (piecewise constant). 0 = no decay.',
     check=checks.at_least(0, '0 = no decay'))
_float(Schedule, 'lr_decay_factor', 0.1, 'Factor of each learning-rate decay.',
       check=checks.finite(0))
_float(Training, 'weight_decay', 0.0001, 'L2 factor: the loss adds weight_decay x sum(v^2) / 2 '
       'over the trainable weights but batch norm\'s gamma and beta (those: '
       '--bn_weight_decay).',
       check=checks.finite(0, inclusive=True))
_int(Schedule, 'warmup', 0, 'Warm-up steps: while global_step < warmup the learning rate is '
     'lr_warmup * lr_warmup_decay_factor ** floor(step / lr_warmup_decay_step).',
     check=checks.at_least(0, '0 = no warm-up'))
_float(Schedule, 'lr_warmup', 0.1, 'Learning rate at the start of the warm-up.',
       check=checks.finite(0))
_int(Schedule, 'lr_warmup_decay_step', 0, 'Steps per warm-up stair (> 0 when warmup > 0).',
     check=checks.at_least(0))
_float(Schedule, 'lr_warmup_decay_factor', 1.414, 'Factor per warm-up stair (> 1: growth).',
       check=checks.finite(0))
_int(Schedule, 'max_iter', 1000000, 'Train until the global step reaches this (a resumed run '
     'stops at the same step); -1 = forever.',
     check=checks.steps_or_forever)
_int(Training, 'random_seed', 1234,
     'Seed of the negative-class selection (--deterministic: of all).')
_bool(Training, 'deterministic', False,
      'Repeatable runs, the same figures from the same command on one machine: graph seed '
      '--random_seed, TensorFlow\'s op determinism; slower input.')
_string(Finetune, 'pretrain_ckpt', '',
        'Fine-tune: initialise every model variable but the head (logits/*), batch-norm '
        'moving statistics included, from this checkpoint (a prefix, or a directory = its '
        'latest); the head may have another class count. Step, momentum and loss counters '
        'start afresh. Used only while --model_dir holds no checkpoint (a restart resumes).')
_bool(Finetune, 'FixBlock2', False, 'Fine-tuning option of the original: train only the variables '
      'whose name contains stages_2, stages_3, global_pool or logits; init and stages 0-1 '
      'keep their kernels, gamma and beta (and get no optimizer slots). How their batch '
      'norm runs: --frozen_bn.')
_string(Data, 'label_type', 'multi',
        'multi: class_num float32 labels a record, the original\'s weighted sigmoid cross-'
        'entropy. single: an int64 class index "label" (its ImageNet fine-tune), softmax.',
        check=checks.one_of(choices.LABEL_TYPES))
_int(Ignored, 'epoch_iter', 0, 'Steps per epoch.' + IGNORED,
     check=checks.at_least(0))

# The rules of the original's finetune.py, each a flag; the defaults are pre-training's.
_string(Schedule, 'lr_schedule', 'piecewise',
        'piecewise: pre-training\'s schedule, lr x lr_decay_factor^k after k of the '
        'boundaries lr_decay_step x 1..4 (k <= 4, the first decay at step lr_decay_step + '
        '1). exponential: finetune.py\'s, lr x lr_decay_factor^floor(step / lr_decay_step), '
        'no cap, the first decay at step lr_decay_step. The warm-up (--warmup > 0) comes '
        'first with either.',
        check=checks.one_of(choices.SCHEDULES, '--lr_schedule must be %s, got %%r'
                % ' or '.join(choices.SCHEDULES)))
_float(Training, 'bn_weight_decay', 0.0,
       'L2 on batch-norm gamma and beta, as a fraction of --weight_decay: the loss adds '
       'bn_weight_decay x weight_decay x sum(v^2) / 2 over them. 0 = none (pre-training); '
       'finetune.py used 0.1.',
       check=checks.finite(0, inclusive=True,
                     meaning='0 = no L2 on batch norm, 0.1 = finetune.py\'s'))
_string(Finetune, 'frozen_bn', 'train',
        'With --FixBlock2: how the frozen stages (init, stages 0-1) run batch norm while '
        'training. train: as finetune.py, batch statistics of the batch, and the moving '
        'mean/variance keep being updated (only kernels, gamma and beta are frozen). '
        'inference: the restored moving statistics, which then stay unchanged.',
        check=checks.one_of(choices.FROZEN_BN_MODES,
                            '--frozen_bn must be train or inference, got %r'))

_int(Output, 'log_interval', 100, 'Every this many steps: print learning_rate, cross_entropy, '
     'train_accuracy, images/s and ETA (and write TensorBoard summaries, unless '
     '--summary_interval says otherwise).',
     check=checks.positive)
_int(Output, 'summary_interval', 0, 'Write TensorBoard summaries every this many steps; 0 = '
     'every --log_interval steps.',
     check=checks.at_least(0, '0 = --log_interval'))
_string(Output, 'log_dir', './out/log/', 'Directory of the text log file train.log (TensorBoard '
        'events go to --model_dir).')
_string(Output, 'model_dir', './out/checkpoint/', 'Checkpoints and TensorBoard events.')
_bool(Output, 'verbose', False, 'Also show TensorFlow\'s C++ messages (GPU warnings, the fp16 '
      'rewrite\'s converted nodes), deprecations and the Estimator\'s loss/step lines.')
_int(Output, 'snapshot', 1000, 'Save a checkpoint every this many steps (and at the end).',
     check=checks.positive)
_string(Ignored, 'tmp_model_dir', './out/tmp/checkpoint/', 'Temporary model directory.' + IGNORED)
_int(Ignored, 'prof_interval', 10, 'Timing report interval; timing is printed every '
     '--log_interval steps instead.' + IGNORED)

_string(Data, 'augment_on', 'auto',
        'Where the training augmentation after the crop runs (flip, rotation, colour; the '
        'distribution is the original\'s either way). cpu: per image in the input '
        'pipeline. device: batched inside the model on the training device; the pipeline '
        'only decodes the crop window and resizes, and ships uint8 batches (4x smaller). '
        'auto: device when a GPU is visible, else cpu.',
        check=checks.one_of(('auto',) + choices.AUGMENT_ON, '--augment_on must be auto, %s, got %%r'
                % ' or '.join(choices.AUGMENT_ON)))
_int(Data, 'private_threads', 0,
     'Give the input pipeline its own thread pool of this many threads (0 = share '
     'TensorFlow\'s; a pool of the process\'s CPU share when tasks share the node).',
     check=checks.at_least(0))
_string(Model, 'dtype', 'fp32',
        'What the model computes in; variables stay float32. fp32. fp16: automatic mixed '
        'precision (graph rewrite) with dynamic loss scaling -- TensorFlow applies the '
        'rewrite only on a GPU, without one the graph stays fp32. bf16: the model in '
        'bfloat16, no loss scaling; on a CPU TensorFlow\'s oneDNN kernels need AVX-512 or '
        'AMX for it (without, train.py stops before training and names the fix); '
        '--mode=eval and predict in bf16 need a GPU or a CPU with AVX512_BF16 or AMX '
        '(without, one error line). auto: bf16 for a run without GPU on a CPU with AMX_BF16 '
        'or AVX512_BF16, else fp32 (a GPU run too); the log\'s first lines say which and why.',
        check=checks.one_of(choices.DTYPE_VALUES))
_bool(Devices, 'xla', False,
      'XLA global JIT compilation of the training graph. On a GPU it just works; on a CPU '
      'TensorFlow also needs the environment variable TF_XLA_FLAGS=--tf_xla_cpu_global_jit, '
      'or the flag does nothing.')
_string(Output, 'profile_steps', '', 'A,B: trace global steps A to B (at most 20 steps) with '
        'TensorFlow\'s profiler while training (--mode=train, train_and_eval, --demo; the '
        'chief\'s steps in a cluster job), into '
        '<model_dir>/plugins/profile/; open it with tensorboard --logdir <model_dir>, '
        'Profile tab (pip install -r requirements-profile.txt). Empty = no trace.',
        check=checks.parsed(checks.profile_span))
_bool(Data, 'use_synthetic_data', False,
      'Train on random images and labels drawn on the training device, a new batch every '
      'step, reading no file: the speed of the model alone (tools/benchmark.py compares it '
      'with real input). --data_dir is not read.')

_int(Devices, 'visiable_gpu', 0, 'GPU index made visible to TensorFlow (sic, the original\'s '
     'spelling; with --num_gpus=N GPUs visiable_gpu ... visiable_gpu + N - 1, counted in '
     'CUDA_VISIBLE_DEVICES when that is set); -1 = leave all GPUs visible. Chosen once at '
     'start, through CUDA_VISIBLE_DEVICES, for every session of the process.')
_string(Devices, 'tf_gpu_thread_mode', 'auto',
        'auto: each GPU launches its kernels from 2 threads of its own (TF_GPU_THREAD_MODE='
        'gpu_private, TF_GPU_THREAD_COUNT=2, as NVIDIA\'s ConvNets; the environment\'s values '
        'win). gpu_private (TF official\'s): as auto, and the inter-op and input pools sized '
        'from the cores left (unless given). gpu_shared: one pool for all GPUs. off: none.',
        check=checks.one_of(choices.GPU_THREAD_MODES))
_int(Devices, 'inter_op_threads', 0, 'Threads running independent ops at once (0 = TF\'s choice, '
     'the gpu_private plan, or the CPU share of tasks sharing the node: docs/performance.md).',
     check=checks.at_least(0, '0 = TensorFlow\'s choice'))
_int(Devices, 'intra_op_threads', 0, 'Threads inside one op (0 = TF\'s choice, or the share).',
     check=checks.at_least(0, '0 = TensorFlow\'s choice'))
_bool(Devices, 'memory_check', True,
      'Before the first step, compare the GPU memory a replica needs (an estimate from '
      'depth, classes, batch, image size, dtype: docs/gpu.md) with the smallest GPU seen '
      '(or MLIMAGES_GPU_MEMORY_GB): exit 2 naming a --batch_size that fits when it exceeds '
      'it, a warning when only the margin does not fit. --nomemory_check: only warn.')

_int(Evaluation, 'test_interval', 0, '--mode=train_and_eval: steps between evaluations (> 0).',
     check=checks.at_least(0))
_int(Evaluation, 'test_iter', 0, 'Batches of --batch_size per evaluation; 0 = the whole val split.',
     check=checks.at_least(0, '0 = the whole val split'))
_int(Evaluation, 'eval_throttle_secs', 600,
     'An evaluator task of a TF_CONFIG cluster (tools/launch_local_cluster.py --evaluator) '
     'evaluates the newest checkpoint of --model_dir at most once in this many seconds, '
     'until the one of --max_iter.',
     check=checks.at_least(0))
_string(Inference, 'piclist', '', '--mode=predict: the images to classify: a list file (one image '
        'a line; the path is the text before the first tab or the first field, relative to '
        'the current directory, so image lists with labels work) or a directory (its image '
        'files, recursively).')
_int(Inference, 'top_k', 5, '--mode=predict: classes listed per image; the SavedModel of '
     '--export_dir outputs the top min(top_k, class_num).',
     check=checks.positive)
_string(Inference, 'threshold', '0.5', 'A number in [0, 1] (predict: list classes scoring >= it; '
        'export: the positives output; eval: F1\'s), or calibrated: the thresholds.txt beside '
        'the checkpoint, per class, which --mode=eval chooses (each class\'s best F1 on val).',
        check=checks.fraction_or(choices.CALIBRATED))
_string(Inference, 'class_dict', '', '--mode=predict and the per-class report of every evaluation: '
        'class names, the ML-Images dictionary (a category_index header, then index, '
        'category id, parent index and name per class), tools/make_image_list.py\'s '
        'classes.txt or one name per line. Evaluation without it: the --hierarchy file\'s '
        'names, else classes.txt, dictionary_and_semantic_hierarchy.txt or dictionary.txt '
        'in --data_dir or its parent, else no names.')
_string(Evaluation, 'hierarchy', '', 'Evaluation (--mode=eval, train_and_eval and the evaluator '
        'task): the semantic hierarchy, dictionary_and_semantic_hierarchy.txt of --class_num '
        'classes; mAP is also reported over its leaf classes (mAP_leaf, what a flat '
        'classifier is judged on) and its inner classes (mAP_inner), in the log line and '
        'TensorBoard.')
_int(Evaluation, 'report_classes', 10, 'Evaluation: every evaluation writes a per-class report, '
     '<model_dir>/eval/per_class-<step>.tsv (index, name, positives, negatives, AP, '
     'threshold, precision, recall, F1; kind leaf/inner with --hierarchy), and logs '
     'this many classes of lowest and of highest AP.',
     check=checks.at_least(0))
_int(Evaluation, 'pr_curves', 10, 'Evaluation: TensorBoard PR curves (PR Curves tab, in '
     '<model_dir>/eval) for this many classes, those with the most positives in val; '
     '0 = none. At most 100: about 5 KB of events a curve per evaluation.',
     check=checks.between(0, choices.MAX_PR_CURVES, '0 = none'))
_string(Evaluation, 'pr_curve_classes', '', 'Evaluation: PR curves for these class indices '
        '(comma-separated, at most 100) instead of the --pr_curves most frequent.',
        check=checks.parsed(checks.class_list))
_int(Ignored, 'interval', 32, 'Checkpoint interval of the eval script.' + IGNORED)
_int(Ignored, 'start', 0, 'First checkpoint index of the eval script.' + IGNORED)
_string(Inference, 'preprocess', 'original',
        '--mode=predict and export (and --export_dir): how an image becomes the network '
        'input. original: as the original\'s extract_feature.py and image_classification.py, '
        'the shorter side resized to 256 x image_size / 224 (OpenCV\'s bilinear), the '
        'centre image_size square. eval: the evaluation crop of --mode=eval, the central '
        '80 % squashed to a square. A SavedModel keeps the one it was exported with.',
        check=checks.one_of(choices.PREPROCESSING, '--preprocess must be original (the original\'s '
                'inference) or eval (the evaluation crop), got %r'))

# Names of the original's example/finetune.sh that its flags.py never defined: accepted
# here as other names of the flags they meant.
ALIASES = collections.OrderedDict([('weight_decay_rate', 'weight_decay'),
                                   ('batch_norm_elipson', 'batch_norm_epsilon')])
for _alias, _target in ALIASES.items():
    flags.DEFINE_alias(_alias, _target)
    FLAGS[_target].help += ' Also --%s (the original fine-tuning script\'s name).' % _alias


# ------------------------------------------------------------------ the settings

# {flag name: the attribute of Settings that holds its group}
GROUP_OF = {field.name: attribute for attribute, group in GROUPS.items()
                      for field in dataclasses.fields(group)}
assert sorted(GROUP_OF) == sorted(ORDER), 'a group field without its flag'


def _settings_of(value_of):
    return Settings(**{attribute: group(**{field.name: value_of(field.name)
                                           for field in dataclasses.fields(group)})
                       for attribute, group in GROUPS.items()})


def settings(flag_values=FLAGS):
    """The parsed flags as Settings."""
    return _settings_of(lambda name: flag_values[name].value)


def default_settings():
    """Every flag's default as Settings (the tools' and tests' starting point)."""
    return _settings_of(lambda name: FLAGS[name].default)


def flat(values):
    """{flag name: value} of Settings, in ORDER (flags.txt, the checks of each flag): the
    one view across every group."""
    return collections.OrderedDict(
        (name, getattr(getattr(values, GROUP_OF[name]), name)) for name in ORDER)


def replace(values, **given):
    """Settings with the given flags (by flag name) replaced."""
    changed = collections.defaultdict(dict)
    for name, value in given.items():
        changed[GROUP_OF[name]][name] = value
    return values.replace(**{attribute: getattr(values, attribute).replace(**fields)
                             for attribute, fields in changed.items()})


def given(flag_values=FLAGS):
    """The names of the flags given on the command line."""
    return {name for name in ORDER if flag_values[name].present}


def help_groups():
    """[(title, flag names)]: each group's title and fields, in --help's order."""
    return [(group.TITLE, [field.name for field in dataclasses.fields(group)])
            for group in GROUPS.values()]


def grouped_help(program):
    """The text of `--help`: every flag of this program, by group, with default and help."""
    lines = ['usage: %s [--flag=value ...]' % program, '',
             'ResNet trainer for multi-label image classification (Tencent ML-Images).',
             'Boolean flags: --name / --noname.']
    for title, names in help_groups():
        lines += ['', title + ':']
        for name in names:
            flag = FLAGS[name]
            lines.append('  --%s (default: %r)' % (name, flag.default))
            lines += textwrap.wrap(flag.help, 80, initial_indent='      ',
                                   subsequent_indent='      ')
    return '\n'.join(lines) + '\n'
