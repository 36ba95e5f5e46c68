"""The worker-side progress reporter: folds runner events into step progress and uploads it.

Public API: `ProgressReporter` (the object a worker feeds), its transports (`HttpTransport` over
`ledger.client` with its `RetryPolicy`, `DirectTransport`, the `Transport` protocol) and the
simulated run used by the demo and tests. A transport raises the library's errors
(`ledger.errors`: `LedgerError` for a refusal, `LedgerUnavailable` for an outage). Everything else
lives in the submodules.

The reporter is a client of the ledger: it imports only the ledger's shared core (the validation
rules, the errors, the HTTP client, the tracing facade). `DirectTransport` calls the ledger's
stores in process, so it lives on the side that knows both packages (`ledger.reporting.direct`)
and is re-exported here on first use.
"""

from typing import TYPE_CHECKING, Any

from ledger.client import RetryPolicy
from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline, static_node_id
from reporter.progress import NodeProgress
from reporter.reporter import ProgressReporter
from reporter.testing import SimulatedRun
from reporter.transports.http import DEFAULT_RETRY_POLICY, HttpTransport
from reporter.transports.protocol import Transport
from reporter.uploader import Status, interval_for_total_rows
from reporter.wire import LogMode

if TYPE_CHECKING:
    from ledger.reporting.direct import DirectTransport as DirectTransport

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "DirectTransport",
    "HttpTransport",
    "LogMode",
    "NodeProgress",
    "ProgressReporter",
    "RetryPolicy",
    "SimulatedRun",
    "StaticPipeline",
    "Status",
    "StepState",
    "Transport",
    "interval_for_total_rows",
    "static_node_id",
]


def __getattr__(name: str) -> Any:
    if name == "DirectTransport":
        # The one way from the reporter to the ledger's stores, taken only when asked for.
        from ledger.reporting.direct import DirectTransport

        return DirectTransport
    raise AttributeError(f"module 'reporter' has no attribute {name!r}")
