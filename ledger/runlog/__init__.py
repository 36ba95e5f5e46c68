"""A run's gapless event sequence and terminal state: event rules (`events`), the Postgres store
(`store`), the LISTEN/NOTIFY wake-ups (`listener`), the stalled-run watchdog (`watchdog`) and the
inspection-view reads (`overview`).
"""

__all__: list[str] = []
