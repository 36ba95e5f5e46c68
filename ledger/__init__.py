"""Run Ledger: a Postgres-backed run ledger (warm pool, run mappings, run events, terminal state).

```python
from ledger import Database, RunLog, WarmPool  # the library, on your Postgres
from ledger import LedgerClient  # the HTTP API of a running `ledger serve`
```

The names below are imported on first use (PEP 562), so `import ledger` stays cheap: the worker
side (`reporter`, which imports `ledger.validate`) never loads psycopg, SQLAlchemy or FastAPI.

They are listed once, as the imports under `TYPE_CHECKING` (which the type checker reads); at run
time that block is read from this file's syntax tree to learn where each name lives.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import typing

__version__ = "0.1.0"

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


def _homes() -> dict[str, str]:
    """Where each lazy name lives: the imports of the `TYPE_CHECKING` block above."""
    tree = ast.parse(pathlib.Path(__file__).read_text(encoding="utf-8"))
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    )
    return {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    }


_HOMES: dict[str, str] = _homes()
__all__ = sorted([*_HOMES, "__version__"])


def __getattr__(name: str) -> typing.Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once; later reads do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
