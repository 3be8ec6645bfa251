"""Data into the graph.

    records.py         the one record format: a serialized tf.train.Example per image
    input_pipeline.py  input_fn over shard files, bad-record skipping, synthetic batches
    hierarchy.py       the ML-Images semantic hierarchy: labels closed under ancestors,
                       consistent scores
    class_names.py     class names from a class dictionary (ML-Images, ImageNet,
                       classes.txt, one name a line)"""
