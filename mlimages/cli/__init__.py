"""What every command shares: argparse helpers and one-line errors (arguments), TensorFlow
on first use (lazy_tensorflow), the worker count and worker processes (worker_processes),
the progress line, free ports."""
