"""Run Ledger: a Postgres-backed run ledger (warm pool, run mappings, run events, terminal state)."""

__version__ = "0.1.0"
