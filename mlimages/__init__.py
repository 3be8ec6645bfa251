"""The trainer behind train.py and tools/, and the map of the checkout.

One folder a concern, in the order the data flows. The first column is the layer, lowest
first (LAYERS below says the same): a module imports only from its own layer or a lower
one. Each sub-package's docstring names its modules, one line each. tests/test_layout.py
checks all of this from the source; this file imports nothing.

    0  errors.py            every exception type and the exit status it means (2, 1,
                            128 + signal); callers use errors.X, never a re-export
    0  files.py             files that appear only when complete, no leftover on an error
                            (atomic_output: inference results, thresholds.txt, a PCA;
                            atomic_directory: the download tools' output directory)
    0  file_db.py           (root) shard listing and each worker's share
    1  config/              the flags' value checks, the run's flags.txt, start-up before
                            TensorFlow, which Python runs the programs
    1  flags.py             (root) every flag, its default and valid values; the settings
                            as frozen groups by concern (flags.Settings)
    2  data/                the record format, input_fn and bad-record skipping, the
                            ML-Images semantic hierarchy
    2  image_preprocess.py  (root) decoding and augmentation of one image
    3  distributed/         cluster sources, roles and strategies, the GPUs a process sees,
                            lost peers, a ps task's end, a local cluster of processes
    4  model/               the loss, learning-rate schedules, metrics, --dtype precision,
                            the GPU memory a replica needs
    4  resnet.py            (root) ResNet v2 with the original's variable names
    5  run/                 model_fn, the Estimator's train / eval, checkpoints, hooks,
                            preemption, run directories, failures, thresholds, run plans
    6  inference/           the serving graph, SavedModel and ONNX export, the inference
                            commands' loops, their inputs and result files, PCA
    7  cli/                 what the commands share: their main (parse, run, errors as one
                            line), argparse, TensorFlow on first use, process pools, the
                            progress line
    8  recordkit/           building and checking records (tools/make_tfrecords.py ...)
    9  bench/               tools/benchmark.py's pipelines and measurements
    10 demo.py              train.py --demo: the demo dataset and its report
    11 train.py             (root) the command line and its modes

The rest of the checkout:

    the root     only the user's five modules marked (root) above, and pyproject.toml
                 (installs this package editable)
    tools/       commands only, each a thin entry point that answers --help (parse, call
                 this package, exit): make_image_list, make_tfrecords, convert_tfrecords,
                 check_tfrecords, urls_to_img2dataset, img2dataset_to_list, predict,
                 extract_features, export_onnx, launch_local_cluster, plan_run, benchmark,
                 graph_size, ps_placement, memory_peak; venv.sh and gpu_smoke.sh
    tests/       pytest, flat: test_<module>.py per module; conftest.py and helpers.py what
                 several files share, references.py the independent numpy reference of each
                 formula, gated_train.py / gated_tool.py a program held at an event (the
                 kill tests); `-m slow` marks the end-to-end runs
    docs/        the details (original.md, records, training, distributed, gpu,
                 fine-tuning, inference, hierarchy, performance, ...), kubernetes/,
                 recipes/ (the published runs as flagfiles, recipes.md)

Where a new piece goes: a learning-rate schedule in model/lr_schedule.py (its name in
SCHEDULES), a metric in model/metrics.py, a cluster source in
distributed/cluster_flags.py, an export format in inference/ with its command in tools/;
a new module gets its line in its package's docstring, a new package its layer here."""

# Lower layers first; read from the source by tests/test_layout.py (no import).
LAYERS = (
    ('mlimages.errors', 'mlimages.files', 'file_db'),
    ('mlimages.config', 'flags'),
    ('mlimages.data', 'image_preprocess'),
    ('mlimages.distributed',),
    ('mlimages.model', 'resnet'),
    ('mlimages.run',),
    ('mlimages.inference',),
    ('mlimages.cli',),
    ('mlimages.recordkit',),
    ('mlimages.bench',),
    ('mlimages.demo',),
    ('train',),
)
