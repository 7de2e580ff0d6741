"""Command-line tools: the CLI, the benchmark and the load test."""
