"""A streams group's durable state, and `apply`: the only code that changes it.

Everything in `StreamsGroup` is a fact carried by a record or derived from such facts by `apply`
(the static-member index and who holds which task). Two coordinators that applied the same records
hold equal groups, which is what makes replay and snapshots exact.

Soft state is kept out of this module on purpose: the task offsets members report (and the lags
computed from them) live in the coordinator beside the groups, are lost on a restart, and come back
with each member's first heartbeat after it. `replay` therefore rebuilds everything but them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise
from typing import Any

from regroup.protocol.keyrange import ranges
from regroup.protocol.messages import STATIC_LEAVE_EPOCH, CommittedOffset
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard
from regroup.protocol.state import CorruptRecordError
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.records import (
    SourceParallelismRecord,
    SourceTopicsRecord,
    StreamsCurrent,
    StreamsCurrentRecord,
    StreamsEpochRecord,
    StreamsMember,
    StreamsMemberRecord,
    StreamsOffsetRecord,
    StreamsRecord,
    StreamsTargetEpochRecord,
    StreamsTargetRecord,
    TopologyRecord,
)
from regroup.protocol.streams.topology import TaskId, Topology, TopologyReady, configure
from regroup.protocol.topics import TopicMetadata

__all__ = ["StreamsGroup", "StreamsGroupState", "apply", "held", "replay"]


class StreamsGroupState(Enum):
    EMPTY = "empty"
    #: The topology cannot run on the topics as they are: nothing is assigned.
    NOT_READY = "not ready"
    ASSIGNING = "assigning"
    RECONCILING = "reconciling"
    STABLE = "stable"


def held(c: StreamsCurrent) -> MemberTasks:
    """What a member holds: its tasks by role plus those it was told to drop and still reports."""
    p = c.pending_revocation
    if p == NO_TASKS:
        return c.assigned
    a = c.assigned
    return MemberTasks(a.active | p.active, a.standby | p.standby, a.warmup | p.warmup)


@dataclass
class StreamsGroup:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    topology: Topology | None = None
    #: Partition counts of the topology's existing source topics, as last recorded.
    source_topics: dict[str, int] = field(default_factory=dict)
    members: dict[str, StreamsMember] = field(default_factory=dict)
    current: dict[str, StreamsCurrent] = field(default_factory=dict)
    target: dict[str, MemberTasks] = field(default_factory=dict)
    #: Committed source offsets (by the actives, or an operator's reset).
    offsets: dict[Shard, CommittedOffset] = field(default_factory=dict)
    # Derived by `apply`, never written directly.
    static_members: dict[str, str] = field(default_factory=dict)
    #: Task -> the member holding it active (assigned or pending revocation).
    active_holder: dict[TaskId, str] = field(default_factory=dict)
    #: Task -> every member holding it in any role (assigned or pending revocation).
    holders: dict[TaskId, set[str]] = field(default_factory=dict)
    #: (subtopology, partition) -> its tasks held active (assigned or pending revocation): an active
    #: of another cut of the same keys is not granted beside them (`coordinator` rule 6).
    active_ranges: dict[tuple[str, int], set[TaskId]] = field(default_factory=dict)
    #: Source topic -> the key ranges per partition the group reads it in: the cut of every topic
    #: any of its topologies ever read, which cannot change while the group exists (`coordinator`
    #: rule 6). From the `TopologyRecord`s, and the `SourceParallelismRecord`s of a snapshot.
    cuts: dict[str, int] = field(default_factory=dict)
    #: (topic, partition) -> the shards committed of it (tasks' parts, and lanes of them).
    offset_parts: dict[tuple[str, int], set[Shard]] = field(default_factory=dict)

    def offsets_overlapping(self, shard: Shard) -> dict[Shard, CommittedOffset]:
        """The committed offsets of ``shard``'s partition whose keys overlap it: a task's own, and
        the lanes of it that its active committed on their own (`offsets` rule 2)."""
        parts = self.offset_parts.get((shard.topic, shard.partition), ())
        return {s: self.offsets[s] for s in sorted(parts) if s.lo < shard.hi and shard.lo < s.hi}

    def member_target(self, member_id: str) -> MemberTasks:
        return self.target.get(member_id, NO_TASKS)

    def held_on_process(self, task: TaskId, process_id: str, besides: str) -> bool:
        """Does a member of ``process_id`` other than ``besides`` hold ``task`` in any role?"""
        for m in self.holders.get(task, ()):
            if m != besides and self.members[m].process_id == process_id:
                return True
        return False

    def is_ready(self) -> bool:
        if self.topology is None:
            return False
        return isinstance(configure(self.topology, TopicMetadata(self.source_topics)), TopologyReady)

    @property
    def state(self) -> StreamsGroupState:
        if not self.members:
            return StreamsGroupState.EMPTY
        if not self.is_ready():
            return StreamsGroupState.NOT_READY
        if self.epoch > self.target_epoch:
            return StreamsGroupState.ASSIGNING
        for c in self.current.values():
            if c.epoch != STATIC_LEAVE_EPOCH and (
                    c.status is not MemberStatus.STABLE or c.epoch != self.target_epoch):
                return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE


def apply(groups: dict[str, StreamsGroup], record: StreamsRecord) -> None:
    """Apply one record (creating or deleting a group as the record says)."""
    gid = record.group_id
    group = groups.get(gid)
    if isinstance(record, StreamsEpochRecord):
        if record.epoch is None:
            if group is not None and group.members:
                raise CorruptRecordError(f"streams group {gid!r} deleted while it still has members")
            groups.pop(gid, None)
            return
        if group is None:
            group = groups[gid] = StreamsGroup(gid)
        group.epoch = record.epoch
        return
    if group is None and isinstance(record, StreamsOffsetRecord) and record.offset is None:
        return  # deleting an offset of a group already gone
    if group is None:
        raise CorruptRecordError(f"record for streams group {gid!r} before the group exists: {record}")
    _APPLIERS[type(record)](group, record)


def replay(records: Iterable[StreamsRecord]) -> dict[str, StreamsGroup]:
    groups: dict[str, StreamsGroup] = {}
    for r in records:
        apply(groups, r)
    return groups


def _apply_topology(group: StreamsGroup, r: TopologyRecord) -> None:
    group.topology = r.topology
    for sub in r.topology.subtopologies:
        # The latest wins: data written before rule 6 was kept may hold a changed cut, and must replay.
        for topic in sorted(sub.source_topics):
            _cut(group, topic, sub.parallelism)


def _apply_source_parallelism(group: StreamsGroup, r: SourceParallelismRecord) -> None:
    _cut(group, r.topic, r.parallelism)


def _cut(group: StreamsGroup, topic: str, parallelism: int) -> None:
    """Record ``topic``'s cut, and cut its committed offsets along it.

    An offset committed before the group cut the topic (an operator's reset of a partition while no
    topology read it, or a whole-partition task's commits before a topology cut it — data written
    before `coordinator` rule 6) may span several of the new tasks' ranges: no task would own it,
    yet each would count it in its floor (`offsets.check_floor`) and be refused commits below it.
    So every committed fragment that crosses a range boundary is cut into its pieces, each keeping
    the fragment's offset: the same position for every key (`keyrange` rule 3), now held by the
    task whose range it lies in (a whole partition becomes its K ranges, as `offsets.per_task` sets
    a reset). Derived here, in `apply`, rather than written as offset records when the cutting
    topology is accepted, so that live, replay, snapshots and the replay of data written before
    this rule all end in the same state with no new record (a snapshot writes the pieces, after the
    topology, so their replay finds nothing left to cut)."""
    group.cuts[topic] = parallelism
    if parallelism == 1:
        return
    bounds = [lo for lo, _ in ranges(parallelism)][1:]
    for key in sorted(k for k in group.offset_parts if k[0] == topic):
        parts = group.offset_parts[key]
        for f in sorted(parts):
            inner = [b for b in bounds if f.lo < b < f.hi]
            if not inner:
                continue
            c = group.offsets.pop(f)
            parts.discard(f)
            for lo, hi in pairwise([f.lo, *inner, f.hi]):
                piece = Shard(f.topic, f.partition, lo, hi)
                was = group.offsets.get(piece)  # fragments are disjoint; a clash keeps the higher
                if was is None or was.offset < c.offset:
                    group.offsets[piece] = c
                parts.add(piece)


def _apply_source_topics(group: StreamsGroup, r: SourceTopicsRecord) -> None:
    group.source_topics = dict(r.topics)


def _apply_member(group: StreamsGroup, r: StreamsMemberRecord) -> None:
    old = group.members.get(r.member_id)
    if old is not None and old.instance_id is not None \
            and group.static_members.get(old.instance_id) == r.member_id:
        del group.static_members[old.instance_id]
    if r.member is None:
        if r.member_id in group.current:
            raise CorruptRecordError(
                f"member {r.member_id!r} of {group.group_id!r} removed before its assignment")
        group.members.pop(r.member_id, None)
        return
    if old is not None and old.process_id != r.member.process_id and r.member_id in group.current:
        raise CorruptRecordError(f"member {r.member_id!r} of {group.group_id!r} changed process")
    group.members[r.member_id] = r.member
    if r.member.instance_id is not None:
        group.static_members[r.member.instance_id] = r.member_id


def _apply_target(group: StreamsGroup, r: StreamsTargetRecord) -> None:
    if r.tasks is None:
        group.target.pop(r.member_id, None)
    else:
        group.target[r.member_id] = r.tasks


def _apply_target_epoch(group: StreamsGroup, r: StreamsTargetEpochRecord) -> None:
    group.target_epoch = r.target_epoch


def _apply_current(group: StreamsGroup, r: StreamsCurrentRecord) -> None:
    mid = r.member_id
    old = group.current.get(mid)
    if old is not None:
        h = held(old)
        for t in h.active:
            if group.active_holder.get(t) == mid:
                del group.active_holder[t]
                _discard_active_range(group, t)
        for t in h.active | h.standby | h.warmup:
            members = group.holders.get(t)
            if members is not None:
                members.discard(mid)
                if not members:
                    del group.holders[t]
    if r.current is None:
        group.current.pop(mid, None)
        return
    if mid not in group.members:
        raise CorruptRecordError(f"assignment of {mid!r} in {group.group_id!r} before its metadata")
    group.current[mid] = r.current
    h = held(r.current)
    for t in h.active:
        group.active_holder[t] = mid
        group.active_ranges.setdefault((t.subtopology, t.partition), set()).add(t)
    for t in h.active | h.standby | h.warmup:
        group.holders.setdefault(t, set()).add(mid)


def _discard_active_range(group: StreamsGroup, task: TaskId) -> None:
    key = (task.subtopology, task.partition)
    tasks = group.active_ranges.get(key)
    if tasks is not None:
        tasks.discard(task)
        if not tasks:
            del group.active_ranges[key]


def _apply_offset(group: StreamsGroup, r: StreamsOffsetRecord) -> None:
    key = (r.shard.topic, r.shard.partition)
    if r.offset is None:
        group.offsets.pop(r.shard, None)
        parts = group.offset_parts.get(key)
        if parts is not None:
            parts.discard(r.shard)
            if not parts:
                del group.offset_parts[key]
    else:
        group.offsets[r.shard] = CommittedOffset(r.offset, r.metadata, r.commit_epoch)
        group.offset_parts.setdefault(key, set()).add(r.shard)


_APPLIERS: dict[type, Callable[[StreamsGroup, Any], None]] = {
    TopologyRecord: _apply_topology,
    SourceParallelismRecord: _apply_source_parallelism,
    SourceTopicsRecord: _apply_source_topics,
    StreamsMemberRecord: _apply_member,
    StreamsTargetRecord: _apply_target,
    StreamsTargetEpochRecord: _apply_target_epoch,
    StreamsCurrentRecord: _apply_current,
    StreamsOffsetRecord: _apply_offset,
}
