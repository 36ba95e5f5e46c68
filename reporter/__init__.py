"""The worker-side progress reporter: folds runner events into step progress and uploads it.

Public API: `ProgressReporter` (the object a worker feeds), its transports (`HttpTransport` with
its `RetryPolicy`, `DirectTransport`, the `Transport` protocol and its errors) and the simulated
run used by the demo and tests. Everything else lives in the submodules.
"""

from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline, static_node_id
from reporter.progress import NodeProgress
from reporter.reporter import ProgressReporter
from reporter.testing import SimulatedRun
from reporter.transports.direct import DirectTransport
from reporter.transports.http import DEFAULT_RETRY_POLICY, HttpTransport, RetryPolicy
from reporter.transports.protocol import StaleAttemptError, Transport, TransportError, UploadRejected
from reporter.uploader import Status, interval_for_total_rows
from reporter.wire import LogMode

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "DirectTransport",
    "HttpTransport",
    "LogMode",
    "NodeProgress",
    "ProgressReporter",
    "RetryPolicy",
    "SimulatedRun",
    "StaleAttemptError",
    "StaticPipeline",
    "Status",
    "StepState",
    "Transport",
    "TransportError",
    "UploadRejected",
    "interval_for_total_rows",
    "static_node_id",
]
