"""planner_sim."""
