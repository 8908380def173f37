"""planner_actuator_circus."""
