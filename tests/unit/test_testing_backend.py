"""Which Postgres the `ledger.testing` plugin uses, decided from the environment without Docker."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from urllib.parse import unquote

import pytest

from ledger.testing import (
    BACKEND_VAR,
    DOCKER_IMAGE,
    IMAGE_VAR,
    URL_VAR,
    Backend,
    BackendUnavailable,
    Container,
    ContainerFactory,
    choose_backend,
    psycopg_url,
)


def _never(image: str) -> None:
    raise AssertionError(f"probed Docker for {image} though nobody asked for it")


def _never_url(url: str) -> None:
    raise AssertionError(f"connected to {url} though nobody asked for it")


def _never_started(image: str) -> AbstractContextManager[Container]:
    raise AssertionError(f"started a {image} container at choice time")


def _choose(
    env: dict[str, str],
    *,
    docker_probe: Callable[[str], None] = _never,
    container_factory: ContainerFactory = _never_started,
    url_probe: Callable[[str], None] = _never_url,
) -> Backend:
    return choose_backend(
        env, docker_probe=docker_probe, container_factory=container_factory, url_probe=url_probe
    )


def _no_engine(image: str) -> None:
    raise BackendUnavailable("no Docker engine answers (DockerException: connection refused)")


class FakeContainer:
    """What testcontainers hands back: a SQLAlchemy-style URL naming the psycopg2 driver."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.running = False

    def __enter__(self) -> FakeContainer:
        self.running = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.running = False

    def get_connection_url(self) -> str:
        return "postgresql+psycopg2://test:test@localhost:32768/test"


@pytest.mark.parametrize("env", [{}, {BACKEND_VAR: "embedded"}, {BACKEND_VAR: " "}])
def test_no_request_is_the_embedded_server(env: dict[str, str]) -> None:
    backend = _choose(env)
    assert backend.kind == "embedded"
    assert not backend.external


def test_the_ledgers_own_database_url_is_never_a_test_server() -> None:
    backend = _choose({"LEDGER_DATABASE_URL": "postgresql://me@prod.example/ledger"})
    assert backend.kind == "embedded"


def test_a_test_database_url_is_that_server(tmp_path: Path) -> None:
    probed: list[str] = []
    backend = _choose({URL_VAR: " postgres://ci@db.example:5433/postgres "}, url_probe=probed.append)
    assert backend.kind == "url"
    assert backend.external
    assert probed == ["postgresql://ci@db.example:5433/postgres"]
    with backend.server(tmp_path) as url:
        assert url == "postgresql://ci@db.example:5433/postgres"


def test_an_unreachable_test_database_url_is_one_line_without_the_password() -> None:
    def refused(url: str) -> None:
        raise BackendUnavailable("no connection (OperationalError: connection refused)")

    with pytest.raises(BackendUnavailable) as info:
        _choose({URL_VAR: "postgresql://ci:s3cret@127.0.0.1:1/x"}, url_probe=refused)
    message = str(info.value)
    assert message == (
        f"{URL_VAR}=postgresql://ci:***@127.0.0.1:1/x cannot be used: "
        "no connection (OperationalError: connection refused)"
    )
    assert "s3cret" not in message


def test_a_malformed_test_database_url_names_the_variable() -> None:
    with pytest.raises(BackendUnavailable, match=URL_VAR):
        _choose({URL_VAR: "mysql://u@h/db"})


def test_docker_without_an_engine_is_a_clear_failure() -> None:
    with pytest.raises(BackendUnavailable) as info:
        _choose({BACKEND_VAR: "docker"}, docker_probe=_no_engine)
    assert str(info.value) == (
        f"{BACKEND_VAR}=docker asks for a testcontainers Postgres ({DOCKER_IMAGE}), "
        "but no Docker engine answers (DockerException: connection refused)"
    )


def test_docker_with_an_engine_is_the_containers_url_for_psycopg(tmp_path: Path) -> None:
    started: list[FakeContainer] = []

    def factory(image: str) -> FakeContainer:
        started.append(FakeContainer(image))
        return started[-1]

    probed: list[str] = []
    backend = _choose({BACKEND_VAR: "Docker"}, docker_probe=probed.append, container_factory=factory)
    assert backend.kind == "docker"
    assert backend.external
    assert probed == [DOCKER_IMAGE]
    assert started == []  # choosing starts nothing
    with backend.server(tmp_path) as url:
        assert url == "postgresql://test:test@localhost:32768/test"
        assert [(c.image, c.running) for c in started] == [(DOCKER_IMAGE, True)]
    assert not started[0].running


@pytest.mark.parametrize("value", ["ledger-test-postgres:15", " registry.example/pg:16 "])
def test_the_image_variable_chooses_the_image_probed_and_started(tmp_path: Path, value: str) -> None:
    probed: list[str] = []
    started: list[str] = []

    def factory(image: str) -> FakeContainer:
        started.append(image)
        return FakeContainer(image)

    backend = _choose(
        {BACKEND_VAR: "docker", IMAGE_VAR: value}, docker_probe=probed.append, container_factory=factory
    )
    with backend.server(tmp_path):
        pass
    assert probed == started == [value.strip()]


def test_an_empty_image_variable_is_the_default_image() -> None:
    probed: list[str] = []
    _choose({BACKEND_VAR: "docker", IMAGE_VAR: " "}, docker_probe=probed.append)
    assert probed == [DOCKER_IMAGE]


def test_two_explicit_requests_are_refused() -> None:
    with pytest.raises(BackendUnavailable, match="set one of them"):
        _choose({URL_VAR: "postgresql://ci@db.example/x", BACKEND_VAR: "docker"})


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(BackendUnavailable, match="expected 'docker' or 'embedded'"):
        _choose({BACKEND_VAR: "podman"})


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+psycopg2://u:p@h:1/d", "postgresql://u:p@h:1/d"),
        ("postgresql+psycopg://u@h/d", "postgresql://u@h/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
    ],
)
def test_psycopg_url(url: str, expected: str) -> None:
    assert psycopg_url(url) == expected


OWN_AND_SHARED = """
import pytest

@pytest.mark.own_postgres
def test_restarts_the_server():
    pass

def test_uses_any_server():
    pass
"""


def _inner_session(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(OWN_AND_SHARED)
    return pytester.runpytest_inprocess("--strict-markers")


def test_own_postgres_tests_run_on_the_embedded_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(URL_VAR, raising=False)
    monkeypatch.delenv(BACKEND_VAR, raising=False)
    result = _inner_session(pytester)
    result.assert_outcomes(passed=2)
    assert "own_postgres are deselected" not in result.stdout.str()


def test_own_postgres_tests_are_deselected_on_an_external_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pg_admin_url: str
) -> None:
    # A real server stands in for the user's: the plugin connects to it at session start.
    monkeypatch.setenv(URL_VAR, pg_admin_url)
    monkeypatch.delenv(BACKEND_VAR, raising=False)
    result = _inner_session(pytester)
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [f"ledger.testing: Postgres from {URL_VAR}; tests marked own_postgres are deselected *"]
    )


# --- a Docker engine without a registry, as the plugin's probe sees it ---------------------------

RYUK_VAR = "TESTCONTAINERS_RYUK_DISABLED"
NO_REGISTRY = 'Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid: no such host'


class _EngineHandler(http.server.BaseHTTPRequestHandler):
    """The Docker API calls the probe makes: the version, a ping, an image, a registry's manifest."""

    protocol_version = "HTTP/1.1"
    server: _FakeEngine

    def do_GET(self) -> None:
        path = unquote(self.path.split("?", 1)[0])
        if path == "/version" or re.fullmatch(r"/v[\d.]+/version", path):
            self._reply(200, {"ApiVersion": "1.41", "Version": "20.10.24", "MinAPIVersion": "1.12"})
        elif re.fullmatch(r"/(v[\d.]+/)?_ping", path):
            self._reply(200, "OK")
        elif match := re.fullmatch(r"/v[\d.]+/images/(.+)/json", path):
            image = match[1]
            if image in self.server.images:
                self._reply(200, {"Id": "sha256:" + "0" * 64, "RepoTags": [image]})
            else:
                self._reply(404, {"message": f"No such image: {image}"})
        elif re.fullmatch(r"/v[\d.]+/distribution/(.+)/json", path):
            self._reply(500, {"message": NO_REGISTRY})
        else:
            self._reply(404, {"message": f"page not found: {path}"})

    def _reply(self, status: int, body: object) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _FakeEngine(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, images: set[str]) -> None:
        super().__init__(str(path), _EngineHandler)
        self.images = images


@pytest.fixture
def registryless_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """A Docker engine (DOCKER_HOST) whose registry is unreachable; add names to the set it yields
    to give it those images."""
    # The dependency-floors venv has no `test` extra: nothing there to probe with.
    pytest.importorskip("testcontainers")
    images: set[str] = set()
    # A short path (a unix socket's name is limited to about 100 bytes), not under the basetemp.
    socket_dir = Path(tempfile.mkdtemp(prefix="ledger-docker-"))
    socket_path = socket_dir / "docker.sock"
    engine = _FakeEngine(socket_path, images)
    thread = threading.Thread(target=engine.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    monkeypatch.setenv(BACKEND_VAR, "docker")
    monkeypatch.delenv(URL_VAR, raising=False)
    monkeypatch.delenv(IMAGE_VAR, raising=False)
    monkeypatch.delenv(RYUK_VAR, raising=False)
    monkeypatch.delenv("TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX", raising=False)
    monkeypatch.delenv("RYUK_CONTAINER_IMAGE", raising=False)
    # A properties file of the user's could disable the reaper; this HOME has none.
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        yield images
    finally:
        engine.shutdown()
        engine.server_close()
        shutil.rmtree(socket_dir, ignore_errors=True)


NEEDS_A_DATABASE = """
def test_needs_a_database(database_url):
    open("ran", "w").close()
"""


def _docker_session(pytester: pytest.Pytester) -> pytest.RunResult:
    # A process of its own: testcontainers reads its settings once per process.
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(NEEDS_A_DATABASE)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def _the_one_line(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in result.stderr.lines if line.strip()]
    assert len(lines) == 1, lines
    assert not result.stdout.str().strip()
    return lines[0]


def test_docker_without_its_images_stops_the_session_with_one_line_saying_what_to_do(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, registryless_engine: set[str]
) -> None:
    # Neither the default image nor the reaper's: one line names both remedies.
    line = _the_one_line(_docker_session(pytester))
    assert line.startswith(
        f"ERROR: {BACKEND_VAR}=docker asks for a testcontainers Postgres ({DOCKER_IMAGE}), "
        f"but the engine has no {DOCKER_IMAGE} and cannot pull it ({NO_REGISTRY}): set {IMAGE_VAR} to "
    )
    assert "(as root: python -m ledger.testing_image, then LEDGER_TEST_IMAGE=ledger-test-postgres:15)" in line
    assert line.endswith(f"set {RYUK_VAR}=true (the session removes its containers itself)")
    assert not (pytester.path / "ran").exists()


def test_docker_without_the_reapers_image_stops_the_session_with_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, registryless_engine: set[str]
) -> None:
    registryless_engine.add("ledger-test-postgres:15")
    monkeypatch.setenv(IMAGE_VAR, "ledger-test-postgres:15")
    line = _the_one_line(_docker_session(pytester))
    assert line.startswith(
        f"ERROR: {BACKEND_VAR}=docker asks for a testcontainers Postgres (ledger-test-postgres:15), "
        "but the engine has no testcontainers/ryuk:"
    )
    assert line.endswith(f"set {RYUK_VAR}=true (the session removes its containers itself)")
    assert IMAGE_VAR not in line.split("), but ", 1)[1]
    assert not (pytester.path / "ran").exists()


def test_docker_with_the_image_and_no_reaper_starts_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, registryless_engine: set[str]
) -> None:
    # The probe passes; the test asks for no database, so nothing is started on the fake engine.
    registryless_engine.add("ledger-test-postgres:15")
    monkeypatch.setenv(IMAGE_VAR, "ledger-test-postgres:15")
    monkeypatch.setenv(RYUK_VAR, "true")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
