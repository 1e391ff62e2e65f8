"""Exceptions of the Python consumer. Each carries the coordinator's error code and message."""

from __future__ import annotations

from regroup.protocol.errors import ErrorCode


class ConsumerError(Exception):
    """Base class: ``code`` is the protocol error (or None for local errors)."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message if code is None else f"{code.value}: {message}")
        self.code = code
        self.message = message


class FatalConsumerError(ConsumerError):
    """The consumer cannot go on (fenced instance id, bad subscription, unsupported assignor...)."""


class CommitFailedError(ConsumerError):
    """The coordinator refused a commit (stale epoch, shard no longer owned, offset behind)."""


class ConsumerClosedError(ConsumerError):
    """The consumer was used after close()."""


class OffsetFetchError(ConsumerError):
    """The group's committed offsets could not be read (coordinator away, or the request refused).

    Never read as "no committed offsets": that would rewind the partition to its beginning.
    """
