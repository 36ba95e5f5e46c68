"""Which Postgres the `ledger.testing` plugin uses, decided from the environment without Docker."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from ledger.testing import (
    BACKEND_VAR,
    DOCKER_IMAGE,
    URL_VAR,
    Backend,
    BackendUnavailable,
    Container,
    ContainerFactory,
    choose_backend,
    psycopg_url,
)


def _never() -> None:
    raise AssertionError("probed a backend nobody asked for")


def _never_url(url: str) -> None:
    raise AssertionError(f"connected to {url} though nobody asked for it")


def _never_started(image: str) -> AbstractContextManager[Container]:
    raise AssertionError(f"started a {image} container at choice time")


def _choose(
    env: dict[str, str],
    *,
    docker_probe: Callable[[], None] = _never,
    container_factory: ContainerFactory = _never_started,
    url_probe: Callable[[str], None] = _never_url,
) -> Backend:
    return choose_backend(
        env, docker_probe=docker_probe, container_factory=container_factory, url_probe=url_probe
    )


def _no_engine() -> None:
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

    backend = _choose({BACKEND_VAR: "Docker"}, docker_probe=lambda: None, container_factory=factory)
    assert backend.kind == "docker"
    assert backend.external
    assert started == []  # choosing starts nothing
    with backend.server(tmp_path) as url:
        assert url == "postgresql://test:test@localhost:32768/test"
        assert [(c.image, c.running) for c in started] == [(DOCKER_IMAGE, True)]
    assert not started[0].running


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
