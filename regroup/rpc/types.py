"""Values the RPC API returns beyond the protocol core's own (the core's types are reused as they are).

`GroupDetails` wraps the core's `GroupDescription` with what only the service knows: which client
process and host each member heartbeats from, per-partition offsets with log-end offsets and lag
(``kafka-consumer-groups --describe --members --verbose`` / ``--offsets``), and the recent history of
the group's epochs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from regroup.protocol.describe import GroupDescription
from regroup.protocol.shard import Shard
from regroup.protocol.state import GroupState
from regroup.protocol.streams.state import StreamsGroupState


@dataclass(frozen=True, slots=True)
class EpochChange:
    """The group epoch ("group") or the target epoch ("target") moved, made durable at a wall time."""

    at_unix_ms: int
    kind: str
    epoch: int
    #: What moved it, as far as the records of that step tell ("member m1 joined", ...).
    cause: str = ""


@dataclass(frozen=True, slots=True)
class MemberClient:
    """Where a member's heartbeats come from, as seen by the service since it started."""

    client_id: str = ""
    client_host: str = ""
    #: Milliseconds since its last heartbeat; -1 when none arrived since the coordinator started.
    last_heartbeat_age_ms: int = -1


@dataclass(frozen=True, slots=True)
class OffsetStatus:
    """One partition of a group: committed offset, log end, lag and owner (None = unknown / none)."""

    shard: Shard
    committed: int | None = None
    metadata: str = ""
    commit_epoch: int = -1
    log_end_offset: int | None = None
    lag: int | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class GroupDetails:
    description: GroupDescription
    #: Per member id (members without a heartbeat since the coordinator started are absent).
    clients: Mapping[str, MemberClient] = field(default_factory=dict)
    #: Every partition of the subscribed topics plus every partition with a committed offset.
    offsets: tuple[OffsetStatus, ...] = ()
    #: Oldest first, bounded per group.
    history: tuple[EpochChange, ...] = ()
    #: The address of the coordinator that answered.
    coordinator: str = ""


class GroupListing(NamedTuple):
    """One group of ListGroups, of either kind; unpacks as ``(group id, state, member count)``."""

    group_id: str
    #: A consumer group's `GroupState` or a streams group's `StreamsGroupState`.
    state: GroupState | StreamsGroupState
    members: int

    @property
    def kind(self) -> str:
        """``consumer`` or ``streams``: which describe call describes the group."""
        return "streams" if isinstance(self.state, StreamsGroupState) else "consumer"


@dataclass(frozen=True, slots=True)
class Nudge:
    """A push from the coordinator: this member has work, heartbeat now."""

    group_id: str
    member_id: str
    #: The group epoch when the nudge was sent (informational only).
    group_epoch: int


@dataclass(frozen=True, slots=True)
class TopicsInfo:
    topics: Mapping[str, int]
    #: Milliseconds since the log backend last answered (-1: never).
    age_ms: int = -1
    #: The last refresh error ("" when the last refresh worked).
    error: str = ""
