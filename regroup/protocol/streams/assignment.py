"""What a task assignor is given and what it must return, and the check of any task assignment.

A task assignor is a pure function from a streams group's tasks, its processes and their members,
the current target (for stickiness) and the lag of every task copy each process holds, to a new
target: for every member, the tasks it runs as *active*, keeps as *standby* replicas, and restores
as *warm-ups*. The coordinator checks whatever an assignor returns with `validate_task_assignment`
before installing it, as it does for consumer-group assignors (`assignors/base.py`).

Lag is per *process*, not per member: a task's local state lives in the process's state directory,
which every member (thread) of the process shares; the process id outlives restarts, so a restarted
process that reports a small lag has proven it still holds the state.

Invariants of every valid assignment (what `validate_task_assignment` checks):

1. Only the spec's members and tasks appear, and every member has an entry.
2. Every task has exactly one active member (unless the group has no member at all).
3. A task has at most one role on one process: an active and a standby or warm-up of the same task
   never share a process (they would share one state store), nor do two standbys.
4. At most ``standby_replicas`` standbys per task and ``max_warmups`` warm-ups in the whole group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.streams.topology import TaskId

__all__ = [
    "EMPTY_TASKS",
    "AssignmentConfig",
    "MemberTasks",
    "ProcessSpec",
    "TaskAssignment",
    "TaskAssignmentSpec",
    "TaskAssignor",
    "TaskSet",
    "validate_task_assignment",
]

TaskSet = frozenset[TaskId]
EMPTY_TASKS: TaskSet = frozenset()


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message)


@dataclass(frozen=True, slots=True)
class MemberTasks:
    """One member's tasks by role (Kafka's ``TasksTuple``)."""

    active: TaskSet = EMPTY_TASKS
    standby: TaskSet = EMPTY_TASKS
    warmup: TaskSet = EMPTY_TASKS

    def roles(self) -> tuple[tuple[str, TaskSet], ...]:
        return (("active", self.active), ("standby", self.standby), ("warm-up", self.warmup))


NO_TASKS = MemberTasks()


@dataclass(frozen=True, slots=True)
class AssignmentConfig:
    """A streams group's assignment settings (defaults are Kafka Streams' KIP-441 defaults)."""

    standby_replicas: int = 0
    acceptable_recovery_lag: int = 10_000  # records; a copy this close to the end is caught up
    max_warmups: int = 2  # for the whole group: each one restores state, which costs I/O

    def __post_init__(self) -> None:
        for name in ("standby_replicas", "acceptable_recovery_lag", "max_warmups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _invalid(f"{name} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process: its members' current targets, and the lag of each task copy it holds.

    ``lags`` maps a task to how many records its local copy is behind; a task that is absent (or
    maps to None) has no copy here. A running active copy reports its lag like any other.
    """

    process_id: str
    members: Mapping[str, MemberTasks]
    lags: Mapping[TaskId, int | None] = field(default_factory=dict)

    def lag(self, task: TaskId) -> int | None:
        return self.lags.get(task)


@dataclass(frozen=True, slots=True)
class TaskAssignmentSpec:
    """The whole input of a task assignor."""

    tasks: frozenset[TaskId]
    processes: Mapping[str, ProcessSpec]
    config: AssignmentConfig = AssignmentConfig()

    def __post_init__(self) -> None:
        owner: dict[str, str] = {}
        for pid, proc in self.processes.items():
            if not isinstance(pid, str) or not pid:
                raise _invalid(f"a process id must be a non-empty string, got {pid!r}")
            if proc.process_id != pid:
                raise _invalid(f"process {pid!r} is filed under the id {proc.process_id!r}")
            for mid in proc.members:
                if not isinstance(mid, str) or not mid:
                    raise _invalid(f"process {pid!r} has a member id {mid!r}; member ids must be "
                                   f"non-empty strings")
                other = owner.setdefault(mid, pid)
                if other != pid:
                    raise _invalid(f"member {mid!r} belongs to both process {other!r} and {pid!r}")
            for task, lag in proc.lags.items():
                if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or lag < 0):
                    raise _invalid(f"process {pid!r} reports lag {lag!r} for task {task}; a lag is "
                                   f"a non-negative number of records")

    def process_of(self) -> dict[str, str]:
        """``{member id: process id}``."""
        return {mid: pid for pid, proc in self.processes.items() for mid in proc.members}


#: The output of a task assignor: every member id of the input mapped to its tasks by role.
TaskAssignment = dict[str, MemberTasks]


@runtime_checkable
class TaskAssignor(Protocol):
    """A named, pure, deterministic task assignment strategy (see the invariants above)."""

    name: str

    def assign(self, spec: TaskAssignmentSpec) -> TaskAssignment: ...


def validate_task_assignment(spec: TaskAssignmentSpec,
                             result: Mapping[str, MemberTasks]) -> TaskAssignment:
    """Check ``result`` against the invariants above; INVALID_ASSIGNMENT names the first broken.

    Returns the assignment as a plain dict of frozen sets.
    """

    def bad(msg: str) -> ProtocolError:
        return ProtocolError(ErrorCode.INVALID_ASSIGNMENT, msg)

    process_of = spec.process_of()
    extra = sorted(set(result) - set(process_of))
    if extra:
        raise bad(f"the assignment names members that are not in the group: {extra}")
    missing = sorted(set(process_of) - set(result))
    if missing:
        raise bad(f"the assignment leaves out members of the group: {missing}")

    out: TaskAssignment = {}
    active_of: dict[TaskId, str] = {}
    role_on: dict[tuple[TaskId, str], tuple[str, str]] = {}  # (task, process) -> (role, member)
    standbys: dict[TaskId, int] = {}
    warmups = 0
    for mid in sorted(result):
        tasks = result[mid]
        if not isinstance(tasks, MemberTasks):
            raise bad(f"member {mid!r} was given {tasks!r}, which is not a MemberTasks")
        frozen = MemberTasks(frozenset(tasks.active), frozenset(tasks.standby),
                             frozenset(tasks.warmup))
        pid = process_of[mid]
        for role, ts in frozen.roles():
            for task in sorted(ts, key=_task_key):
                if not isinstance(task, TaskId) or task not in spec.tasks:
                    named = task if isinstance(task, TaskId) else repr(task)
                    raise bad(f"member {mid!r} was given {role} task {named}, which is not a task "
                              f"of the group")
                held = role_on.setdefault((task, pid), (role, mid))
                if held != (role, mid):
                    raise bad(f"task {task} has two roles on process {pid!r}: {held[0]} on member "
                              f"{held[1]!r} and {role} on member {mid!r}")
                if role == "active":
                    prev = active_of.setdefault(task, mid)
                    if prev != mid:
                        raise bad(f"task {task} is active on both {prev!r} and {mid!r}")
                elif role == "standby":
                    standbys[task] = standbys.get(task, 0) + 1
                else:
                    warmups += 1
        out[mid] = frozen
    unowned = sorted(spec.tasks - active_of.keys())
    if unowned and process_of:
        raise bad(f"tasks without an active member: {', '.join(map(str, unowned[:20]))}")
    over = sorted(t for t, n in standbys.items() if n > spec.config.standby_replicas)
    if over:
        raise bad(f"task {over[0]} has {standbys[over[0]]} standbys; the group allows "
                  f"{spec.config.standby_replicas}")
    if warmups > spec.config.max_warmups:
        raise bad(f"the assignment has {warmups} warm-ups; the group allows "
                  f"{spec.config.max_warmups}")
    return out


def _task_key(task: object) -> tuple[str, int, int, int]:
    """Sort key that tolerates junk (so the error names the junk rather than a TypeError)."""
    if isinstance(task, TaskId):
        return (task.subtopology, task.partition, task.part, task.parts)
    return ("\uffff" + repr(task), 0, 0, 0)
