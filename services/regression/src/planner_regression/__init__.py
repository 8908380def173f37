"""planner_regression."""
