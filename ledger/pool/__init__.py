"""The warm pool of worker instances per code version, and run → instance mappings: pure rules
(`rules`) and the Postgres store that applies them (`store`).
"""

__all__: list[str] = []
