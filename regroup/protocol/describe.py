"""Read-only views of a group for troubleshooting from the server (CLI, metrics, tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

from regroup.protocol.messages import CommittedOffset
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard, ShardSet
from regroup.protocol.state import Group, GroupState
from regroup.protocol.target import effective_topics


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    epoch: int
    previous_epoch: int
    status: MemberStatus
    assigned: ShardSet
    pending_revocation: ShardSet
    #: Shards in the target that the member does not have yet (waiting for their owner to release).
    awaiting: ShardSet
    target: ShardSet
    subscribed_topics: frozenset[str]
    subscribed_regex: str | None
    resolved_topics: frozenset[str]
    assignor: str | None
    rebalance_timeout_ms: int


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    epoch: int
    target_epoch: int
    assignor: str
    subscribed_topics: dict[str, int]
    members: tuple[MemberDescription, ...]
    offsets: dict[Shard, CommittedOffset]
    #: Key ranges per partition of the topics the group cuts (`regroup.protocol.keyrange`).
    parallelism: dict[str, int] = field(default_factory=dict)


def describe(group: Group) -> GroupDescription:
    members = []
    for mid in sorted(group.members):
        meta = group.members[mid]
        cur = group.current[mid]
        target = group.member_target(mid)
        members.append(MemberDescription(
            member_id=mid, instance_id=meta.instance_id, rack_id=meta.rack_id, epoch=cur.epoch,
            previous_epoch=cur.previous_epoch, status=cur.status, assigned=cur.assigned,
            pending_revocation=cur.pending_revocation, awaiting=target - cur.assigned, target=target,
            subscribed_topics=meta.subscribed_topics, subscribed_regex=meta.subscribed_regex,
            resolved_topics=effective_topics(meta, group.regexes), assignor=meta.assignor,
            rebalance_timeout_ms=meta.rebalance_timeout_ms,
        ))
    return GroupDescription(
        group_id=group.group_id, state=group.state, epoch=group.epoch, target_epoch=group.target_epoch,
        assignor=group.assignor, subscribed_topics=dict(group.subscribed_topics), members=tuple(members),
        offsets=dict(sorted(group.offsets.items())), parallelism=dict(sorted(group.parallelism.items())),
    )
