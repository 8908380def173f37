"""What a stock engine's own ``/metrics`` say about it: capabilities, request and token counters."""
