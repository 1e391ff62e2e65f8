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
5. A partition split on the producer side (`layout`, `pieces`) is written and read piece by piece:
   a produce call routes each record to the open piece of its key and appends there (one atomic
   append per piece); while a change is announced it first lets go of every announced piece this
   instance holds, then waits only if it has records for one; a writer that takes a piece's lock
   checks the layout afterwards and never appends to a sealed or announced piece; a read of keys
   follows `Layout.reading`. A partition never split costs one ``stat`` more per produce and read
   call, nothing else.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from regroup.log.arrow import empty_batch, records_to_arrow
from regroup.log.base import ConsumedRecord, KeyRead, LogRecord, keep_keys
from regroup.log.embedded.arrow import frames_to_arrow
from regroup.log.embedded.directory import LogDirectory
from regroup.log.embedded.files import FsyncPolicy
from regroup.log.embedded.frames import HARD_MAX_RECORD_BYTES, Frame
from regroup.log.embedded.layout import Layout, LayoutError, Piece
from regroup.log.embedded.pieces import DEFAULT_CHANGE_TIMEOUT_S, LayoutChange, Layouts, now_ms, piece_dir
from regroup.log.embedded.reader import DEFAULT_MAX_READ_BYTES, PartitionReader, decode_records, read_end
from regroup.log.embedded.writer import PartitionWriter, open_writer
from regroup.log.errors import InvalidRecordError, LogError, PartitionLockedError, ProduceError
from regroup.log.validation import check_read_args, check_topic_name
from regroup.protocol.keyrange import key_hash

DEFAULT_MAX_RECORD_BYTES = 64 << 20
_MAX_OPEN_READERS = 256


class _PieceMoved(Exception):
    """The piece a produce was about to write was sealed or announced meanwhile: route again."""


def _is_open(layout: Layout, piece_id: int) -> bool:
    return any(p.id == piece_id for p in layout.open_pieces())


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
        # Keyed by (topic, partition, piece id): piece 0 is the partition's own files.
        self._writers: dict[tuple[str, int, int], PartitionWriter] = {}
        self._readers: OrderedDict[tuple[str, int, int], PartitionReader] = OrderedDict()
        self._closed = False
        self._dir = LogDirectory(self._root, fsync)
        self._layouts = Layouts(self._dir)

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

        On a partition split on the producer side each record goes to the open piece of its key and
        the call is atomic per piece, not across pieces; the offset returned is the first record's in
        its piece. Keyless records are refused there (`layout` rule 4). While a split or merge of a
        piece is under way, a produce to that piece waits for it (at most its timeout).
        """
        self._check_open()
        self._dir.check_partition(topic, partition)
        layout = self._layouts.get(topic, partition)
        if layout.trivial:
            try:
                return self._append(topic, partition, layout.pieces[0], records)
            except _PieceMoved:
                pass  # split meanwhile: route below
        return self._produce_routed(topic, partition, records)

    def _produce_routed(self, topic: str, partition: int, records: Sequence[LogRecord]) -> int:
        left = list(range(len(records)))  # indexes of the records not appended yet
        first: dict[int, int] = {}
        while left:
            self._check_open()
            layout = self._layouts.get(topic, partition)
            pending = layout.pending_for(now_ms())
            opened = layout.open_pieces()
            by_piece: dict[int, list[int]] = {}
            if len(opened) == 1:
                by_piece[opened[0].id] = left
            else:
                for i in left:
                    key = records[i].key
                    if key is None:
                        raise InvalidRecordError(
                            f"record {i} has no key, and partition {partition} of {topic!r} is split by key "
                            "into pieces: a keyless record has no piece to go to. Give it a key, or "
                            "merge the partition back whole first.")
                    by_piece.setdefault(layout.open_piece_at(key_hash(key, 0)).id, []).append(i)
            if pending is not None:
                # `pieces` rule 3: let go of every announced piece held, not only those this call
                # writes: the change must take them all, and we may be about to wait for it.
                self._release(topic, partition, pending.pieces)
            waiting = False
            for pid, idxs in sorted(by_piece.items()):
                if pending is not None and pid in pending.pieces:
                    waiting = True
                    continue
                try:
                    at = self._append(topic, partition, layout.piece(pid), [records[i] for i in idxs])
                except _PieceMoved:
                    waiting = True
                    continue
                first.update((i, at + n) for n, i in enumerate(idxs))
                done = set(idxs)
                left = [i for i in left if i not in done]
            if waiting and left:
                self._wait_for_layout(topic, partition, layout)
        return first[0] if records else self._end_of_routed(topic, partition)

    def _wait_for_layout(self, topic: str, partition: int, seen: Layout) -> None:
        """A split or merge of a piece we write is under way: wait until it is published or void."""
        deadline = seen.pending.deadline_ms if seen.pending is not None else now_ms()
        delay = 0.001
        while True:
            layout = self._layouts.get(topic, partition)
            if layout != seen or now_ms() > deadline:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _end_of_routed(self, topic: str, partition: int) -> int:
        return self.end_offsets(topic).get(partition, 0)

    def _append(self, topic: str, partition: int, piece: Piece, records: Sequence[LogRecord]) -> int:
        while True:
            w = self._writer(topic, partition, piece)
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

    def _writer(self, topic: str, partition: int, piece: Piece) -> PartitionWriter:
        key = (topic, partition, piece.id)
        with self._lock:
            self._check_open()
            w = self._writers.get(key)
            if w is not None:
                if w.pid != os.getpid():
                    raise LogError(
                        "this EmbeddedLog was inherited across fork() with a partition open for writing; "
                        "open a new EmbeddedLog in the child process"
                    )
                return w
            name = f"{topic}/{partition} of {self._root}" + (f" piece {piece.id}" if piece.id else "")
            try:
                w = open_writer(piece_dir(self._dir.partition_dir(topic, partition), piece.id), name,
                                self._fsync, piece.start)
            except PartitionLockedError:
                # Held by a split or merge announced since we routed (not by another producer)?
                if self._moved(topic, partition, piece):
                    raise _PieceMoved from None
                raise
            # Rule 5: with the lock held, the piece cannot be sealed any more; check that it was not
            # sealed or announced before we took it.
            if self._moved(topic, partition, piece):
                with w.lock:
                    w.close()
                raise _PieceMoved
            self._writers[key] = w
            return w

    def _moved(self, topic: str, partition: int, piece: Piece) -> bool:
        """Whether ``piece`` is sealed, or announced to be, in the partition's current layout."""
        layout = self._layouts.get(topic, partition)
        pending = layout.pending_for(now_ms())
        return not _is_open(layout, piece.id) or (pending is not None and piece.id in pending.pieces)

    def _release(self, topic: str, partition: int, pieces: Iterable[int]) -> None:
        for pid in pieces:
            with self._lock:
                w = self._writers.pop((topic, partition, pid), None)
            if w is not None:
                with w.lock:
                    w.close()

    def release_partition(self, topic: str, partition: int) -> None:
        """Close this instance's writer of ``topic``/``partition`` (if any), releasing its lock, so
        that another process can write it: how a task's writes move with the task."""
        with self._lock:
            pieces = [k[2] for k in self._writers if k[:2] == (topic, partition)]
        self._release(topic, partition, pieces)

    def _forget_writer(self, w: PartitionWriter) -> None:
        with self._lock:
            for key, known in list(self._writers.items()):
                if known is w:
                    del self._writers[key]

    # ------------------------------------------------------------------------------------ reading

    def _reader(self, topic: str, partition: int, piece: Piece | None = None) -> PartitionReader:
        key = (topic, partition, 0 if piece is None else piece.id)
        with self._lock:
            r = self._readers.get(key)
            if r is None:
                where = self._dir.partition_dir(topic, partition)
                r = (PartitionReader(where) if piece is None or piece.id == 0
                     else PartitionReader(piece_dir(where, piece.id), piece.start))
                self._readers[key] = r
                while len(self._readers) > _MAX_OPEN_READERS:
                    _, old = self._readers.popitem(last=False)
                    with old.lock:
                        old.close()
            else:
                self._readers.move_to_end(key)
            return r

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: next offset}`` as published by each partition's writer. For a partition split
        on the producer side: the highest end of its open pieces (each piece has its own, see
        :meth:`piece_ends`)."""
        self._check_open()
        check_topic_name(topic)
        count = self._dir.partition_count(topic)
        out: dict[int, int] = {}
        for p in range(count):
            layout = self._layouts.get(topic, p)
            if layout.trivial:
                out[p] = self._published_end(self._dir.partition_dir(topic, p))
            else:
                out[p] = max(self.piece_ends(topic, p).values())
        return out

    def record_counts(self, topic: str) -> dict[int, int]:
        """``{partition: records}``: its end offset, or for a split partition the sum over its pieces."""
        out = self.end_offsets(topic)
        for p in out:
            layout = self._layouts.get(topic, p)
            if not layout.trivial:
                ends = self.piece_ends(topic, p)
                out[p] = sum((ends[(q.lo, q.hi)] if q.end is None else q.end) - q.start
                             for q in layout.pieces)
        return out

    def _published_end(self, directory: Path) -> int:
        try:
            fd = os.open(directory / "end", os.O_RDONLY)
        except FileNotFoundError:
            return 0
        try:
            return read_end(fd, directory)[0]
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------ split pieces

    def layout(self, topic: str, partition: int) -> Layout:
        """The partition's key layout (`regroup.log.embedded.layout`): one piece unless it was split."""
        self._check_open()
        self._dir.check_partition(topic, partition)
        return self._layouts.get(topic, partition)

    def key_pieces(self, topic: str, partition: int) -> tuple[tuple[int, int], ...]:
        """The open pieces' key ranges ``(lo, hi)``, in key order (the whole key space if not split)."""
        return tuple((p.lo, p.hi) for p in self.layout(topic, partition).open_pieces())

    def piece_ends(self, topic: str, partition: int) -> dict[tuple[int, int], int]:
        """``{(lo, hi): next offset}`` of each open piece of the partition."""
        pdir = self._dir.partition_dir(topic, partition)
        return {(p.lo, p.hi): max(p.start, self._published_end(piece_dir(pdir, p.id)))
                for p in self.layout(topic, partition).open_pieces()}

    def split_partition(self, topic: str, partition: int, into: int, *, piece: int | None = None,
                        timeout_s: float = DEFAULT_CHANGE_TIMEOUT_S) -> Layout:
        """Split an open piece of the partition (the partition itself, if never split) into ``into``
        pieces over equal slices of its keys; the new layout. Producers of that piece are held until
        it is done; see `regroup.log.embedded.pieces`."""
        layout = self.layout(topic, partition)
        if piece is None:
            opened = layout.open_pieces()
            if len(opened) != 1:
                raise LayoutError(
                    f"partition {partition} of {topic!r} has {len(opened)} open pieces "
                    f"({', '.join(str(p) for p in opened)}); name the one to split")
            piece = opened[0].id
        chosen = piece
        return self._change(topic, partition, [chosen], timeout_s,
                            lambda base, ends: base.split(chosen, into, ends[chosen]))

    def merge_partition(self, topic: str, partition: int, pieces: Sequence[int] | None = None, *,
                        timeout_s: float = DEFAULT_CHANGE_TIMEOUT_S) -> Layout:
        """Merge adjacent open pieces (all of them by default: the partition whole again) into one;
        the new layout. Producers of those pieces are held until it is done."""
        layout = self.layout(topic, partition)
        ids = [p.id for p in layout.open_pieces()] if pieces is None else list(pieces)
        return self._change(topic, partition, ids, timeout_s, lambda base, ends: base.merge(ends))

    def _change(self, topic: str, partition: int, pieces: list[int], timeout_s: float,
                change: Any) -> Layout:
        self._check_open()
        self._dir.check_partition(topic, partition)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        return LayoutChange(self._layouts, self._dir, self._fsync, topic, partition, timeout_s,
                            lambda ids: self._release(topic, partition, ids)).run(pieces, change)

    # ------------------------------------------------------------------------------------ reading

    def _collect(
        self, topic: str, partition: int, start: int, max_records: int, max_bytes: int,
        piece: Piece | None = None,
    ) -> list[Frame]:
        """Find the frames holding records ``start .. start+max_records`` (up to the committed end)."""
        self._check_open()
        self._dir.check_partition(topic, partition)
        check_read_args(start, max_records)
        while True:
            r = self._reader(topic, partition, piece)
            with r.lock:
                if r.closed:  # evicted from the cache between the lookup and the lock
                    self._check_open()
                    continue
                return r.collect(topic, partition, start, max_records, max_bytes)

    def _read_piece(self, topic: str, partition: int, piece: Piece, start: int, max_records: int,
                    max_bytes: int) -> list[ConsumedRecord]:
        out: list[ConsumedRecord] = []
        for f in self._collect(topic, partition, start, max_records, max_bytes, piece):
            out += decode_records(topic, partition, f)
        return out

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
        A partition split into several open pieces cannot be read as one sequence: read its key
        ranges (:meth:`read_keys`, :meth:`key_pieces`).
        """
        if self._layouts.get(topic, partition).trivial:
            out: list[ConsumedRecord] = []
            for f in self._collect(topic, partition, start, max_records, max_bytes):
                out += decode_records(topic, partition, f)
            return out
        return self._read_all_keys(topic, partition, start, max_records, max_bytes)

    def _read_all_keys(self, topic: str, partition: int, start: int, max_records: int,
                       max_bytes: int) -> list[ConsumedRecord]:
        # Every key, across pieces: records or the end (a read may land in a gap between pieces).
        while True:
            got = self.read_keys(topic, partition, 0, 1 << 32, start, max_records, max_bytes=max_bytes)
            if got.records or got.next_offset == start:
                return got.records
            start = got.next_offset

    def read_keys(self, topic: str, partition: int, lo: int, hi: int, start: int, max_records: int,
                  *, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> KeyRead:
        """The records of keys ``[lo, hi)`` from ``start`` on, looking at up to ``max_records`` records
        of each piece read, and where to read on (`layout` rule 3; see `PartitionedLog.read_keys`)."""
        layout = self._layouts.get(topic, partition)
        if layout.trivial:
            return keep_keys(self.read(topic, partition, start, max_records, max_bytes=max_bytes),
                             lo, hi, start)
        check_read_args(start, max_records)
        reading = layout.reading(lo, hi, start)
        if reading.sealed:
            return self._read_sealed(topic, partition, reading.sealed, lo, hi, start, max_records,
                                     max_bytes, reading.open)
        piece = reading.open
        if piece is None:  # pragma: no cover - open pieces tile the key space (layout rule 1)
            raise LogError(f"no piece of {topic}/{partition} holds keys [{lo}, {hi})")
        at = max(start, piece.start)
        return keep_keys(self._read_piece(topic, partition, piece, at, max_records, max_bytes), lo, hi, at)

    def _read_sealed(self, topic: str, partition: int, sealed: tuple[Piece, ...], lo: int, hi: int,
                     start: int, max_records: int, max_bytes: int, after: Piece | None) -> KeyRead:
        """Sealed pieces read together in offset order (records at one offset: by piece id), cut at
        the lowest offset any piece's read stopped at, so that no record below it is left unread."""
        got: list[tuple[Piece, list[ConsumedRecord]]] = []
        cut: int | None = None
        for piece in sealed:
            end = piece.end if piece.end is not None else piece.start
            at = max(start, piece.start)
            if at >= end:
                continue
            recs = self._read_piece(topic, partition, piece, at, min(max_records, end - at), max_bytes)
            got.append((piece, recs))
            stopped = recs[-1].offset + 1 if recs else at
            if stopped < end:  # more to read in this piece: nothing at or above `stopped` is safe yet
                cut = stopped if cut is None else min(cut, stopped)
        if cut is None:  # every sealed piece read to its end: on to the open piece's start
            nxt = max([start] + [p.end for p in sealed if p.end is not None])
            if after is not None:
                nxt = max(nxt, after.start)
            cut = nxt
        merged = sorted(((r.offset, p.id, r) for p, recs in got for r in recs if r.offset < cut),
                        key=lambda t: (t[0], t[1]))
        kept = keep_keys([r for _, _, r in merged], lo, hi, start).records
        return KeyRead(kept, cut)

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
        if not self._layouts.get(topic, partition).trivial:
            return records_to_arrow(self._read_all_keys(topic, partition, start, max_records, max_bytes))
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
