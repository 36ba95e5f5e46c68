"""A Python client for the ledger's HTTP API: `LedgerClient` (blocking) and `AsyncLedgerClient`.

```python
from ledger.client import LedgerClient

with LedgerClient("http://127.0.0.1:8787", token) as ledger:  # or LedgerClient.from_env()
    ledger.open_run("run-1", play_name="enrich")
    ledger.append_events("run-1", [{"type": "log", "line": "starting"}])
    page = ledger.list_events("run-1", after=-1, timeout_ms=5000)  # long-poll
    for event in ledger.tail("run-1"):  # SSE until the terminal event, resuming after drops
        print(event["seq"], event["type"])
```

`AsyncLedgerClient` has the same methods, awaited (`tail` and `iter_events` are async iterators).

This module is the whole public surface; the parts live in private modules, one job each:

- `_operations`: **one description per operation.** Each operation is a function of its
  arguments returning a `Call` (method, path, query, body, how to read the answer); both clients
  inherit them, so the faces cannot drift apart on what they send.
- `_errors`: **errors are the library's.** The one reader of the service's `{"error": ...}`
  answers, mapping each status to a class of `ledger.errors` (400/422 `InvalidInput`, 401/403
  `Unauthorized`, 404 `NotFound`, 409 `StaleAttempt`/`RunTerminal`/`Conflict`, 410
  `CursorExpired`, 413 `PayloadTooLarge`; 408/429/502/503/504 and a connection that fails
  `LedgerUnavailable` with the `Retry-After` seconds). The reporter's HTTP transport
  (`reporter.transports.http`) adapts this client, so the worker side reads the same errors.
- `_policy`: **retries are safe.** `LedgerUnavailable` is retried (`RetryPolicy`: backoff with
  jitter, a `Retry-After` is the minimum wait, attempts and total time capped; `RetryPolicy.until(s)`
  caps only the time, and its `on_first_failure` hears of a call's first failure at once, which the
  `ledger` commands print as one line before they keep trying until `--deadline`). Reads are
  idempotent, and every write carries an `Idempotency-Key` (the caller's, else one made per call
  and kept across its retries; a status upload's is `<producer_attempt>:<upload_seq>:<key_scope>`),
  so a retried write whose first answer was lost is answered from the service's store instead of
  being applied twice. The one write without a key (minting a token) is sent again only when the
  service surely did not handle it. A caller with a deadline of its own passes it down (the
  client's `deadline(seconds)` block): every call in it is tried until then, however many tries
  that is, and never past it; nobody retries around the policy. What a retry means for an answer
  is a typed field, not a key added to the service's JSON (`deliver_status` answers a
  `StatusDelivery`, `redelivered` when the upload was sent more than once).
- `_sse`: **the tail resumes.** `tail` reconnects after a dropped stream with `Last-Event-ID`, so
  nothing is lost or repeated, until `max_reconnects` failures in a row (or a deadline).
- `_transport`: the request each call becomes, and what both faces share.
- `_async_client` is the one hand-written face; `_sync_client` is generated from it by
  `tools/async_to_sync.py` and checked in CI, so the blocking face only drops the awaiting.
"""

from __future__ import annotations

from ledger.client._async_client import AsyncLedgerClient
from ledger.client._operations import DEFAULT_URL, URL_VAR, StatusDelivery, segment, service_url
from ledger.client._policy import RetryPolicy
from ledger.client._sync_client import LedgerClient

__all__ = [
    "DEFAULT_URL",
    "URL_VAR",
    "AsyncLedgerClient",
    "LedgerClient",
    "RetryPolicy",
    "StatusDelivery",
    "segment",
    "service_url",
]

# The public names are this module's, wherever they are written (as httpx does): what `help`,
# tracebacks and pickles show does not depend on the private layout.
for _name in ("AsyncLedgerClient", "LedgerClient", "RetryPolicy", "StatusDelivery", "segment", "service_url"):
    globals()[_name].__module__ = __name__
del _name
