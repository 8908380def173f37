"""planner_cli."""
