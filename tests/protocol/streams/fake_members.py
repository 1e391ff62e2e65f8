"""A pretend streams deployment for the coordinator tests: processes with state directories, members
that obey their responses, and a committed-offsets store the actives write to.

Every task reads partition *i* of the one topic ``in``; a process's state directory remembers, per
task, the offset its local copy has reached (kept after the task leaves: a dormant copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from regroup.protocol.coordinator import Outcome
from regroup.protocol.errors import ErrorCode
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig, StreamsGroups
from regroup.protocol.streams.lags import offsets_from
from regroup.protocol.streams.messages import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
)
from regroup.protocol.streams.state import StreamsGroup, held
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.protocol.topics import TopicMetadata

GROUP = "g"
TOPIC = "in"
TOPOLOGY = Topology.of({"s": [TOPIC]})
REBALANCE_MS = 60_000


def task(n: int) -> TaskId:
    return TaskId("s", n)


def source(t: TaskId) -> Shard:
    """The task's part of ``in``: its partition, or its key range of it for a key-range task."""
    return t.shard(TOPIC)


@dataclass
class Member:
    member_id: str
    process_id: str
    instance_id: str | None = None
    epoch: int = 0
    owned: MemberTasks = NO_TASKS
    last: StreamsHeartbeatResponse | None = None


@dataclass
class Deployment:
    """The coordinator under test and everything around it."""

    partitions: int = 4
    config: StreamsConfig = field(default_factory=StreamsConfig)
    topology: Topology = TOPOLOGY
    topics: TopicMetadata | None = None
    now: int = 0
    committed: dict[str, dict[Shard, int]] = field(default_factory=dict)
    #: process id -> task -> offset its local copy reached.
    disks: dict[str, dict[TaskId, int]] = field(default_factory=dict)
    #: member id -> process id, for every member that ever joined.
    process_of: dict[str, str] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)
    records: list[object] = field(default_factory=list)
    outcomes: list[Outcome[StreamsHeartbeatResponse]] = field(default_factory=list)
    #: member id -> the positions its last accepted heartbeat reported (what the coordinator knows).
    reported: dict[str, dict[TaskId, int]] = field(default_factory=dict)
    sg: StreamsGroups = field(init=False)

    def __post_init__(self) -> None:
        self.committed.setdefault(GROUP, {})
        topics = self.topics if self.topics is not None else TopicMetadata({TOPIC: self.partitions})
        self.sg = StreamsGroups(self.config, topics, offsets_from(self.committed))

    # -- the members' side ------------------------------------------------------------------
    def join(self, member_id: str, process_id: str, instance_id: str | None = None) -> Member:
        m = Member(member_id, process_id, instance_id)
        self.process_of[member_id] = process_id
        self.members[member_id] = m
        self.disks.setdefault(process_id, {})
        self.heartbeat(member_id)
        return m

    def heartbeat(self, member_id: str) -> StreamsHeartbeatResponse:
        m = self.members[member_id]
        joining = m.epoch == 0
        disk = dict(self.disks[m.process_id])
        req = StreamsHeartbeatRequest(
            GROUP, m.member_id, m.epoch, instance_id=m.instance_id, process_id=m.process_id,
            rebalance_timeout_ms=REBALANCE_MS if joining else None,
            topology=self.topology if joining else None, owned=m.owned,
            task_offsets={t: {source(t): pos} for t, pos in disk.items()})
        resp = self.keep(self.sg.heartbeat(req, self.now))
        m.last = resp
        if resp.error is ErrorCode.NONE:
            self.reported[member_id] = disk
        if resp.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            m.epoch, m.owned = 0, NO_TASKS  # close every task, keep the disk, rejoin
        elif resp.error is ErrorCode.NONE:
            m.epoch = resp.member_epoch
            if resp.assignment is not None:
                m.owned = resp.assignment
        return resp

    def leave(self, member_id: str, static: bool = False) -> StreamsHeartbeatResponse:
        m = self.members.pop(member_id)
        epoch = STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH
        req = StreamsHeartbeatRequest(GROUP, m.member_id, epoch, instance_id=m.instance_id)
        return self.keep(self.sg.heartbeat(req, self.now))

    def commit(self, member_id: str, records: int) -> None:
        """The member's actives process ``records`` more records each and commit."""
        m = self.members[member_id]
        for t in m.owned.active:
            end = self.committed[GROUP].get(source(t), 0) + records
            self.committed[GROUP][source(t)] = end
            self.disks[m.process_id][t] = end

    def restore(self, member_id: str, records: int | None = None) -> None:
        """The member's standbys and warm-ups read ``records`` more of the log (None: all of it)."""
        m = self.members[member_id]
        disk = self.disks[m.process_id]
        for t in m.owned.standby | m.owned.warmup:
            end = self.committed[GROUP].get(source(t), 0)
            reached = disk.get(t, 0)
            disk[t] = end if records is None else min(end, reached + records)

    # -- the coordinator's side -------------------------------------------------------------
    def keep(self, outcome: Outcome[StreamsHeartbeatResponse]) -> StreamsHeartbeatResponse:
        self.records.extend(outcome.records)
        self.outcomes.append(outcome)
        return outcome.response

    def expire(self) -> Outcome[None]:
        out = self.sg.expire(self.now)
        self.records.extend(out.records)
        return out

    def restart_coordinator(self, from_snapshot: bool = False) -> None:
        old = self.sg
        history = old.snapshot() if from_snapshot else list(self.records)
        self.sg = StreamsGroups(old.config, old.topics, old.offsets)
        self.reported.clear()  # soft state: lost with the coordinator
        self.sg.recover(history, self.now)  # type: ignore[arg-type]

    def settle(self, rounds: int = 20, restore: bool = True) -> int:
        """Heartbeat every member until a round changes nothing; returns the rounds it took."""
        for n in range(1, rounds + 1):
            before = len(self.records)
            for mid in sorted(self.members):
                if restore:
                    self.restore(mid)
                self.heartbeat(mid)
            if len(self.records) == before:
                return n
        raise AssertionError(f"not settled after {rounds} rounds")

    # -- readings ---------------------------------------------------------------------------
    def group(self) -> StreamsGroup:
        return self.sg.groups[GROUP]

    def actives(self) -> dict[TaskId, str]:
        """Task -> member holding it active (assigned or pending revocation)."""
        out: dict[TaskId, str] = {}
        for mid, c in self.group().current.items():
            for t in held(c).active:
                assert t not in out, f"{t} active on {out[t]} and {mid}"
                out[t] = mid
        return out

    def reported_lag(self, process_id: str, t: TaskId, members: set[str]) -> int | None:
        """The smallest lag any of ``members`` of ``process_id`` last reported for ``t``."""
        end = self.committed[GROUP].get(source(t))
        lags = [max(0, (end or 0) - r[t]) if end is not None else 0
                for mid, r in self.reported.items()
                if mid in members and t in r and self.process_of.get(mid) == process_id]
        return min(lags) if lags else None

    def target(self, member_id: str) -> MemberTasks:
        return self.group().member_target(member_id)
