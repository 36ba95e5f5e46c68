"""What the ledger stores: input-validation primitives shared by the ledger and the reporter.

Pure and dependency-free (it imports only `ledger.errors`), so the worker-side reporter can
check an upload against exactly the rules the service will apply, and drop what would be refused
instead of having the whole upload refused.

Each check returns the value it accepted (normalised where said) or raises
`InvalidInput(field, problem)`. The bounds are the database's: text columns refuse NUL and text
that is not valid UTF-8 (a lone surrogate), integer columns are int4 or int8, jsonb refuses
NaN/Infinity, NUL and lone surrogates, and times must convert to a `datetime` (year 1 to 9999), so
anything accepted here can be written without Postgres or `ledger.clock.from_ms` failing on it.

Two kinds of value are treated differently:

* **Free text** (log lines, messages, error texts) is *repaired*, never refused: NUL and lone
  surrogates become U+FFFD (`repair_text`). A runner's log is whatever its tools printed; one bad
  byte must not cost the run its log.
* **Structure** (ids, counts, times, JSON payloads) is refused when out of bounds: a wrong value
  there is a bug of the producer, and guessing would store a lie.

JSON nests at most `MAX_JSON_DEPTH` levels in a request and `MAX_VALUE_DEPTH` in one stored value,
so a value that passes here still fits any request that carries it. `bool` is never an integer or
a number here, although Python says it is one.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

# The errors the checks raise; `LedgerError` stays importable from here, where it used to live.
from ledger.errors import InvalidInput, LedgerError

# How a run may end: the ledger's terminal statuses (a run token's final upload names one too).
TERMINAL_STATUSES: Final = ("completed", "failed", "cancelled")
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
# The last millisecond `datetime` can hold (9999-12-31T23:59:59.999Z): from_ms of anything up to
# here never overflows. A number, not a conversion: times convert in `ledger.clock` alone, which
# this dependency-free module does not import (a test checks the two agree).
MAX_EPOCH_MS: Final = 253_402_300_799_999
# A request body nests at most this deep (an object or list is one level); deeper is refused whole.
MAX_JSON_DEPTH: Final = 64
# One stored JSON value: the deepest request wrapping (body, list or map, item, field) adds four.
MAX_VALUE_DEPTH: Final = MAX_JSON_DEPTH - 4
# A value the ledger stores one level inside another: a lifecycle event (`{"event": ...}`), an
# activity observation (`{"observation": ...}`) or one value of a node's I/O object. Checking it
# against this, not `MAX_VALUE_DEPTH`, is what makes a value at the bound fit once wrapped.
MAX_WRAPPED_VALUE_DEPTH: Final = MAX_VALUE_DEPTH - 1
MAX_RUN_ID_LENGTH: Final = 512
REPLACEMENT_CHARACTER: Final = "\ufffd"
# Any surrogate code point in a Python str is unpaired: JSON's escaped pairs decode to one character.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (Python counts `True` as the int 1; JSON does not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or float that is not a bool (finite or not: `number` is the check that refuses NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def items(field: str, value: object, what: str) -> list[Any]:
    """A JSON array (a list or tuple; a string is not one): `what` names its items in the error."""
    if not isinstance(value, list | tuple):
        raise InvalidInput(field, f"must be a list of {what}, got {_kind(value)}")
    return list(value)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def text(
    field: str,
    value: object,
    *,
    optional: bool = False,
    non_empty: bool = False,
    max_len: int | None = None,
) -> str | None:
    """A string without NUL that encodes as UTF-8; None only when `optional`.

    `non_empty` refuses blank strings (whitespace only); `max_len` counts characters.
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        expected = "a string or null" if optional else "a string"
        raise InvalidInput(field, f"must be {expected}, got {_kind(value)}")
    if non_empty and not value.strip():
        raise InvalidInput(field, "must not be empty")
    if max_len is not None and len(value) > max_len:
        raise InvalidInput(field, f"must be at most {max_len} characters")
    if "\x00" in value:
        raise InvalidInput(field, "must not contain NUL characters")
    if not _encodable(value):
        raise InvalidInput(field, "must be valid Unicode (it holds a lone surrogate)")
    return value


def required_text(field: str, value: object, *, non_empty: bool = False, max_len: int | None = None) -> str:
    """`text` for a value that may not be null (typed as `str`)."""
    checked = text(field, value, non_empty=non_empty, max_len=max_len)
    assert checked is not None
    return checked


def repair_text(value: str) -> str:
    """`value` with every NUL and lone surrogate replaced by U+FFFD (storable as Postgres text)."""
    if value.isascii() and "\x00" not in value:  # the usual line, answered without the regex
        return value
    return _UNSTORABLE.sub(REPLACEMENT_CHARACTER, value)


def free_text(field: str, value: object, *, optional: bool = False) -> str | None:
    """Free text (a log line, a message, an error): must be a string; unstorable characters are
    repaired (`repair_text`), never refused."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        expected = "a string or null" if optional else "a string"
        raise InvalidInput(field, f"must be {expected}, got {_kind(value)}")
    return repair_text(value)


def free_text_list(field: str, value: object) -> list[str]:
    """A list of free-text lines (items named `field[i]`, each repaired); None is `[]`."""
    if value is None:
        return []
    return [
        _required(free_text(f"{field}[{index}]", item))
        for index, item in enumerate(items(field, value, "strings"))
    ]


def _required(value: str | None) -> str:
    assert value is not None
    return value


def run_id(field: str, value: object) -> str:
    """A run id: a non-blank string of at most 512 characters, no `/` (it could never be addressed
    in a URL path again) and no control characters."""
    checked = required_text(field, value, non_empty=True, max_len=MAX_RUN_ID_LENGTH)
    if "/" in checked:
        raise InvalidInput(field, "must not contain '/'")
    if _CONTROL.search(checked):
        raise InvalidInput(field, "must not contain control characters")
    return checked


# Path segments a URL client removes (RFC 3986 dot segments): a run so named could not be addressed.
DOT_SEGMENTS: Final = (".", "..")


def new_run_id(field: str, value: object) -> str:
    """The id of a run being created: a `run_id`, and not ``.`` or ``..``, which every HTTP client
    removes from a URL path (``/v1/runs/..`` is ``/v1/``): a run so named could be created but
    never read, reported to or ended through the API. A run already stored under one stays
    readable (`run_id` takes it)."""
    checked = run_id(field, value)
    if checked in DOT_SEGMENTS:
        raise InvalidInput(field, "must not be '.' or '..' (a URL path cannot address it)")
    return checked


def cursor(field: str, value: object) -> int | None:
    """A read cursor: a sequence number (ASCII digits), `-1` (from the oldest retained event) or
    `now` (None: only what comes next). `int()`'s leniency (`1_0`, `+1`, non-ASCII digits, spaces)
    is refused: a cursor is copied from an earlier answer, never typed by hand."""
    problem = "must be a sequence number (ASCII digits), -1 or 'now'"
    if isinstance(value, str):
        if value == "now":
            return None
        if value == "-1":
            return -1
        if not (value.isascii() and value.isdigit()) or len(value) > 19:
            raise InvalidInput(field, problem)
        value = int(value)
    if not is_int(value) or not -1 <= value <= INT64_MAX:
        raise InvalidInput(field, problem)
    return value


def string_list(field: str, value: object, *, none_is_empty: bool = False) -> list[str]:
    """A list of `text` strings (items named `field[i]`); None is `[]` only when `none_is_empty`."""
    if value is None and none_is_empty:
        return []
    return [
        required_text(f"{field}[{index}]", item) for index, item in enumerate(items(field, value, "strings"))
    ]


def integer(
    field: str,
    value: object,
    *,
    minimum: int = 0,
    maximum: int | None = INT64_MAX,
    optional: bool = False,
    integral_float: bool = False,
) -> int | None:
    """An int in `[minimum, maximum]` (by default one a bigint column holds; `maximum=None` for a
    value only ever stored inside jsonb, which has no such limit); None only when `optional`. With
    `integral_float`, a float with no fraction (3.0, as JavaScript sends) is accepted as the int it
    equals."""
    if value is None and optional:
        return None
    if integral_float and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value):
        expected = "an integer or null" if optional else "an integer"
        raise InvalidInput(field, f"must be {expected}, got {_kind(value)}")
    # The value is not echoed: str() of a huge int is slow, and past 4300 digits it raises.
    if value < minimum:
        raise InvalidInput(field, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidInput(field, f"must be <= {maximum}")
    return value


def required_integer(
    field: str,
    value: object,
    *,
    minimum: int = 0,
    maximum: int | None = INT64_MAX,
    integral_float: bool = False,
) -> int:
    """`integer` for a value that may not be null (typed as `int`)."""
    checked = integer(field, value, minimum=minimum, maximum=maximum, integral_float=integral_float)
    assert checked is not None
    return checked


def number(field: str, value: object, *, minimum: float | None = None) -> float | int:
    """A finite int or float (not bool), at least `minimum` when given."""
    if not is_number(value):
        raise InvalidInput(field, f"must be a number, got {_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(field, "must be finite")
    if minimum is not None and value < minimum:
        raise InvalidInput(field, "must not be negative" if minimum == 0 else f"must be >= {minimum}")
    return value


def epoch_ms(field: str, value: object, *, optional: bool = False) -> int | None:
    """Epoch milliseconds: a non-negative finite number up to year 9999, truncated to an int.

    Anything accepted converts with `ledger.clock.from_ms` and fits a timestamptz column.
    """
    if value is None and optional:
        return None
    if not is_number(value) or (isinstance(value, float) and not math.isfinite(value)) or value < 0:
        expected = " or null" if optional else ""
        raise InvalidInput(field, f"must be epoch milliseconds (a non-negative number){expected}")
    if value > MAX_EPOCH_MS:
        raise InvalidInput(field, f"is out of range (epoch milliseconds up to {MAX_EPOCH_MS}, year 9999)")
    return int(value)


def invocation_seq(invocation_id: object) -> int | None:
    """The number a docflow invocation id ends with: the ASCII digits after its last `:` (runners
    number an invocation's runs that way), else None.

    ASCII only: `str.isdigit()` also says yes to '²', which `int()` refuses. More digits than a
    bigint has give `INT64_MAX + 1`, which no column holds, instead of being converted: `int()` of
    a long enough string raises.
    """
    if not isinstance(invocation_id, str):
        return None
    tail = invocation_id.rpartition(":")[2]
    if not (tail.isascii() and tail.isdigit()):
        return None
    return int(tail) if len(tail) <= len(str(INT64_MAX)) else INT64_MAX + 1


def json_value(field: str, value: object, *, max_depth: int = MAX_VALUE_DEPTH) -> Any:
    """Any value storable as jsonb: JSON-serialisable, no NaN/Infinity, no NUL, no lone surrogate,
    nesting at most `max_depth` levels."""
    # First, and without recursion: serialising a deeply nested value would exhaust the stack.
    if json_depth(value) > max_depth:
        raise InvalidInput(field, f"nests deeper than {max_depth} levels")
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
        encoded.encode()
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise InvalidInput(field, f"is not valid JSON ({exc})") from None
    # A NUL is always escaped as \u0000; the walk tells it apart from a literal backslash-u0000.
    if "\\u0000" in encoded and _holds_nul(value):
        raise InvalidInput(field, "must not contain NUL characters")
    return value


# -- the reporter's upload: the parts both sides check field by field -----------------------------

LIVE_LOG_TAIL_LIMIT: Final = 1_000
# An upload's `pipeline_steps`: a contract's step list is read by people, a few dozen steps at most.
MAX_PIPELINE_STEPS: Final = 1_000

# -- upload size: what keeps every upload under the service's body limit ----------------------------

# The service's default request body limit (`LEDGER_MAX_BODY_BYTES`); a service advertises its own
# in `GET /v1/limits` and in the body of a 413 answer (`max_body_bytes`).
MAX_BODY_BYTES: Final = 1024 * 1024
# Under the default body limit: one log line (UTF-8 bytes), the live tail (UTF-8 bytes of its
# lines: a full tail may take two uploads, which the reporter splits it into) and one structured
# value of an upload (encoded JSON bytes). `UploadBounds` scales them down for a smaller limit, so
# that a line and a value always fit an upload of their own.
MAX_LOG_LINE_BYTES: Final = 64 * 1024
LIVE_LOG_TAIL_BYTES: Final = 2 * 1024 * 1024
MAX_UPLOAD_VALUE_BYTES: Final = 256 * 1024
# What replaces the middle of an over-long line: how many UTF-8 bytes were cut.
TRUNCATION_MARKER: Final = "[…{cut} bytes cut…]"


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadBounds:
    """The bounds an upload is kept under for a service whose body limit is `max_body_bytes`."""

    max_body_bytes: int = MAX_BODY_BYTES
    log_line_bytes: int = MAX_LOG_LINE_BYTES
    log_tail_bytes: int = LIVE_LOG_TAIL_BYTES
    value_bytes: int = MAX_UPLOAD_VALUE_BYTES

    @classmethod
    def for_body_limit(cls, max_body_bytes: int) -> UploadBounds:
        """The default bounds, each no larger than its share of `max_body_bytes` (a line a
        sixteenth, a value a quarter: what leaves room for the rest; the tail two bodies)."""
        limit = max(1, max_body_bytes)
        return cls(
            max_body_bytes=limit,
            log_line_bytes=max(_MIN_LINE_BYTES, min(MAX_LOG_LINE_BYTES, limit // 16)),
            log_tail_bytes=min(LIVE_LOG_TAIL_BYTES, 2 * limit),
            value_bytes=min(MAX_UPLOAD_VALUE_BYTES, limit // 4),
        )


DEFAULT_UPLOAD_BOUNDS: Final = UploadBounds()
# Room for the marker with a few bytes of the line on either side.
_MIN_LINE_BYTES: Final = 64


def encode_body(value: object) -> bytes:
    """`value` as a request body: compact JSON, UTF-8, non-ASCII unescaped. The reporter measures
    an upload with this and sends exactly these bytes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def utf8_length(value: str) -> int:
    """How many bytes storable text (`repair_text`) takes in UTF-8."""
    return len(value) if value.isascii() else len(value.encode())


def truncate_line(line: str, max_bytes: int = MAX_LOG_LINE_BYTES) -> str:
    """`line` if it takes at most `max_bytes` UTF-8 bytes; else its beginning and its end with
    `TRUNCATION_MARKER` (the bytes cut) between them, at most `max_bytes` in all and cut on
    character boundaries. `line` must be storable text (`repair_text` first)."""
    if len(line) * 4 <= max_bytes:  # no character takes more than four bytes
        return line
    encoded = line.encode()
    if len(encoded) <= max_bytes:
        return line
    # The marker for the whole line is at least as long as the one for the bytes finally cut.
    room = max(0, max_bytes - len(TRUNCATION_MARKER.format(cut=len(encoded)).encode()))
    head = encoded[: room - room // 2].decode(errors="ignore")
    tail = encoded[len(encoded) - room // 2 :].decode(errors="ignore")
    cut = len(encoded) - len(head.encode()) - len(tail.encode())
    return f"{head}{TRUNCATION_MARKER.format(cut=cut)}{tail}"


def upload_value(field: str, value: object, max_bytes: int = MAX_UPLOAD_VALUE_BYTES) -> Any:
    """A structured value an upload carries (a node's I/O value, a lifecycle event, an activity
    observation), already checked for what it is: refused when its encoding (`encode_body`) takes
    more than `max_bytes`, which leaves room in the upload for everything else."""
    size = len(encode_body(value))
    if size > max_bytes:
        raise InvalidInput(field, f"takes {size} bytes, more than the {max_bytes} one value of an upload may")
    return value


def log_line(line: str, max_bytes: int = MAX_LOG_LINE_BYTES) -> str:
    """A log line as the ledger stores it: repaired (`repair_text`), then truncated to `max_bytes`
    UTF-8 bytes (`truncate_line`)."""
    return truncate_line(repair_text(line), max_bytes)


def log_line_list(field: str, value: object) -> list[str]:
    """`free_text_list` of log lines, each bounded as `log_line` does."""
    return [truncate_line(line) for line in free_text_list(field, value)]


def bounded_text(field: str, value: object, *, optional: bool = False) -> str | None:
    """Free text the ledger stores as one piece of a run's story (a log line, an error, a step's
    message), the same on every route: repaired (`free_text`), then cut to `MAX_LOG_LINE_BYTES`
    with the marker (`truncate_line`). Never refused for its content or its length."""
    checked = free_text(field, value, optional=optional)
    return None if checked is None else truncate_line(checked)


NODE_COUNT_FIELDS: Final = (
    "completed",
    "failed",
    "total",
    "started_rows",
    "active_rows",
    "waiting_rows",
    "completed_rows",
)
NODE_TIME_FIELDS: Final = ("started_at", "completed_at", "updated_at")
# A step's state: not started yet, under way, or settled (`skipped`: the run ended before it started).
STEP_STATES: Final = ("pending", "running", "completed", "failed", "cancelled", "skipped")
NODE_FIELDS: Final = (
    *NODE_COUNT_FIELDS,
    *NODE_TIME_FIELDS,
    "message",
    "artifact_table_namespace",
    "node_io",
    "state",
    "reason",
)


def node_id(field: str, value: object) -> str:
    """A node id of `live_node_progress`: non-blank text."""
    return required_text(field, value, non_empty=True)


def node_field(field: str, key: str, value: object) -> Any:
    """One known field of a node's progress (`key` in `NODE_FIELDS`, `value` not None).

    Counts are bigints and times epoch milliseconds (the inspection views cast both); JavaScript's
    integral floats (3.0) are taken as ints. `message` and `reason` are free text (a reason is cut
    like a log line), `state` is one of `STEP_STATES`, the rest is structure.
    """
    if key in NODE_COUNT_FIELDS:
        return required_integer(field, value, integral_float=True)
    if key in NODE_TIME_FIELDS:
        return required_integer(field, value, maximum=MAX_EPOCH_MS, integral_float=True)
    if key == "message":
        return bounded_text(field, value)
    if key == "artifact_table_namespace":
        return required_text(field, value)
    if key == "node_io":
        return json_object(field, value)
    if key == "state":
        if value not in STEP_STATES:
            raise InvalidInput(field, f"must be one of {', '.join(STEP_STATES)}, got {value!r}")
        return value
    if key == "reason":
        # Free text, like an error: repaired and bounded, never refused.
        return truncate_line(_required(free_text(field, value)))
    raise ValueError(f"{key!r} is not a node progress field")


def activity_observation(field: str, value: object) -> dict[str, Any]:
    """A runner's activity observation: a JSON object with a non-blank `activityId` and a numeric
    `observedAt` (the newest per activity wins, so it must compare as a number), stored wrapped
    one level deeper."""
    observation = json_object(field, value, max_depth=MAX_WRAPPED_VALUE_DEPTH)
    text(f"{field}.activityId", observation.get("activityId"), non_empty=True)
    number(f"{field}.observedAt", observation.get("observedAt"))
    return observation


def json_depth(value: object) -> int:
    """How deep `value` nests: a scalar is 0, an object or list one more than its deepest item."""
    deepest = 0
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        pending.extend((child, depth) for child in children)
    return deepest


def json_object(field: str, value: object, *, max_depth: int = MAX_VALUE_DEPTH) -> dict[str, Any]:
    """A dict that `json_value` accepts."""
    if not isinstance(value, dict):
        raise InvalidInput(field, f"must be an object, got {_kind(value)}")
    json_value(field, value, max_depth=max_depth)
    return value


def dataset_lifecycle_event(field: str, value: object) -> dict[str, Any]:
    """A runner's dataset lifecycle event: a JSON object, stored wrapped one level deeper."""
    return json_object(field, value, max_depth=MAX_WRAPPED_VALUE_DEPTH)


def _encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _holds_nul(value: object) -> bool:
    # Iterative: json.dumps already accepted the structure, however deep it is.
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


__all__ = [
    "DEFAULT_UPLOAD_BOUNDS",
    "DOT_SEGMENTS",
    "INT32_MAX",
    "INT64_MAX",
    "LIVE_LOG_TAIL_BYTES",
    "LIVE_LOG_TAIL_LIMIT",
    "MAX_BODY_BYTES",
    "MAX_EPOCH_MS",
    "MAX_JSON_DEPTH",
    "MAX_LOG_LINE_BYTES",
    "MAX_PIPELINE_STEPS",
    "MAX_RUN_ID_LENGTH",
    "MAX_UPLOAD_VALUE_BYTES",
    "MAX_VALUE_DEPTH",
    "MAX_WRAPPED_VALUE_DEPTH",
    "NODE_COUNT_FIELDS",
    "NODE_FIELDS",
    "NODE_TIME_FIELDS",
    "REPLACEMENT_CHARACTER",
    "STEP_STATES",
    "TERMINAL_STATUSES",
    "TRUNCATION_MARKER",
    "InvalidInput",
    "LedgerError",
    "UploadBounds",
    "activity_observation",
    "bounded_text",
    "cursor",
    "dataset_lifecycle_event",
    "encode_body",
    "epoch_ms",
    "free_text",
    "free_text_list",
    "integer",
    "invocation_seq",
    "is_int",
    "is_number",
    "items",
    "json_depth",
    "json_object",
    "json_value",
    "log_line",
    "log_line_list",
    "new_run_id",
    "node_field",
    "node_id",
    "number",
    "repair_text",
    "required_integer",
    "required_text",
    "run_id",
    "string_list",
    "text",
    "truncate_line",
    "upload_value",
    "utf8_length",
]
