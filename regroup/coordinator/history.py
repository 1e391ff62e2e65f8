"""A bounded per-group history of epoch changes, derived from the records as they are persisted.

The protocol core decides; this module only *reads* the records of each step to tell an operator
when the group epoch or the target epoch moved, and what the same step's records say about why
("member m1 joined", "member m2 fenced (timeout)", "subscribed topics changed"). Entries carry the
wall-clock time at which the service handed them to the store, and are persisted with the records.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from regroup.protocol.records import (
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadataRecord,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from regroup.protocol.timers import MemberKey
from regroup.rpc.types import EpochChange

#: Causes listed per entry before "and N more".
_MAX_CAUSES = 4


@dataclass(frozen=True, slots=True)
class HistoryOp:
    """Add an entry to a group's history, or (entry None) drop the group's history (group deleted)."""

    group_id: str
    entry: EpochChange | None


@dataclass
class _Pending:
    causes: list[str] = field(default_factory=list)
    joined: set[str] = field(default_factory=set)
    targets: int = 0


def derive(records: Sequence[Record], fenced: Iterable[MemberKey], at_unix_ms: int) -> list[HistoryOp]:
    """The history operations implied by one step's records, in order."""
    fenced_set = set(fenced)
    pending: dict[str, _Pending] = {}
    ops: list[HistoryOp] = []
    for i, r in enumerate(records):
        gid = r.group_id
        p = pending.setdefault(gid, _Pending())
        if isinstance(r, MemberMetadataRecord):
            if r.metadata is None:
                how = "fenced (session or revocation timeout)" if (gid, r.member_id) in fenced_set else "left"
                p.causes.append(f"member {r.member_id} {how}")
            elif _joins(records, i, r.member_id):
                p.joined.add(r.member_id)
                p.causes.append(f"member {r.member_id} joined")
            else:
                p.causes.append(f"member {r.member_id} changed its subscription")
        elif isinstance(r, SubscribedTopicsRecord):
            shown = ", ".join(f"{t}={n}" for t, n in list(sorted(r.topics.items()))[:3])
            more = f", +{len(r.topics) - 3} more" if len(r.topics) > 3 else ""
            p.causes.append(f"subscribed topics now {shown or 'none'}{more}")
        elif isinstance(r, RegexRecord) and r.topics is not None:
            p.causes.append(f"regex {r.regex!r} now matches {len(r.topics)} topic(s)")
        elif isinstance(r, TargetMemberRecord):
            p.targets += 1
        elif isinstance(r, GroupEpochRecord):
            if r.epoch is None:
                ops.append(HistoryOp(gid, None))
            elif r.epoch == 0:
                ops.append(HistoryOp(gid, EpochChange(at_unix_ms, "group", 0, "group created")))
            else:
                ops.append(HistoryOp(gid, EpochChange(at_unix_ms, "group", r.epoch, _summary(p.causes))))
            pending[gid] = _Pending()
        elif isinstance(r, TargetEpochRecord):
            cause = f"assignor {r.assignor}; {p.targets} member target(s) changed"
            ops.append(HistoryOp(gid, EpochChange(at_unix_ms, "target", r.target_epoch, cause)))
            p.targets = 0
    return ops


def _joins(records: Sequence[Record], i: int, member_id: str) -> bool:
    """A member's metadata followed by a fresh epoch-0 assignment is a join (not a take-over)."""
    nxt = records[i + 1] if i + 1 < len(records) else None
    return (isinstance(nxt, CurrentAssignmentRecord) and nxt.member_id == member_id
            and nxt.current is not None and nxt.current.epoch == 0 and nxt.current.previous_epoch == -1)


def _summary(causes: list[str]) -> str:
    if not causes:
        return ""
    shown = "; ".join(causes[:_MAX_CAUSES])
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
