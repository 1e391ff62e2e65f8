"""The range assignor: contiguous partition ranges per topic, co-partitioned across topics."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from operator import attrgetter

from regroup.protocol.assignors.base import Assignment, GroupSpec
from regroup.protocol.assignors.uniform import SubscriptionClass, subscription_classes
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.topics import TopicMetadata

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
        out.update(dict.fromkeys(idle, EMPTY))
        if not classes:
            return out
        metadata = spec.topics
        order = _member_order(classes)

        # Topics with the same subscriber classes and partition count share one range layout.
        topic_classes: dict[str, list[int]] = {}
        for ci, cls in enumerate(classes):
            for t in cls.topics:
                topic_classes.setdefault(t, []).append(ci)
        layouts: dict[tuple[tuple[int, ...], int], list[str]] = {}
        for t in sorted(topic_classes):
            layouts.setdefault((tuple(sorted(topic_classes[t])), metadata.partitions[t]), []).append(t)

        class_of: dict[str, int] = {}
        # runs[mid]: the member's ranges, each one slice of a layout's shards.
        runs: dict[str, list[Sequence[Shard]]] = {}
        for (subscribing, count), topics in layouts.items():
            if len(subscribing) == len(classes):
                subscribers = order
            else:
                if not class_of:
                    for ci, cls in enumerate(classes):
                        class_of.update(dict.fromkeys(cls.member_ids, ci))
                wanted = set(subscribing)
                subscribers = [mid for mid in order if class_of[mid] in wanted]
            ranges = _ranges(metadata, topics, count, len(subscribers))
            if len(layouts) == 1:
                self._finish(spec, dict(zip(subscribers, ranges, strict=False)), out)
                out.update(dict.fromkeys(order[count:], EMPTY))  # more members than partitions
                return out
            for mid, shards in zip(subscribers, ranges, strict=False):
                got = runs.get(mid)
                if got is None:
                    runs[mid] = [shards]
                else:
                    got.append(shards)

        merged: dict[str, Sequence[Shard]] = {}
        for mid in order:
            got = runs.get(mid)
            if got is None:
                out[mid] = EMPTY
            else:
                merged[mid] = got[0] if len(got) == 1 else list(chain.from_iterable(got))
        self._finish(spec, merged, out)
        return out

    @staticmethod
    def _finish(spec: GroupSpec, assigned: dict[str, Sequence[Shard]], out: Assignment) -> None:
        """Freeze each member's shards, handing back its ``current`` object when they are equal."""
        members = spec.members
        currents = list(map(_current_of, map(members.__getitem__, assigned)))
        if not any(currents):  # nothing to compare with: build every set in C
            out.update(zip(assigned, map(frozenset, assigned.values()), strict=True))
            return
        for (mid, shards), cur in zip(assigned.items(), currents, strict=True):
            # End points first: a moved boundary usually shows there, before hashing everything.
            if (len(cur) == len(shards) and shards[0] in cur and shards[-1] in cur
                    and cur.issuperset(shards)):
                out[mid] = cur
            else:
                out[mid] = frozenset(shards)


_current_of = attrgetter("current")
_instance_of = attrgetter("instance_id")


def _ranges(metadata: TopicMetadata, topics: list[str], count: int,
            members: int) -> Iterator[Sequence[Shard]]:
    """The ranges of a layout in member order: the first ``count % members`` one partition longer.

    A layout of several topics is laid out partition-major (partition 0 of every topic, then
    partition 1, ...), so a range of partitions is one slice covering the same partitions of every
    topic: co-partitioning for free. Yields ``min(count, members)`` non-empty slices.
    """
    if len(topics) == 1:
        flat: Sequence[Shard] = metadata.shards(topics[0])
    else:
        flat = list(chain.from_iterable(zip(*map(metadata.shards, topics), strict=True)))
    width = len(topics)
    quota, extra = divmod(count, members)
    long_run, short_run = (quota + 1) * width, quota * width
    cut = extra * long_run
    starts = chain(range(0, cut, long_run), range(cut, len(flat), short_run) if quota else ())
    ends = chain(range(long_run, cut + 1, long_run),
                 range(cut + short_run, len(flat) + 1, short_run) if quota else ())
    return map(flat.__getitem__, map(slice, starts, ends))


def _member_order(classes: list[SubscriptionClass]) -> list[str]:
    """Static members by (instance id, member id), then dynamic members by member id."""
    ids = list(chain.from_iterable(c.member_ids for c in classes))
    instances = list(map(_instance_of, chain.from_iterable(c.members for c in classes)))
    if instances.count(None) == len(instances):
        return sorted(ids)
    static = sorted((inst, mid) for mid, inst in zip(ids, instances, strict=True) if inst is not None)
    dynamic = sorted(mid for mid, inst in zip(ids, instances, strict=True) if inst is None)
    return [mid for _, mid in static] + dynamic
