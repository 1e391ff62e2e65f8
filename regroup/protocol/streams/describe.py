"""A read-only view of a streams group: members, processes, roles, lags and warm-up progress."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from regroup.protocol.records import MemberStatus
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.messages import GroupStatus
from regroup.protocol.streams.state import StreamsGroup, StreamsGroupState
from regroup.protocol.streams.topology import TaskId, Topology

__all__ = ["StreamsGroupDescription", "StreamsMemberDescription", "WarmupProgress", "describe"]


@dataclass(frozen=True, slots=True)
class WarmupProgress:
    task: TaskId
    #: Records still to restore (None: no report yet).
    lag: int | None
    acceptable_lag: int

    @property
    def caught_up(self) -> bool:
        return self.lag is not None and self.lag <= self.acceptable_lag


@dataclass(frozen=True, slots=True)
class StreamsMemberDescription:
    member_id: str
    instance_id: str | None
    process_id: str
    epoch: int
    previous_epoch: int
    status: MemberStatus
    assigned: MemberTasks
    pending_revocation: MemberTasks
    target: MemberTasks
    #: Lag of every task copy its process reported (soft: empty until it reports).
    lags: Mapping[TaskId, int]
    warmups: tuple[WarmupProgress, ...]


@dataclass(frozen=True, slots=True)
class StreamsGroupDescription:
    group_id: str
    state: StreamsGroupState
    status: GroupStatus
    epoch: int
    target_epoch: int
    topology: Topology | None
    members: tuple[StreamsMemberDescription, ...]


def describe(group: StreamsGroup, status: GroupStatus, lags: Mapping[str, Mapping[TaskId, int]],
             acceptable_lag: int) -> StreamsGroupDescription:
    members = []
    for mid in sorted(group.members):
        meta = group.members[mid]
        cur = group.current[mid]
        target = group.member_target(mid)
        own = dict(sorted(lags.get(meta.process_id, {}).items()))
        warm = tuple(WarmupProgress(t, own.get(t), acceptable_lag) for t in sorted(target.warmup))
        members.append(StreamsMemberDescription(
            mid, meta.instance_id, meta.process_id, cur.epoch, cur.previous_epoch, cur.status,
            cur.assigned, cur.pending_revocation, target, own, warm))
    return StreamsGroupDescription(group.group_id, group.state, status, group.epoch, group.target_epoch,
                                   group.topology, tuple(members))
