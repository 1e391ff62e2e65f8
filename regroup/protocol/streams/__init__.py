"""Streams groups: a topology's tasks, and where each task runs as active, standby or warm-up.

`topology` turns declared subtopologies and the topics' partition counts into tasks (or says why
it cannot yet); `assignment` is the contract every task assignor meets and the check of its result;
`assignor` is the built-in lag-aware assignor with warm-ups (KIP-441 semantics).
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
    "ConfiguredTopology",
    "HighlyAvailableAssignor",
    "MemberTasks",
    "ProcessSpec",
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
    "validate_task_assignment",
]
