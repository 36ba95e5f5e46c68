"""Alembic migrations of the ledger schema, shipped with the package."""
