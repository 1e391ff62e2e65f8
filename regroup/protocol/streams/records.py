"""Durable records of streams groups: every change of a streams group's state is one of these.

As for consumer groups (`regroup.protocol.records`), the coordinator decides, emits records and
applies them with `regroup.protocol.streams.state.apply`; a restart replays the same records through
the same function. A payload of None is a tombstone.

What is *not* here, on purpose: the task offsets members report. They change on every heartbeat,
they are only hints for the assignor, and every member sends them again in full on its first
heartbeat after a coordinator restart; persisting them would write a record per heartbeat.
Committed source offsets are `StreamsOffsetRecord`s, keyed by `Shard(topic, partition)` like the
consumer-group `OffsetRecord` but a type of their own, so that replay never has to guess which kind
of group an offset belongs to; the active of a task commits them through the normal commit path
(`regroup.protocol.streams.offsets` says who may).

How each source topic was cut into key ranges (`regroup.protocol.streams.topology` rule 4) is fixed
for the group's life (`regroup.protocol.streams.coordinator` rule 6), so the group remembers the cut
of every topic it ever read, also after a topology stops reading it. Replay derives it from the
`TopologyRecord`s; a snapshot, which keeps only the current topology, writes a
`SourceParallelismRecord` for each topic that topology no longer reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.topology import Topology

__all__ = [
    "MemberStatus",
    "SourceParallelismRecord",
    "SourceTopicsRecord",
    "StreamsCurrent",
    "StreamsCurrentRecord",
    "StreamsEpochRecord",
    "StreamsMember",
    "StreamsMemberRecord",
    "StreamsOffsetRecord",
    "StreamsRecord",
    "StreamsTargetEpochRecord",
    "StreamsTargetRecord",
    "TopologyRecord",
]


@dataclass(frozen=True, slots=True)
class StreamsMember:
    """A member's identity: who it is and which state directory (process) it runs in."""

    instance_id: str | None
    process_id: str
    rebalance_timeout_ms: int


@dataclass(frozen=True, slots=True)
class StreamsCurrent:
    """A member's reconciliation state: its epoch, its tasks by role, and what it must give up.

    ``pending_revocation`` holds tasks of every role the member was told to drop and still reported:
    until it stops reporting them they count as held by it (see `regroup.protocol.streams.reconcile`).
    """

    epoch: int
    previous_epoch: int
    status: MemberStatus
    assigned: MemberTasks
    pending_revocation: MemberTasks


@dataclass(frozen=True, slots=True)
class StreamsEpochRecord:
    """The streams group exists, at this epoch (None: deleted)."""

    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    group_id: str
    topology: Topology


@dataclass(frozen=True, slots=True)
class SourceTopicsRecord:
    """Partition counts of the topology's source topics that exist, as last seen (change => bump)."""

    group_id: str
    topics: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SourceParallelismRecord:
    """Source topic ``topic`` was read cut into ``parallelism`` key ranges per partition by a topology
    the group had before its current one (written by snapshots only: see the module's opening)."""

    group_id: str
    topic: str
    parallelism: int


@dataclass(frozen=True, slots=True)
class StreamsMemberRecord:
    group_id: str
    member_id: str
    member: StreamsMember | None


@dataclass(frozen=True, slots=True)
class StreamsTargetRecord:
    """One member's part of the target (None: removed from the target)."""

    group_id: str
    member_id: str
    tasks: MemberTasks | None


@dataclass(frozen=True, slots=True)
class StreamsTargetEpochRecord:
    group_id: str
    target_epoch: int


@dataclass(frozen=True, slots=True)
class StreamsCurrentRecord:
    group_id: str
    member_id: str
    current: StreamsCurrent | None


@dataclass(frozen=True, slots=True)
class StreamsOffsetRecord:
    """A committed source offset of a streams group (offset None: deleted)."""

    group_id: str
    shard: Shard
    offset: int | None
    metadata: str = ""
    commit_epoch: int = -1


StreamsRecord = (
    StreamsEpochRecord
    | TopologyRecord
    | SourceTopicsRecord
    | SourceParallelismRecord
    | StreamsMemberRecord
    | StreamsTargetRecord
    | StreamsTargetEpochRecord
    | StreamsCurrentRecord
    | StreamsOffsetRecord
)
