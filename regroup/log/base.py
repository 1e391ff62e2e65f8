"""What regroup needs from a partitioned log, whichever backend holds it.

The coordinator only reads topic metadata; consumers and the PySpark source read offset ranges and
end offsets; producers append batches. Backends: `embedded` (a local directory, the default) and
`kafka` (any Kafka-compatible cluster through confluent-kafka).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record as produced: key, value, timestamp (ms since the epoch) and headers."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()


class TopicSource(Protocol):
    """The one thing the coordinator needs: ``{topic: partition count}``."""

    def topic_partitions(self) -> Mapping[str, int]: ...


class PartitionedLog(TopicSource, Protocol):
    def create_topic(self, topic: str, partitions: int) -> None: ...

    def add_partitions(self, topic: str, total: int) -> None: ...

    def produce(self, topic: str, partition: int, records: Sequence[LogRecord]) -> int:
        """Append ``records``; returns the offset of the first one."""
        ...

    def read(self, topic: str, partition: int, start: int, max_records: int) -> list[ConsumedRecord]:
        """Records from offset ``start`` on (at most ``max_records``); empty at the end."""
        ...

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset to be written}``."""
        ...

    def close(self) -> None: ...
