"""How `regroup groups describe` prints a streams group: readiness, topology, every member's tasks
by role, and every task copy's lag and warm-up progress.

A task is spelled as Kafka spells it, ``subtopology_partition``; a member's tasks of one role are
grouped by subtopology (``count[0,1,2]``), as a consumer's partitions are by topic. A key-range task
(a subtopology with parallelism K) is ``count_0.1of2`` on its own and ``count[0.1of2]`` in a group:
range 1 of 2 of partition 0. Client-chosen names are printed literally (`regroup.admin`'s rule).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from regroup.admin import _console, _dash, _lit, _row
from regroup.coordinator.logs import escape_controls
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.describe import StreamsGroupDescription, StreamsMemberDescription
from regroup.protocol.streams.topology import TaskId


def print_streams_group(d: StreamsGroupDescription, json_output: bool) -> None:
    """A streams group: readiness, topology, every member's tasks by role, every task copy's lag."""
    from regroup.rpc.views import streams_group_json

    if json_output:
        print(json.dumps(streams_group_json(d)))
        return
    c = _console()
    c.print(Text.assemble((escape_controls(d.group_id), "bold"), "  streams group  state ",
                          (d.state.value, "bold"), f"  group epoch {d.epoch}  target epoch {d.target_epoch}"))
    if d.status.ready:
        c.print("ready: the topology runs on the topics as they are")
    else:
        c.print(Text.assemble(("not ready", "red"), ": nothing is assigned until this is fixed:"))
        for reason in d.status.reasons:
            c.print(_lit(f"  - {reason}"))
    if d.topology is None:
        c.print("topology: none yet (no member sent one)")
    else:
        c.print(_lit("topology: " + "; ".join(
            f"{s.subtopology_id} <- {', '.join(sorted(s.source_topics))}"
            + (f" ({s.parallelism} key ranges per partition)" if s.parallelism > 1 else "")
            for s in sorted(d.topology.subtopologies, key=lambda s: s.subtopology_id))))
    members = Table("member", "instance", "process", "epoch", "state", "active", "standby", "warm-up",
                    "revoking", "target (when different)", title="members")
    for m in d.members:
        _row(members, m.member_id, m.instance_id or "-", m.process_id, m.epoch, m.status.value,
             _tasks(m.assigned.active), _tasks(m.assigned.standby), _tasks(m.assigned.warmup),
             _by_role(m.pending_revocation), "-" if m.target == m.assigned else _by_role(m.target))
    c.print(members)
    copies = Table("process", "task", "role", "lag (records)", "warm-up progress",
                   title="task copies by process (lag behind the committed offsets)")
    for process, task, roles, lag, progress in _copies(d.members):
        _row(copies, process, task, roles, _dash(lag), progress)
    c.print(copies)


def _tasks(tasks: Iterable[TaskId]) -> str:
    """``count[0,1,2] join[4]``: tasks grouped by subtopology, as partitions are by topic; a key-range
    task is its partition and range, ``count[0.0of2,0.1of2]``."""
    by_sub: dict[str, list[str]] = {}
    for t in sorted(tasks):
        by_sub.setdefault(t.subtopology, []).append(str(t)[len(t.subtopology) + 1:])
    return " ".join(f"{sub}[{','.join(ps)}]" for sub, ps in by_sub.items()) or "-"


def _by_role(tasks: MemberTasks) -> str:
    """``active count[0] standby count[1,2]``: the roles that have tasks."""
    return "  ".join(f"{role} {_tasks(ts)}" for role, ts in tasks.roles() if ts) or "-"


def _roles_of(m: StreamsMemberDescription, task: TaskId) -> list[str]:
    """What one member does with one task: its role, revoking one, or awaiting one of its target."""
    assigned, revoking, target = m.assigned.roles(), m.pending_revocation.roles(), m.target.roles()
    return [*(role for role, ts in assigned if task in ts),
            *(f"revoking {role}" for role, ts in revoking if task in ts),
            *(f"awaiting {role}" for (role, ts), (_, now) in zip(target, assigned, strict=True)
              if task in ts and task not in now)]


def _copies(members: Iterable[StreamsMemberDescription],
            ) -> list[tuple[str, TaskId, str, int | None, str]]:
    """One row per process and task copy: the roles its members give it, its lag (None: not
    reported) and, for a warm-up, how far it is from being caught up."""
    by_process: dict[str, list[StreamsMemberDescription]] = {}
    for m in members:
        by_process.setdefault(m.process_id, []).append(m)
    rows = []
    for process, ms in sorted(by_process.items()):
        lags = ms[0].lags  # the process's: every member of a process carries the same
        warm = {w.task: w for m in ms for w in m.warmups}
        tasks: set[TaskId] = set(lags)
        for m in ms:
            for held in (m.assigned, m.pending_revocation, m.target):
                tasks |= held.active | held.standby | held.warmup
        for task in sorted(tasks):
            roles = [f"{r} ({m.member_id})" if len(ms) > 1 else r for m in ms for r in _roles_of(m, task)]
            w = warm.get(task)
            if w is None:
                progress = "-"
            elif w.lag is None:
                progress = f"no report yet (caught up at <= {w.acceptable_lag})"
            elif w.caught_up:
                progress = f"caught up: {w.lag} <= {w.acceptable_lag}"
            else:
                progress = f"restoring: {w.lag} behind, caught up at <= {w.acceptable_lag}"
            rows.append((process, task, ", ".join(roles) or "dormant", lags.get(task), progress))
    return rows
