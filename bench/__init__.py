"""Benchmarks: run as `python -m bench.<script>`; each writes its section of docs/benchmarks.md."""
