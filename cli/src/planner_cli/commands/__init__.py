"""Subcommands of `planner`, discovered automatically."""
