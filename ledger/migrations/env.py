"""Alembic environment: the URL comes from the ledger's configuration, the models from ledger.schema."""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

import psycopg
from alembic import context
from sqlalchemy import Connection, create_engine, pool

from ledger.config import sqlalchemy_url
from ledger.db import resolve_url
from ledger.migrate import VERSION_TABLE
from ledger.runlog import conversion
from ledger.schema import SCHEMA, metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("ledger_url") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # Only our schema is ours to compare: other schemas in a shared database are not drift.
    if type_ == "schema":
        return name == SCHEMA
    return True


def _converting(connection: Connection) -> bool:
    return bool(connection.exec_driver_sql(f"SELECT {conversion.CONVERTING_SQL}").scalar())


def run_migrations() -> None:
    url = config.attributes.get("ledger_url")
    server = None
    if not url:
        url, server = resolve_url()
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=metadata,
                version_table=VERSION_TABLE,
                include_schemas=True,
                include_name=include_name,
                compare_type=True,
            )
            with context.begin_transaction():
                converting = _converting(connection)
                context.run_migrations()
                if _converting(connection) and not converting:
                    # The old log was moved aside just now: no previous release may read beside it.
                    driver = connection.connection.driver_connection
                    assert isinstance(driver, psycopg.Connection)
                    conversion.refuse_beside_previous_release(driver, VERSION_TABLE)
    finally:
        engine.dispose()
        if server is not None:
            server.stop()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations()
