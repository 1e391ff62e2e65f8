"""Streams groups: a topology's tasks, and where each task runs as active, standby or warm-up.

`topology` turns declared subtopologies and the topics' partition counts into tasks (or says why
it cannot yet); `assignment` is the contract every task assignor meets and the check of its result;
`assignor` is the built-in lag-aware assignor with warm-ups (KIP-441 semantics).

The group itself, one job per module: `messages` (the heartbeat), `records` and `state` (durable
facts and the only code that applies them), `lags` (the soft state: reported task offsets),
`reconcile` (one member's next safe step), `fencing` (who may heartbeat as whom), `target` (the
target and the promotion rule), `describe`, and `coordinator` (`StreamsGroups`, the doors).
`coordinator` is not re-exported here: it imports the consumer-group `Outcome`, and the consumer
`Coordinator` will import this package, so importing it here would make a cycle.
"""

from __future__ import annotations

from regroup.protocol.streams.assignment import (
    EMPTY_TASKS,
    AssignmentConfig,
    MemberTasks,
    ProcessSpec,
    TaskAssignment,
    TaskAssignmentSpec,
    TaskAssignor,
    TaskSet,
    validate_task_assignment,
)
from regroup.protocol.streams.assignor import HighlyAvailableAssignor
from regroup.protocol.streams.lags import CommittedOffsets, offsets_from
from regroup.protocol.streams.messages import (
    GroupStatus,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
)
from regroup.protocol.streams.records import StreamsRecord
from regroup.protocol.streams.topology import (
    ConfiguredTopology,
    Subtopology,
    TaskId,
    Topology,
    TopologyNotReady,
    TopologyReady,
    configure,
)

__all__ = [
    "EMPTY_TASKS",
    "AssignmentConfig",
    "CommittedOffsets",
    "ConfiguredTopology",
    "GroupStatus",
    "HighlyAvailableAssignor",
    "MemberTasks",
    "ProcessSpec",
    "StreamsHeartbeatRequest",
    "StreamsHeartbeatResponse",
    "StreamsRecord",
    "Subtopology",
    "TaskAssignment",
    "TaskAssignmentSpec",
    "TaskAssignor",
    "TaskId",
    "TaskSet",
    "Topology",
    "TopologyNotReady",
    "TopologyReady",
    "configure",
    "offsets_from",
    "validate_task_assignment",
]
