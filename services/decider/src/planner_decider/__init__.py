"""planner_decider."""
