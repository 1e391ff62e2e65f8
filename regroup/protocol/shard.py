"""The unit of assignment.

A `Shard` is what the coordinator hands to a member: today one whole partition of a topic. It is a
small immutable value (a named tuple, so hashing and comparison run in C, which the assignors rely on
for speed). Every part of the core speaks in shards and never in loose ``(topic, partition)`` tuples,
so that a later version can give a shard a key range inside its partition without touching the
reconciliation or the coordinator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple


class Shard(NamedTuple):
    """One assignable piece of a topic: ``topic`` and ``partition`` (0-based)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


#: A member's set of shards. Frozen so that unchanged assignments can be shared, not copied.
ShardSet = frozenset[Shard]

EMPTY: ShardSet = frozenset()


def shards_of(topic: str, partitions: int) -> tuple[Shard, ...]:
    """All shards of a topic with ``partitions`` partitions, in partition order."""
    return tuple(Shard(topic, p) for p in range(partitions))


def group_by_topic(shards: Iterable[Shard]) -> dict[str, list[int]]:
    """``{topic: sorted partitions}``: the compact form used in responses and in records."""
    out: dict[str, list[int]] = {}
    for s in shards:
        out.setdefault(s.topic, []).append(s.partition)
    for parts in out.values():
        parts.sort()
    return out


def from_topic_map(by_topic: Mapping[str, Iterable[int]]) -> ShardSet:
    """Inverse of `group_by_topic`."""
    return frozenset(Shard(t, p) for t, parts in by_topic.items() for p in parts)


def format_shards(shards: Iterable[Shard]) -> str:
    """Human-readable ``topic[0,1,2] other[4]`` form for messages and the CLI."""
    grouped = group_by_topic(shards)
    if not grouped:
        return "(none)"
    return " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in sorted(grouped.items()))
