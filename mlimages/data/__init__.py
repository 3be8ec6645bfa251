"""Data into the graph: the record format (records), the input pipeline (input_fn, bad-record
skipping, synthetic batches), the ML-Images semantic hierarchy."""
