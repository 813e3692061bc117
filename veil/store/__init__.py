"""Veil's durable state: the ledger (budgets, reservations, release log, answer cache, credentials) and the warehouse."""
