"""planner_runtime."""
