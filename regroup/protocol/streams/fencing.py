"""Who may heartbeat as whom in a streams group: request checks, epoch fencing, static identities.

Pure checks that raise `ProtocolError` before the coordinator changes anything. The identity rules
(instance ids, static take-over, which epochs pass) are the consumer groups' own, from
`regroup.protocol.fencing`; what is particular here is the request's shape and that a resent epoch
is judged by tasks in every role.

A member's task lists arrive grouped by subtopology and become sets, which cannot show a task listed
twice nor how long the lists really were: a shell decodes each with `tasks_from_listing` (as a
consumer shell decodes owned shards), and `validate` bounds the tasks a request owns in all roles.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.fencing import check_instance, check_leaving_instance, epoch_fence, static_predecessor
from regroup.protocol.messages import JOIN_EPOCH, STATIC_LEAVE_EPOCH
from regroup.protocol.streams.assignment import MemberTasks, TaskSet
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.records import StreamsCurrent
from regroup.protocol.streams.state import StreamsGroup
from regroup.protocol.streams.topology import TaskId
from regroup.protocol.validation import unique_from_listing

__all__ = ["check_epoch", "check_instance", "check_leaving_instance", "static_predecessor",
           "tasks_from_listing", "validate"]


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message)


def validate(req: StreamsHeartbeatRequest, cfg: CoordinatorConfig) -> None:
    """The request's shape: ids, epochs, and that a join says who it is."""
    for name in ("group_id", "member_id"):
        value = getattr(req, name)
        if not isinstance(value, str) or not value or len(value) > cfg.max_id_length:
            raise _invalid(f"{name} must be a non-empty string of at most {cfg.max_id_length} "
                           f"characters, got {value!r}")
    for name in ("instance_id", "process_id"):
        value = getattr(req, name)
        if value is not None and (not isinstance(value, str) or not value
                                  or len(value) > cfg.max_id_length):
            raise _invalid(f"{name} must be a non-empty string of at most {cfg.max_id_length} "
                           f"characters, got {value!r}")
    if not isinstance(req.member_epoch, int) or req.member_epoch < STATIC_LEAVE_EPOCH:
        raise _invalid(f"member_epoch {req.member_epoch!r} is not an epoch")
    if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
        raise _invalid("only a static member (with an instance id) can leave with epoch -2")
    if req.rebalance_timeout_ms is not None and (
            not isinstance(req.rebalance_timeout_ms, int) or req.rebalance_timeout_ms <= 0):
        raise _invalid(f"rebalance_timeout_ms must be positive, got {req.rebalance_timeout_ms!r}")
    if req.member_epoch == JOIN_EPOCH and req.rebalance_timeout_ms is None:
        raise _invalid("a join (member_epoch 0) must send its rebalance_timeout_ms")
    if req.owned is not None:
        owned = len(req.owned.active) + len(req.owned.standby) + len(req.owned.warmup)
        if owned > cfg.max_owned_shards:
            raise _invalid(f"owned lists {owned} tasks in all roles; the limit is {cfg.max_owned_shards}")
    if req.task_offsets is not None:
        for task, offsets in req.task_offsets.items():
            if not isinstance(task, TaskId):
                raise _invalid(f"task_offsets names {task!r}, which is not a task id")
            for shard, offset in offsets.items():
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise _invalid(f"task {task} reports offset {offset!r} for {shard}; offsets are "
                                   "non-negative integers")


def tasks_from_listing(field: str, listing: Iterable[tuple[str | tuple[str, int], Collection[int]]],
                       limit: int) -> TaskSet:
    """The tasks of one role as a request lists them, ``(subtopology, partitions)`` groups, as a set.
    A group of key-range tasks (a subtopology cut K ways) is named ``(subtopology, K)`` and lists each
    task by its number ``partition * K + range`` (`TaskId.changelog_partition`).

    INVALID_REQUEST, before any task is built, when the groups list more than ``limit`` tasks (counted
    as listed) or one task twice (the message names it).
    """
    return unique_from_listing(field, listing, limit, _listed_task, "task")


def _listed_task(name: str | tuple[str, int], number: int) -> TaskId:
    if isinstance(name, tuple):
        sub, parts = name
        return TaskId(sub, number) if parts == 1 else TaskId(sub, number // parts, number % parts, parts)
    return TaskId(name, number)


def check_epoch(group: StreamsGroup, req: StreamsHeartbeatRequest, current: StreamsCurrent) -> None:
    """FENCED_MEMBER_EPOCH unless the epoch is current, or the previous one after a lost response.

    The previous epoch is accepted only from a member that reports what it owns, runs as active
    only tasks it was given as active, and holds copies only of tasks it was given in some role: then
    it cannot be running a task that moved on. A copy given a new role in the lost answer (a warm-up
    promoted to active) still passes: a copy never writes.
    """
    resend_is_safe = req.owned is not None and _within(req.owned, current.assigned)
    why = epoch_fence(req.member_epoch, current.epoch, current.previous_epoch, resend_is_safe)
    if why is not None:
        raise ProtocolError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"member {req.member_id!r} of streams group {group.group_id!r} is fenced: {why}; close all "
            "its tasks without committing and rejoin with epoch 0")


def _within(owned: MemberTasks, given: MemberTasks) -> bool:
    every_given = given.active | given.standby | given.warmup
    return owned.active <= given.active and (owned.standby | owned.warmup) <= every_given
