"""The range assignor: contiguous partition ranges per topic, co-partitioned across topics."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain, compress, filterfalse, islice
from operator import attrgetter, contains, itemgetter, not_
from typing import cast

from regroup.protocol.assignors.base import Assignment, GroupSpec
from regroup.protocol.assignors.uniform import (
    SubscriptionClass,
    sorted_topic_names,
    subscription_classes,
    topic_shards,
)
from regroup.protocol.shard import EMPTY, Shard, ShardRun, ShardSet
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
        order, dynamic_only = _member_order(classes)

        # Topics with the same subscriber classes and partition count share one range layout.
        layouts: dict[tuple[tuple[int, ...], int], list[str]] = {}
        if len(classes) == 1:  # every topic has the one class: layouts by partition count alone
            names = sorted_topic_names(metadata, classes[0].topics)
            counts = list(map(metadata.units.__getitem__, names))
            if counts.count(counts[0]) == len(counts):
                layouts[((0,), counts[0])] = names
            else:
                for t, count in zip(names, counts, strict=True):
                    layouts.setdefault(((0,), count), []).append(t)
        else:
            topic_classes: dict[str, list[int]] = {}
            for ci, cls in enumerate(classes):
                for t in cls.topics:
                    topic_classes.setdefault(t, []).append(ci)
            for t in sorted(topic_classes):
                layouts.setdefault((tuple(sorted(topic_classes[t])), metadata.units[t]),
                                   []).append(t)

        class_of: dict[str, int] = {}

        def subscribers_of(subscribing: tuple[int, ...]) -> list[str]:
            """The members of the ``subscribing`` classes, in member order."""
            if len(subscribing) == len(classes):
                return order
            if dynamic_only:  # the order is by member id alone
                return sorted(chain.from_iterable(classes[ci].member_ids for ci in subscribing))
            if not class_of:
                for ci, cls in enumerate(classes):
                    class_of.update(dict.fromkeys(cls.member_ids, ci))
            wanted = set(subscribing)
            return list(compress(order, map(wanted.__contains__, map(class_of.__getitem__, order))))

        if len(layouts) == 1:  # one range per member, each a tuple of consecutive shards
            ((subscribing, count), topics), = layouts.items()
            subscribers = subscribers_of(subscribing)
            runs = list(_run_tuples(metadata, topics, count, len(subscribers)))
            make = ShardRun if _in_shard_order(topics, count, len(subscribers)) else frozenset
            self._finish(spec, subscribers[:count], runs, out, make)
            out.update(dict.fromkeys(order[count:], EMPTY))  # more members than partitions
            return out

        in_layouts = [ci for subscribing, _ in layouts for ci in subscribing]
        if len(in_layouts) == len(set(in_layouts)):
            # Every class is in one layout (e.g. disjoint subscriptions, one partition count each):
            # every member gets at most one range, each a tuple of consecutive shards, all in C.
            single: dict[str, Sequence[Shard]] = {}
            in_order = True
            for (subscribing, count), topics in layouts.items():
                subscribers = subscribers_of(subscribing)
                tuples = _run_tuples(metadata, topics, count, len(subscribers))
                single.update(zip(subscribers, tuples, strict=False))
                in_order = in_order and _in_shard_order(topics, count, len(subscribers))
            out.update(dict.fromkeys(filterfalse(single.__contains__, order), EMPTY))
            served = list(filter(single.__contains__, order))
            self._finish(spec, served, list(map(single.__getitem__, served)), out,
                         ShardRun if in_order else frozenset)
            return out

        # ranges[mid]: the member's ranges, each one slice of a layout's shards.
        ranges: dict[str, list[Sequence[Shard]]] = {}
        for (subscribing, count), topics in layouts.items():
            subscribers = subscribers_of(subscribing)
            for mid, shards in zip(subscribers, _ranges(metadata, topics, count, len(subscribers)),
                                   strict=False):
                got = ranges.get(mid)
                if got is None:
                    ranges[mid] = [shards]
                else:
                    got.append(shards)

        merged: dict[str, Sequence[Shard]] = {}
        for mid in order:
            got = ranges.get(mid)
            if got is None:
                out[mid] = EMPTY
            else:
                merged[mid] = got[0] if len(got) == 1 else list(chain.from_iterable(got))
        self._finish(spec, list(merged), list(merged.values()), out)
        return out

    @staticmethod
    def _finish(spec: GroupSpec, mids: list[str], runs: Sequence[Sequence[Shard]],
                out: Assignment, make: Callable[[Sequence[Shard]], ShardSet] = frozenset) -> None:
        """Freeze each member's (non-empty) run of shards with ``make``, handing back its
        ``current`` object when they are equal. ``make`` is `ShardRun` only when every run is in
        shard order (`_in_shard_order`): a set without a hash table per member."""
        currents = list(map(_current_of, map(spec.members.__getitem__, mids)))
        if not any(currents):  # nothing to compare with: build every set in C
            out.update(zip(mids, map(make, runs), strict=True))
            return
        if make is ShardRun:
            # Every new set is a run: build them all in C, then hand back the current object of a
            # member whose run did not change. A current run compares with its new one as a tuple
            # (both in shard order), in C; other current sets (frozensets: a member's range before
            # it became a run) as below.
            new = list(map(ShardRun, runs))
            out.update(zip(mids, new, strict=True))
            is_run = [type(c) is ShardRun for c in currents]
            unchanged = list(map(_tuple_eq, compress(currents, is_run), compress(new, is_run)))
            out.update(zip(compress(compress(mids, is_run), unchanged),
                           compress(compress(currents, is_run), unchanged), strict=True))
            is_set = list(map(not_, is_run))
            _keep_equal_sets(list(compress(mids, is_set)), list(compress(currents, is_set)),
                             list(compress(runs, is_set)), out)
            return
        out.update(dict.fromkeys(mids, EMPTY))  # the members' places, in order; values follow
        _keep_equal_sets(mids, currents, runs, out, make)


def _keep_equal_sets(mids: list[str], currents: list[ShardSet], runs: Sequence[Sequence[Shard]],
                     out: Assignment, make: Callable[[Sequence[Shard]], ShardSet] | None = None) -> None:
    """``out[mid]`` = the member's ``current`` where it holds exactly its run; the others get
    ``make(run)``, or keep what ``out`` already has when ``make`` is None.

    A member whose first shard is not in its current set has changed (the usual case when a
    boundary moves): found, and its set built, in C. The others are compared one by one."""
    maybe = list(map(contains, currents, map(_first, runs)))
    if make is not None:
        changed = list(map(not_, maybe))
        out.update(zip(compress(mids, changed), map(make, compress(runs, changed)), strict=True))
    for mid, cur, shards in compress(zip(mids, currents, runs, strict=True), maybe):
        if len(cur) == len(shards) and cur.issuperset(shards):
            out[mid] = cur
        elif make is not None:
            out[mid] = make(shards)

_current_of = attrgetter("current")
_tuple_eq = cast("Callable[[ShardSet, ShardSet], bool]", tuple.__eq__)  # two runs, as tuples
_first = itemgetter(0)
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
        flat = list(chain.from_iterable(zip(*topic_shards(metadata, topics), strict=True)))
    width = len(topics)
    quota, extra = divmod(count, members)
    long_run, short_run = (quota + 1) * width, quota * width
    cut = extra * long_run
    starts = chain(range(0, cut, long_run), range(cut, len(flat), short_run) if quota else ())
    ends = chain(range(long_run, cut + 1, long_run),
                 range(cut + short_run, len(flat) + 1, short_run) if quota else ())
    return map(flat.__getitem__, map(slice, starts, ends))


def _in_shard_order(topics: list[str], count: int, members: int) -> bool:
    """Whether `_run_tuples` of this layout are each in shard order (``(topic, partition)``): one
    topic, or at most one partition per member (the same partition of every topic, topics in name
    order). Otherwise a run goes partition-major across the topics (``a:0 b:0 a:1 b:1``)."""
    return len(topics) == 1 or count <= members


def _run_tuples(metadata: TopicMetadata, topics: list[str], count: int,
                members: int) -> Iterator[tuple[Shard, ...]]:
    """The same runs as `_ranges`, as tuples: zip over n references to one iterator yields n
    consecutive shards at a time, in C, without the flat list or slices; islice stops before
    pulling from zip, so the longer runs take exactly their shards."""
    shards = topic_shards(metadata, topics)
    it: Iterator[Shard] = (iter(shards[0]) if len(shards) == 1
                           else chain.from_iterable(zip(*shards, strict=True)))
    width = len(topics)
    quota, extra = divmod(count, members)
    longer = islice(zip(*[it] * ((quota + 1) * width), strict=False), extra)
    return chain(longer, zip(*[it] * (quota * width), strict=False) if quota else ())


def _member_order(classes: list[SubscriptionClass]) -> tuple[list[str], bool]:
    """Static members by (instance id, member id), then dynamic members by member id; and whether
    every member is dynamic (then the order is by member id alone)."""
    ids = list(chain.from_iterable(c.member_ids for c in classes))
    instances = list(map(_instance_of, chain.from_iterable(c.members for c in classes)))
    if instances.count(None) == len(instances):
        return sorted(ids), True
    static = sorted((inst, mid) for mid, inst in zip(ids, instances, strict=True) if inst is not None)
    dynamic = sorted(mid for mid, inst in zip(ids, instances, strict=True) if inst is None)
    return [mid for _, mid in static] + dynamic, False
