"""`EmbeddedLog`: the door through which every call on an embedded log passes.

Rules of this module:

1. The facade decides nothing about bytes or files: topic metadata is `directory`'s, appends and
   recovery `writer`'s, reads `reader`'s, Arrow batches `arrow`'s. It checks arguments, finds the
   partition's writer or reader, and holds the locks that keep threads apart.
2. Thread-safe: one lock guards the tables of writers and readers; each writer and reader has its own
   lock, held while it works, so that closing or evicting one never pulls files from under a thread.
   A writer or reader found closed after its lock was taken is looked up again.
3. A writer is taken on the first produce to a partition and kept until :meth:`EmbeddedLog.close`. At
   most 256 partitions' readers stay open per instance (least recently used are closed); a writer keeps
   two files open per partition it writes.
4. Pickling gives a fresh instance on the same directory with no open files or locks, which is what a
   Spark task or a ``multiprocessing`` child needs. An instance inherited across ``fork()`` with a
   partition open for writing refuses to write there: the lock is the parent's.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from regroup.log.arrow import empty_batch
from regroup.log.base import ConsumedRecord, LogRecord
from regroup.log.embedded.arrow import frames_to_arrow
from regroup.log.embedded.directory import LogDirectory
from regroup.log.embedded.files import FsyncPolicy
from regroup.log.embedded.frames import HARD_MAX_RECORD_BYTES, Frame
from regroup.log.embedded.reader import DEFAULT_MAX_READ_BYTES, PartitionReader, decode_records, read_end
from regroup.log.embedded.writer import PartitionWriter, open_writer
from regroup.log.errors import LogError, ProduceError
from regroup.log.validation import check_read_args, check_topic_name

DEFAULT_MAX_RECORD_BYTES = 64 << 20
_MAX_OPEN_READERS = 256


class EmbeddedLog:
    """A partitioned log in ``directory``, shared by processes on one machine (see `regroup.log.embedded`).

    ``fsync`` is ``"batch"`` (durable on return from ``produce``) or ``"never"`` (survives a process
    crash, not a power loss). ``max_record_bytes`` bounds one record (key + value + headers).

    Thread-safe. Pickling an instance gives a fresh instance on the same directory with no open files
    or locks, which is what a Spark task or a ``multiprocessing`` child needs. Use it as a context
    manager, or call :meth:`close`, to release the partitions it writes.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        fsync: FsyncPolicy = "batch",
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        if fsync not in ("batch", "never"):
            raise ValueError(f"fsync must be 'batch' or 'never', got {fsync!r}")
        if not 1 <= max_record_bytes <= HARD_MAX_RECORD_BYTES:
            raise ValueError(f"max_record_bytes must be between 1 and {HARD_MAX_RECORD_BYTES}")
        self._root = Path(directory).absolute()
        self._fsync: FsyncPolicy = fsync
        self._max_record_bytes = max_record_bytes
        self._lock = threading.RLock()
        self._writers: dict[tuple[str, int], PartitionWriter] = {}
        self._readers: OrderedDict[tuple[str, int], PartitionReader] = OrderedDict()
        self._closed = False
        self._dir = LogDirectory(self._root, fsync)

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (str(self._root), self._fsync, self._max_record_bytes))

    def __repr__(self) -> str:
        return f"EmbeddedLog({str(self._root)!r}, fsync={self._fsync!r})"

    def __enter__(self) -> EmbeddedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def directory(self) -> Path:
        return self._root

    # ---------------------------------------------------------------------------------- metadata

    def topic_partitions(self) -> dict[str, int]:
        """``{topic: partition count}`` for every topic, read fresh from the directory."""
        self._check_open()
        return self._dir.topic_partitions()

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions; :class:`TopicExistsError` if it exists."""
        self._check_open()
        self._dir.create_topic(topic, partitions)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (a no-op if it has that many; shrinking is refused)."""
        self._check_open()
        self._dir.add_partitions(topic, total)

    # ------------------------------------------------------------------------------------ writing

    def produce(self, topic: str, partition: int, records: Sequence[LogRecord]) -> int:
        """Append ``records`` atomically; return the offset of the first (the end offset if empty).

        The first produce to a partition takes its writer lock, which this instance keeps until
        :meth:`close`; another writer gets :class:`PartitionLockedError`. If writing fails (disk
        full...), :class:`ProduceError` is raised, the partition is released, and the next produce
        reopens it and recovers: the failed call's records are then normally absent (the data file is
        cut back), though a call that fails after its data was complete may still be present.
        """
        self._check_open()
        self._dir.check_partition(topic, partition)
        while True:
            w = self._writer(topic, partition)
            with w.lock:
                if w.closed:  # closed or discarded by another thread meanwhile
                    self._check_open()
                    continue
                try:
                    return w.append(records, self._max_record_bytes)
                except ProduceError:
                    if w.closed:  # the write failed: the next produce opens the partition afresh
                        self._forget_writer(w)
                    raise

    def _writer(self, topic: str, partition: int) -> PartitionWriter:
        with self._lock:
            self._check_open()
            w = self._writers.get((topic, partition))
            if w is not None:
                if w.pid != os.getpid():
                    raise LogError(
                        "this EmbeddedLog was inherited across fork() with a partition open for writing; "
                        "open a new EmbeddedLog in the child process"
                    )
                return w
            w = open_writer(self._dir.partition_dir(topic, partition), f"{topic}/{partition} of {self._root}",
                            self._fsync)
            self._writers[(topic, partition)] = w
            return w

    def release_partition(self, topic: str, partition: int) -> None:
        """Close this instance's writer of ``topic``/``partition`` (if any), releasing its lock, so
        that another process can write it: how a task's writes move with the task."""
        with self._lock:
            w = self._writers.pop((topic, partition), None)
        if w is not None:
            with w.lock:
                w.close()

    def _forget_writer(self, w: PartitionWriter) -> None:
        with self._lock:
            for key, known in list(self._writers.items()):
                if known is w:
                    del self._writers[key]

    # ------------------------------------------------------------------------------------ reading

    def _reader(self, topic: str, partition: int) -> PartitionReader:
        key = (topic, partition)
        with self._lock:
            r = self._readers.get(key)
            if r is None:
                r = PartitionReader(self._dir.partition_dir(topic, partition))
                self._readers[key] = r
                while len(self._readers) > _MAX_OPEN_READERS:
                    _, old = self._readers.popitem(last=False)
                    with old.lock:
                        old.close()
            else:
                self._readers.move_to_end(key)
            return r

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset}`` as published by each partition's writer."""
        self._check_open()
        check_topic_name(topic)
        count = self._dir.partition_count(topic)
        out: dict[int, int] = {}
        for p in range(count):
            directory = self._dir.partition_dir(topic, p)
            try:
                fd = os.open(directory / "end", os.O_RDONLY)
            except FileNotFoundError:
                out[p] = 0
                continue
            try:
                out[p] = read_end(fd, directory)[0]
            finally:
                os.close(fd)
        return out

    def _collect(
        self, topic: str, partition: int, start: int, max_records: int, max_bytes: int
    ) -> list[Frame]:
        """Find the frames holding records ``start .. start+max_records`` (up to the committed end)."""
        self._check_open()
        self._dir.check_partition(topic, partition)
        check_read_args(start, max_records)
        while True:
            r = self._reader(topic, partition)
            with r.lock:
                if r.closed:  # evicted from the cache between the lookup and the lock
                    self._check_open()
                    continue
                return r.collect(topic, partition, start, max_records, max_bytes)

    def read(
        self,
        topic: str,
        partition: int,
        start: int,
        max_records: int,
        *,
        max_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> list[ConsumedRecord]:
        """Records from ``start`` on: at most ``max_records``, and stopping at about ``max_bytes``.

        Returns ``[]`` at the end of the partition; raises :class:`OffsetOutOfRangeError` beyond it.
        """
        out: list[ConsumedRecord] = []
        for f in self._collect(topic, partition, start, max_records, max_bytes):
            out += decode_records(topic, partition, f)
        return out

    def read_arrow(
        self,
        topic: str,
        partition: int,
        start: int,
        max_records: int,
        *,
        max_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> pa.RecordBatch:
        """The records :meth:`read` would return, as one batch with ``ARROW_SCHEMA``, built column-wise."""
        frames = self._collect(topic, partition, start, max_records, max_bytes)
        if not frames:
            return empty_batch()
        return frames_to_arrow(topic, partition, start, frames)

    # ------------------------------------------------------------------------------------ closing

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"{self!r} is closed")

    def close(self) -> None:
        """Release every partition this instance writes and close all files. Idempotent."""
        with self._lock:
            self._closed = True
            writers = list(self._writers.values())
            readers = list(self._readers.values())
        for w in writers:
            with w.lock:
                self._forget_writer(w)
                w.close()
        for r in readers:
            with r.lock:
                r.close()
        with self._lock:
            self._readers.clear()
