"""The measuring commands' libraries (tools/benchmark.py, graph_size.py, ps_placement.py,
memory_peak.py), one measurement a module.

    benchmark.py    tools/benchmark.py: input pipelines and training steps side by side
    pipelines.py    the compared input pipelines, photograph-like shards and the run loop
                    that takes every variant in turn
    photos.py       what storing images downscaled buys and costs (--photos)
    bookkeeping.py  the record tools' bookkeeping at many shards (--bookkeeping)
    first_step.py   time to the first training step, one process vs one per device
                    (--startup)
    engines.py      inference img/s and agreement of each engine x dtype (--engines)
    versus_keras.py train.py's training step against Keras' ResNet-V2 of the same depth
                    (--versus_keras)
    graph_size.py   the training graph's size against the replicas (tools/graph_size.py)
    ps_placement.py the bytes of variables each ps task holds (tools/ps_placement.py)
    memory_peak.py  model/memory.py's constants fitted to the peak of a training step
                    (tools/memory_peak.py)
    report_cost.py  the per-class report's time, memory and bytes at many classes
                    (--report_cost)"""
