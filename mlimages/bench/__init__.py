"""The benchmark's libraries (tools/benchmark.py): the compared input pipelines,
photograph-size records, per-shard bookkeeping costs."""
