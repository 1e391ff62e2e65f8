"""Conversions between the protobuf messages of streams groups and the protocol core's values.

`wire`'s rules hold here too, and its helpers are shared (offsets, enums, optional strings):

1. Both the server and the client use these functions, so a value survives ``to_pb`` then
   ``from_pb`` unchanged (tests/coordinator/test_wire_streams.py checks it).
2. "None = unchanged" travels as field presence: proto3 ``optional`` scalars (``instance_id``,
   ``process_id``, ``rebalance_timeout_ms``) and message fields that are set or not (``topology``,
   ``owned``, ``task_offsets``, the response's ``assignment``). A present `pb.MemberTasks` with no
   tasks is "no tasks", which is not "unchanged"; the same for an empty `pb.TaskOffsets`.
3. Sets and mappings are written sorted (subtopologies, then partitions), so equal values give
   equal messages.
4. Decoding checks only what the protobuf types cannot say and the core's values cannot hold, and
   raises `WireError` naming the field (the server answers INVALID_REQUEST): a task listed twice in
   one role (found on the listed integers by the core's `tasks_from_listing`, before any task is
   built), a request owning more tasks in all roles than the coordinator's ``max_owned_shards``
   (counted as listed, before anything is built), a task's offsets given twice or a source
   partition twice within one task, a source topic listed twice in a subtopology, a topology
   that `Topology` itself refuses (no subtopology, a blank or repeated id, a topic feeding two
   subtopologies: a value that cannot exist), a lag given twice for one task, an enum value this
   version does not know. A request's names and numbers are held to the coordinator's documented
   limits here too, on the listing as sent (`regroup.protocol.validation.check_named_numbers`): a
   subtopology id over 255 characters or a blank one in owned tasks and task offsets, a source topic
   over 249, more than 10,000 source topics, a negative partition in owned tasks or task offsets
   (the core's streams validation checks none of them; `regroup chaos fuzz` found them accepted
   and stored), and more task copies or offsets in ``task_offsets`` than ``max_owned_shards``
   (counted before anything is built). Everything else (member ids, epochs, negative offsets, a
   task in two roles, whether the topology fits the topics) is the protocol core's validation, with
   the core's messages.
5. A `StreamsGroupStatus` left out means ready, the core's default.
6. Key-range tasks (`regroup.protocol.streams.topology` rule 4) travel as extra fields that are 0 for a
   whole partition, so a K=1 message is byte for byte what it was: a task listing's ``parallelism``
   and one ``parts`` entry per listed partition, a subtopology's ``parallelism``, a task position's,
   lag's or warm-up's ``part`` and ``parallelism``. A range outside ``0..K-1``, a ``parts`` list of
   another length than ``partitions``, ranges without a parallelism, or a parallelism over the
   limit are refused naming the field.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ProtocolError
from regroup.protocol.keyrange import MAX_PARALLELISM
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.describe import (
    StreamsGroupDescription,
    StreamsMemberDescription,
    WarmupProgress,
)
from regroup.protocol.streams.fencing import tasks_from_listing
from regroup.protocol.streams.messages import (
    READY,
    GroupStatus,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
    TaskOffsets,
)
from regroup.protocol.streams.state import StreamsGroupState
from regroup.protocol.streams.topology import Subtopology, TaskId, Topology
from regroup.protocol.validation import check_length, check_named_numbers
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.errors import WireError
from regroup.rpc.wire import (
    _STATUS_TO_PB,
    DEFAULT_MAX_OWNED,
    _enum_map,
    _offsets_from_pb,
    _offsets_to_pb,
    _opt,
    _status_from_pb,
    error_from_pb,
    error_to_pb,
)

__all__ = [
    "member_tasks_from_pb",
    "member_tasks_to_pb",
    "streams_description_from_pb",
    "streams_description_to_pb",
    "streams_heartbeat_request_from_pb",
    "streams_heartbeat_request_to_pb",
    "streams_heartbeat_response_from_pb",
    "streams_heartbeat_response_to_pb",
    "streams_state_from_pb",
    "streams_state_to_pb",
    "task_offsets_from_pb",
    "task_offsets_to_pb",
    "topology_from_pb",
    "topology_to_pb",
]

_STATE_TO_PB = {StreamsGroupState[n]: v for n, v in _enum_map(
    "STREAMS_GROUP_STATE_", StreamsGroupState.__members__, pb.StreamsGroupState).items()}
_STATE_FROM_PB = {v: k for k, v in _STATE_TO_PB.items()}


def streams_state_to_pb(state: StreamsGroupState) -> pb.StreamsGroupState:
    return _STATE_TO_PB[state]  # type: ignore[return-value]


def streams_state_from_pb(value: int) -> StreamsGroupState:
    state = _STATE_FROM_PB.get(value)
    if state is None:
        raise WireError(f"unknown streams group state {value}")
    return state


#: The limits on names and numbers a request's tasks, topology and task offsets are held to (the
#: coordinator's own: `ServerConfig` never changes them).
_LIMITS = CoordinatorConfig()


def _check(rule: Callable[..., None], *args: Any) -> None:
    """A check of `regroup.protocol.validation` on the wire: its refusal as a `WireError`."""
    try:
        rule(*args)
    except ProtocolError as e:
        raise WireError(e.message) from e


# ---------------------------------------------------------------------------------------- tasks


def _tasks_to_pb(tasks: Iterable[TaskId], out: RepeatedCompositeFieldContainer[pb.SubtopologyTasks]) -> None:
    by_sub: dict[tuple[str, int], list[TaskId]] = {}
    for t in tasks:
        by_sub.setdefault((t.subtopology, t.parts), []).append(t)
    for sub, parts in sorted(by_sub):
        listed = sorted(by_sub[sub, parts])
        if parts == 1:
            out.add(subtopology=sub, partitions=[t.partition for t in listed])
        else:
            out.add(subtopology=sub, partitions=[t.partition for t in listed], parallelism=parts,
                    parts=[t.part for t in listed])


def _task_listing(e: pb.SubtopologyTasks, where: str) -> tuple[str | tuple[str, int], list[int] | Any]:
    """One group of a task listing as `tasks_from_listing` takes it; key-range tasks by number
    ``partition * K + range`` after checking the cut (rule 4)."""
    k = e.parallelism
    if k <= 1:
        if k < 0 or e.parts:
            raise WireError(f"{where}: subtopology {e.subtopology!r} lists key ranges with parallelism "
                            f"{k}; give parallelism > 1 with them, or no key ranges")
        return e.subtopology, e.partitions
    if k > MAX_PARALLELISM:
        raise WireError(f"{where}: subtopology {e.subtopology!r} has parallelism {k}; the limit is "
                        f"{MAX_PARALLELISM}")
    if len(e.parts) != len(e.partitions):
        raise WireError(f"{where}: subtopology {e.subtopology!r} lists {len(e.partitions)} partitions and "
                        f"{len(e.parts)} key ranges; give one key range per listed partition")
    bad = next((r for r in e.parts if not 0 <= r < k), None)
    if bad is not None:
        raise WireError(f"{where}: subtopology {e.subtopology!r} lists key range {bad} of {k}; ranges are "
                        f"0..{k - 1}")
    return (e.subtopology, k), [p * k + r for p, r in zip(e.partitions, e.parts, strict=True)]


def _tasks_from_pb(entries: Iterable[pb.SubtopologyTasks], where: str, limit: int) -> frozenset[TaskId]:
    try:
        return tasks_from_listing(where, (_task_listing(e, where) for e in entries), limit)
    except ProtocolError as e:
        raise WireError(e.message) from e


def _task_from(subtopology: str, partition: int, part: int, parallelism: int, where: str) -> TaskId:
    """The task of a `TaskPosition`, `TaskLag` or `WarmupProgress` (parallelism 0 or 1: a whole
    partition)."""
    if parallelism <= 1:
        if parallelism < 0 or part:
            raise WireError(f"{where}: task {subtopology}_{partition} names key range {part} with "
                            f"parallelism {parallelism}")
        return TaskId(subtopology, partition)
    if parallelism > MAX_PARALLELISM or not 0 <= part < parallelism:
        raise WireError(f"{where}: task {subtopology}_{partition} names key range {part} of "
                        f"{parallelism}; ranges are 0..parallelism-1, parallelism at most {MAX_PARALLELISM}")
    return TaskId(subtopology, partition, part, parallelism)


def _task_fields(task: TaskId) -> dict[str, Any]:
    """The task's fields of a `TaskPosition`, `TaskLag` or `WarmupProgress`."""
    fields: dict[str, Any] = {"subtopology": task.subtopology, "partition": task.partition}
    if task.parts > 1:
        fields.update(part=task.part, parallelism=task.parts)
    return fields


def member_tasks_to_pb(tasks: MemberTasks, out: pb.MemberTasks | None = None) -> pb.MemberTasks:
    """A member's tasks by role, present even when it has none (rule 2)."""
    msg = pb.MemberTasks() if out is None else out
    msg.SetInParent()
    _tasks_to_pb(tasks.active, msg.active)
    _tasks_to_pb(tasks.standby, msg.standby)
    _tasks_to_pb(tasks.warmup, msg.warmup)
    return msg


def member_tasks_from_pb(msg: pb.MemberTasks, where: str = "tasks", limit: int | None = None) -> MemberTasks:
    """``where`` names the field in errors (``owned``, ``assignment``, ...); ``limit`` bounds the tasks
    listed in all roles together (a request's owned tasks: the coordinator's ``max_owned_shards``),
    counted before any task is built."""
    roles = (msg.active, msg.standby, msg.warmup)
    if limit is None:
        limit = sys.maxsize
    else:
        listed = sum(len(e.partitions) for role in roles for e in role)
        if listed > limit:  # the core's words (`streams.fencing.validate`), before building anything
            raise WireError(f"{where} lists {listed} tasks in all roles; the limit is {limit}")
        for name, role in zip(("active", "standby", "warmup"), roles, strict=True):  # a request: rule 4
            _check(check_named_numbers, f"{where}.{name}", ((e.subtopology, e.partitions) for e in role),
                   _LIMITS.max_id_length, "subtopology", "partition")
    return MemberTasks(_tasks_from_pb(msg.active, f"{where}.active", limit),
                       _tasks_from_pb(msg.standby, f"{where}.standby", limit),
                       _tasks_from_pb(msg.warmup, f"{where}.warmup", limit))


# ---------------------------------------------------------------------------------------- topology


def topology_to_pb(topology: Topology, out: pb.Topology | None = None) -> pb.Topology:
    msg = pb.Topology() if out is None else out
    msg.SetInParent()
    for s in sorted(topology.subtopologies, key=lambda s: s.subtopology_id):
        entry = msg.subtopologies.add(subtopology_id=s.subtopology_id, source_topics=sorted(s.source_topics))
        if s.parallelism != 1:
            entry.parallelism = s.parallelism
    return msg


def topology_from_pb(msg: pb.Topology, where: str = "topology", request: bool = False) -> Topology:
    """``request``: a member's topology, also held to the limits on names and topics (rule 4)."""
    if request:
        count = sum(len(s.source_topics) for s in msg.subtopologies)
        if count > _LIMITS.max_subscribed_topics:
            raise WireError(f"{where} reads {count} source topics; the limit is "
                            f"{_LIMITS.max_subscribed_topics}")
    subs = []
    for s in msg.subtopologies:
        topics = list(s.source_topics)
        if request:  # blank names are `Topology`'s to refuse
            _check(check_length, where, s.subtopology_id, _LIMITS.max_id_length, "subtopology id")
            for t in topics:
                _check(check_length, f"{where}: subtopology {s.subtopology_id!r}", t,
                       _LIMITS.max_topic_name_length, "source topic")
        twice = sorted({t for t in topics if topics.count(t) > 1})
        if twice:
            raise WireError(f"{where}: subtopology {s.subtopology_id!r} lists source topic "
                            f"{twice[0]!r} twice; list each topic once")
        subs.append(Subtopology(s.subtopology_id, frozenset(topics), s.parallelism or 1))
    try:
        return Topology(tuple(subs))
    except ProtocolError as e:  # a value that cannot exist: refused on the wire, naming the field
        raise WireError(f"{where}: {e.message}") from e


# ---------------------------------------------------------------------------------------- task offsets


def task_offsets_to_pb(offsets: TaskOffsets, out: pb.TaskOffsets | None = None) -> pb.TaskOffsets:
    """Every local task copy and the source offsets it reached, present even when empty (rule 2)."""
    msg = pb.TaskOffsets() if out is None else out
    msg.SetInParent()
    for task in sorted(offsets):
        msg.tasks.add(**_task_fields(task), topics=_offsets_to_pb(offsets[task]))
    return msg


def task_offsets_from_pb(msg: pb.TaskOffsets, where: str = "task_offsets", limit: int = DEFAULT_MAX_OWNED,
                         ) -> dict[TaskId, dict[Shard, int]]:
    """``limit`` bounds the task copies and the offsets listed in all, counted before anything is built."""
    copies, offsets = len(msg.tasks), sum(len(t.partitions) for p in msg.tasks for t in p.topics)
    if max(copies, offsets) > limit:
        raise WireError(f"{where} lists {copies} task copies and {offsets} offsets; the limit is {limit}")
    out: dict[TaskId, dict[Shard, int]] = {}
    for position in msg.tasks:  # names and numbers first (rule 4); offsets are the core's
        _check(check_named_numbers, where, [(position.subtopology, [position.partition])],
               _LIMITS.max_id_length, "subtopology", "partition")
        for t in position.topics:
            _check(check_named_numbers, f"{where} of task {position.subtopology}_{position.partition}",
                   [(t.topic, [po.partition for po in t.partitions])], _LIMITS.max_topic_name_length,
                   "topic", "partition")
        task = _task_from(position.subtopology, position.partition, position.part, position.parallelism,
                          where)
        if task in out:
            raise WireError(f"{where} lists task {task} twice; give each task copy one entry")
        try:
            out[task] = _offsets_from_pb(position.topics)
        except WireError as e:
            raise WireError(f"{where} of task {task}: {e}") from e
    return out


# ---------------------------------------------------------------------------------------- heartbeat


def streams_heartbeat_request_to_pb(req: StreamsHeartbeatRequest) -> pb.StreamsHeartbeatRequest:
    msg = pb.StreamsHeartbeatRequest(group_id=req.group_id, member_id=req.member_id,
                                     member_epoch=req.member_epoch)
    if req.instance_id is not None:
        msg.instance_id = req.instance_id
    if req.process_id is not None:
        msg.process_id = req.process_id
    if req.rebalance_timeout_ms is not None:
        msg.rebalance_timeout_ms = req.rebalance_timeout_ms
    if req.topology is not None:
        topology_to_pb(req.topology, msg.topology)
    if req.owned is not None:
        member_tasks_to_pb(req.owned, msg.owned)
    if req.task_offsets is not None:
        task_offsets_to_pb(req.task_offsets, msg.task_offsets)
    return msg


def streams_heartbeat_request_from_pb(msg: pb.StreamsHeartbeatRequest, max_owned: int = DEFAULT_MAX_OWNED,
                                      ) -> StreamsHeartbeatRequest:
    """``max_owned``: the coordinator's ``max_owned_shards``, bounding the owned tasks in all roles."""
    return StreamsHeartbeatRequest(
        group_id=msg.group_id,
        member_id=msg.member_id,
        member_epoch=msg.member_epoch,
        instance_id=_opt(msg, "instance_id"),
        process_id=_opt(msg, "process_id"),
        rebalance_timeout_ms=msg.rebalance_timeout_ms if msg.HasField("rebalance_timeout_ms") else None,
        topology=topology_from_pb(msg.topology, request=True) if msg.HasField("topology") else None,
        owned=member_tasks_from_pb(msg.owned, "owned", max_owned) if msg.HasField("owned") else None,
        task_offsets=(task_offsets_from_pb(msg.task_offsets, limit=max_owned) if msg.HasField("task_offsets")
                      else None),
    )


def _status_to_pb(status: GroupStatus, out: pb.StreamsGroupStatus) -> None:
    out.SetInParent()
    out.ready = status.ready
    out.reasons.extend(status.reasons)


def _status_from(msg: pb.StreamsHeartbeatResponse | pb.StreamsGroupDescription) -> GroupStatus:
    if not msg.HasField("status"):
        return READY  # rule 5
    return GroupStatus(msg.status.ready, tuple(msg.status.reasons))


def streams_heartbeat_response_to_pb(resp: StreamsHeartbeatResponse) -> pb.StreamsHeartbeatResponse:
    msg = pb.StreamsHeartbeatResponse(
        error=error_to_pb(resp.error), message=resp.message, member_id=resp.member_id,
        member_epoch=resp.member_epoch, heartbeat_interval_ms=resp.heartbeat_interval_ms,
        session_timeout_ms=resp.session_timeout_ms, failover_grace_ms=resp.failover_grace_ms)
    if resp.assignment is not None:
        member_tasks_to_pb(resp.assignment, msg.assignment)
    _status_to_pb(resp.status, msg.status)
    return msg


def streams_heartbeat_response_from_pb(msg: pb.StreamsHeartbeatResponse) -> StreamsHeartbeatResponse:
    return StreamsHeartbeatResponse(
        error=error_from_pb(msg.error), message=msg.message, member_id=msg.member_id,
        member_epoch=msg.member_epoch, heartbeat_interval_ms=msg.heartbeat_interval_ms,
        session_timeout_ms=msg.session_timeout_ms, failover_grace_ms=msg.failover_grace_ms,
        assignment=member_tasks_from_pb(msg.assignment, "assignment") if msg.HasField("assignment") else None,
        status=_status_from(msg))


# ---------------------------------------------------------------------------------------- describe


def _member_to_pb(m: StreamsMemberDescription, out: pb.StreamsMemberDescription) -> None:
    out.member_id, out.process_id = m.member_id, m.process_id
    out.epoch, out.previous_epoch = m.epoch, m.previous_epoch
    out.status = _STATUS_TO_PB[m.status]  # type: ignore[assignment]
    if m.instance_id is not None:
        out.instance_id = m.instance_id
    member_tasks_to_pb(m.assigned, out.assigned)
    member_tasks_to_pb(m.pending_revocation, out.pending_revocation)
    member_tasks_to_pb(m.target, out.target)
    for task, lag in sorted(m.lags.items()):
        out.lags.add(**_task_fields(task), lag=lag)
    for w in m.warmups:
        entry = out.warmups.add(**_task_fields(w.task), acceptable_lag=w.acceptable_lag)
        if w.lag is not None:
            entry.lag = w.lag


def _lags_from_pb(entries: Iterable[pb.TaskLag], where: str) -> dict[TaskId, int]:
    out: dict[TaskId, int] = {}
    for e in entries:
        task = _task_from(e.subtopology, e.partition, e.part, e.parallelism, where)
        if task in out:
            raise WireError(f"{where} gives the lag of task {task} twice")
        out[task] = e.lag
    return out


def _member_from_pb(msg: pb.StreamsMemberDescription) -> StreamsMemberDescription:
    where = f"member {msg.member_id!r}"
    try:
        status = _status_from_pb(msg.status)
    except WireError as e:
        raise WireError(f"{where}: status: {e}") from e
    return StreamsMemberDescription(
        member_id=msg.member_id, instance_id=_opt(msg, "instance_id"), process_id=msg.process_id,
        epoch=msg.epoch, previous_epoch=msg.previous_epoch, status=status,
        assigned=member_tasks_from_pb(msg.assigned, f"{where}: assigned"),
        pending_revocation=member_tasks_from_pb(msg.pending_revocation, f"{where}: pending_revocation"),
        target=member_tasks_from_pb(msg.target, f"{where}: target"),
        lags=_lags_from_pb(msg.lags, f"{where}: lags"),
        warmups=tuple(WarmupProgress(_task_from(w.subtopology, w.partition, w.part, w.parallelism,
                                                f"{where}: warmups"),
                                     w.lag if w.HasField("lag") else None, w.acceptable_lag)
                      for w in msg.warmups))


def streams_description_to_pb(d: StreamsGroupDescription) -> pb.StreamsGroupDescription:
    msg = pb.StreamsGroupDescription(group_id=d.group_id, state=streams_state_to_pb(d.state),
                                     epoch=d.epoch, target_epoch=d.target_epoch)
    _status_to_pb(d.status, msg.status)
    if d.topology is not None:
        topology_to_pb(d.topology, msg.topology)
    for m in d.members:
        _member_to_pb(m, msg.members.add())
    return msg


def streams_description_from_pb(msg: pb.StreamsGroupDescription) -> StreamsGroupDescription:
    try:
        state = streams_state_from_pb(msg.state)
    except WireError as e:
        raise WireError(f"state: {e}") from e
    return StreamsGroupDescription(
        group_id=msg.group_id, state=state, status=_status_from(msg),
        epoch=msg.epoch, target_epoch=msg.target_epoch,
        topology=topology_from_pb(msg.topology) if msg.HasField("topology") else None,
        members=tuple(_member_from_pb(m) for m in msg.members))
