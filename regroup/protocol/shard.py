"""The unit of assignment.

A `Shard` is what the coordinator hands to a member: a whole partition of a topic, or — when the
group cuts the topic's partitions into key ranges (`regroup.protocol.keyrange`, a ``parallelism``
per topic) — one key range of a partition: the records whose key hash falls in ``[lo, hi)`` of the
fixed key space ``[0, KEY_SPACE)``. A whole partition is the range ``[0, KEY_SPACE)``, which is
what the defaults give, so ``Shard(topic, partition)`` means the same as it always did.

It is a small immutable value (a named tuple, so hashing and comparison run in C, which the
assignors rely on for speed). Every part of the core speaks in shards and never in loose
``(topic, partition)`` tuples. Two shards of one partition may overlap (a range and the whole
partition, or ranges of two parallelisms while a group changes its parallelism): the rules that
must see that use `overlaps`, never equality.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

#: The key space of every partition: a record belongs to the range holding its key hash.
KEY_SPACE = 1 << 32


class Shard(NamedTuple):
    """One assignable piece of a topic: ``topic``, ``partition`` (0-based) and the key range
    ``[lo, hi)`` of the partition's key space (all of it by default: the whole partition)."""

    topic: str
    partition: int
    lo: int = 0
    hi: int = KEY_SPACE

    @property
    def whole(self) -> bool:
        """True for a whole partition (the range covering the entire key space)."""
        return self.lo == 0 and self.hi == KEY_SPACE

    @property
    def partition_key(self) -> tuple[str, int]:
        """``(topic, partition)``: what shards of one partition share."""
        return (self.topic, self.partition)

    def __str__(self) -> str:
        # ``topic:partition``, the form the commands take too: a topic of the log never holds a
        # colon (Kafka's rules), and the partition is the number after the last one whatever the
        # name — unlike ``topic-3``, which ``my-topic-3`` or ``orders--1`` (partition -1) make
        # ambiguous to a reader.
        if self.lo == 0 and self.hi == KEY_SPACE:
            return f"{self.topic}:{self.partition}"
        return f"{self.topic}:{self.partition}[{self.lo:08x},{self.hi:08x})"


def overlaps(a: Shard, b: Shard) -> bool:
    """True when ``a`` and ``b`` share records: the same partition and intersecting key ranges."""
    return a.partition == b.partition and a.topic == b.topic and a.lo < b.hi and b.lo < a.hi


def within(part: Shard, shard: Shard) -> bool:
    """True when every key of ``part`` is ``shard``'s, in the same partition."""
    return part.partition == shard.partition and part.topic == shard.topic and shard.lo <= part.lo \
        and part.hi <= shard.hi


def overlap_any(a: frozenset[Shard], b: frozenset[Shard]) -> bool:
    """True when some shard of ``a`` overlaps some shard of ``b`` (set intersection when every shard
    is a whole partition, so the common case costs what ``isdisjoint`` costs)."""
    if not a.isdisjoint(b):
        return True
    ranged = [s for s in a if not s.whole] + [s for s in b if not s.whole]
    if not ranged:
        return False
    by_partition: dict[tuple[str, int], list[Shard]] = {}
    for s in b:
        by_partition.setdefault((s.topic, s.partition), []).append(s)
    return any(overlaps(s, o) for s in a for o in by_partition.get((s.topic, s.partition), ()))


#: A member's set of shards. Frozen so that unchanged assignments can be shared, not copied.
ShardSet = frozenset[Shard]

EMPTY: ShardSet = frozenset()


def shards_of(topic: str, partitions: int) -> tuple[Shard, ...]:
    """All shards of a topic with ``partitions`` partitions, in partition order."""
    return tuple(Shard(topic, p) for p in range(partitions))


#: One entry of a topic's list in `group_by_topic`: a whole partition's number, or a key range of a
#: partition as ``[partition, lo, hi]``.
PartitionEntry = int | list[int]


def group_by_topic(shards: Iterable[Shard]) -> dict[str, list[PartitionEntry]]:
    """``{topic: sorted entries}``: the compact form used in records. A whole partition is its number
    (so a group without key ranges encodes as it always did), a key range ``[partition, lo, hi]``."""
    out: dict[str, list[Shard]] = {}
    for s in shards:
        out.setdefault(s.topic, []).append(s)
    return {t: [s.partition if s.whole else [s.partition, s.lo, s.hi] for s in sorted(ss)]
            for t, ss in out.items()}


def from_topic_map(by_topic: Mapping[str, Iterable[PartitionEntry]]) -> ShardSet:
    """Inverse of `group_by_topic`."""
    return frozenset(Shard(t, e) if isinstance(e, int) else Shard(t, e[0], e[1], e[2])
                     for t, entries in by_topic.items() for e in entries)


def format_shards(shards: Iterable[Shard]) -> str:
    """Human-readable ``topic[0,1,2] other[4]`` form for messages and the CLI (a key range of a
    partition as ``4:[00000000,80000000)``)."""
    grouped: dict[str, list[Shard]] = {}
    for s in shards:
        grouped.setdefault(s.topic, []).append(s)
    if not grouped:
        return "(none)"

    def entry(s: Shard) -> str:
        return str(s.partition) if s.whole else f"{s.partition}:[{s.lo:08x},{s.hi:08x})"

    return " ".join(f"{t}[{','.join(map(entry, sorted(ss)))}]" for t, ss in sorted(grouped.items()))
