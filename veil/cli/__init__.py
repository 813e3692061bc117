"""Command-line interface (thin edge over the Python API)."""
