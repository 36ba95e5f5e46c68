"""A pytest plugin that gives tests a real, migrated Postgres (entry point `ledger`, loaded on install).

Where the server comes from, chosen once per session by `choose_backend`:

- `LEDGER_TEST_DATABASE_URL`: that server; the tests create and drop their databases on it, so
  the role needs CREATEDB. `LEDGER_DATABASE_URL` is never used: it is the ledger's real database.
- `LEDGER_TEST_BACKEND=docker`: a testcontainers Postgres, image `LEDGER_TEST_IMAGE` (default
  `DOCKER_IMAGE`), published on 127.0.0.1 and reached there. Without an image registry, build one
  from Debian packages with `python -m ledger.testing_image` (as root).
- otherwise (or `LEDGER_TEST_BACKEND=embedded`): the embedded wheel with durability turned off.

An explicit request that cannot be had stops the session at start with one line; it is never a
skip. Validating it starts nothing (a ping of the Docker engine and a look for the images it needs,
a connect to the URL); a server is started only when a test first asks for a fixture. On it: one
template database migrated to head per schema version, cloned into one database per xdist worker
and dropped at the end.

Fixtures: `pg_admin_url` (may create databases), `database_url` (this worker's migrated database),
`clean_database_url` (the same, every ledger table emptied first), `ledger_service` (the real
service on that database, one per session, served from the test process: `.url`, `.token`;
`ledger.testing_service` says why and has `start_server` for a `ledger serve` subprocess),
`ledger_client` (a `ledger.client.LedgerClient` on it); `ledger_service_env` is the service's
extra environment, for a project to override. Marker: `own_postgres`.

`BackendUnavailable` stays here rather than in `ledger.errors`: only this plugin raises it, at
session start, where it becomes pytest's usage error.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from ledger.config import validate_database_url
from ledger.errors import ConfigError
from ledger.testing_service import (
    InProcessService,
    Server,
    Service,
    free_port,
    serve_in_process,
    start_server,
    stop_server,
)
from ledger.text import one_line

if TYPE_CHECKING:
    from ledger.client import LedgerClient

__all__ = [
    "BACKEND_VAR",
    "DOCKER_IMAGE",
    "FRESH_SERVER_VAR",
    "IMAGE_VAR",
    "OWN_POSTGRES_MARKER",
    "URL_VAR",
    "Backend",
    "BackendUnavailable",
    "Container",
    "ContainerFactory",
    "InProcessService",
    "Server",
    "Service",
    "check_url",
    "choose_backend",
    "clone_database",
    "create_empty_database",
    "delete_all_rows",
    "docker_server",
    "drop_database",
    "drop_orphaned_databases",
    "embedded_server",
    "ensure_template",
    "free_port",
    "ping_docker",
    "postgres_container",
    "psycopg_url",
    "redact",
    "reused_server_dir",
    "serve_in_process",
    "start_server",
    "stop_server",
    "with_database",
    "worker_database",
]

URL_VAR = "LEDGER_TEST_DATABASE_URL"
# Set to 1: the embedded backend makes a throwaway server per session instead of reusing the one
# kept in the user's cache dir.
FRESH_SERVER_VAR = "LEDGER_TEST_FRESH_SERVER"
BACKEND_VAR = "LEDGER_TEST_BACKEND"
IMAGE_VAR = "LEDGER_TEST_IMAGE"
DOCKER_IMAGE = "postgres:16-alpine"
_LOOPBACK = "127.0.0.1"
OWN_POSTGRES_MARKER = "own_postgres"
_OWN_POSTGRES_DOC = (
    f"{OWN_POSTGRES_MARKER}: needs a Postgres server of its own (it restarts or kills it); "
    "deselected when an external backend is asked for"
)


class BackendUnavailable(Exception):
    """The Postgres asked for cannot be had; the message is one line for a person."""


class Container(Protocol):
    def get_connection_url(self) -> str: ...


ContainerFactory = Callable[[str], AbstractContextManager[Container]]


@dataclass(frozen=True)
class Backend:
    """Where the tests' Postgres comes from. `server(data_dir)` reaches or starts it when entered."""

    kind: Literal["embedded", "url", "docker"]
    source: str  # what asked for it, for messages
    server: Callable[[Path], AbstractContextManager[str]]

    @property
    def external(self) -> bool:
        """True when the server is not one the tests may restart or kill."""
        return self.kind != "embedded"


def choose_backend(
    env: Mapping[str, str],
    *,
    docker_probe: Callable[[str], None],
    container_factory: ContainerFactory,
    url_probe: Callable[[str], None],
) -> Backend:
    """The backend the environment asks for, validated without starting anything.

    The probes raise `BackendUnavailable` with the reason; it comes back naming the request. The
    Docker probe is given the image to look for.
    """
    raw_url = env.get(URL_VAR, "").strip()
    backend = env.get(BACKEND_VAR, "").strip().lower()
    if raw_url and backend == "docker":
        raise BackendUnavailable(f"{URL_VAR} and {BACKEND_VAR}=docker are both set: set one of them")
    if raw_url:
        try:
            url = validate_database_url(raw_url, source=URL_VAR)
        except ConfigError as exc:
            raise BackendUnavailable(str(exc)) from None
        try:
            url_probe(url)
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"{URL_VAR}={redact(url)} cannot be used: {exc}") from None
        return Backend("url", URL_VAR, lambda _data_dir: nullcontext(url))
    if backend == "docker":
        source = f"{BACKEND_VAR}=docker"
        image = env.get(IMAGE_VAR, "").strip() or DOCKER_IMAGE
        try:
            docker_probe(image)
        except BackendUnavailable as exc:
            raise BackendUnavailable(
                f"{source} asks for a testcontainers Postgres ({image}), but {exc}"
            ) from None
        return Backend("docker", source, lambda _data_dir: docker_server(container_factory, image))
    if backend not in ("", "embedded"):
        raise BackendUnavailable(f"{BACKEND_VAR}={backend!r}: expected 'docker' or 'embedded'")
    return Backend("embedded", "the embedded Postgres", embedded_server)


def _one_line(exc: BaseException) -> str:
    return one_line(f"{type(exc).__name__}: {exc}")


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def check_url(url: str) -> None:
    """The server answers and the role may create databases (the tests make their own)."""
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_user, rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except psycopg.Error as exc:
        raise BackendUnavailable(f"no connection ({_one_line(exc)})") from None
    if row is None or not row[1]:
        role = row[0] if row else "?"
        raise BackendUnavailable(f"role {role} may not create databases (the tests need CREATEDB)")


def ping_docker(image: str) -> None:
    """testcontainers is installed, a Docker engine answers, and it has (or can pull) `image` and,
    unless testcontainers is told to do without it, the reaper's image.

    Checked here because testcontainers would otherwise fail every test, one pull at a time. Whether
    a missing image can be pulled is asked of its registry (a manifest, nothing downloaded).
    """
    try:
        import docker
        import testcontainers.community.postgres  # noqa: F401 - its absence is the answer
        from testcontainers.core.config import testcontainers_config
    except ImportError as exc:
        raise BackendUnavailable(f"{exc.name} is not installed (pip install 'run-ledger[test]')") from None
    from ledger.testing_image import DEFAULT_TAG as built_image

    # testcontainers puts its prefix (TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX) before both names.
    prefix = testcontainers_config.hub_image_name_prefix
    ryuk = None if testcontainers_config.ryuk_disabled else prefix + testcontainers_config.ryuk_image
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
            image_missing = _image_missing(client, prefix + image)
            ryuk_missing = _image_missing(client, ryuk) if ryuk else None
        finally:
            client.close()
    except Exception as exc:
        raise BackendUnavailable(f"no Docker engine answers ({_one_line(exc)})") from None
    problems = []
    if image_missing:
        problems.append(
            f"the engine has no {prefix + image} and cannot pull it ({image_missing}): set {IMAGE_VAR} "
            f"to an image it has, or build one without a registry (as root: python -m "
            f"ledger.testing_image, then {IMAGE_VAR}={built_image})"
        )
    if ryuk_missing:
        problems.append(
            f"the engine has no {ryuk} (testcontainers' reaper) and cannot pull it ({ryuk_missing}): "
            "set TESTCONTAINERS_RYUK_DISABLED=true (the session removes its containers itself)"
        )
    if problems:
        raise BackendUnavailable("; and ".join(problems))


def _image_missing(client: Any, image: str) -> str | None:
    """Why the engine can neither find nor pull `image`; None when it can do one of them."""
    import docker.errors

    try:
        client.images.get(image)
        return None
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.get_registry_data(image)
        return None
    except docker.errors.APIError as exc:
        # The engine's own words ("…: no such host"), without the request's URL around them.
        return one_line(exc.explanation or exc)
    except Exception as exc:
        return _one_line(exc)


@dataclass(frozen=True)
class _Published:
    """A started container, as the URL of its port on the loopback interface."""

    url: str

    def get_connection_url(self) -> str:
        return self.url


@contextmanager
def postgres_container(image: str) -> Iterator[Container]:
    """testcontainers' Postgres, its durability off like the embedded one's.

    Its port is published on 127.0.0.1 only and reached there: testcontainers would otherwise pick
    a bridge or gateway address when the tests run inside a container, and publish on every
    interface a server whose password is known.
    """
    from testcontainers.community.postgres import PostgresContainer

    container = PostgresContainer(image, driver=None)
    container.with_command("postgres -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    # docker-py binds a port on one interface when given (address, port); testcontainers' type for
    # the binding names only the port.
    cast("dict[str, Any]", container.ports)[str(container.port)] = (_LOOPBACK, None)
    with container:
        port = container.get_docker_client().port(container.get_container_id(), container.port)
        user, password = quote(container.username, safe=""), quote(container.password, safe="")
        yield _Published(f"postgresql://{user}:{password}@{_LOOPBACK}:{port}/{container.dbname}")


def psycopg_url(url: str) -> str:
    """A SQLAlchemy-style URL (`postgresql+psycopg2://…`) in the plain form psycopg takes."""
    scheme, rest = url.split("://", 1)
    return validate_database_url(scheme.split("+", 1)[0] + "://" + rest, source="the container's URL")


@contextmanager
def docker_server(container_factory: ContainerFactory, image: str = DOCKER_IMAGE) -> Iterator[str]:
    with container_factory(image) as container:
        yield psycopg_url(container.get_connection_url())


@contextmanager
def embedded_server(data_dir: Path) -> Iterator[str]:
    from ledger.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir)
    url = server.url()
    # Throwaway server: durability buys nothing and costs commit latency.
    with psycopg.connect(url, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield url
    finally:
        server.stop()


def with_database(url: str, database: str) -> str:
    """The same server URL, pointing at another database."""
    return urlunsplit(urlsplit(url)._replace(path="/" + database))


def _schema_fingerprint() -> str:
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    # The migrations (read where `ledger.migrate` points Alembic, without importing Alembic: a
    # session whose template exists never needs it) and the functions and views they load from
    # `ledger/sql/`: those are the schema too.
    for path in [
        *sorted((package / "migrations" / "versions").glob("*.py")),
        *sorted((package / "sql").glob("*.sql")),
    ]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_template(admin_url: str) -> str:
    """A database migrated to head, made once per schema version and reused across runs."""
    name = f"ledger_tpl_{_schema_fingerprint()}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        # Serialise xdist workers (and concurrent sessions) building the same template.
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                building = name + "_building"
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(building)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
                from ledger import migrate

                migrate.upgrade(with_database(admin_url, building))
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(building), sql.Identifier(name)
                    )
                )
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
    return name


def clone_database(admin_url: str, template: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        drop_database(conn, name)
        # FILE_COPY (15+) skips WAL-logging every page of the copy.
        strategy = sql.SQL(" STRATEGY FILE_COPY") if conn.info.server_version >= 150000 else sql.SQL("")
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
            + strategy
        )
    return with_database(admin_url, name)


def drop_database(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def create_empty_database(admin_url: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        drop_database(conn, name)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(admin_url, name)


def delete_all_rows(url: str) -> None:
    from ledger.schema import ALL_TABLES

    with psycopg.connect(url) as conn:
        for table in ALL_TABLES:
            conn.execute(f"DELETE FROM {table.fullname}")


def _worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "master")


# --- pytest hooks -----------------------------------------------------------------------------

_BACKEND = pytest.StashKey[Backend]()


def pytest_configure(config: pytest.Config) -> None:
    # A project may list the marker itself (for --strict-markers readers); list it once.
    declared = [str(line).split(":", 1)[0].strip() for line in config.getini("markers")]
    if OWN_POSTGRES_MARKER not in declared:
        config.addinivalue_line("markers", _OWN_POSTGRES_DOC)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # Before xdist starts its workers, so a bad request is one line and nothing else.
    try:
        backend = choose_backend(
            os.environ, docker_probe=ping_docker, container_factory=postgres_container, url_probe=check_url
        )
    except BackendUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None
    session.config.stash[_BACKEND] = backend


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = config.stash.get(_BACKEND, None)
    if backend is None or not backend.external:
        return
    deselected = [item for item in items if item.get_closest_marker(OWN_POSTGRES_MARKER)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker(OWN_POSTGRES_MARKER)]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    backend = config.stash.get(_BACKEND, None)
    if backend is not None and backend.external:
        # Under xdist only the workers collect, so the line states the rule rather than a count.
        terminalreporter.write_line(
            f"ledger.testing: Postgres from {backend.source}; "
            f"tests marked {OWN_POSTGRES_MARKER} are deselected (they need a server of their own)"
        )


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_admin_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A URL with rights to create databases on the tests' server, started on first use."""
    backend = request.config.stash[_BACKEND]
    base = tmp_path_factory.getbasetemp()
    # xdist workers share one embedded server: the wheel reuses a running one per data dir.
    shared = base.parent if _worker_id() != "master" else base
    data_dir = shared / "embedded-pg" if _fresh_server(os.environ) else reused_server_dir()
    with backend.server(data_dir) as url:
        drop_orphaned_databases(url)
        yield url


def _fresh_server(env: Mapping[str, str]) -> bool:
    return env.get(FRESH_SERVER_VAR, "").strip().lower() in ("1", "true", "yes")


def reused_server_dir() -> Path:
    """Where the embedded server the sessions share lives: the user's cache dir, per Postgres
    version of the wheel. Its template database survives the session, so a later one starts the
    server (a second) instead of making and migrating a cluster (most of a small project's run)."""
    import platformdirs

    from ledger.embedded import postgres_version

    return Path(platformdirs.user_cache_dir("run-ledger")) / f"test-postgres-{postgres_version()}"


# A worker database is `ledger_test_[<purpose>_]<worker>_<pid>`: its session's process.
_WORKER_DATABASE = re.compile(r"ledger_test_(?:[a-z]+_)?[A-Za-z0-9]+_([0-9]+)")


def drop_orphaned_databases(admin_url: str) -> None:
    """Drop the worker databases of sessions that ended without dropping them (killed), so a
    server kept across sessions does not fill up with them."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        listed = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'ledger_test_%'")
        for (name,) in listed.fetchall():
            found = _WORKER_DATABASE.fullmatch(name)
            if found is not None and not _process_alive(int(found.group(1))):
                drop_database(conn, name)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


@contextmanager
def worker_database(admin_url: str, purpose: str = "") -> Iterator[str]:
    """A database of this test process's own, cloned from the migrated template and dropped on
    leaving: what `database_url` is, and with a `purpose` (lowercase letters) a second one for
    tests that must not share it (with a session's service, say). Named after the xdist worker and
    the pid, so `drop_orphaned_databases` finds it if the session is killed."""
    if purpose and not (purpose.isascii() and purpose.isalpha() and purpose.islower()):
        raise ValueError(f"a worker database's purpose is lowercase letters, not {purpose!r}")
    template = ensure_template(admin_url)
    name = "_".join(part for part in ("ledger_test", purpose, _worker_id(), str(os.getpid())) if part)
    url = clone_database(admin_url, template, name)
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            drop_database(conn, name)


@pytest.fixture(scope="session")
def database_url(pg_admin_url: str) -> Iterator[str]:
    """This worker's own database, cloned from the migrated template and dropped at the end."""
    with worker_database(pg_admin_url) as url:
        yield url


@pytest.fixture
def clean_database_url(database_url: str) -> str:
    """The worker database with every ledger table emptied (committed tests clean up with DELETE)."""
    delete_all_rows(database_url)
    return database_url


@pytest.fixture(scope="session")
def ledger_service_env() -> dict[str, str]:
    """Extra environment of the `ledger_service` (e.g. `LEDGER_SSE_KEEPALIVE_S`), over this
    process's; override this fixture in a conftest to change it. Empty by default."""
    return {}


@pytest.fixture(scope="session")
def ledger_service(
    database_url: str, ledger_service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The ledger service on this worker's database, one per session, served from the test
    process (`serve_in_process`): `.url`, `.token`."""
    service = serve_in_process(database_url, tmp_path_factory.mktemp("ledger-service"), **ledger_service_env)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def ledger_client(ledger_service: Service) -> Iterator[LedgerClient]:
    """A `LedgerClient` on `ledger_service`, closed after the test."""
    from ledger.client import LedgerClient

    with LedgerClient(ledger_service.url, ledger_service.token) as client:
        yield client
