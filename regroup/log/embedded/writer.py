"""The writer's side of one partition: the single-writer lock, the append path, crash recovery, the index.

Rules of this module:

1. One writer per partition, in any process: ``flock`` on the ``end`` file, non-blocking, so a second
   writer gets :class:`PartitionLockedError` naming the holder at once. The lock is taken when the
   writer opens the partition and held until it is closed.
2. The commit point of an append is the ``end`` file: the frames are written (and, with
   ``fsync="batch"``, ``fdatasync``\\ed), index entries appended, and only then the new end published
   with one 32-byte ``pwrite``. Readers never look past the published end, so they never see a torn or
   partly written frame.
3. A writer that fails to write publishes nothing, cuts the data back (best effort) and closes itself:
   in-memory positions are not trusted after a failed write; the next writer recovers from the files.
4. Recovery runs whenever a writer opens a partition: it starts from the published end (or, if that is
   beyond the data, from the last index entry that still points at a frame), validates frames forward,
   keeps every complete produce call (up to the last frame flagged batch end), truncates anything
   after it (a torn tail) and republishes the end. A produce call that crashed is therefore either
   fully present or absent, never half present.
5. The index is a hint, written every :data:`INDEX_INTERVAL_BYTES` of log and never fsynced: recovery
   drops entries that do not point at their frame.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from regroup.log.base import LogRecord
from regroup.log.embedded.files import FsyncPolicy, fsync_dir, pread_exact, pwrite_all
from regroup.log.embedded.frames import (
    BODY_HEAD,
    CRC,
    END_SIZE,
    FLAG_BATCH_END,
    FRAME_HEAD,
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    INDEX_ENTRY,
    encode_batch,
    frame_crc_ok,
    pack_end,
    unpack_end,
)
from regroup.log.errors import PartitionLockedError, ProduceError

_log = logging.getLogger(__name__)

INDEX_INTERVAL_BYTES = 64 << 10


@dataclass(slots=True)
class PartitionWriter:
    """The writer's side of one partition: the lock, the open files and where the next frame goes."""

    directory: Path
    end_fd: int  # also the flock'd lock
    data_fd: int
    next_offset: int
    position: int
    last_index_position: int
    index_size: int
    pid: int
    fsync: FsyncPolicy
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def append(self, records: Sequence[LogRecord], max_record_bytes: int) -> int:
        """Append one produce call; return its first offset. The caller holds ``self.lock``.

        On a failed write this writer is closed (rule 3) and :class:`ProduceError` raised.
        """
        first = self.next_offset
        if not records:
            return first
        data, frames = encode_batch(records, first, max_record_bytes)
        next_offset = first + len(records)
        position = self.position + len(data)
        last_index = self.last_index_position
        entries = []
        for base, rel in frames:
            pos = self.position + rel
            if pos - last_index >= INDEX_INTERVAL_BYTES:
                entries.append(INDEX_ENTRY.pack(base, pos))
                last_index = pos
        try:
            pwrite_all(self.data_fd, data, self.position)
            if self.fsync == "batch":
                os.fdatasync(self.data_fd)
            if entries:
                self._append_index(b"".join(entries))
            # Publishing the end is the commit point: readers see the batch from here on.
            pwrite_all(self.end_fd, pack_end(next_offset, position), 0)
        except OSError as e:
            # Nothing was published: cut the data back (best effort) and let the next produce reopen
            # the partition and recover, rather than trust in-memory state after a failed write.
            with suppress(OSError):
                os.ftruncate(self.data_fd, self.position)
            self.close()
            raise ProduceError(f"writing to {self.directory / 'log'} failed: {e}") from e
        self.next_offset, self.position, self.last_index_position = next_offset, position, last_index
        return first

    def _append_index(self, data: bytes) -> None:
        fd = os.open(self.directory / "index", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            pwrite_all(fd, data, self.index_size)
        finally:
            os.close(fd)
        self.index_size += len(data)

    def close(self) -> None:
        """Close the files, releasing the lock; the caller holds ``self.lock``. Idempotent.

        In a forked child the descriptors are the parent's: closing them there would not release the
        parent's lock, and could close files the child has since reused the numbers for.
        """
        if not self.closed and self.pid == os.getpid():
            self.closed = True
            os.close(self.data_fd)
            os.close(self.end_fd)  # releases the flock


def open_writer(directory: Path, name: str, fsync: FsyncPolicy, first_offset: int = 0) -> PartitionWriter:
    """Take the partition in ``directory`` for writing, recovering it (``name`` is for error messages).

    ``first_offset`` is the offset of the files' first record: 0, or a split piece's start (`layout`).
    """
    created = not directory.exists()
    directory.mkdir(exist_ok=True)
    end_fd = os.open(directory / "end", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(end_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(end_fd)
        if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        try:
            holder = (directory / "writer").read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise PartitionLockedError(
            f"partition {name} is already being written "
            f"(writer: {holder}); the embedded log allows one writer per partition. Close the other "
            "EmbeddedLog (or stop that process) first."
        ) from None
    try:
        data_fd = os.open(directory / "log", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        os.close(end_fd)
        raise
    try:
        info = f"pid {os.getpid()} on {socket.gethostname()}\n".encode()
        fd = os.open(directory / "writer", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, info, 0)
        finally:
            os.close(fd)
        if created and fsync == "batch":
            fsync_dir(directory)
            fsync_dir(directory.parent)
        w = _recover(directory, end_fd, data_fd, fsync, first_offset)
    except BaseException:
        os.close(data_fd)
        os.close(end_fd)
        raise
    return w


def _recover(directory: Path, end_fd: int, data_fd: int, fsync: FsyncPolicy,
             first_offset: int = 0) -> PartitionWriter:
    """Find the true end of a partition we now own; cut a torn tail; republish the end (rule 4)."""
    size = os.fstat(data_fd).st_size
    published = unpack_end(os.pread(end_fd, END_SIZE, 0))
    index = _load_index(directory)
    start = (first_offset, 0)
    if published is not None and published[1] <= size:
        start = published
    else:
        if published is not None:
            _log.warning(
                "%s: the published end (offset %d, byte %d) is beyond the %d bytes of data "
                "(lost on a machine crash with fsync='never'?); recovering from the index",
                directory, published[0], published[1], size,
            )
        for off, pos in reversed(index):
            if pos < size and _frame_base_at(data_fd, pos) == off:
                start = (off, pos)
                break
    good_off, good_pos = start
    off, pos = start
    while pos < size:
        head = pread_exact(data_fd, FRAME_HEADER_SIZE, pos)
        if len(head) < FRAME_HEADER_SIZE:
            break
        magic, body_len, base, count = FRAME_HEAD.unpack_from(head)
        (crc,) = CRC.unpack_from(head, FRAME_HEAD.size)
        if magic != FRAME_MAGIC or base != off or count == 0:
            break
        if pos + FRAME_HEADER_SIZE + body_len > size:
            break
        body = pread_exact(data_fd, body_len, pos + FRAME_HEADER_SIZE)
        if len(body) != body_len or not frame_crc_ok(head, body, crc):
            break
        pos += FRAME_HEADER_SIZE + body_len
        off += count
        if BODY_HEAD.unpack_from(body)[0] & FLAG_BATCH_END:
            good_off, good_pos = off, pos
    if good_pos < size:
        lost = size - good_pos
        acknowledged = published is not None and good_pos < published[1]
        _log.warning(
            "%s: truncating %d bytes after offset %d (byte %d): %s",
            directory, lost, good_off, good_pos,
            "DATA THAT HAD BEEN PUBLISHED IS LOST" if acknowledged
            else "a torn tail from a crashed writer",
        )
        os.ftruncate(data_fd, good_pos)
        if fsync == "batch":
            os.fsync(data_fd)
    kept = [(o, p) for o, p in index if p < good_pos and o < good_off]
    # A torn append leaves garbage at the index's tail: drop entries until one points at its frame.
    while kept and _frame_base_at(data_fd, kept[-1][1]) != kept[-1][0]:
        kept.pop()
    index_path = directory / "index"
    if len(kept) != len(index) or (
        index_path.exists() and index_path.stat().st_size != len(kept) * INDEX_ENTRY.size
    ):
        fd = os.open(directory / "index", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 0)
            pwrite_all(fd, b"".join(INDEX_ENTRY.pack(o, p) for o, p in kept), 0)
        finally:
            os.close(fd)
    if published != (good_off, good_pos):
        pwrite_all(end_fd, pack_end(good_off, good_pos), 0)
    return PartitionWriter(
        directory=directory,
        end_fd=end_fd,
        data_fd=data_fd,
        next_offset=good_off,
        position=good_pos,
        last_index_position=kept[-1][1] if kept else 0,
        index_size=len(kept) * INDEX_ENTRY.size,
        pid=os.getpid(),
        fsync=fsync,
    )


def _load_index(directory: Path) -> list[tuple[int, int]]:
    """The index's entries up to the first that does not increase (the rest is not trusted)."""
    try:
        raw = (directory / "index").read_bytes()
    except FileNotFoundError:
        return []
    raw = raw[: len(raw) - len(raw) % INDEX_ENTRY.size]
    out: list[tuple[int, int]] = []
    for off, pos in INDEX_ENTRY.iter_unpack(raw):
        if off < 0 or pos < 0 or (out and (off <= out[-1][0] or pos <= out[-1][1])):
            break
        out.append((off, pos))
    return out


def _frame_base_at(fd: int, pos: int) -> int | None:
    head = pread_exact(fd, FRAME_HEAD.size, pos)
    if len(head) < FRAME_HEAD.size:
        return None
    magic, _, base, _ = FRAME_HEAD.unpack_from(head)
    return int(base) if magic == FRAME_MAGIC else None
