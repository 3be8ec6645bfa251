"""What a trained model becomes: the serving graph and SavedModel export (serving), inference
inputs and result files (inference_io), settings read from the run's flags.txt."""
