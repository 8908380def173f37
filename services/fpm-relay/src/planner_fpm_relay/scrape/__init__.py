"""Scrape adapters: engines without FPM (vLLM, SGLang, TRT-LLM serve, llama.cpp server) read over
their Prometheus ``/metrics`` and published as WorkerLoadSample."""
