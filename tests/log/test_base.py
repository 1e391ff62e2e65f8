"""The shared record types."""

from __future__ import annotations

import dataclasses

import pytest

from regroup.log.base import ConsumedRecord, make_consumed_records


def test_make_consumed_records_equals_the_constructor_and_stays_frozen() -> None:
    made = make_consumed_records("t", 3, range(5, 7), [b"a", None], [None, b"b"], [1, 2], [(), (("h", b""),)])
    assert made == [
        ConsumedRecord("t", 3, 5, b"a", None, 1, ()),
        ConsumedRecord("t", 3, 6, None, b"b", 2, (("h", b""),)),
    ]
    assert hash(made[0]) == hash(ConsumedRecord("t", 3, 5, b"a", None, 1, ()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].offset = 9  # type: ignore[misc]
    assert make_consumed_records("t", 0, [], [], [], [], []) == []


def test_make_consumed_records_refuses_ragged_columns() -> None:
    with pytest.raises(ValueError, match="1 keys for 2 offsets"):
        make_consumed_records("t", 0, [0, 1], [b"a"], [b"", b""], [0, 0], [(), ()])
