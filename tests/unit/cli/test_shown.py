"""What `ledger` prints of a runner's text: no control character or escape sequence reaches the
terminal, and nothing is read as rich markup; the text itself otherwise shows as written."""

from __future__ import annotations

import io

import pytest
from rich.console import Console, RenderableType

from ledger.cli import render
from ledger.cli.shown import shown

NOW = 1_700_000_000_000


def printed(renderable: RenderableType) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None, force_terminal=False).print(renderable)
    return out.getvalue()


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("retitle\x1b]0;pwned\x07 done", "retitle done"),
        ("clear\x1b[2J\x1b[H done", "clear done"),
        ("colour \x1b[1;31mred\x1b[0m", "colour red"),
        ("bell\x07 backspace\x08 nul\x00 del\x7f", "bell backspace nul del"),
        ("c1 \x9b31m \x85next", "c1 31m next"),
        ("dcs \x1bP+q544e\x1b\\ end", "dcs  end"),
        ("unterminated \x1b]0;title", "unterminated "),
        ("lone escape \x1b", "lone escape "),
        ("two\nlines\tand a tab", "two lines and a tab"),
        ("é 日本 \U0001f600 \u202e", "é 日本 \U0001f600 \u202e"),
    ],
)
def test_control_characters_and_escape_sequences_are_removed(text: str, plain: str) -> None:
    assert shown(text, markup=False) == plain
    assert not any(c in shown(text) for c in "\x1b\x07\x9b\x00\x08")


def test_tab_and_newline_are_kept_where_several_lines_are_shown() -> None:
    assert shown("a\nb\tc\x1b[0m\r", markup=False, multiline=True) == "a\nb\tc"


@pytest.mark.parametrize("name", ["[/bold]n", "[bold red]x", "[link=http://x]y", "a\\[b]", "[/]"])
def test_markup_is_shown_as_written(name: str) -> None:
    assert printed(shown(name)).strip() == name


def test_a_step_named_like_markup_renders_in_ledger_run() -> None:
    # rich used to read the name as a closing tag and raise MarkupError.
    run = {
        "run_id": "r[/bold]",
        "play_name": "[red]p",
        "status": "failed",
        "terminal": {"status": "failed", "error": "[/]boom\x1b[2J"},
        "live_node_progress": {"[/bold]n": {"started_at": NOW, "message": "[/i]m\x07"}},
    }
    text = printed(render.run_detail(run, NOW))
    for expected in ("r[/bold]", "[red]p", "[/]boom", "[/bold]n", "[/i]m"):
        assert expected in text
    assert "\x1b" not in text and "\x07" not in text


def test_runs_and_pool_tables_show_the_data_as_written() -> None:
    runs = [{"run_id": "[/bold]r\x1b]0;t\x07", "status": "[red]x", "last_event_type": "[/]e"}]
    text = printed(render.runs_table(runs, NOW))
    assert "[/bold]r" in text and "[red]x" in text and "[/]e" in text and "\x1b" not in text
    pool = printed(render.pool_view("[/p]", "v\x1b[1m", {}, [{"id": "[/i]", "state": "ready"}], NOW))
    assert "[/p]" in pool and "[/i]" in pool and "\x1b" not in pool
