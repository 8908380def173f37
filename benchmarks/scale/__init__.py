"""The scale bench harness (``benchmarks/bench_scale.py``) and its synthetic engine processes."""
