"""`planner register`: stock engines into planner_engines, with their capabilities, and drained."""
