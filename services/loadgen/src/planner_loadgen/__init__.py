"""planner_loadgen."""
