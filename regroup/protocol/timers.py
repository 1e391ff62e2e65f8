"""Deadlines the coordinator must act on, kept as data: the shells only ask when and call expire().

Session deadlines all use one timeout, so the latest heartbeat always has the latest deadline: an
insertion-ordered dict whose first entry is the earliest makes every operation O(1) — a steady
heartbeat costs a dict move, not a heap push. Revocation and delegation deadlines vary per member,
are rare, and live in a heap with lazy deletion. So does a grace (`regroup.protocol.failover`): an
earlier deadline beside a member's session one, which every heartbeat (`touch_session`) forgets.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum

MemberKey = tuple[str, str]  # (group id, member id)


class TimerKind(Enum):
    SESSION = "session"
    REVOCATION = "revocation"
    DELEGATION = "delegation"
    #: A dynamic member's connection broke: fenced at the end of the grace (`regroup.protocol.failover`).
    GRACE = "grace"


@dataclass(frozen=True, slots=True)
class DueTimer:
    kind: TimerKind
    group_id: str
    #: The member (empty for a group-level delegation deadline).
    member_id: str
    #: The epoch the timer was armed for: it only fires if that epoch has not moved.
    epoch: int


class Timers:
    def __init__(self) -> None:
        self._session: dict[MemberKey, int] = {}
        self._armed: dict[tuple[TimerKind, str, str], tuple[int, int]] = {}
        self._heap: list[tuple[int, str, str, str]] = []

    # -- session -------------------------------------------------------------------------------
    def touch_session(self, group_id: str, member_id: str, deadline: int) -> None:
        key = (group_id, member_id)
        self._session.pop(key, None)
        self._session[key] = deadline
        # A heartbeat re-arms the normal session: a grace armed by a broken connection is forgotten
        # (failover rule 3). The heap entry goes lazily, as a disarmed one does.
        if self._armed:
            self._armed.pop((TimerKind.GRACE, group_id, member_id), None)

    def session_deadline(self, group_id: str, member_id: str) -> int | None:
        return self._session.get((group_id, member_id))

    # -- revocation and delegation ---------------------------------------------------------------
    def arm(self, kind: TimerKind, group_id: str, member_id: str, deadline: int, epoch: int) -> None:
        self._armed[(kind, group_id, member_id)] = (deadline, epoch)
        heapq.heappush(self._heap, (deadline, kind.value, group_id, member_id))

    def disarm(self, kind: TimerKind, group_id: str, member_id: str) -> None:
        self._armed.pop((kind, group_id, member_id), None)

    def is_armed(self, kind: TimerKind, group_id: str, member_id: str) -> bool:
        return (kind, group_id, member_id) in self._armed

    def forget_member(self, group_id: str, member_id: str) -> None:
        self._session.pop((group_id, member_id), None)
        self._armed.pop((TimerKind.REVOCATION, group_id, member_id), None)
        self._armed.pop((TimerKind.GRACE, group_id, member_id), None)

    # -- firing ----------------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        self._drop_stale()
        candidates = []
        if self._session:
            candidates.append(next(iter(self._session.values())))
        if self._heap:
            candidates.append(self._heap[0][0])
        return min(candidates) if candidates else None

    def pop_due(self, now: int) -> list[DueTimer]:
        """Remove and return every timer whose deadline is at or before ``now``, earliest first."""
        due: list[tuple[int, DueTimer]] = []
        while self._session:
            key, deadline = next(iter(self._session.items()))
            if deadline > now:
                break
            del self._session[key]
            due.append((deadline, DueTimer(TimerKind.SESSION, key[0], key[1], -1)))
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now:
                break
            deadline, kind_value, gid, mid = heapq.heappop(self._heap)
            kind = TimerKind(kind_value)
            _, epoch = self._armed.pop((kind, gid, mid))
            due.append((deadline, DueTimer(kind, gid, mid, epoch)))
        due.sort(key=lambda d: (d[0], d[1].kind.value, d[1].group_id, d[1].member_id))
        return [d for _, d in due]

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, kind_value, gid, mid = heap[0]
            armed = self._armed.get((TimerKind(kind_value), gid, mid))
            if armed is not None and armed[0] == deadline:
                return
            heapq.heappop(heap)
