"""`TopicPartition`: a partition of a topic, as the public API names it (confluent-kafka's name).

The core hands out `Shard`s — a whole partition each, or a key range inside one — and speaks of
nothing else. What a user of `regroup.Consumer` is given and gives back is a partition:
a value of its own, so that the public API keeps its meaning when the core's unit grows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from regroup.protocol.keyrange import low_watermarks
from regroup.protocol.shard import Shard


class TopicPartition(NamedTuple):
    """One partition of a topic: ``topic`` and ``partition`` (0-based). Prints as ``topic:3`` (as
    every regroup message and command writes a partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"


def partitions_of(shards: Iterable[Shard]) -> set[TopicPartition]:
    return {TopicPartition(s.topic, s.partition) for s in shards}


def shard_of(tp: TopicPartition | Shard) -> Shard:
    return Shard(tp.topic, tp.partition)


def offsets_by_shard(offsets: Mapping[TopicPartition, int] | Mapping[Shard, int]) -> dict[Shard, int]:
    return {shard_of(tp): o for tp, o in offsets.items()}


def offsets_by_partition(offsets: Mapping[Shard, int] | Iterable[tuple[Shard, int]],
                         ) -> dict[TopicPartition, int]:
    """Offsets by partition; key ranges of one partition count as their lowest (where the partition
    as a whole would have to resume: `keyrange.low_watermarks`)."""
    pairs = offsets.items() if isinstance(offsets, Mapping) else offsets
    return {TopicPartition(s.topic, s.partition): o for s, o in low_watermarks(pairs).items()}
