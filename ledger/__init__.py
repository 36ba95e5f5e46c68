"""Run Ledger: a Postgres-backed run ledger (warm pool, run mappings, run events, terminal state).

```python
from ledger import Database, RunLog, WarmPool  # the library, on your Postgres
from ledger import LedgerClient  # the HTTP API of a running `ledger serve`
```

The names below are imported on first use (PEP 562), so `import ledger` stays cheap: the worker
side (`reporter`, which imports `ledger.validate`) never loads psycopg, SQLAlchemy or FastAPI.

Each is written three times on purpose, each for its reader: in `__all__` (what `import *` and the
documentation take), in `_HOMES` (where the name lives, which `__getattr__` imports on first use)
and under `TYPE_CHECKING` (which the type checker reads, never run). A test fails when the three
disagree or an entry does not resolve.
"""

from __future__ import annotations

import importlib
import typing

__version__ = "0.1.0"

__all__ = [
    "AsyncLedgerClient",
    "ConfigError",
    "Conflict",
    "CursorExpired",
    "Database",
    "DatabaseUnavailable",
    "InvalidInput",
    "LedgerClient",
    "LedgerError",
    "LedgerFailure",
    "LedgerUnavailable",
    "Listener",
    "NotFound",
    "PayloadTooLarge",
    "RunLog",
    "RunTerminal",
    "StaleAttempt",
    "Unauthorized",
    "WarmPool",
    "Watchdog",
    "__version__",
    "apply_status_upload",
    "list_observations",
    "record_observations",
    "record_sheet_rows",
    "sheet_outcomes",
]

if typing.TYPE_CHECKING:
    from ledger.client import AsyncLedgerClient as AsyncLedgerClient
    from ledger.client import LedgerClient as LedgerClient
    from ledger.db import Database as Database
    from ledger.errors import ConfigError as ConfigError
    from ledger.errors import Conflict as Conflict
    from ledger.errors import CursorExpired as CursorExpired
    from ledger.errors import DatabaseUnavailable as DatabaseUnavailable
    from ledger.errors import InvalidInput as InvalidInput
    from ledger.errors import LedgerError as LedgerError
    from ledger.errors import LedgerFailure as LedgerFailure
    from ledger.errors import LedgerUnavailable as LedgerUnavailable
    from ledger.errors import NotFound as NotFound
    from ledger.errors import PayloadTooLarge as PayloadTooLarge
    from ledger.errors import RunTerminal as RunTerminal
    from ledger.errors import StaleAttempt as StaleAttempt
    from ledger.errors import Unauthorized as Unauthorized
    from ledger.ingest.observations import list_observations as list_observations
    from ledger.ingest.observations import record_observations as record_observations
    from ledger.ingest.sheets import record_sheet_rows as record_sheet_rows
    from ledger.ingest.sheets import sheet_outcomes as sheet_outcomes
    from ledger.ingest.store import apply_status_upload as apply_status_upload
    from ledger.pool.store import WarmPool as WarmPool
    from ledger.runlog.listener import Listener as Listener
    from ledger.runlog.store import RunLog as RunLog
    from ledger.runlog.watchdog import Watchdog as Watchdog

# Where each lazy name lives: `__getattr__` imports the module the first time the name is read.
_HOMES: typing.Final[dict[str, str]] = {
    "AsyncLedgerClient": "ledger.client",
    "LedgerClient": "ledger.client",
    "Database": "ledger.db",
    "ConfigError": "ledger.errors",
    "Conflict": "ledger.errors",
    "CursorExpired": "ledger.errors",
    "DatabaseUnavailable": "ledger.errors",
    "InvalidInput": "ledger.errors",
    "LedgerError": "ledger.errors",
    "LedgerFailure": "ledger.errors",
    "LedgerUnavailable": "ledger.errors",
    "NotFound": "ledger.errors",
    "PayloadTooLarge": "ledger.errors",
    "RunTerminal": "ledger.errors",
    "StaleAttempt": "ledger.errors",
    "Unauthorized": "ledger.errors",
    "list_observations": "ledger.ingest.observations",
    "record_observations": "ledger.ingest.observations",
    "record_sheet_rows": "ledger.ingest.sheets",
    "sheet_outcomes": "ledger.ingest.sheets",
    "apply_status_upload": "ledger.ingest.store",
    "WarmPool": "ledger.pool.store",
    "Listener": "ledger.runlog.listener",
    "RunLog": "ledger.runlog.store",
    "Watchdog": "ledger.runlog.watchdog",
}


def __getattr__(name: str) -> typing.Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once; later reads do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
