"""What the ledger stores: input-validation primitives shared by the ledger and the reporter.

Pure and dependency-free (it imports nothing from either package), so the worker-side reporter can
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
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeGuard


class LedgerError(Exception):
    """Base class of the ledger's errors: `message` is the client-facing text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(LedgerError):
    """A request field is missing, of the wrong type or out of range; nothing was written."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
# The last millisecond `datetime` can hold: from_ms of anything up to here never overflows.
MAX_EPOCH_MS: Final = (datetime.max.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    milliseconds=1
)
# A request body nests at most this deep (an object or list is one level); deeper is refused whole.
MAX_JSON_DEPTH: Final = 64
# One stored JSON value: the deepest request wrapping (body, list or map, item, field) adds four.
MAX_VALUE_DEPTH: Final = MAX_JSON_DEPTH - 4
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
# The service refuses a request body above this many bytes by default (LEDGER_MAX_BODY_BYTES moves
# it); the reporter must keep every upload under it, and the runner protocol states it.
MAX_BODY_BYTES: Final = 1024 * 1024
# One log line, in UTF-8 bytes: a longer one is stored cut in the middle, its beginning and end
# kept around `LINE_CUT_MARKER`, so that no single line can fill a request body.
MAX_LOG_LINE_BYTES: Final = 16 * 1024
# What replaces the middle of a cut line; `{cut}` is the number of UTF-8 bytes removed.
LINE_CUT_MARKER: Final = "[…{cut} bytes cut…]"
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
NODE_FIELDS: Final = (*NODE_COUNT_FIELDS, *NODE_TIME_FIELDS, "message", "artifact_table_namespace", "node_io")


def node_id(field: str, value: object) -> str:
    """A node id of `live_node_progress`: non-blank text."""
    return required_text(field, value, non_empty=True)


def node_field(field: str, key: str, value: object) -> Any:
    """One known field of a node's progress (`key` in `NODE_FIELDS`, `value` not None).

    Counts are bigints and times epoch milliseconds (the inspection views cast both); JavaScript's
    integral floats (3.0) are taken as ints. `message` is free text, the rest is structure.
    """
    if key in NODE_COUNT_FIELDS:
        return required_integer(field, value, integral_float=True)
    if key in NODE_TIME_FIELDS:
        return required_integer(field, value, maximum=MAX_EPOCH_MS, integral_float=True)
    if key == "message":
        return free_text(field, value)
    if key == "artifact_table_namespace":
        return required_text(field, value)
    if key == "node_io":
        return json_object(field, value)
    raise ValueError(f"{key!r} is not a node progress field")


def activity_observation(field: str, value: object) -> dict[str, Any]:
    """A runner's activity observation: a JSON object with a non-blank `activityId` and a numeric
    `observedAt` (the newest per activity wins, so it must compare as a number)."""
    observation = json_object(field, value)
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


def json_object(field: str, value: object) -> dict[str, Any]:
    """A dict that `json_value` accepts."""
    if not isinstance(value, dict):
        raise InvalidInput(field, f"must be an object, got {_kind(value)}")
    json_value(field, value)
    return value


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
    "INT32_MAX",
    "INT64_MAX",
    "LINE_CUT_MARKER",
    "LIVE_LOG_TAIL_LIMIT",
    "MAX_BODY_BYTES",
    "MAX_EPOCH_MS",
    "MAX_JSON_DEPTH",
    "MAX_LOG_LINE_BYTES",
    "MAX_RUN_ID_LENGTH",
    "MAX_VALUE_DEPTH",
    "NODE_COUNT_FIELDS",
    "NODE_FIELDS",
    "NODE_TIME_FIELDS",
    "REPLACEMENT_CHARACTER",
    "InvalidInput",
    "LedgerError",
    "activity_observation",
    "cursor",
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
    "node_field",
    "node_id",
    "number",
    "repair_text",
    "required_integer",
    "required_text",
    "run_id",
    "string_list",
    "text",
]
