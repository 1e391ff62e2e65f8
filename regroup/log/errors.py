"""Exceptions raised by the partitioned logs, the same for every backend.

Callers (the consumer shell, the PySpark source, the CLI) catch these types rather than backend-specific
ones, so switching from the embedded log to Kafka changes no error handling. Input mistakes also derive
from ``ValueError`` so that generic argument checking still catches them.
"""

from __future__ import annotations


class LogError(Exception):
    """Base class of every error raised by ``regroup.log``."""


class InvalidTopicError(LogError, ValueError):
    """The topic name is not a legal name (Kafka's rules: ``[A-Za-z0-9._-]``, 1 to 249 characters)."""


class InvalidPartitionsError(LogError, ValueError):
    """A partition count is out of range: below 1, or a request to shrink a topic."""


class InvalidRecordError(LogError, ValueError):
    """A record cannot be written: wrong field types or an out-of-range timestamp."""


class RecordTooLargeError(InvalidRecordError):
    """A record (or a single header) is larger than the log accepts."""


class UnknownTopicError(LogError):
    """The topic does not exist."""

    def __init__(self, topic: str, where: str = "") -> None:
        self.topic = topic
        suffix = f" in {where}" if where else ""
        super().__init__(f"unknown topic {topic!r}{suffix}")


class UnknownPartitionError(LogError):
    """The topic exists but has no such partition."""

    def __init__(self, topic: str, partition: int, partitions: int) -> None:
        self.topic = topic
        self.partition = partition
        self.partitions = partitions
        super().__init__(
            f"topic {topic!r} has no partition {partition} (it has {partitions}: 0..{partitions - 1})"
        )


class TopicExistsError(LogError):
    """``create_topic`` was asked for a topic that already exists."""

    def __init__(self, topic: str, partitions: int | None = None) -> None:
        self.topic = topic
        self.partitions = partitions
        detail = f" with {partitions} partitions" if partitions is not None else ""
        super().__init__(f"topic {topic!r} already exists{detail}")


class OffsetOutOfRangeError(LogError):
    """A read started before the first or after the last offset of a partition."""

    def __init__(self, topic: str, partition: int, offset: int, detail: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"offset {offset} is out of range for {topic}/{partition}: {detail}")


class CorruptLogError(LogError):
    """Data that the log had published as written fails its checksum or framing checks."""


class PartitionLockedError(LogError):
    """Another writer (process or ``EmbeddedLog`` instance) holds a partition of the embedded log."""


class UnsupportedOperationError(LogError):
    """The backend or the broker does not support the requested operation."""


class LogTimeoutError(LogError, TimeoutError):
    """The backend did not answer in time (a Kafka broker unreachable, for instance)."""


class ProduceError(LogError):
    """The backend refused or failed to store records; ``produced`` tells how many were acknowledged."""

    def __init__(self, message: str, produced: int = 0) -> None:
        self.produced = produced
        super().__init__(message)
