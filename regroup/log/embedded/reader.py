"""The readers' side of one partition: the committed end, seek hints, the frame scan, decoding records.

Rules of this module:

1. Readers never lock a file and never write one; any number of them, in any process, read while the
   writer appends.
2. A read first reads the committed end (the ``end`` file; retried while a concurrent ``pwrite`` is
   caught half-done) and never looks past it. Within the committed range a bad CRC or bad framing is
   real corruption and raises :class:`CorruptLogError`.
3. Where to start is only ever a hint: the cursor (where the previous read stopped) or the sparse
   index. A hint that does not point at the expected frame (a writer's recovery rewrote the tail)
   raises :class:`StaleHint`, and the read walks the file again from its start, without hints.
4. A reader keeps, per partition, the sparse index, the cursor and the checked bytes of the frame its
   last read stopped inside, so a consumer reading on in small steps neither seeks nor re-reads and
   re-checks a frame.

``read`` builds :class:`ConsumedRecord` objects column by column here; ``read_arrow`` hands the same
frames to `regroup.log.embedded.arrow`.
"""

from __future__ import annotations

import bisect
import itertools
import os
import threading
import time
from array import array
from pathlib import Path

from regroup.log.base import ConsumedRecord, make_consumed_records
from regroup.log.embedded.files import pread_exact
from regroup.log.embedded.frames import (
    CRC,
    END_SIZE,
    FLAG_HEADERS,
    FLAG_KEY_NULLS,
    FLAG_VALUE_NULLS,
    FRAME_HEAD,
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    INDEX_ENTRY,
    Frame,
    frame_crc_ok,
    ints,
    parse_body,
    unpack_end,
)
from regroup.log.errors import CorruptLogError, OffsetOutOfRangeError

#: ``read``/``read_arrow`` stop adding frames once this many bytes are collected (at least one frame is
#: always returned); it bounds memory and keeps Arrow's 32-bit offsets far from overflowing. Measured:
#: 8 MiB reads 1 KiB records about twice as fast as 64 MiB (buffers above glibc's 32 MiB mmap
#: threshold are fresh pages every time), and is no slower for small records.
DEFAULT_MAX_READ_BYTES = 8 << 20
_FIRST_READ_BYTES = 64 << 10
_MAX_READ_CHUNK = 8 << 20


class StaleHint(Exception):
    """A cached frame position no longer matches the file (only after a recovery rewrote the tail)."""


def read_end(fd: int, where: Path) -> tuple[int, int]:
    """Read an end file, retrying while a concurrent 32-byte ``pwrite`` is caught half-done."""
    for attempt in range(200):
        raw = os.pread(fd, END_SIZE, 0)
        if not raw:
            return 0, 0  # created by a writer that has not published anything yet
        end = unpack_end(raw)
        if end is not None:
            return end
        time.sleep(0 if attempt < 20 else 0.001)
    raise CorruptLogError(f"{where / 'end'}: the committed end is unreadable (bad checksum)")


class PartitionReader:
    """A reader's cached view of one partition: open files, the sparse index, and a cursor.

    The cursor remembers where the previous read stopped, so a consumer that reads on from there
    (the common case) goes straight to the right frame without touching the index.
    """

    def __init__(self, directory: Path, first_offset: int = 0) -> None:
        self.directory = directory
        #: The offset of the first record the files hold: 0, or a split piece's start (`layout`).
        self.first_offset = first_offset
        self.end_fd = -1
        self.data_fd = -1
        self.index_offsets: list[int] = []
        self.index_positions: list[int] = []
        self.index_loaded = 0
        self.cursor: tuple[int, int, int] | None = None  # (next offset, frame base, frame position)
        # Held while reading, so that evicting this reader from the cache cannot close its files
        # under a reading thread (a reused file descriptor would read another file).
        self.lock = threading.Lock()
        self.closed = False
        # The checked bytes of the frame the last read stopped inside, by position: a consumer that
        # reads fewer records than a frame holds does not re-read and re-checksum it every time.
        self.frame: tuple[int, bytes] | None = None

    def close(self) -> None:
        """Close the files; the caller holds ``self.lock``."""
        self.closed = True
        for fd in (self.end_fd, self.data_fd):
            if fd >= 0:
                os.close(fd)
        self.end_fd = self.data_fd = -1

    def committed(self) -> tuple[int, int]:
        """The published ``(end offset, end position)``; ``(0, 0)`` if nothing was ever written."""
        if self.end_fd < 0:
            try:
                self.end_fd = os.open(self.directory / "end", os.O_RDONLY)
            except FileNotFoundError:
                return 0, 0
        return read_end(self.end_fd, self.directory)

    def data(self) -> int:
        if self.data_fd < 0:
            try:
                self.data_fd = os.open(self.directory / "log", os.O_RDONLY)
            except FileNotFoundError:
                raise CorruptLogError(
                    f"{self.directory}: the end file says records were written but the log file is missing"
                ) from None
        return self.data_fd

    def refresh_index(self) -> None:
        try:
            fd = os.open(self.directory / "index", os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            if size < self.index_loaded:  # a writer's recovery rewrote it: start over
                self.index_offsets, self.index_positions, self.index_loaded = [], [], 0
            whole = size - size % INDEX_ENTRY.size
            if whole > self.index_loaded:
                raw = pread_exact(fd, whole - self.index_loaded, self.index_loaded)
                raw = raw[: len(raw) - len(raw) % INDEX_ENTRY.size]
                offsets, positions = self.index_offsets, self.index_positions
                for off, pos in INDEX_ENTRY.iter_unpack(raw):
                    if off < 0 or pos < 0 or (offsets and (off <= offsets[-1] or pos <= positions[-1])):
                        continue  # never trust a non-increasing entry; the index is only a hint
                    offsets.append(off)
                    positions.append(pos)
                self.index_loaded += len(raw)
        finally:
            os.close(fd)

    def seek_hint(self, start: int) -> tuple[int, int]:
        """A frame start ``(base offset, byte position)`` at or before ``start``, as close as known."""
        cur = self.cursor
        if cur is not None and cur[0] == start:
            return cur[1], cur[2]
        self.refresh_index()
        best = (self.first_offset, 0)
        i = bisect.bisect_right(self.index_offsets, start) - 1
        if i >= 0:
            best = (self.index_offsets[i], self.index_positions[i])
        if cur is not None and best[0] < cur[1] <= start:
            best = (cur[1], cur[2])
        return best

    def forget_hints(self) -> None:
        self.cursor = None
        self.frame = None
        self.index_offsets, self.index_positions, self.index_loaded = [], [], 0

    def collect(
        self, topic: str, partition: int, start: int, max_records: int, max_bytes: int
    ) -> list[Frame]:
        """The frames holding records ``start .. start+max_records`` (up to the committed end).

        The caller holds ``self.lock`` and has checked that the reader is open.
        """
        end_offset, end_pos = self.committed()
        if start < self.first_offset or start > end_offset:
            raise OffsetOutOfRangeError(
                topic, partition, start,
                f"the partition holds offsets {self.first_offset} to {end_offset - 1} (end {end_offset})",
            )
        if start == end_offset or max_records == 0:
            return []
        stop = min(end_offset, start + max_records)
        try:
            return self.scan(start, stop, end_pos, max_bytes, use_hints=True)
        except StaleHint:
            self.forget_hints()
            return self.scan(start, stop, end_pos, max_bytes, use_hints=False)

    def scan(self, start: int, stop: int, end_pos: int, max_bytes: int, use_hints: bool) -> list[Frame]:
        """Walk frames from the best known position to ``stop``, checking each frame it returns.

        A hint (index entry, cursor) that does not point at the expected frame raises ``StaleHint``;
        the caller then walks again from the start of the file, without hints.
        """
        fd = self.data()
        base, pos = self.seek_hint(start) if use_hints else (self.first_offset, 0)
        hint_pos = pos
        if pos != 0 and not (0 < pos < end_pos and self.first_offset < base <= start):
            raise StaleHint
        frames: list[Frame] = []
        buf = b""
        buf_pos = 0
        chunk = _FIRST_READ_BYTES
        taken = 0

        def corrupt(why: str) -> CorruptLogError:
            return CorruptLogError(
                f"{self.directory / 'log'}: {why} at byte {pos} (expected the frame of offset {base}; the "
                f"committed end is byte {end_pos}). The partition is corrupt from there."
            )

        while base < stop:
            if pos >= end_pos:
                raise corrupt("the committed end claims more records than the bytes hold")
            cached = self.frame
            if cached is not None and cached[0] == pos:
                # The frame the previous read stopped inside: already read and checked.
                fbuf = cached[1]
                _, body_len, fbase, count = FRAME_HEAD.unpack_from(fbuf)
                if fbase == base and base + count > start:
                    first = max(0, start - base)
                    last = min(count, stop - base)
                    frames.append(Frame(fbuf, FRAME_HEADER_SIZE, body_len, base, count, first, last))
                    if last < count:
                        self.cursor = (base + last, base, pos)
                        return frames
                    self.frame = None
                    taken += len(fbuf)
                    pos, base = pos + len(fbuf), base + count
                    if taken >= max_bytes:
                        break
                    continue
            rel = pos - buf_pos
            if rel < 0 or rel + FRAME_HEADER_SIZE > len(buf):
                buf = pread_exact(fd, min(chunk, end_pos - pos), pos)
                buf_pos, rel = pos, 0
                chunk = min(chunk * 2, _MAX_READ_CHUNK)
                if len(buf) < FRAME_HEADER_SIZE:
                    raise corrupt("the file is shorter than its committed end")
            magic, body_len, fbase, count = FRAME_HEAD.unpack_from(buf, rel)
            if magic != FRAME_MAGIC or fbase != base or count == 0:
                if pos == hint_pos != 0:
                    raise StaleHint
                raise corrupt("bad frame header")
            frame_end = pos + FRAME_HEADER_SIZE + body_len
            if frame_end > end_pos:
                raise corrupt("a frame runs past the committed end")
            if fbase + count <= start:  # skipping forward from an index entry
                pos, base = frame_end, base + count
                continue
            if rel + FRAME_HEADER_SIZE + body_len > len(buf):
                buf = pread_exact(fd, max(min(chunk, end_pos - pos), FRAME_HEADER_SIZE + body_len), pos)
                buf_pos, rel = pos, 0
                chunk = min(chunk * 2, _MAX_READ_CHUNK)
                if len(buf) < FRAME_HEADER_SIZE + body_len:
                    raise corrupt("the file is shorter than its committed end")
            (crc,) = CRC.unpack_from(buf, rel + FRAME_HEAD.size)
            mv = memoryview(buf)
            body_at = rel + FRAME_HEADER_SIZE
            if not frame_crc_ok(mv[rel : rel + FRAME_HEAD.size], mv[body_at : body_at + body_len], crc):
                raise corrupt("checksum mismatch")
            first = max(0, start - fbase)
            last = min(count, stop - fbase)
            frames.append(Frame(buf, body_at, body_len, fbase, count, first, last))
            taken += FRAME_HEADER_SIZE + body_len
            if last < count:  # stopped inside this frame: the next read starts in it
                self.cursor = (fbase + last, fbase, pos)
                # Keep just this frame (a copy, so the whole chunk can be freed) for that read.
                self.frame = (pos, bytes(mv[rel : body_at + body_len]))
                return frames
            pos, base = frame_end, base + count
            if taken >= max_bytes:
                break
        self.cursor = (base, base, pos)
        return frames


# --------------------------------------------------------------------------------------------------
# Decoding to records


def _slices(buf: bytes, lengths: array[int], at: int, i0: int, i1: int) -> list[bytes]:
    """``buf`` cut into the values ``i0 .. i1`` of a column whose values start at ``buf[at]``.

    Only the wanted range is walked in Python; the bytes before it are skipped with a C-level sum, so
    a small read from the middle of a big frame costs little more than its own records.
    """
    offs = list(itertools.accumulate(lengths[i0:i1], initial=at + sum(lengths[:i0])))
    return list(map(buf.__getitem__, map(slice, offs, offs[1:])))


def decode_records(topic: str, partition: int, f: Frame) -> list[ConsumedRecord]:
    """The wanted records of one checked frame, built column by column."""
    buf = f.buf
    try:
        b = parse_body(buf, f.at, f.body_len, f.count)
    except ValueError as e:
        raise CorruptLogError(f"frame of offset {f.base} in {topic}/{partition}: {e}") from e
    n = f.count
    i0, i1 = f.first, f.stop
    ts = ints(buf, "q", b.ts + 8 * i0, i1 - i0).tolist()
    keys: list[bytes | None] = list(_slices(buf, ints(buf, "i", b.klens, n), b.keys, i0, i1))
    values: list[bytes | None] = list(_slices(buf, ints(buf, "i", b.vlens, n), b.values, i0, i1))
    if b.flags & (FLAG_KEY_NULLS | FLAG_VALUE_NULLS):
        nulls = buf[b.nulls + i0 : b.nulls + i1]
        if b.flags & FLAG_KEY_NULLS:
            keys = [None if nb & 1 else k for k, nb in zip(keys, nulls, strict=True)]
        if b.flags & FLAG_VALUE_NULLS:
            values = [None if nb & 2 else v for v, nb in zip(values, nulls, strict=True)]
    headers: list[tuple[tuple[str, bytes], ...]]
    if b.flags & FLAG_HEADERS:
        hcounts = ints(buf, "i", b.hcounts, n)
        h0 = sum(hcounts[:i0])
        h1 = h0 + sum(hcounts[i0:i1])
        raw_names = _slices(buf, ints(buf, "i", b.hnlens, b.n_headers), b.hnames, h0, h1)
        hvalues = _slices(buf, ints(buf, "i", b.hvlens, b.n_headers), b.hvalues, h0, h1)
        decoded: dict[bytes, str] = {}
        names = [decoded.get(r) or decoded.setdefault(r, r.decode()) for r in raw_names]
        pairs = list(zip(names, hvalues, strict=True))
        bounds = list(itertools.accumulate(hcounts[i0:i1], initial=0))
        headers = [tuple(pairs[a:z]) for a, z in itertools.pairwise(bounds)]
    else:
        headers = [()] * (i1 - i0)
    return make_consumed_records(topic, partition, range(f.base + i0, f.base + i1), keys, values, ts, headers)
