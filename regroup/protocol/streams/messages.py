"""A streams-group heartbeat and its answer, as plain immutable values.

As in consumer groups (`regroup.protocol.messages`): times are milliseconds, the member epochs 0, -1
and -2 mean join, leave and static leave, and a field left as None means "unchanged since my last
heartbeat". A join must send its process id, its rebalance timeout and its topology.

The process id names the state directory, not the run: the member persists it beside its local
state and sends it again after a restart, which is how the coordinator knows that the restarted
process still holds its task copies (and how lags of one process's members are pooled).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.topology import TaskId, Topology

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "GroupStatus",
    "StreamsHeartbeatRequest",
    "StreamsHeartbeatResponse",
    "TaskOffsets",
]

#: For each task copy a member holds locally, the source offsets its state has reached.
TaskOffsets = Mapping[TaskId, Mapping[Shard, int]]


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    process_id: str | None = None
    rebalance_timeout_ms: int | None = None
    #: Sent on join and whenever it changes.
    topology: Topology | None = None
    #: The tasks the member runs, by role (None = unchanged since the last heartbeat).
    owned: MemberTasks | None = None
    #: Every local copy (active, standby, warm-up or dormant on disk), complete when sent.
    task_offsets: TaskOffsets | None = None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """Whether the group's topology can run on the topics as they are; why not, naming topics."""

    ready: bool = True
    reasons: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


READY = GroupStatus()


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatResponse:
    error: ErrorCode
    message: str = ""
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: The member's tasks by role, or None when unchanged since the last response.
    assignment: MemberTasks | None = None
    status: GroupStatus = READY
    #: The coordinator's session timeout (0: not said), which the member's own check must follow.
    session_timeout_ms: int = 0
    #: How long after its connection broke this member may be fenced (`regroup.protocol.failover`;
    #: 0 = never early).
    failover_grace_ms: int = 0
