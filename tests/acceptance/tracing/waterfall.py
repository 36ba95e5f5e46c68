"""Draw the trace of a `ledger demo` run as a waterfall (SVG), from the spans it exports.

    python -m tests.acceptance.tracing.waterfall docs/tracing-demo.svg

It runs `ledger demo --exit` with the OTEL_* variables pointing at a small OTLP/HTTP receiver
(`otlp_receiver`), picks the trace of the demo's run, and draws each span as a bar on a shared time
axis, indented under its parent: what a collector's UI (Jaeger, Tempo) would show, without one.
Purple: the worker's side and our own spans; grey: the HTTP call; green: the service's request.
Statements are folded into their request's row (a count and their total time), so the picture stays
readable for a run of a few hundred uploads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from html import escape
from pathlib import Path

from tests.acceptance.tracing.otlp_receiver import Span, receiving

ROW_PX = 18
LABEL_PX = 430
BAR_PX = 620
MAX_ROWS = 60


def _rows(spans: list[Span]) -> list[tuple[int, Span, int]]:
    """(depth, span, statements folded into it) in start order under each parent."""
    children: dict[str, list[Span]] = {}
    for span in spans:
        children.setdefault(span.parent_id, []).append(span)
    ids = {span.span_id for span in spans}
    roots = [span for span in spans if span.parent_id not in ids]
    rows: list[tuple[int, Span, int]] = []

    def walk(span: Span, depth: int) -> None:
        below = sorted(children.get(span.span_id, []), key=lambda s: s.start_ns)
        statements = [s for s in below if any(key.startswith("db.") for key in s.attributes)]
        rows.append((depth, span, len(statements)))
        for child in below:
            if child not in statements:
                walk(child, depth + 1)

    for root in sorted(roots, key=lambda s: s.start_ns):
        walk(root, 0)
    return rows


def _colour(span: Span) -> str:
    if "/" in span.name:
        return "#2e8b57"  # the service's request
    if span.name.isupper():
        return "#999999"  # the HTTP client's call (named by its method)
    return "#6a5acd"  # ours: the worker's run, its uploads, the service's waits


def draw(spans: list[Span]) -> str:
    rows = _rows(spans)
    shown = rows[:MAX_ROWS]
    start = min(span.start_ns for span in spans)
    total = max(span.end_ns for span in spans) - start or 1
    height = ROW_PX * (len(shown) + 2)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_PX + BAR_PX + 20}" height="{height}" '
        'font-family="monospace" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="4" y="13">trace {spans[0].trace_id} — {total / 1e6:,.0f} ms, {len(spans)} spans</text>',
    ]
    for index, (depth, span, statements) in enumerate(shown, start=1):
        y = ROW_PX * index + 4
        label = span.name + (f"  (+{statements} statements)" if statements else "")
        x = LABEL_PX + BAR_PX * (span.start_ns - start) / total
        width = max(1.0, BAR_PX * (span.end_ns - span.start_ns) / total)
        out.append(f'<text x="{4 + 14 * depth}" y="{y + 11}">{escape(label[:60])}</text>')
        out.append(
            f'<text x="{LABEL_PX - 6}" y="{y + 11}" text-anchor="end" fill="#555">'
            f"{(span.end_ns - span.start_ns) / 1e6:.1f} ms</text>"
        )
        out.append(
            f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW_PX - 6}" fill="{_colour(span)}"/>'
        )
    if len(rows) > len(shown):
        out.append(f'<text x="4" y="{height - 4}">… {len(rows) - len(shown)} more rows</text>')
    out.append("</svg>")
    return "\n".join(out)


def demo_trace(options: list[str], data_dir: Path) -> list[Span]:
    """The spans of the trace of one `ledger demo --exit` run (its data in `data_dir`)."""
    with receiving() as receiver:
        env = {
            **os.environ,
            "LEDGER_DATA_DIR": str(data_dir),
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        demo = [sys.executable, "-m", "ledger.cli", "demo", "--exit", *options]
        subprocess.run(demo, env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
        spans = receiver.all()
    run = next(span for span in spans if span.name == "ledger demo run")
    return [span for span in spans if span.trace_id == run.trace_id]


def main(target: Path) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        spans = demo_trace(["--rows", "1000"], Path(data_dir))
    target.write_text(draw(spans), encoding="utf-8")
    print(f"{target}: {len(spans)} spans of trace {spans[0].trace_id}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
