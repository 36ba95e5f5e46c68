"""A read cursor is at most 19 digits, the length of the largest sequence number (INT64_MAX): a
longer one is refused before it is read as a number, even when its value would be small."""

from __future__ import annotations

import pytest

from ledger import validate
from ledger.errors import InvalidInput


def test_a_cursor_of_19_digits_is_read_and_one_of_20_is_refused_whatever_its_value() -> None:
    assert validate.cursor("after", "0" * 18 + "1") == 1  # 19 digits: the limit
    assert validate.cursor("after", str(validate.INT64_MAX)) == validate.INT64_MAX
    for refused in ("0" * 19 + "1", "0" * 20, "1" + "0" * 19):  # 20 digits: one past it
        with pytest.raises(InvalidInput) as caught:
            validate.cursor("after", refused)
        assert caught.value.field == "after"
