"""A bounded per-group history of epoch changes, as the protocol core explained them.

The core reports with each step why epochs moved (`regroup.protocol.causes`): a group created, bumped
because "member m1 joined" or "subscribed topics changed", a target installed, a group deleted. This
module only words those events as entries for an operator; it never guesses a cause from the records.
Entries carry the wall-clock time at which the step was handed to the store, and are persisted with
the step's records.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from regroup.protocol.causes import (
    BumpCause,
    EpochEvent,
    GroupCreated,
    GroupDeleted,
    GroupEpochBumped,
    describe_cause,
)
from regroup.rpc.types import EpochChange

#: Causes listed per entry before "and N more".
_MAX_CAUSES = 4


@dataclass(frozen=True, slots=True)
class HistoryOp:
    """Add an entry to a group's history, or (entry None) drop the group's history (group deleted)."""

    group_id: str
    entry: EpochChange | None


def derive(events: Iterable[EpochEvent], at_unix_ms: int) -> list[HistoryOp]:
    """The history operations of one step's epoch events, in order."""
    ops: list[HistoryOp] = []
    for e in events:
        if isinstance(e, GroupDeleted):
            ops.append(HistoryOp(e.group_id, None))
        elif isinstance(e, GroupCreated):
            ops.append(HistoryOp(e.group_id, EpochChange(at_unix_ms, "group", 0, "group created")))
        elif isinstance(e, GroupEpochBumped):
            ops.append(HistoryOp(e.group_id, EpochChange(at_unix_ms, "group", e.epoch, _summary(e.causes))))
        else:
            cause = f"assignor {e.assignor}; {e.changed_members} member target(s) changed"
            ops.append(HistoryOp(e.group_id, EpochChange(at_unix_ms, "target", e.target_epoch, cause)))
    return ops


def _summary(causes: tuple[BumpCause, ...]) -> str:
    shown = "; ".join(describe_cause(c) for c in causes[:_MAX_CAUSES])
    more = len(causes) - _MAX_CAUSES
    return shown + (f"; and {more} more" if more > 0 else "")


class EpochHistory:
    """The last ``limit`` epoch changes of every group, in memory."""

    def __init__(self, limit: int = 100) -> None:
        self.limit = limit
        self._by_group: dict[str, deque[EpochChange]] = {}

    def apply(self, ops: Iterable[HistoryOp]) -> None:
        for op in ops:
            if op.entry is None:
                self._by_group.pop(op.group_id, None)
            else:
                self._by_group.setdefault(op.group_id, deque(maxlen=self.limit)).append(op.entry)

    def of(self, group_id: str) -> tuple[EpochChange, ...]:
        return tuple(self._by_group.get(group_id, ()))
