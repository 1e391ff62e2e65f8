"""The streams group as the coordinator describes it, sampled while the stateful demo runs.

Rules of this module:

1. The coordinator is the only source of who holds which task in which role (its describe) and of
   the committed offsets (its offset fetch). What the members run is theirs (`processes`): a sample
   never mixes the two, and `GroupWatch.settled` compares them.
2. A call that fails (the coordinator is busy) leaves the last view in place and makes the group not
   stable: the demo carries on and asks again.
3. A member is named by the process id it reported on joining; the static member keeps its process
   id across a restart, so its name does not change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from regroup.demo.common import Workload
from regroup.demo.stateful_demo.processes import Member
from regroup.demo.stateful_member import STREAMS_GROUP
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import STATIC_LEAVE_EPOCH, OffsetFetchRequest
from regroup.protocol.records import MemberStatus
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.streams.state import StreamsGroupState
from regroup.rpc.client import CoordinatorClient

#: At most this often (s) the coordinator is asked.
SAMPLE_EVERY_S = 0.4

ACTIVE, STANDBY, WARMUP = "active", "standby", "warm-up"


@dataclass(frozen=True)
class Sample:
    """The group as the coordinator described it at ``t``."""

    t: float
    epoch: int
    state: str
    #: task (partition) -> the member holding its active.
    active: Mapping[int, str]
    #: task (partition) -> (member, role) of each standby and warm-up copy.
    copies: Mapping[int, tuple[tuple[str, str], ...]]
    #: Tasks whose active's process is not running (killed, or a static member between stop and
    #: restart): the coordinator keeps them there until the session times out or it returns.
    absent: frozenset[int] = frozenset()
    #: Records produced but not yet committed, over every partition (None: unknown).
    lag: int | None = None


@dataclass
class GroupWatch:
    topic: str
    partitions: int
    standby_replicas: int
    acceptable_recovery_lag: int
    description: StreamsGroupDescription | None = None
    committed: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    #: A file that gets every description, member by member, as a JSON line (for inspection).
    trace: Path | None = None
    _last: float = 0.0

    def refresh(self, client: CoordinatorClient | None, members: Sequence[Member],
                ends: Mapping[int, int] | None = None) -> None:
        """Describe the group and fetch its offsets, unless that was done less than `SAMPLE_EVERY_S`
        ago; ``ends``: the log's end offsets now (for the lag)."""
        now = time.time()
        if client is None or now - self._last < SAMPLE_EVERY_S:
            return
        self._last = now
        try:
            self.description = client.describe_streams_group(STREAMS_GROUP)
            resp = client.fetch_offsets(OffsetFetchRequest(STREAMS_GROUP))
            if resp.error is ErrorCode.NONE:
                self.committed = {s.partition: c.offset for s, c in resp.offsets.items()
                                  if s.topic == self.topic}
        except Exception:  # rule 2 (a group nobody joined yet does not exist either)
            self.description = None
            return
        if ends is not None:
            self.ends = dict(ends)
        d = self.description
        names = self.names(members)
        active: dict[int, str] = {}
        copies: dict[int, list[tuple[str, str]]] = {}
        gone: set[str] = {m.member_id for m in d.members if names.get(m.process_id) not in _running(members)}
        absent: set[int] = set()
        for m in d.members:
            name = names.get(m.process_id, m.process_id[:6])
            for t in m.assigned.active:
                active[t.partition] = name
                if m.member_id in gone:
                    absent.add(t.partition)
            for role, tasks in ((STANDBY, m.assigned.standby), (WARMUP, m.assigned.warmup)):
                for t in tasks:
                    copies.setdefault(t.partition, []).append((name, role))
        lag = sum(max(0, e - self.committed.get(p, 0)) for p, e in self.ends.items()) if self.ends else None
        self.samples.append(Sample(now, d.epoch, d.state.value, active,
                                   {p: tuple(sorted(c)) for p, c in copies.items()}, frozenset(absent), lag))
        if self.trace is not None:
            self._write_trace(now, d, names)

    def _write_trace(self, now: float, d: StreamsGroupDescription, names: Mapping[str, str]) -> None:
        assert self.trace is not None

        def tasks(held: MemberTasks) -> dict[str, list[int]]:
            return {role: sorted(t.partition for t in ts) for role, ts in held.roles() if ts}

        line = {"t": round(now, 3), "epoch": d.epoch, "target_epoch": d.target_epoch, "state": d.state.value,
                "committed": self.committed, "ends": self.ends,
                "members": [{"name": names.get(m.process_id, m.process_id[:6]), "epoch": m.epoch,
                             "status": m.status.value, "assigned": tasks(m.assigned),
                             "pending": tasks(m.pending_revocation), "target": tasks(m.target),
                             "lags": {str(t): lag for t, lag in m.lags.items()}} for m in d.members]}
        with open(self.trace, "a") as f:
            f.write(json.dumps(line) + "\n")

    @staticmethod
    def names(members: Sequence[Member]) -> dict[str, str]:
        """process id -> member name (rule 3)."""
        return {m.process_id: m.name for m in members if m.process_id is not None}

    def held(self, members: Sequence[Member]) -> dict[str, dict[str, set[str]]]:
        """member name -> role -> tasks (``s_<partition>``), as the coordinator last assigned them."""
        out: dict[str, dict[str, set[str]]] = {}
        if self.description is None:
            return out
        names = self.names(members)
        for m in self.description.members:
            roles = out.setdefault(names.get(m.process_id, m.process_id[:6]), {})
            for role, tasks in m.assigned.roles():
                roles.setdefault(role, set()).update(str(t) for t in tasks)
        return out

    def settled(self, members: Sequence[Member]) -> bool:
        """The group is stable with the members in it that should be, every member at the group epoch,
        no warm-up left, every task active once with its standbys, and every member running
        exactly the actives the coordinator assigned it. Copies a member dropped (`Member.dropped_copies`:
        their query failed, and the member does not start them again while it keeps the assignment)
        are left out: a warm-up the coordinator waits for forever is not a move under way."""
        d = self.description
        if d is None or d.state is not StreamsGroupState.STABLE:
            return False
        inside = [m for m in members if m.in_group]
        if any(m.process_id is None for m in inside):
            return False
        if {m.process_id for m in inside} != {m.process_id for m in d.members}:
            return False
        if not all(m.status is MemberStatus.STABLE and m.epoch == d.epoch for m in d.members):
            return False
        dropped = {m.process_id: m.dropped_copies() for m in inside}
        if any({str(t) for t in m.assigned.warmup | m.target.warmup} - dropped.get(m.process_id, set())
               for m in d.members):
            return False
        actives = [t for m in d.members for t in m.assigned.active]
        if sorted(t.partition for t in actives) != list(range(self.partitions)):
            return False
        want_standbys = min(self.standby_replicas, len(d.members) - 1)
        standbys = [t.partition for m in d.members for t in m.assigned.standby]
        if any(standbys.count(p) != want_standbys for p in range(self.partitions)):
            return False
        held = self.held(members)
        return all(m.roles(ACTIVE) == held.get(m.name, {}).get(ACTIVE, set()) for m in inside)

    def standbys_caught_up(self) -> bool:
        """Every standby's copy has reported a lag within the acceptable recovery lag. A settled
        group may still have a move waiting for a standby to catch up (a move to a process holding
        a standby needs no warm-up); once every standby is caught up, such a move has been made or
        was never wanted. The scripted events start from here, so that a move still pending from
        the previous event is not counted as the next one's."""
        d = self.description
        if d is None:
            return False
        return all(m.lags.get(t, self.acceptable_recovery_lag + 1) <= self.acceptable_recovery_lag
                   for m in d.members for t in m.assigned.standby)

    def copies_not_running(self, members: Sequence[Member]) -> dict[str, set[str]]:
        """member name -> the standbys and warm-ups the coordinator assigned it that it does not run."""
        held = self.held(members)
        out: dict[str, set[str]] = {}
        for m in members:
            if m.in_group:
                assigned = held.get(m.name, {})
                missing = (assigned.get(STANDBY, set()) | assigned.get(WARMUP, set())) - set(m.tasks)
                if missing:
                    out[m.name] = missing
        return out

    def drained(self, workload: Workload | None, ends: Mapping[int, int]) -> bool:
        """Every partition's committed offset is the log's end, and the log holds what was produced."""
        if workload is None or len(ends) != self.partitions:
            return False
        return (sum(ends.values()) == workload.produced
                and all(self.committed.get(p) == e for p, e in ends.items()))

    def stepped_out(self, instance: str) -> bool:
        """Whether the static member ``instance`` has left temporarily (the coordinator keeps its
        tasks for it until its session times out)."""
        d = self.description
        return d is not None and any(m.instance_id == instance and m.epoch == STATIC_LEAVE_EPOCH
                                     for m in d.members)

    def members(self) -> int:
        """Members in the group as last described."""
        return len(self.description.members) if self.description is not None else 0

    def epoch(self) -> int:
        return self.description.epoch if self.description is not None else -1

    def actives(self) -> dict[int, str]:
        return dict(self.samples[-1].active) if self.samples else {}


def _running(members: Sequence[Member]) -> set[str]:
    return {m.name for m in members if m.in_group}
