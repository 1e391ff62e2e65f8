"""Small builders for task-assignor inputs, and readings of its outputs, shared by the tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from regroup.protocol.streams.assignment import (
    AssignmentConfig,
    MemberTasks,
    ProcessSpec,
    TaskAssignment,
    TaskAssignmentSpec,
    validate_task_assignment,
)
from regroup.protocol.streams.assignor import HighlyAvailableAssignor
from regroup.protocol.streams.topology import TaskId

NO_COPY = None


def t(n: int, sub: str = "s") -> TaskId:
    return TaskId(sub, n)


def ts(*ns: int, sub: str = "s") -> frozenset[TaskId]:
    return frozenset(TaskId(sub, n) for n in ns)


def tasks(n: int, sub: str = "s") -> frozenset[TaskId]:
    return frozenset(TaskId(sub, i) for i in range(n))


def roles(active: Iterable[TaskId] = (), standby: Iterable[TaskId] = (),
          warmup: Iterable[TaskId] = ()) -> MemberTasks:
    return MemberTasks(frozenset(active), frozenset(standby), frozenset(warmup))


def spec(all_tasks: Iterable[TaskId], members: Mapping[str, Mapping[str, MemberTasks]],
         lags: Mapping[str, Mapping[TaskId, int | None]] | None = None,
         **config: int) -> TaskAssignmentSpec:
    """``members``: process id -> member id -> current roles; ``lags``: process id -> lags."""
    lags = lags or {}
    return TaskAssignmentSpec(
        frozenset(all_tasks),
        {pid: ProcessSpec(pid, dict(ms), dict(lags.get(pid, {}))) for pid, ms in members.items()},
        AssignmentConfig(**config),
    )


def again(s: TaskAssignmentSpec, out: TaskAssignment,
          lags: Mapping[str, Mapping[TaskId, int | None]] | None = None) -> TaskAssignmentSpec:
    """``s`` with ``out`` as the current target (and new lags where given)."""
    return TaskAssignmentSpec(
        s.tasks,
        {pid: ProcessSpec(pid, {m: out[m] for m in p.members},
                          dict(lags[pid]) if lags is not None and pid in lags else p.lags)
         for pid, p in s.processes.items()},
        s.config,
    )


def run(s: TaskAssignmentSpec) -> TaskAssignment:
    out = HighlyAvailableAssignor().assign(s)
    assert validate_task_assignment(s, out) == out
    return out


def active_owner(out: TaskAssignment) -> dict[TaskId, str]:
    return {task: m for m, r in out.items() for task in r.active}


def active_counts(out: TaskAssignment) -> Counter[str]:
    return Counter({m: len(r.active) for m, r in out.items()})


def warmups(out: TaskAssignment) -> dict[TaskId, str]:
    return {task: m for m, r in out.items() for task in r.warmup}


def standbys(out: TaskAssignment) -> dict[TaskId, set[str]]:
    found: dict[TaskId, set[str]] = {}
    for m, r in out.items():
        for task in r.standby:
            found.setdefault(task, set()).add(m)
    return found


def balanced(out: TaskAssignment) -> bool:
    counts = active_counts(out).values()
    return not counts or max(counts) - min(counts) <= 1
