"""Browser tests: the real service (`ledger serve`), Debian's Chromium driven by Playwright.

Playwright cannot download its own browser here, so it drives the system Chromium through
`executable_path` (`LEDGER_TEST_CHROMIUM`, else `chromium` on PATH). Without a browser or without
Playwright the tests fail under CI (`CI=true`) and are skipped, saying why, elsewhere.

Screenshots land in `LEDGER_TEST_ARTIFACTS` (default `build/test-artifacts/browser`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import ROOT, TOKENS, Server, start_server, stop_server
from tests.browser.proxy import DroppingProxy
from tests.prerequisites import unavailable

# Flags for a closed network: without the background ones Chromium keeps calling home, refused.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# How long a page may take to show what the service already has: generous, the machine is shared.
UI_TIMEOUT_MS = 15_000


def _unavailable(reason: str) -> None:
    unavailable("browser tests", reason)


def chromium_path() -> str:
    explicit = os.environ.get("LEDGER_TEST_CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    _unavailable("no Chromium: install Debian's `chromium` or set LEDGER_TEST_CHROMIUM")
    raise AssertionError("unreachable")


# Module scope, never wider: while Playwright's sync API lives, its event loop counts as running
# in this thread, so an asyncio test after it in the same worker could not start its own. pytest
# tears a module's fixtures down before it runs a test of another module.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
        raise
    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def ui_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(database_url, tmp_path_factory.mktemp("ui-serve"))
    yield running
    stop_server(running)


@pytest.fixture
def api(ui_server: Server) -> Iterator[httpx.Client]:
    with ui_server.client() as http:
        yield http


@pytest.fixture
def proxy(ui_server: Server) -> Iterator[DroppingProxy]:
    port = int(ui_server.base_url.rsplit(":", 1)[1])
    running = DroppingProxy("127.0.0.1", port)
    yield running
    running.close()


@pytest.fixture
def context(browser: Any, ui_server: Server) -> Iterator[Any]:
    """A fresh browser profile (no cookies); every URL it requests is kept in `context.urls`."""
    ctx = browser.new_context(base_url=ui_server.base_url, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(UI_TIMEOUT_MS)
    urls: list[str] = []
    ctx.on("request", lambda request: urls.append(request.url))
    ctx.urls = urls
    yield ctx
    ctx.close()


def sign_in(page: Any, token: str = TOKENS[0]) -> None:
    """Through the form, as a person: open a page, get sent to sign-in, paste, submit."""
    page.goto("/ui/")
    page.wait_for_url("**/ui/sign-in")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url("**/ui/")


def artifacts_dir() -> Path:
    path = Path(os.environ.get("LEDGER_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts" / "browser"))
    path.mkdir(parents=True, exist_ok=True)
    return path
