"""Topic metadata as the coordinator sees it: topic name -> partition count.

The metadata is an immutable value; a change (topic created or deleted, partitions added) is a new
value. Shards are built once per topic and shared, so assignors never allocate them.

A group's view may also cut topics' partitions into key ranges (``parallelism``, see
`regroup.protocol.keyrange`): then a topic's shards are its partitions' ranges, partition-major
(partition 0's ranges in key order, then partition 1's, ...), and `units` counts them. Assignors
speak only of shards and units, so they hand out ranges exactly as they hand out partitions, and
equal ranges of co-partitioned topics line up as equal partitions do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from regroup.protocol.keyrange import MAX_PARALLELISM, range_shards
from regroup.protocol.shard import Shard, shards_of


@dataclass(frozen=True)
class TopicMetadata(Mapping[str, int]):
    """Immutable ``{topic: partition count}`` with the shards of each topic precomputed, and the key
    ranges per partition of the topics that have more than one (``parallelism``)."""

    partitions: Mapping[str, int] = field(default_factory=dict)
    parallelism: Mapping[str, int] = field(default_factory=dict)
    #: Shards per topic (partitions × parallelism): the same object as ``partitions`` without ranges.
    units: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)
    _shards: dict[str, tuple[Shard, ...]] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name, count in self.partitions.items():
            if not name or not isinstance(name, str):
                raise ValueError(f"topic name must be a non-empty string, got {name!r}")
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"topic {name!r} must have at least one partition, got {count!r}")
        for name, ranges in self.parallelism.items():
            if not isinstance(ranges, int) or not 1 <= ranges <= MAX_PARALLELISM:
                raise ValueError(
                    f"parallelism of topic {name!r} must be 1..{MAX_PARALLELISM}, got {ranges!r}")
        object.__setattr__(self, "partitions", dict(sorted(self.partitions.items())))
        cut = {t: n for t, n in sorted(self.parallelism.items()) if n > 1 and t in self.partitions}
        object.__setattr__(self, "parallelism", cut)
        units = {t: n * cut.get(t, 1) for t, n in self.partitions.items()} if cut else self.partitions
        object.__setattr__(self, "units", units)
        object.__setattr__(self, "_shards", {})

    def __getitem__(self, topic: str) -> int:
        return self.partitions[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def __hash__(self) -> int:
        return hash((tuple(self.partitions.items()), tuple(self.parallelism.items())))

    def shards(self, topic: str) -> tuple[Shard, ...]:
        """All shards of ``topic`` in partition order, each partition's key ranges in key order
        (empty if the topic does not exist)."""
        cached = self._shards.get(topic)
        if cached is None:
            count = self.partitions.get(topic, 0)
            ranges = self.parallelism.get(topic, 1)
            if ranges == 1:
                cached = shards_of(topic, count)
            else:
                cached = tuple(s for p in range(count) for s in range_shards(topic, p, ranges))
            self._shards[topic] = cached
        return cached

    def shards_of_topics(self, topics: list[str]) -> list[tuple[Shard, ...]]:
        """``[self.shards(t) for t in topics]``, straight from the cache (in C) when every topic's
        shards are built already, as a coordinator's long-lived metadata has them: the assignors
        call this for every topic of a group on every assignment."""
        try:
            return list(map(self._shards.__getitem__, topics))
        except KeyError:
            return list(map(self.shards, topics))

    @cached_property
    def all_shards(self) -> tuple[Shard, ...]:
        """Every shard of every topic, topics in name order: the shards in `Shard` order. Built
        once and kept, for assignors dealing a group that subscribes to every topic (walking one
        tuple costs a third of chaining the topics' tuples)."""
        return tuple(s for t in self.partitions for s in self.shards(t))

    def contains(self, shard: Shard) -> bool:
        """True when the shard's topic exists and has that partition, and the shard is one of the
        partition's key ranges at the topic's parallelism (the whole partition without ranges)."""
        if not 0 <= shard.partition < self.partitions.get(shard.topic, 0):
            return False
        ranges = self.parallelism.get(shard.topic, 1)
        if ranges == 1:
            return shard.whole
        return shard in range_shards(shard.topic, shard.partition, ranges)
