"""planner_core."""
