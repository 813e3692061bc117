"""Analyst queries: parse → validate → plan → reserve → rewrite → execute → noise → release."""
