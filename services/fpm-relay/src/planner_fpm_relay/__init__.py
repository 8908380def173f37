"""planner_fpm_relay."""
