"""The trainer behind train.py and tools/, in folders that follow the data flow (lower
layers first; a module imports only from its own layer or below, tests/test_layout.py):

    errors.py     every exception type and the exit statuses they mean
    files.py      files that appear only when complete (atomic_output)
    config/       value checks, the run's flags.txt, start-up before TensorFlow, the Python
    data/         record format, input pipeline, semantic hierarchy
    distributed/  cluster sources, TF_CONFIG roles and strategies, devices, lost peers,
                  a local cluster of processes, free ports
    model/        loss, learning-rate schedules, metrics, precision
    run/          model_fn, the Estimator run, checkpoints, hooks, preemption, run plans
    inference/    serving graph and export, inference inputs and outputs
    cli/          what the commands share (argparse, TensorFlow on first use, worker
                  processes, progress)
    recordkit/    building and checking records (tools/make_tfrecords.py ...)
    bench/        tools/benchmark.py's pipelines and measurements
    demo.py       train.py --demo: the demo dataset and report

The five modules the user named stay at the checkout's root (train.py, flags.py,
resnet.py, image_preprocess.py, file_db.py); tools/ holds only commands."""
