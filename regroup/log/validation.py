"""Input checks shared by every backend, so both reject the same mistakes with the same messages.

Kafka's own rules are used for topic names (``[A-Za-z0-9._-]``, at most 249 characters, not ``.`` or
``..``): a topic that works in the embedded log must also be creatable on a Kafka cluster, and the
embedded log uses the name as a directory name, which this alphabet makes safe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from regroup.log.base import LogRecord
from regroup.log.errors import (
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    RecordTooLargeError,
)

MAX_TOPIC_NAME_LENGTH = 249
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: A sanity bound, not a Kafka rule: it catches a unit mistake (bytes for a count) before a backend
#: tries to create a million partitions.
MAX_PARTITIONS = 100_000


def check_topic_name(topic: object) -> str:
    """Return ``topic`` if it is a legal topic name, else raise :class:`InvalidTopicError`."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"a topic name must be a str, not {type(topic).__name__}")
    if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        if len(topic) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidTopicError(
                f"topic name is {len(topic)} characters long; at most {MAX_TOPIC_NAME_LENGTH} are allowed"
            )
        raise InvalidTopicError(
            f"illegal topic name {topic!r}: use 1 to {MAX_TOPIC_NAME_LENGTH} characters from "
            "[A-Za-z0-9._-], and not '.' or '..'"
        )
    return topic


def check_partition_count(partitions: object, what: str = "partition count") -> int:
    """Return ``partitions`` if it is an int in ``1..MAX_PARTITIONS``."""
    if not isinstance(partitions, int) or isinstance(partitions, bool):
        raise InvalidPartitionsError(f"the {what} must be an int, not {type(partitions).__name__}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(f"the {what} must be between 1 and {MAX_PARTITIONS}, got {partitions}")
    return partitions


def check_partition_index(partition: object) -> int:
    """Return ``partition`` if it is a non-negative int (whether it exists is the backend's check)."""
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise InvalidPartitionsError(f"a partition must be an int >= 0, got {partition!r}")
    return partition


def check_read_args(start: object, max_records: object) -> tuple[int, int]:
    """Validate the ``start`` offset and ``max_records`` of a read."""
    if not isinstance(start, int) or isinstance(start, bool):
        raise ValueError(f"start offset must be an int, got {start!r}")
    if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 0:
        raise ValueError(f"max_records must be an int >= 0, got {max_records!r}")
    return start, max_records


def first_invalid_record(
    records: Sequence[LogRecord], max_field_bytes: int | None = None, min_timestamp: int = -(2**63)
) -> InvalidRecordError | None:
    """The error for the first record that is not a well-typed :class:`LogRecord`, or None.

    Field types are checked, not trusted, because a ``str`` where ``bytes`` belong would otherwise be
    written (or rejected) far from the caller's mistake.
    """
    for i, r in enumerate(records):
        if not isinstance(r, LogRecord):
            return InvalidRecordError(f"record {i} is a {type(r).__name__}, not a LogRecord")
        for name in ("key", "value"):
            v = getattr(r, name)
            if v is not None and not isinstance(v, bytes | bytearray):
                return InvalidRecordError(f"record {i}: {name} must be bytes or None, not {type(v).__name__}")
            if v is not None and max_field_bytes is not None and len(v) >= max_field_bytes:
                return RecordTooLargeError(f"record {i}: the {name} is {len(v)} bytes")
        ts = r.timestamp_ms
        if not isinstance(ts, int) or isinstance(ts, bool) or not min_timestamp <= ts < 2**63:
            allowed = "an int64" if min_timestamp == -(2**63) else f"an int64 >= {min_timestamp}"
            return InvalidRecordError(f"record {i}: timestamp_ms must be {allowed}, got {ts!r}")
        if not isinstance(r.headers, tuple | list):
            return InvalidRecordError(f"record {i}: headers must be a tuple of (str, bytes) pairs")
        for h in r.headers:
            if (
                not isinstance(h, tuple | list)
                or len(h) != 2
                or not isinstance(h[0], str)
                or not isinstance(h[1], bytes | bytearray)
            ):
                return InvalidRecordError(f"record {i}: header {h!r} is not a (str, bytes) pair")
            try:
                h[0].encode()
            except UnicodeEncodeError as e:
                return InvalidRecordError(f"record {i}: header name {h[0]!r} is not valid UTF-8: {e}")
    return None
