"""Measurements shared by publications (veil.generators) and audits (veil.auditor): the layer below both."""
