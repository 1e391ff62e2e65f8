"""Requests and responses of the protocol, as plain immutable values.

Times are integers in milliseconds. In a heartbeat, a field left as None means "unchanged since my
last heartbeat"; a join (epoch 0) must fill in the subscription and the rebalance timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from regroup.protocol.errors import ErrorCode
from regroup.protocol.shard import Shard, ShardSet

#: Member epochs with a special meaning in a heartbeat request.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int | None = None
    subscribed_topics: tuple[str, ...] | None = None
    #: None = unchanged; "" = drop the regex subscription.
    subscribed_regex: str | None = None
    #: Server-side assignor this member asks for (None = unchanged / the group's default).
    assignor: str | None = None
    #: Assignors this member can run itself when the coordinator delegates the computation.
    client_assignors: tuple[str, ...] | None = None
    #: The shards the member currently owns (None = unchanged since the last heartbeat).
    owned: ShardSet | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    message: str = ""
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: The member's full assignment, or None when it has not changed since the last response.
    assignment: ShardSet | None = None
    #: Delegated assignment: this member should fetch the group spec and compute the target.
    should_compute_assignment: bool = False
    #: The server-decided session timeout: silent this long, the member is fenced (0 = not said).
    session_timeout_ms: int = 0
    #: How long after its connection broke this member may be fenced (`regroup.protocol.failover`;
    #: 0 = never early: a static member, the rule off, or not said).
    failover_grace_ms: int = 0


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """A commit from a member, at its current epoch, of shards it holds."""

    group_id: str
    member_id: str
    member_epoch: int
    offsets: Mapping[Shard, int]
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetResetRequest:
    """An operator sets committed offsets (also backwards); only while the group has no members."""

    group_id: str
    offsets: Mapping[Shard, int]
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """Committed offsets of ``shards`` (all of the group's when None).

    A member passes its id and epoch and is fenced like a commit; an operator leaves them as they are.
    """

    group_id: str
    member_id: str = ""
    member_epoch: int = LEAVE_EPOCH
    shards: tuple[Shard, ...] | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    #: Epoch of the member that committed it (-1 for an operator's reset), for troubleshooting.
    commit_epoch: int = LEAVE_EPOCH


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error: ErrorCode
    message: str = ""
    offsets: Mapping[Shard, CommittedOffset] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ack:
    """The answer to a request that returns nothing but success or an error."""

    error: ErrorCode
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is ErrorCode.NONE
