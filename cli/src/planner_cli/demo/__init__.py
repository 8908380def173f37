"""The end-to-end demo: embedded NATS, circusd with every service and engine-sim workers, a live view, a report."""
