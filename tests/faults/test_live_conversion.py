"""A live upgrade through the service: a database filled by the release before partitioning (0010),
upgraded by `ledger serve` as it starts, then converted by `ledger db convert` while clients
append to its running runs at a low event cap (so every run is trimmed while it is copied) and
read their events.

What the clients were told must be what the log holds afterwards: every acknowledged append at its
seq, once, in order, the newest `CAP` events of each run kept; every answer they got was a 2xx or a
503 with `Retry-After` (reads of events during the copy); no page ever starts below its
`first_seq` or misses an event; a cursor below the trim watermark is 410, as documented."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from ledger import migrate
from ledger.client import LedgerClient, RetryPolicy
from ledger.errors import CursorExpired, LedgerUnavailable
from ledger.runlog import conversion
from tests.faults.conftest import serving
from tests.faults.invariants import assert_consistent
from tests.own_postgres import OwnPostgres

RUNNING = 6
FILLED_EVENTS = 40
# Other runs, for the copy to take a few batches.
BULK = 100
BULK_EVENTS = 20
CAP = 50
BATCH = 100
# Appends each writer makes after the copy ended, so the service is seen taking them either side.
AFTER_COPY = 5
GIVE_UP_S = 120.0

pytestmark = pytest.mark.own_postgres


class Answers(httpx.HTTPTransport):
    """Every answer the service gave: method, path, status, whether it had `Retry-After`."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, int, bool]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.seen.append(
            (request.method, request.url.path, response.status_code, "retry-after" in response.headers)
        )
        return response


@pytest.fixture
def previous_release_url(own_pg: OwnPostgres) -> Iterator[str]:
    """A database at 0010 with RUNNING runs of FILLED_EVENTS events and BULK of BULK_EVENTS, as the
    release before partitioning left it."""
    with psycopg.connect(own_pg.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE ledger_previous")
    url = own_pg.handle.url("ledger_previous")
    migrate.upgrade(url, "0010")
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO ledger.runs (run_id, created_at, updated_at, last_seq)"
            " SELECT 'live-' || i, now() - make_interval(days => i), now(), %(n)s"
            " FROM generate_series(0, %(runs)s - 1) i",
            {"runs": RUNNING, "n": FILLED_EVENTS},
        )
        conn.execute(
            "INSERT INTO ledger.runs (run_id, created_at, updated_at, last_seq)"
            " SELECT 'bulk-' || i, now() - make_interval(hours => i), now(), %(n)s"
            " FROM generate_series(0, %(runs)s - 1) i",
            {"runs": BULK, "n": BULK_EVENTS},
        )
        conn.execute(
            "INSERT INTO ledger.run_events (run_id, seq, type, payload)"
            " SELECT r.run_id, s, 'log', jsonb_build_object('line', 'filled ' || s)"
            " FROM ledger.runs r CROSS JOIN generate_series(1, r.last_seq) s"
        )
    yield url


class Writer(threading.Thread):
    """Appends one log line at a time to its run, each with an Idempotency-Key, retrying 503s as
    the client does; remembers the seq each acknowledged line was given."""

    def __init__(self, client: LedgerClient, run_id: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client, self.run_id, self.stop = client, run_id, stop
        self.acknowledged: dict[int, str] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stop.is_set():
                n += 1
                line = f"{self.run_id} appended {n}"
                (event,) = self.client.append_events(
                    self.run_id, [{"type": "log", "line": line}], idempotency_key=f"{self.run_id}-{n}"
                )
                self.acknowledged[event["seq"]] = line
        except BaseException as exc:
            self.error = exc


class Reader(threading.Thread):
    """Follows its run from the start: each page it gets must continue its cursor without a gap;
    a 503 (the copy running) is waited out as `Retry-After` says."""

    def __init__(self, client: LedgerClient, run_id: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client, self.run_id, self.stop = client, run_id, stop
        self.seen: dict[int, str] = {}
        self.unavailable = 0
        self.problems: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        cursor = -1
        try:
            while not self.stop.is_set():
                try:
                    page = self.client.list_events(self.run_id, cursor, limit=20)
                except LedgerUnavailable as exc:
                    self.unavailable += 1
                    time.sleep(min(exc.retry_after or 0.2, 0.2))
                    continue
                except CursorExpired:
                    # Trimmed past us while we were away: start again from the oldest kept.
                    cursor = -1
                    continue
                events = page["events"]
                # Retention keeps a run's newest CAP events: a log read whole says so.
                if page["first_seq"] != max(1, page["latest_seq"] - CAP + 1):
                    self.problems.append(f"first_seq {page['first_seq']} of {page['latest_seq']} events")
                if cursor == -1 and events and events[0]["seq"] != page["first_seq"]:
                    self.problems.append(f"from the start: first_seq {page['first_seq']}, first {events[0]}")
                expected = page["first_seq"] if cursor == -1 else cursor + 1
                seqs = [event["seq"] for event in events]
                if seqs and seqs != list(range(expected, expected + len(seqs))):
                    self.problems.append(f"after {cursor}: seqs {seqs}, expected from {expected}")
                for event in events:
                    self.seen[event["seq"]] = line(event)
                if seqs:
                    cursor = seqs[-1]
        except BaseException as exc:
            self.error = exc


def line(event: Mapping[str, Any]) -> str:
    return str(event["line"])


def ledger_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", *args],
        env={**os.environ, "LEDGER_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=GIVE_UP_S,
    )


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + GIVE_UP_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_live_upgrade_and_conversion_through_the_service_loses_no_event(
    previous_release_url: str, tmp_path: Path
) -> None:
    url = previous_release_url
    runs = [f"live-{i}" for i in range(RUNNING)]
    answers = Answers()
    stop = threading.Event()
    started = time.monotonic()
    with (
        contextlib.ExitStack() as closing,
        serving(url, tmp_path / "serve", LEDGER_MAX_EVENTS_PER_RUN=str(CAP)) as server,
    ):
        # `ledger serve` upgraded the database as it started; the copy is still to be made.
        assert conversion.pending(url)
        assert "reads of events answer 503" in server.log()
        client = LedgerClient(server.url, server.token, transport=answers, retry=RetryPolicy.until(GIVE_UP_S))
        reading = LedgerClient(server.url, server.token, transport=answers, retry=RetryPolicy(max_attempts=1))
        closing.callback(client.close)
        closing.callback(reading.close)
        writers = [Writer(client, run_id, stop) for run_id in runs]
        done_reading = threading.Event()
        readers = [Reader(reading, run_id, done_reading) for run_id in runs]
        for thread in (*writers, *readers):
            thread.start()
        # Every run is past its cap before the copy reaches it: trims happen in both tables.
        wait_until(lambda: all(len(w.acknowledged) > CAP - FILLED_EVENTS for w in writers), "appends")
        copy_started = time.monotonic()
        converted = ledger_cli(url, "db", "convert", "--batch", str(BATCH))
        copy_s = time.monotonic() - copy_started
        assert converted.returncode == 0, converted.stderr
        assert not conversion.pending(url)
        counts = {w.run_id: len(w.acknowledged) for w in writers}
        wait_until(
            lambda: all(len(w.acknowledged) >= counts[w.run_id] + AFTER_COPY for w in writers),
            "appends after the copy",
        )
        stop.set()
        for writer in writers:
            writer.join(GIVE_UP_S)
        pairs = list(zip(readers, writers, strict=True))
        wait_until(lambda: all(max(r.seen, default=0) >= max(w.acknowledged) for r, w in pairs), "readers")
        done_reading.set()
        for reader in readers:
            reader.join(GIVE_UP_S)
        assert [w.error for w in writers] == [None] * RUNNING
        assert [r.error for r in readers] == [None] * RUNNING
        assert [p for r in readers for p in r.problems] == []

        for writer, reader in zip(writers, readers, strict=True):
            run_id = writer.run_id
            page = client.list_events(run_id, -1, limit=1000)
            last = FILLED_EVENTS + len(writer.acknowledged)
            # Each acknowledged line at its seq, once, in order; the newest CAP kept, gapless.
            assert sorted(writer.acknowledged) == list(range(FILLED_EVENTS + 1, last + 1))
            told = {seq: f"filled {seq}" for seq in range(1, FILLED_EVENTS + 1)} | writer.acknowledged
            assert page["latest_seq"] == last
            assert page["first_seq"] == last - CAP + 1 == page["events"][0]["seq"]
            assert {event["seq"]: line(event) for event in page["events"]} == {
                seq: line for seq, line in told.items() if seq > last - CAP
            }
            # What the reader was shown agrees with the log at every seq it saw.
            assert {seq: line for seq, line in reader.seen.items()} == {seq: told[seq] for seq in reader.seen}
            # A cursor below the watermark is 410 (the events were trimmed), at the watermark not.
            with pytest.raises(CursorExpired):
                client.list_events(run_id, page["first_seq"] - 2)
            at_watermark = client.list_events(run_id, page["first_seq"] - 1, limit=1)
            assert at_watermark["events"][0]["seq"] == page["first_seq"]

    # A 410 is a cursor below the watermark: the probes above, and a reader that fell behind the cap.
    expired = [a for a in answers.seen if a[2] == 410]
    assert all(method == "GET" and path.endswith("/events") for method, path, _, _ in expired)
    assert len(expired) >= RUNNING
    wrong = [a for a in answers.seen if not (200 <= a[2] < 300 or (a[2] == 503 and a[3]) or a[2] == 410)]
    assert wrong == []
    unavailable = [a for a in answers.seen if a[2] == 503]
    # Reads of events were refused while the copy was to be made.
    assert any(method == "GET" and path.endswith("/events") for method, path, _, _ in unavailable)
    print(
        f"appends {sum(len(w.acknowledged) for w in writers)}, copy {copy_s:.2f} s,"
        f" 503s {len(unavailable)}, all in {time.monotonic() - started:.1f} s"
    )
    assert_consistent(url)
