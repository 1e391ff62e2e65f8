"""An in-process, virtual-time group: the coordinator runtime and member state machines.

Members acknowledge every Revoke and Assign at once (an instant consumer), and the coordinator's
nudges are honoured: a member it wakes heartbeats right away. Every call goes through the same
`Runtime` as the service, over an in-memory store unless given another. This is the smallest faithful
driver of the two state machines together; the walkthrough, the benchmarks and tests build on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from regroup.coordinator.memory_store import MemoryStore
from regroup.coordinator.runtime import Effects, RecordStore, Runtime
from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.member import Assign, ComputeAssignment, Fatal, Lost, MemberStateMachine, Revoke
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.timers import MemberKey
from regroup.protocol.topics import TopicMetadata

R = TypeVar("R")


@dataclass
class Event:
    """Something a member's driver did, at a virtual time (for narration and checks)."""

    at_ms: int
    member_id: str
    kind: str
    detail: str


@dataclass
class InProcessGroup:
    coordinator: Coordinator
    group_id: str = "g"
    now: int = 0
    members: dict[str, MemberStateMachine] = field(default_factory=dict)
    #: Every record written, in order (the store may have compacted its own copy).
    records: list[AnyRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    heartbeats: int = 0
    store: RecordStore = field(default_factory=MemoryStore)
    runtime: Runtime = field(init=False)

    def __post_init__(self) -> None:
        self.runtime = Runtime(self.coordinator, self.store, lambda: self.now)

    @classmethod
    def create(cls, topics: dict[str, int], group_id: str = "g", store: RecordStore | None = None,
               ) -> InProcessGroup:
        return cls(Coordinator(topics=TopicMetadata(topics)), group_id,
                   store=store if store is not None else MemoryStore())

    # ---------------------------------------------------------------- membership
    def join(self, member_id: str, topics: tuple[str, ...], instance_id: str | None = None) -> None:
        self.members[member_id] = MemberStateMachine(
            self.group_id, member_id, instance_id=instance_id, subscribed_topics=topics,
            rebalance_timeout_ms=60_000)

    def leave(self, member_id: str) -> None:
        self._act(member_id, self.members[member_id].leave(self.now))

    def crash(self, member_id: str) -> None:
        """The process dies: it says nothing; the coordinator notices after the session timeout."""
        self.members.pop(member_id).close()
        self.events.append(Event(self.now, member_id, "crash", ""))

    def update_topics(self, topics: dict[str, int]) -> None:
        self.step(lambda c: c.update_topics(TopicMetadata(topics), self.now))

    # ---------------------------------------------------------------- running
    def run_for(self, ms: int) -> None:
        """Advance virtual time by ``ms``, delivering heartbeats and timers as they fall due."""
        end = self.now + ms
        while True:
            self._drain()
            due = [t for t in (m.next_heartbeat_at() for m in self.members.values()) if t is not None]
            deadline = self.coordinator.next_deadline()
            if deadline is not None:
                due.append(deadline)
            nxt = min(due, default=end + 1)
            if nxt > end:
                self.now = end
                return
            self.now = max(self.now, nxt)
            self.step(lambda c: c.expire(self.now))

    def _drain(self) -> None:
        """Send every heartbeat due now, repeatedly, until nobody has anything due."""
        for _ in range(10_000):
            ready = [mid for mid, m in sorted(self.members.items()) if m.heartbeat_due(self.now)]
            if not ready:
                return
            for mid in ready:
                self._heartbeat(mid)
        raise RuntimeError("members keep heartbeating without time passing: a livelock")

    def _heartbeat(self, mid: str) -> None:
        m = self.members.get(mid)
        if m is None:
            return
        req = m.next_request(self.now)
        if req is None:
            return
        self.heartbeats += 1
        resp = self.step(lambda c: c.heartbeat(req, self.now), (self.group_id, mid))
        self._act(mid, m.on_response(resp, self.now))

    def _act(self, mid: str, actions: list) -> None:  # type: ignore[type-arg]
        m = self.members[mid]
        while actions:
            a = actions.pop(0)
            if isinstance(a, Revoke):
                self.events.append(Event(self.now, mid, "revoke", str(sorted(map(str, a.shards)))))
                actions.extend(m.revocation_done(a.shards, self.now))
            elif isinstance(a, Assign):
                self.events.append(Event(self.now, mid, "assign", str(sorted(map(str, a.shards)))))
                actions.extend(m.assignment_done(a.shards, self.now))
            elif isinstance(a, Lost):
                self.events.append(Event(self.now, mid, "lost", a.reason))
            elif isinstance(a, Fatal):
                self.events.append(Event(self.now, mid, "fatal", a.message))
            elif isinstance(a, ComputeAssignment):
                self.events.append(Event(self.now, mid, "compute", ""))

    def step(self, decide: Callable[[Coordinator], Outcome[R]], requester: MemberKey | None = None) -> R:
        """One call of the coordinator through the runtime; its effects are performed at once."""
        eff = self.runtime.step(decide, requester)
        self._perform(eff)
        return eff.response

    def _perform(self, eff: Effects[Any]) -> None:
        self.records.extend(eff.records)
        for gid, woken in eff.nudges:
            if gid == self.group_id and woken in self.members:
                self.members[woken].nudge(self.now)  # a round trip away, not a heartbeat interval
        for f in eff.fences:
            if f.group_id == self.group_id:
                self.events.append(Event(self.now, f.member_id, "fenced", f.reason.value))
