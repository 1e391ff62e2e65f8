"""Durable records: every change of a group's state is one of these.

The coordinator never mutates a group directly: it decides, emits records, and applies them with
`regroup.protocol.state.apply`. The shells persist the records before answering, and a restart
replays them through the same `apply`, so replaying is equivalent to having run by construction.
A record whose payload is None is a tombstone (the thing was removed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from regroup.protocol.shard import Shard, ShardSet


class MemberStatus(Enum):
    """Where a member stands in its reconciliation (see docs/protocol.md)."""

    STABLE = "stable"
    #: Must give shards up; its epoch does not move until it stops reporting them.
    UNREVOKED = "unrevoked"
    #: At the target epoch, but waits for shards that their previous owner has not released yet.
    UNRELEASED = "unreleased"


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A member's identity and subscription: what it asked for, not what it got."""

    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topics: frozenset[str]
    subscribed_regex: str | None
    assignor: str | None
    client_assignors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """A member's reconciliation state: its epoch and what it owns or must give up."""

    epoch: int
    previous_epoch: int
    status: MemberStatus
    assigned: ShardSet
    pending_revocation: ShardSet


@dataclass(frozen=True, slots=True)
class GroupEpochRecord:
    """The group exists, at this epoch (None: the group is deleted)."""

    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class SubscribedTopicsRecord:
    """Partition counts of the topics the group subscribes to, as last seen (change => bump)."""

    group_id: str
    topics: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class RegexRecord:
    """What a subscription regex resolves to (None: no member uses the regex any more)."""

    group_id: str
    regex: str
    topics: frozenset[str] | None


@dataclass(frozen=True, slots=True)
class MemberMetadataRecord:
    group_id: str
    member_id: str
    metadata: MemberMetadata | None


@dataclass(frozen=True, slots=True)
class TargetEpochRecord:
    """The target assignment now corresponds to this group epoch."""

    group_id: str
    target_epoch: int
    assignor: str


@dataclass(frozen=True, slots=True)
class TargetMemberRecord:
    """One member's part of the target assignment (None: removed from the target)."""

    group_id: str
    member_id: str
    shards: ShardSet | None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    group_id: str
    member_id: str
    current: CurrentAssignment | None


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """A committed offset (offset None: deleted)."""

    group_id: str
    shard: Shard
    offset: int | None
    metadata: str = ""
    commit_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ParallelismRecord:
    """How many key ranges the group cuts each partition of ``topic`` into (None: back to 1, the
    whole partition). A group setting an operator makes (`regroup.protocol.keyrange`)."""

    group_id: str
    topic: str
    parallelism: int | None


@dataclass(frozen=True, slots=True)
class ExternalHold:
    """The shards a group outside regroup holds while a regroup group migrates from it
    (`regroup.protocol.external`): ``holder`` names it (``kafka:GROUP``); until it was read once
    (``known`` False) it may hold anything, so it holds everything."""

    holder: str
    shards: ShardSet
    known: bool = True


@dataclass(frozen=True, slots=True)
class ExternalHoldRecord:
    """What an external group holds of this group's shards (None: no migration, nothing held)."""

    group_id: str
    hold: ExternalHold | None


@dataclass(frozen=True, slots=True)
class EmptySinceRecord:
    """Offsets retention: the group has been seen empty since ``since_ms`` (wall-clock unix ms), at
    group epoch ``epoch`` (None: the mark is dropped). A mark of the coordinator, for a group of
    either kind, kept beside the groups and not in one (`regroup.protocol.retention`)."""

    group_id: str
    since_ms: int | None
    epoch: int = 0


Record = (
    GroupEpochRecord
    | SubscribedTopicsRecord
    | RegexRecord
    | MemberMetadataRecord
    | TargetEpochRecord
    | TargetMemberRecord
    | CurrentAssignmentRecord
    | OffsetRecord
    | ParallelismRecord
    | ExternalHoldRecord
    | EmptySinceRecord
)
