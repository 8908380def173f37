"""planner_engine_sim."""
