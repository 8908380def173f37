"""planner_actuator_k8s."""
