"""The target assignment: which assignor a group uses, its input, and the records of a new target.

Pure helpers of the coordinator; the decision of *when* to recompute (group epoch ahead of target
epoch) is taken by the coordinator, and the computation itself by an assignor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from functools import lru_cache

from regroup.protocol.assignors.base import Assignment, AssignorRegistry, GroupSpec, MemberSpec
from regroup.protocol.records import MemberMetadata, Record, TargetEpochRecord, TargetMemberRecord
from regroup.protocol.state import Group
from regroup.protocol.topics import TopicMetadata


def effective_topics(meta: MemberMetadata, regexes: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Explicit topic names plus what the member's regex currently resolves to."""
    if meta.subscribed_regex:
        return meta.subscribed_topics | regexes.get(meta.subscribed_regex, frozenset())
    return meta.subscribed_topics


def subscribed_topic_counts(group: Group, topics: TopicMetadata) -> dict[str, int]:
    """``{topic: partitions}`` of every existing topic some member of the group subscribes to."""
    wanted: set[str] = set()
    for meta in group.members.values():
        wanted |= effective_topics(meta, group.regexes)
    return {t: topics[t] for t in sorted(wanted) if t in topics}


def chosen_assignor(group: Group, registry: AssignorRegistry) -> str:
    """The assignor most members ask for (ties: registry order, then name); the default otherwise."""
    votes = Counter(m.assignor for m in group.members.values() if m.assignor is not None)
    if not votes:
        return registry.default.name
    order = {name: i for i, name in enumerate(registry.names)}
    return min(votes, key=lambda n: (-votes[n], order.get(n, len(order)), n))


def delegate_for(group: Group, assignor: str) -> str | None:
    """The member that computes a client-side assignor's target: the smallest id that offers it."""
    able = [mid for mid, m in group.members.items()
            if assignor in m.client_assignors and group.current.get(mid) is not None
            and group.current[mid].epoch >= 0]
    return min(able) if able else None


@lru_cache(maxsize=256)
def _metadata(items: tuple[tuple[str, int], ...], ranges: tuple[tuple[str, int], ...] = ()) -> TopicMetadata:
    # One TopicMetadata (with its prebuilt shards) per distinct set of topics: rebuilding it for
    # every assignment would allocate every shard again, which dominates large assignments.
    return TopicMetadata(dict(items), dict(ranges))


def build_spec(group: Group) -> GroupSpec:
    """The assignor's input: each member's resolved subscription and its current target; the
    shards are the group's key ranges where it cuts topics into ranges (`TopicMetadata`)."""
    group_topics = _metadata(tuple(group.subscribed_topics.items()), tuple(sorted(group.parallelism.items())))
    # Members with the same subscription share one frozenset: assignors group members by it.
    resolved: dict[tuple[frozenset[str], str | None], frozenset[str]] = {}
    members = {}
    for mid, meta in group.members.items():
        key = (meta.subscribed_topics, meta.subscribed_regex)
        subscribed = resolved.get(key)
        if subscribed is None:
            subscribed = resolved[key] = frozenset(
                t for t in effective_topics(meta, group.regexes) if t in group_topics)
        members[mid] = MemberSpec(
            member_id=mid,
            topics=subscribed,
            current=group.member_target(mid),
            instance_id=meta.instance_id,
            rack=meta.rack_id,
        )
    return GroupSpec(members=members, topics=group_topics)


def target_records(group: Group, new: Assignment, assignor: str) -> tuple[list[Record], list[str]]:
    """Records installing ``new`` as the target at the group's epoch, and the members it changed."""
    gid = group.group_id
    records: list[Record] = []
    changed: list[str] = []
    old = group.target
    for mid, shards in new.items():
        prev = old.get(mid)
        if prev is None or (prev is not shards and prev != shards):
            records.append(TargetMemberRecord(gid, mid, shards))
            changed.append(mid)
    for mid in old:
        if mid not in new:
            records.append(TargetMemberRecord(gid, mid, None))
    records.append(TargetEpochRecord(gid, group.epoch, assignor))
    return records, changed
