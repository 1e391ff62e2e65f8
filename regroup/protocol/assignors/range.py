"""The range assignor: contiguous partition ranges per topic, co-partitioned across topics."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from regroup.protocol.assignors.base import Assignment, GroupSpec
from regroup.protocol.assignors.uniform import SubscriptionClass, subscription_classes
from regroup.protocol.shard import EMPTY, Shard

__all__ = ["RangeAssignor"]


class RangeAssignor:
    """Each topic's partitions are split into contiguous ranges over that topic's subscribers.

    Members are ordered static members first (by ``instance_id``, then member id), then dynamic
    members by member id. For a topic with ``n`` partitions and ``k`` subscribers, the subscribers
    in that order get consecutive ranges of ``n // k`` partitions, the first ``n % k`` one more.
    Topics with the same partition count and the same subscribers are therefore co-partitioned:
    a member gets the same partition numbers of each of them.

    Stickiness: none beyond the order itself, deliberately, like Kafka 4.0's server-side range
    assignor (which dropped the sticky variant in KAFKA-16944). Moving a range boundary to keep a
    member's old partitions would break contiguity or co-partitioning, which are the reasons to
    choose this assignor. Static members keep their position across restarts (their instance id
    does not change), so a rolling bounce of a static group reproduces the same assignment. The
    output is a pure function of the members' ids, instance ids and subscriptions and of the
    partition counts; ``current`` is only used to hand a member back its ``current`` object when
    its ranges did not change.
    """

    name = "range"

    def assign(self, spec: GroupSpec) -> Assignment:
        """Compute the range assignment of ``spec`` (an entry for every member)."""
        out: Assignment = {}
        classes, idle = subscription_classes(spec)
        for mid in idle:
            out[mid] = EMPTY
        if not classes:
            return out
        metadata = spec.topics

        order = _member_order(classes)
        # Topics with the same subscriber classes and partition count share one range layout.
        class_of: dict[str, int] = {}
        topic_classes: dict[str, list[int]] = {}
        for ci, cls in enumerate(classes):
            class_of.update(dict.fromkeys(cls.member_ids, ci))
            for t in cls.topics:
                topic_classes.setdefault(t, []).append(ci)
        layouts: dict[tuple[tuple[int, ...], int], list[str]] = {}
        for t in sorted(topic_classes):
            layouts.setdefault((tuple(sorted(topic_classes[t])), metadata.partitions[t]), []).append(t)

        # pieces[mid]: runs of shards; a run is one topic's range, or one partition of every topic
        # of a co-partitioned layout.
        pieces: dict[str, list[Sequence[Shard]]] = {}
        sizes: dict[str, int] = {}
        subscribers_of: dict[tuple[int, ...], list[str]] = {}
        for (subscribing, count), topics in layouts.items():
            subscribers = subscribers_of.get(subscribing)
            if subscribers is None:
                if len(subscribing) == len(classes):
                    subscribers = order
                else:
                    wanted = set(subscribing)
                    subscribers = [mid for mid in order if class_of[mid] in wanted]
                subscribers_of[subscribing] = subscribers
            single = metadata.shards(topics[0])
            # rows[p] holds partition p of every topic of the layout (built in C by zip).
            rows = list(zip(*map(metadata.shards, topics), strict=True)) if len(topics) > 1 else []
            width = len(topics)
            k = len(subscribers)
            quota, extra = divmod(count, k)
            start = 0
            for j, mid in enumerate(subscribers[:min(k, count)]):
                end = start + quota + (j < extra)
                got = pieces.get(mid)
                if got is None:
                    got = pieces[mid] = []
                    sizes[mid] = 0
                if rows:
                    got.extend(rows[start:end])
                else:
                    got.append(single[start:end])
                sizes[mid] += (end - start) * width
                start = end

        members = spec.members
        for mid in order:
            got = pieces.get(mid)
            if got is None:
                out[mid] = EMPTY
                continue
            cur = members[mid].current
            shards = chain.from_iterable(got)
            if len(cur) == sizes[mid] and cur.issuperset(shards):
                out[mid] = cur  # same ranges as before: hand back the very same object
            else:
                out[mid] = frozenset(chain.from_iterable(got))
        return out


def _member_order(classes: list[SubscriptionClass]) -> list[str]:
    """Static members by (instance id, member id), then dynamic members by member id."""
    static: list[tuple[str, str]] = []
    dynamic: list[str] = []
    for cls in classes:
        for mid, m in zip(cls.member_ids, cls.members, strict=True):
            if m.instance_id is None:
                dynamic.append(mid)
            else:
                static.append((m.instance_id, mid))
    static.sort()
    dynamic.sort()
    return [mid for _, mid in static] + dynamic
