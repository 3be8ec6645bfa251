"""What every command shares: argparse helpers, TensorFlow on first use, process pools
(common), the progress line, free ports."""
