"""Topic metadata as the coordinator sees it: topic name -> partition count.

The metadata is an immutable value; a change (topic created or deleted, partitions added) is a new
value. Shards are built once per topic and shared, so assignors never allocate them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from regroup.protocol.shard import Shard, shards_of


@dataclass(frozen=True)
class TopicMetadata(Mapping[str, int]):
    """Immutable ``{topic: partition count}`` with the shards of each topic precomputed."""

    partitions: Mapping[str, int] = field(default_factory=dict)
    _shards: dict[str, tuple[Shard, ...]] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name, count in self.partitions.items():
            if not name or not isinstance(name, str):
                raise ValueError(f"topic name must be a non-empty string, got {name!r}")
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"topic {name!r} must have at least one partition, got {count!r}")
        object.__setattr__(self, "partitions", dict(sorted(self.partitions.items())))
        object.__setattr__(self, "_shards", {})

    def __getitem__(self, topic: str) -> int:
        return self.partitions[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def __hash__(self) -> int:
        return hash(tuple(self.partitions.items()))

    def shards(self, topic: str) -> tuple[Shard, ...]:
        """All shards of ``topic`` in partition order (empty if the topic does not exist)."""
        cached = self._shards.get(topic)
        if cached is None:
            count = self.partitions.get(topic, 0)
            cached = shards_of(topic, count)
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

    def contains(self, shard: Shard) -> bool:
        """True when the shard's topic exists and has that partition."""
        return 0 <= shard.partition < self.partitions.get(shard.topic, 0)
