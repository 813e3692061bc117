"""Privacy metrics computed on released data."""
