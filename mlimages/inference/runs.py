"""TRANSITION (#41): batch_outputs.py's functions under their old names, for train.py
until it imports batch_outputs; removed after."""
from mlimages.inference.batch_outputs import predict_to as run_predict  # noqa: F401
