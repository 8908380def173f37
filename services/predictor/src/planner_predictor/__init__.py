"""planner_predictor."""
