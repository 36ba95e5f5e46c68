"""Durable Streams on Postgres: named append-only byte logs read by offset, long-poll and SSE.

`rules` holds the protocol's pure parts (offsets, headers, JSON mode), `store` the streams
themselves (`StreamStore`), `runs` a run's events read as a read-only JSON stream.
"""

__all__: list[str] = []
