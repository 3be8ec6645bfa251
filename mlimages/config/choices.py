"""The values each choice flag may take, owned here at the bottom so that the checks of
the flags (flag_checks) and the modules that act on a value (named beside each) read one
list with a plain import, and --help and the checks need no TensorFlow."""

# --resnet_size: the depths resnet.py builds (its _ARCHITECTURES has one entry each).
SUPPORTED_SIZES = (18, 34, 50, 101, 152, 200)

# --frozen_bn: how resnet.py runs the batch norm of FixBlock2's frozen stages.
FROZEN_BN_MODES = ('inference', 'train')

# --lr_schedule: the decays of model/lr_schedule.py, in the order its message names them.
SCHEDULES = ('piecewise', 'exponential')

# --augment_on, once 'auto' is resolved: where data/input_pipeline.py (cpu) or the model
# (device) runs the training augmentation.
AUGMENT_ON = ('cpu', 'device')

# --preprocess: the network-input preprocessing of inference/serving.py (its PREPROCESSING
# describes each).
PREPROCESSING = ('original', 'eval')

# --label_type: how data/records.py parses a record's label (and recordkit writes it).
LABEL_TYPES = ('multi', 'single')

# --dtype: what model/precision.py computes the model in; the flag also takes auto,
# resolved at start to one of them (config/cpu.py).
DTYPES = ('fp32', 'fp16', 'bf16')
DTYPE_VALUES = DTYPES + ('auto',)

# --tf_gpu_thread_mode: the GPU launch-thread plans of distributed/devices.py.
GPU_THREAD_MODES = ('off', 'gpu_private', 'gpu_shared', 'auto')

# --threshold's word for the per-class thresholds run/calibration.py chooses.
CALIBRATED = 'calibrated'

# --mode: what train.py does.
MODES = ('train', 'eval', 'train_and_eval', 'predict', 'export')

# --optimizer: the optimizers of run/model_fn.py.
OPTIMIZERS = ('mom', 'sgd')

# --profile_steps: the most steps run/hooks.py's ProfileHook traces (a trace of a step of
# ResNet-101 holds every op's events: tens of MB each).
MAX_PROFILE_STEPS = 20

# --pr_curves and --pr_curve_classes: the most PR curves run/class_report.py writes an
# evaluation (about 5 KB of events each).
MAX_PR_CURVES = 100
