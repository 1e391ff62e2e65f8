"""What a streams group's target should be, and when a copy's report calls for a new one.

Rules:

1. A group whose topology cannot run on the topics (missing topics, source topics of a subtopology
   not co-partitioned) is *not ready*: its target gives every member nothing, and its status names
   the topics. Running on mismatched partitions would join records that do not belong together.
2. Otherwise the target is the `HighlyAvailableAssignor`'s, over the members' current targets (for
   stickiness) and the lags their processes last reported, checked with `validate_task_assignment`.
3. Promotion by event: a heartbeat that shows a warm-up of the member's target caught up (lag <=
   ``acceptable_recovery_lag``) while the last target computation saw it behind or did not see it,
   is a reason for a new target now. So is a standby that has caught up while the last computation
   saw it behind, or saw its process without a copy of the task (the assignor moves a task to a
   caught-up standby without a warm-up). A standby whose process had not reported at all when the
   target was computed (the first reports after a coordinator restart) is not: the target did not
   wait for it, and a bump per member after every restart would be churn for nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from regroup.protocol.causes import WarmupCaughtUp
from regroup.protocol.streams.assignment import (
    NO_TASKS,
    AssignmentConfig,
    MemberTasks,
    ProcessSpec,
    TaskAssignment,
    TaskAssignmentSpec,
    validate_task_assignment,
)
from regroup.protocol.streams.assignor import HighlyAvailableAssignor
from regroup.protocol.streams.messages import GroupStatus
from regroup.protocol.streams.state import StreamsGroup
from regroup.protocol.streams.topology import TaskId, TopologyReady, configure
from regroup.protocol.topics import TopicMetadata

__all__ = ["ASSIGNOR", "caught_up", "group_status", "new_target"]

ASSIGNOR = HighlyAvailableAssignor()

ProcessLags = Mapping[str, Mapping[TaskId, int]]


def group_status(group: StreamsGroup) -> GroupStatus:
    """Rule 1, as the members and `describe` see it."""
    if group.topology is None:
        return GroupStatus(False, ("the group has no topology yet",))
    configured = configure(group.topology, TopicMetadata(group.source_topics))
    if isinstance(configured, TopologyReady):
        return GroupStatus()
    return GroupStatus(False, configured.reasons)


def new_target(group: StreamsGroup, lags: ProcessLags, config: AssignmentConfig) -> TaskAssignment:
    """Rules 1 and 2: every member of the group mapped to its tasks by role."""
    configured = configure(group.topology, TopicMetadata(group.source_topics)) \
        if group.topology is not None else None
    if not isinstance(configured, TopologyReady):
        return dict.fromkeys(group.members, NO_TASKS)
    tasks = frozenset(configured.tasks)
    members: dict[str, dict[str, MemberTasks]] = {}
    for mid, m in sorted(group.members.items()):
        members.setdefault(m.process_id, {})[mid] = group.member_target(mid)
    processes = {pid: ProcessSpec(pid, ms, {t: lag for t, lag in lags.get(pid, {}).items() if t in tasks})
                 for pid, ms in members.items()}
    spec = TaskAssignmentSpec(tasks, processes, config)
    return validate_task_assignment(spec, ASSIGNOR.assign(spec))


def caught_up(group: StreamsGroup, member_id: str, lags: Mapping[TaskId, int],
              seen: Mapping[tuple[str, TaskId], int], seen_processes: Collection[str],
              limit: int) -> list[WarmupCaughtUp]:
    """Rule 3 for one member's heartbeat: the copies whose catching up calls for a new target.

    ``lags`` are the member's process's lags now; ``seen`` and ``seen_processes`` what the last
    computation used.
    """
    target = group.member_target(member_id)
    if group.epoch > group.target_epoch or (not target.warmup and not target.standby):
        return []
    pid = group.members[member_id].process_id
    out = []
    for task in sorted(target.warmup | target.standby):
        lag = lags.get(task)
        if lag is None or lag > limit:
            continue
        before = seen.get((pid, task))
        if before is not None and before <= limit:
            continue  # the target already counted on it
        if before is None and task not in target.warmup and pid not in seen_processes:
            continue
        out.append(WarmupCaughtUp(member_id, str(task), lag))
    return out
