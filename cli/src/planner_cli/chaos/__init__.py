"""``planner chaos``: kill -9 every service (and the nats-server) during a compressed demo run, then
check that the planner recovered and never double-scaled, dropped a request or broke its GPU budget."""
