"""Mutation testing of the pure rules: `python -m tests.mutation` (docs/testing.md)."""
