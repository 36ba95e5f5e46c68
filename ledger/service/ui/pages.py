"""Rendering the dashboard's pages: HTML templates shipped in the package, filled with escaped text.

Templates use `string.Template` placeholders; every value is HTML-escaped (quotes included, so it
is safe inside attributes too) before it is put in. Pages carry no data beyond what names them
(a run id); the tables are filled by the page's script from the JSON API, as text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from string import Template

from fastapi.responses import HTMLResponse

from ledger.service.ui.session import PAGE_HEADERS

__all__ = [
    "nav",
    "page",
    "render",
]

_PACKAGE = "ledger.service.ui"


@cache
def _template(name: str) -> Template:
    return Template(files(_PACKAGE).joinpath("templates", name).read_text(encoding="utf-8"))


def render(name: str, markup: Mapping[str, str] | None = None, **values: str) -> str:
    """Template `name` with every value escaped; `markup` holds pieces already rendered (by this
    function), put in as they are."""
    escaped = {key: html.escape(value, quote=True) for key, value in values.items()}
    return _template(name).substitute({**escaped, **(markup or {})})


def page(
    body: str,
    *,
    title: str,
    script: str | None = None,
    nav: str = "",
    attrs: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """A whole page: the layout around `body` (already rendered), with the page's script file and
    `data-*` attributes on <body> for the script to read."""
    data = "".join(f' data-{key}="{html.escape(value, quote=True)}"' for key, value in (attrs or {}).items())
    scripts = "" if script is None else f'<script src="/ui/static/{html.escape(script)}" defer></script>'
    layout = _template("layout.html").substitute(
        title=html.escape(title),
        data=data,
        nav=nav,
        scripts=scripts,
        body=body,
    )
    return HTMLResponse(layout, status_code=status_code, headers=PAGE_HEADERS)


def nav(active: str) -> str:
    """The header's links and the sign-out button (a form: signing out is a POST)."""
    links = [("runs", "/ui/", "Runs"), ("pool", "/ui/pool", "Warm pool")]
    items = "".join(
        f'<a href="{href}"' + (' aria-current="page"' if key == active else "") + f">{label}</a>"
        for key, href, label in links
    )
    # Our own fixed markup, not data: substituted as it is.
    return _template("nav.html").substitute(links=items)
