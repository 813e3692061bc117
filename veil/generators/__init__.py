"""Curator publications (k-anonymity, SDC filters, synthetic data, PATE)."""
