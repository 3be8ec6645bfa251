"""The benchmark's libraries (tools/benchmark.py), one measurement a module.

    pipelines.py    the compared input pipelines, photograph-like shards and the run loop
                    that takes every variant in turn
    photos.py       what storing images downscaled buys and costs (--photos)
    bookkeeping.py  the record tools' bookkeeping at many shards (--bookkeeping)
    first_step.py   time to the first training step, one process vs one per device
                    (--startup)"""
