"""A simulated play run: the runner events a real worker would pipe into the reporter.

`SimulatedRun` describes a small pipeline — a ``code`` step that loads input, a ``dataset`` map over
``rows`` rows (every ``fail_every``-th row fails), a ``tool`` step and a closing ``code`` step — and
yields its runner events in wire format (camelCase): timestamped log lines, the map-start
diagnostic per source page, tool batches, ``map.*``/``tool.call.*`` execution events, a dataset
lifecycle event, an activity observation, and finally the ``result`` with checkpoint mapFrames.

`sheet_rows()` gives the per-row outcomes the data plane would have written, and `expected()` the
counts a reconciled ledger must end with. The demo and the integration tests drive it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "SimulatedRun",
]


@dataclass(frozen=True, kw_only=True)
class SimulatedRun:
    rows: int = 5_000
    fail_every: int = 97
    page_size: int = 1_000
    progress_every: int = 100
    batch_size: int = 25
    namespace: str = "leads"
    physical_suffix: str = "r1"
    tool_id: str = "slack.post"
    start_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    fail_run: bool = False
    keep_result_logs: bool = True  # False: the result carries no logs (memory benchmarks)

    @property
    def table_namespace(self) -> str:
        return f"{self.namespace}_{self.physical_suffix}"

    @property
    def failed_rows(self) -> int:
        return 0 if self.fail_every <= 0 else self.rows // self.fail_every

    @property
    def completed_rows(self) -> int:
        return self.rows - self.failed_rows

    def contract(self) -> dict[str, Any]:
        """The contract snapshot: ``load`` (code), ``enrich`` (dataset), ``notify`` (tool) and
        ``on_error`` (code; a branch this run never takes)."""
        return {
            "staticPipeline": {
                "substeps": [
                    {"type": "code", "id": "load", "field": "input"},
                    {"type": "dataset", "id": "enrich", "field": "leads", "tableNamespace": self.namespace},
                    {"type": "tool", "id": "notify", "toolId": self.tool_id},
                    {"type": "code", "id": "on_error", "field": "alert"},
                ]
            }
        }

    def row_failed(self, index: int) -> bool:
        return self.fail_every > 0 and (index + 1) % self.fail_every == 0

    def _stamp(self, offset_ms: int) -> str:
        seconds, ms = divmod(self.start_ms + offset_ms, 1000)
        return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms:03d}Z"

    def _log(self, offset_ms: int, text: str, source: str = "runner") -> dict[str, Any]:
        return {"type": "log", "line": f"[{self._stamp(offset_ms)}] {text}", "source": source}

    def _map_event(self, kind: str, completed: int, failed: int) -> dict[str, Any]:
        return {
            "type": "execution_event",
            "event": {
                "type": kind,
                "mapNodeId": None,
                "artifactTableNamespace": self.table_namespace,
                "logicalNamespace": self.namespace,
                "totalRows": self.rows,
                "completedRows": completed,
                "failedRows": failed,
            },
        }

    def events(self) -> Iterator[dict[str, Any]]:
        """Every runner event of the run, ending with the ``result`` line."""
        t = 0
        logs: list[str] = []

        def log(text: str, source: str = "runner") -> dict[str, Any]:
            event = self._log(t, text, source)
            if source == "runner" and self.keep_result_logs:
                logs.append(event["line"])
            return event

        yield {"type": "log", "line": "sandbox ready: executing play", "source": "worker"}
        yield log("Loading input rows")
        yield {
            "type": "execution_event",
            "event": {
                "type": "dataset.lifecycle",
                "tableNamespace": self.table_namespace,
                "phase": "created",
            },
        }
        yield log(f"[perf] runtime map setup table={self.table_namespace} rows={self.rows}")
        yield self._map_event("map.started", 0, 0)
        completed = failed = 0
        for page_start in range(0, self.rows, self.page_size):
            page_rows = min(self.page_size, self.rows - page_start)
            yield log(
                f"Starting map over {page_rows} items with concurrency 8 "
                f"(table namespace: {self.table_namespace}; 0 already satisfied; {page_rows} pending)"
            )
            for batch_start in range(page_start, page_start + page_rows, self.batch_size):
                batch = min(self.batch_size, page_start + page_rows - batch_start)
                yield log(f"Executing tool batch enrich:{batch_start // self.batch_size}: {batch} calls")
                for index in range(batch_start, batch_start + batch):
                    t += 2
                    yield {
                        "type": "row_update",
                        "tableNamespace": self.table_namespace,
                        "rowKey": f"row-{index}",
                    }
                    if self.row_failed(index):
                        failed += 1
                    else:
                        completed += 1
                    if (completed + failed) % self.progress_every == 0:
                        yield self._map_event("map.progress", completed, failed)
        yield self._map_event("map.progress", completed, failed)
        yield self._map_event("map.completed", completed, failed)
        yield {
            "type": "execution_event",
            "event": {
                "type": "activity.observed",
                "observation": {"activityId": "notify-1", "observedAt": self.start_ms + t, "state": "sent"},
            },
        }
        yield {"type": "execution_event", "event": {"type": "tool.call.started", "toolId": self.tool_id}}
        yield log(f"Calling {self.tool_id}: {completed:,} rows enriched, {failed:,} failed")
        yield {
            "type": "execution_event",
            "event": {
                "type": "tool.call.settled",
                "toolId": self.tool_id,
                "outcome": "failed" if self.fail_run else "succeeded",
            },
        }
        yield log("Play finished" if not self.fail_run else "Play failed: notify step errored")
        yield {
            "type": "result",
            "status": "failed" if self.fail_run else "completed",
            "logs": list(logs),
            "checkpoint": {
                "mapFrames": {
                    "enrich": {
                        "status": "completed",
                        "mapNodeId": None,
                        "artifactTableNamespace": self.table_namespace,
                        "logicalNamespace": self.namespace,
                        "totalRows": self.rows,
                        "completedRowsCount": completed,
                        "failedRowsCount": failed,
                        "completedRowKeys": [],
                        "pendingRowKeys": [],
                    }
                }
            },
        }

    def sheet_rows(self) -> list[dict[str, str]]:
        """The data plane's per-row outcomes ``{table_namespace, row_key, status}``."""
        return [
            {
                "table_namespace": self.table_namespace,
                "row_key": f"row-{index}",
                "status": "failed" if self.row_failed(index) else "completed",
            }
            for index in range(self.rows)
        ]

    def expected(self) -> dict[str, Any]:
        """The reconciled truth: the map node's counts and the run's terminal status."""
        return {
            "status": "failed" if self.fail_run else "completed",
            "map_node_id": "enrich",
            "completed": self.completed_rows,
            "failed": self.failed_rows,
            "total": self.rows,
        }
