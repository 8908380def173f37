"""llama.cpp: the llama-server binary, a tiny generated model, and a server process for demos and tests."""
