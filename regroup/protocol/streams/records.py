"""Durable records of streams groups: every change of a streams group's state is one of these.

As for consumer groups (`regroup.protocol.records`), the coordinator decides, emits records and
applies them with `regroup.protocol.streams.state.apply`; a restart replays the same records through
the same function. A payload of None is a tombstone.

What is *not* here, on purpose: the task offsets members report. They change on every heartbeat,
they are only hints for the assignor, and every member sends them again in full on its first
heartbeat after a coordinator restart; persisting them would write a record per heartbeat.
Committed offsets are not here either: they live with the group's offsets (the consumer-group
`OffsetRecord`, keyed by `Shard`), which the active task commits through the normal commit path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from regroup.protocol.records import MemberStatus
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.topology import Topology

__all__ = [
    "MemberStatus",
    "SourceTopicsRecord",
    "StreamsCurrent",
    "StreamsCurrentRecord",
    "StreamsEpochRecord",
    "StreamsMember",
    "StreamsMemberRecord",
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


StreamsRecord = (
    StreamsEpochRecord
    | TopologyRecord
    | SourceTopicsRecord
    | StreamsMemberRecord
    | StreamsTargetRecord
    | StreamsTargetEpochRecord
    | StreamsCurrentRecord
)
