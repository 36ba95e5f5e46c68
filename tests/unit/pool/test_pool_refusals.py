"""What a person reads when a pool request is refused: the field and what it should hold."""

from __future__ import annotations

import pytest

from ledger.errors import InvalidInput
from ledger.pool import rules


def test_ids_that_are_not_a_list_are_refused_saying_a_list_of_strings_is_wanted() -> None:
    with pytest.raises(InvalidInput) as caught:
        rules.check_ids("a-b")
    assert str(caught.value) == "ids: must be a list of strings, got str"
