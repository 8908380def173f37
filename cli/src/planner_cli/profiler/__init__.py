"""The live pre-deployment profiler (I/O side): endpoints, engine-sim spawning, the sweep runner, and
the files, plots and recommendations it writes. The plan, aggregation and TP choice are pure and
live in planner_core.profiling."""
