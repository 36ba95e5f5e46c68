"""Clients that ride out faults: an appender retrying with its Idempotency-Key, and long-poll and
SSE readers that resume from the last seq they saw. Each runs in a thread of its own."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

from ledger.testing import Server

# How long a client keeps retrying through a fault before the test gives up on the service.
GIVE_UP_S = 90.0


class GaveUp(AssertionError):
    pass


def _retryable(answer: httpx.Response) -> bool:
    if answer.status_code == 503:
        assert int(answer.headers["retry-after"]) >= 1, answer.headers
        return True
    return False


def append(
    client: httpx.Client, run_id: str, events: list[dict[str, Any]], key: str
) -> tuple[dict[str, Any], int]:
    """Append until acknowledged, retrying a 503 or a dropped connection with the same key; the
    answer and how many attempts failed first."""
    deadline = time.monotonic() + GIVE_UP_S
    failed = 0
    while True:
        try:
            answer = client.post(
                f"/v1/runs/{run_id}/events", json={"events": events}, headers={"Idempotency-Key": key}
            )
            if answer.status_code == 200:
                body: dict[str, Any] = answer.json()
                return body, failed
            assert _retryable(answer), (key, answer.status_code, answer.text)
        except httpx.TransportError:
            pass
        failed += 1
        if time.monotonic() > deadline:
            raise GaveUp(f"append {key} to {run_id} never acknowledged")
        time.sleep(0.05)


class Reader(threading.Thread):
    """Reads one run's events from the start until its terminal event, resuming after faults."""

    def __init__(self, server: Server, run_id: str) -> None:
        super().__init__(daemon=True, name=f"{type(self).__name__}-{run_id}")
        self.server, self.run_id = server, run_id
        self.events: list[dict[str, Any]] = []
        self.resumed = 0
        self.error: BaseException | None = None

    @property
    def cursor(self) -> int:
        return int(self.events[-1]["seq"]) if self.events else 0

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1]["type"] == "terminal"

    def run(self) -> None:
        try:
            deadline = time.monotonic() + GIVE_UP_S
            with self.server.client(timeout=60) as client:
                while not self.done:
                    if time.monotonic() > deadline:
                        raise GaveUp(f"{self.name} never saw the terminal event")
                    try:
                        self.read(client)
                    except httpx.TransportError:
                        self.resumed += 1
                        time.sleep(0.05)
        except BaseException as exc:
            self.error = exc

    def read(self, client: httpx.Client) -> None:
        raise NotImplementedError

    def result(self, timeout: float = GIVE_UP_S + 30) -> list[dict[str, Any]]:
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} still reading"
        if self.error is not None:
            raise self.error
        return self.events


class LongPollReader(Reader):
    def read(self, client: httpx.Client) -> None:
        answer = client.get(
            f"/v1/runs/{self.run_id}/events", params={"after": self.cursor, "timeout_ms": 5000}
        )
        if _retryable(answer):
            self.resumed += 1
            time.sleep(0.05)
            return
        assert answer.status_code == 200, (answer.status_code, answer.text)
        self.events.extend(answer.json()["events"])


class SseReader(Reader):
    def read(self, client: httpx.Client) -> None:
        headers = {"Last-Event-ID": str(self.cursor)}
        with client.stream("GET", f"/v1/runs/{self.run_id}/events/stream", headers=headers) as stream:
            if stream.status_code != 200:
                stream.read()
                assert _retryable(stream), (stream.status_code, stream.text)
                self.resumed += 1
                time.sleep(0.05)
                return
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    self.events.append(json.loads(line.removeprefix("data:").strip()))
        if not self.done:
            # The stream ended early (the service lost the database mid-stream): resume.
            self.resumed += 1
