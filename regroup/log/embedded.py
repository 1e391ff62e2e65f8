"""The embedded log: a durable, partitioned, append-only log in a local directory.

It is regroup's default log, for everything on one machine: a producer process appends, while consumer
processes and Spark executors read the same partitions concurrently. There is no server; processes
coordinate through the files alone.

Layout of the directory::

    regroup-log.json                 format marker (refuses to open a directory of another format)
    .meta.lock                       flock'd while a topic is created or grown
    topics/<topic>/meta.json         {"partitions": N}; replaced atomically (temp file, fsync, rename)
    topics/<topic>/<p>/log           the partition's frames, append-only
    topics/<topic>/<p>/end           the committed end: (next offset, byte size) + CRC; the writer's lock
    topics/<topic>/<p>/index         sparse index: (offset, byte position) every >= 64 KiB of log
    topics/<topic>/<p>/writer        pid and host of the current writer (for error messages only)

Partition directories are created by the first writer, not by ``create_topic``: creating a topic of
10,000 partitions writes one file, and a reader treats a partition without files as empty.

Format. A produce call is written as one or more *frames*, like Kafka's record batches. A frame is a
24-byte header (magic ``RGF1``, body length, base offset, record count, CRC-32 of header and body)
followed by a columnar body: the timestamps (int64), key lengths and value lengths (int32), optional
null flags and header counts, the header name and value lengths, then the keys, values, header names and
header values, each concatenated. Why columnar: ``read_arrow`` turns a run of frames into an Arrow batch
with a handful of ``memcpy``-speed joins and one vectorised prefix sum per column, without a Python
object per record; ``read`` decodes a frame with a few ``array`` conversions. Why a CRC per frame rather
than per record: it detects the same torn writes and bit rot, at a fraction of the cost. Large produce
calls are split into frames of at most 4,096 records or about 1 MiB, so reading from any offset never
decodes much more than it returns. The last frame of a produce call carries a *batch end* flag, which
makes a produce call atomic across a crash (recovery cuts back to the last batch end).

Concurrency. One writer per partition, enforced with ``flock`` on the ``end`` file (non-blocking: a
second writer gets :class:`PartitionLockedError` naming the holder). Any number of readers, in any
process, never lock anything. The writer appends the frames, optionally ``fdatasync``\\s them, appends
index entries, and only then publishes the new end in the ``end`` file (one 32-byte ``pwrite`` with its
own CRC; a reader that catches it half-written retries). Readers read the committed end first and never
look past it, so they never see a torn or partly written frame; within the committed range a bad CRC
or bad framing is real corruption and raises :class:`CorruptLogError`. The lock is taken on the first
produce to a partition and held until :meth:`EmbeddedLog.close`.

Durability (``fsync``):

* ``"batch"`` (default): the log file is ``fdatasync``\\ed before the end is published and ``produce``
  returns, so an acknowledged batch survives a power loss. Costs about 0.3 ms per produce call on this
  project's machines, so produce in batches.
* ``"never"``: no ``fsync``; an acknowledged batch survives a crash of the process (it is in the page
  cache) but not of the machine, where the tail may be lost.

The ``end`` and ``index`` files are never fsynced: recovery rebuilds what they say from the log itself.

Recovery. When a writer opens a partition it starts from the published end (or, if that is beyond the
data, from the last index entry that still points at a frame), validates frames forward, keeps every
complete batch, truncates anything after the last batch end (a torn tail) and republishes the end. A
produce call that crashed may therefore be either fully present or absent, never half present.

Reading. A reader keeps, per partition, the sparse index, a cursor (where its last read stopped) and
the frame its last read stopped inside, so a consumer reading on in small steps neither seeks nor
re-reads and re-checks a frame. ``read_arrow`` joins the wanted slices of each frame's columns and
wraps them with ``pyarrow.Array.from_buffers`` (lengths become offsets with one vectorised prefix sum);
``read`` builds :class:`ConsumedRecord` objects column by column. Open files are cached for at most
256 partitions per instance (least recently used are closed); a writer keeps two files open per
partition it writes.

Throughput (``regroup bench log``, on this project's 2-CPU VM while other jobs ran, load average about
3.5: conservative, and noisy by up to 2x). 116-byte records (16-byte key, 100-byte value), 1 M of them:
produce in calls of 1,000 ≈ 600 k records/s (69 MB/s) with ``fsync="batch"``, ≈ 1.2 M/s (135 MB/s)
with ``"never"``; one record per call ≈ 4 k calls/s with fsync (the fsync is the cost), ≈ 35 k/s
without; ``read`` ≈ 440 k records/s (creating Python objects is the cost); ``read_arrow`` ≈ 2.6 M
records/s (300 MB/s; reading, checksumming and copying bytes is the cost). 1,016-byte records:
produce ≈ 250 k/s (250 MB/s) with fsync, ``read`` ≈ 150 k/s (155 MB/s), ``read_arrow`` ≈ 610 k/s
(620 MB/s).

Left out on purpose: segments and retention (one file per partition, which grows forever), compaction,
and deleting topics. The format has a version in ``regroup-log.json`` so segments can come later.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import itertools
import json
import logging
import os
import socket
import struct
import sys
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from regroup.log.arrow import ARROW_SCHEMA, HEADER_STRUCT, HEADERS_TYPE, TIMESTAMP_TYPE, empty_batch
from regroup.log.base import ConsumedRecord, LogRecord, make_consumed_records
from regroup.log.errors import (
    CorruptLogError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    LogError,
    OffsetOutOfRangeError,
    PartitionLockedError,
    ProduceError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from regroup.log.validation import (
    check_partition_count,
    check_partition_index,
    check_read_args,
    check_topic_name,
    first_invalid_record,
)

__all__ = ["DEFAULT_MAX_READ_BYTES", "EmbeddedLog", "FsyncPolicy"]

_log = logging.getLogger(__name__)

FsyncPolicy = Literal["batch", "never"]

FORMAT_NAME = "regroup-embedded-log"
FORMAT_VERSION = 1

_FRAME_MAGIC = b"RGF1"
_FRAME_HEAD = struct.Struct("<4sIqI")  # magic, body length, base offset, count
_CRC = struct.Struct("<I")
FRAME_HEADER_SIZE = 24  # _FRAME_HEAD (20 bytes) + CRC
_BODY_HEAD = struct.Struct("<IIIIII")  # flags, headers, keys, values, header names, values
_END_MAGIC = b"RGE1"
_END = struct.Struct("<4sIqq")  # magic, format version, end offset, end position
_END_SIZE = 32  # _END (24 bytes) + CRC + padding
_INDEX_ENTRY = struct.Struct("<qq")  # offset, position

_FLAG_KEY_NULLS = 1
_FLAG_VALUE_NULLS = 2
_FLAG_HEADERS = 4
_FLAG_BATCH_END = 8

MAX_FRAME_RECORDS = 4096
FRAME_TARGET_BYTES = 1 << 20
INDEX_INTERVAL_BYTES = 64 << 10
DEFAULT_MAX_RECORD_BYTES = 64 << 20
#: A frame body length is a u32 and Arrow's binary offsets are int32: a record must stay well below both.
_HARD_MAX_RECORD_BYTES = 1 << 30
#: ``read``/``read_arrow`` stop adding frames once this many bytes are collected (at least one frame is
#: always returned); it bounds memory and keeps Arrow's 32-bit offsets far from overflowing. Measured:
#: 8 MiB reads 1 KiB records about twice as fast as 64 MiB (buffers above glibc's 32 MiB mmap
#: threshold are fresh pages every time), and is no slower for small records.
DEFAULT_MAX_READ_BYTES = 8 << 20
_FIRST_READ_BYTES = 64 << 10
_MAX_READ_CHUNK = 8 << 20
_MAX_OPEN_READERS = 256

if sys.byteorder != "little":  # pragma: no cover - every platform regroup targets is little-endian
    raise ImportError("the embedded log's format is little-endian and so are Arrow's buffers on this host")


# --------------------------------------------------------------------------------------------------
# Encoding


def _invalid_record(records: Sequence[LogRecord]) -> InvalidRecordError:
    """The precise complaint about a batch that failed to encode (only on the error path)."""
    return first_invalid_record(records, _HARD_MAX_RECORD_BYTES) or InvalidRecordError(
        "invalid records (a field has the wrong type)"
    )


def _encode_batch(
    records: Sequence[LogRecord], base_offset: int, max_record_bytes: int
) -> tuple[bytes, list[tuple[int, int]]]:
    """Encode one produce call as frames; return the bytes and ``(base offset, relative position)`` per frame.

    Columns are built with list comprehensions and ``array`` so the per-record Python work is a few
    attribute reads; everything else is ``bytes.join``.
    """
    n = len(records)
    try:
        keys: list[Any] = [r.key for r in records]
        values: list[Any] = [r.value for r in records]
        timestamps = array("q", [r.timestamp_ms for r in records])
        headers = [r.headers for r in records]
        key_nulls = None in keys
        value_nulls = None in values
        if key_nulls:
            keys = [b"" if k is None else k for k in keys]
        if value_nulls:
            values = [b"" if v is None else v for v in values]
        klens = array("i", map(len, keys))
        vlens = array("i", map(len, values))
        has_headers = any(headers)
        if has_headers:
            hcounts = array("i", map(len, headers))
            flat = [h for hs in headers for h in hs]
            hnames = [name.encode() for name, _ in flat]
            hvalues = [v for _, v in flat]
            hnlens = array("i", map(len, hnames))
            hvlens = array("i", map(len, hvalues))
    except (AttributeError, TypeError, ValueError, OverflowError) as e:
        raise _invalid_record(records) from e
    nulls = b""
    if key_nulls or value_nulls:
        nulls = bytes(
            (r.key is None) | ((r.value is None) << 1) for r in records
        )
    total = sum(klens) + sum(vlens) + (sum(hnlens) + sum(hvlens) if has_headers else 0)
    if total > max_record_bytes:
        for i in range(n):
            size = klens[i] + vlens[i]
            if has_headers:
                size += sum(len(a) + len(b) for a, b in records[i].headers)
            if size > max_record_bytes:
                raise RecordTooLargeError(
                    f"record {i} is {size} bytes (key + value + headers); "
                    f"this log accepts at most {max_record_bytes}"
                )
    # Frame boundaries: one frame unless the call is large.
    bounds: list[tuple[int, int]]
    if n <= MAX_FRAME_RECORDS and total <= FRAME_TARGET_BYTES:
        bounds = [(0, n)]
    else:
        bounds = []
        start = 0
        acc = 0
        h = 0
        for i in range(n):
            size = klens[i] + vlens[i]
            if has_headers:
                c = hcounts[i]
                size += sum(hnlens[h : h + c]) + sum(hvlens[h : h + c])
                h += c
            if i > start and (i - start >= MAX_FRAME_RECORDS or acc + size > FRAME_TARGET_BYTES):
                bounds.append((start, i))
                start, acc = i, 0
            acc += size
        bounds.append((start, n))

    out: list[bytes] = []
    frames: list[tuple[int, int]] = []
    position = 0
    h0 = 0
    null_flags = (_FLAG_KEY_NULLS if key_nulls else 0) | (_FLAG_VALUE_NULLS if value_nulls else 0)
    for fi, (i, j) in enumerate(bounds):
        count = j - i
        try:
            kblob = b"".join(keys[i:j])
            vblob = b"".join(values[i:j])
            if has_headers:
                h1 = h0 + sum(hcounts[i:j])
                hnblob = b"".join(hnames[h0:h1])
                hvblob = b"".join(hvalues[h0:h1])
            else:
                h1 = h0
                hnblob = hvblob = b""
        except TypeError as e:
            raise _invalid_record(records) from e
        # len() of a non-byte memoryview or a str counts items, not bytes: the blobs would disagree
        # with the lengths and the frame would decode wrongly. Catch it here, cheaply.
        if len(kblob) != sum(klens[i:j]) or len(vblob) != sum(vlens[i:j]) or (
            has_headers and (len(hnblob) != sum(hnlens[h0:h1]) or len(hvblob) != sum(hvlens[h0:h1]))
        ):
            raise _invalid_record(records)
        flags = null_flags | (_FLAG_HEADERS if has_headers else 0)
        if fi == len(bounds) - 1:
            flags |= _FLAG_BATCH_END
        parts = [
            _BODY_HEAD.pack(flags, h1 - h0, len(kblob), len(vblob), len(hnblob), len(hvblob)),
            timestamps[i:j].tobytes(),
            klens[i:j].tobytes(),
            vlens[i:j].tobytes(),
        ]
        if null_flags:
            parts.append(nulls[i:j])
        if has_headers:
            parts += [hcounts[i:j].tobytes(), hnlens[h0:h1].tobytes(), hvlens[h0:h1].tobytes()]
        parts += [kblob, vblob, hnblob, hvblob]
        body = b"".join(parts)
        head = _FRAME_HEAD.pack(_FRAME_MAGIC, len(body), base_offset + i, count)
        out += [head, _CRC.pack(zlib.crc32(body, zlib.crc32(head))), body]
        frames.append((base_offset + i, position))
        position += FRAME_HEADER_SIZE + len(body)
        h0 = h1
    return b"".join(out), frames


class _Body(NamedTuple):
    """Where each column of one frame's body lives inside the buffer that holds the frame."""

    flags: int
    n_records: int
    n_headers: int
    ts: int
    klens: int
    vlens: int
    nulls: int
    hcounts: int
    hnlens: int
    hvlens: int
    keys: int
    values: int
    hnames: int
    hvalues: int
    end: int


def _parse_body(buf: bytes, at: int, body_len: int, count: int) -> _Body:
    """Locate the columns of a frame body starting at ``buf[at]`` (the CRC has been checked)."""
    flags, nh, kl, vl, hnl, hvl = _BODY_HEAD.unpack_from(buf, at)
    p = at + _BODY_HEAD.size
    ts = p
    p += 8 * count
    klens = p
    p += 4 * count
    vlens = p
    p += 4 * count
    nulls = p
    if flags & (_FLAG_KEY_NULLS | _FLAG_VALUE_NULLS):
        p += count
    hcounts = p
    if flags & _FLAG_HEADERS:
        p += 4 * count
    hnlens = p
    p += 4 * nh
    hvlens = p
    p += 4 * nh
    keys = p
    values = keys + kl
    hnames = values + vl
    hvalues = hnames + hnl
    end = hvalues + hvl
    if end != at + body_len:
        raise ValueError(f"frame body sizes add up to {end - at} bytes, the header says {body_len}")
    return _Body(flags, count, nh, ts, klens, vlens, nulls, hcounts, hnlens, hvlens, keys, values, hnames,
                 hvalues, end)


def _ints(buf: bytes | memoryview, typecode: str, at: int, n: int) -> array[int]:
    a = array(typecode)
    a.frombytes(memoryview(buf)[at : at + a.itemsize * n])
    return a


def _pack_end(end_offset: int, end_position: int) -> bytes:
    head = _END.pack(_END_MAGIC, FORMAT_VERSION, end_offset, end_position)
    return head + _CRC.pack(zlib.crc32(head)) + bytes(_END_SIZE - _END.size - _CRC.size)


def _unpack_end(raw: bytes) -> tuple[int, int] | None:
    """``(end offset, end position)`` from an end file's bytes; None if torn or not an end file."""
    if len(raw) < _END.size + _CRC.size:
        return None
    magic, version, end_offset, end_position = _END.unpack_from(raw)
    (crc,) = _CRC.unpack_from(raw, _END.size)
    if magic != _END_MAGIC or crc != zlib.crc32(raw[: _END.size]) or version != FORMAT_VERSION:
        return None
    return end_offset, end_position


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


def _pread_exact(fd: int, size: int, position: int) -> bytes:
    """Read ``size`` bytes (fewer only at the end of the file)."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _binary_from_lengths(
    typ: pa.DataType, lengths: bytes, data: bytes, n: int, validity: pa.Buffer | None, null_count: int
) -> pa.Array:
    """An Arrow (string or binary) array from int32 lengths and the concatenated values."""
    lens = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(lengths)])
    ends = pc.cumulative_sum_checked(lens)
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), ends])
    return pa.Array.from_buffers(
        typ, n, [validity, offsets.buffers()[1], pa.py_buffer(data)], null_count=null_count
    )


# --------------------------------------------------------------------------------------------------
# Per-partition state


@dataclass(slots=True)
class _Writer:
    """The writer's side of one partition: the lock, the open files and where the next frame goes."""

    directory: Path
    end_fd: int  # also the flock'd lock
    data_fd: int
    next_offset: int
    position: int
    last_index_position: int
    index_size: int
    pid: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


@dataclass(slots=True)
class _Frame:
    """A frame found by a read: its bytes (``buf[at:]``), offsets and the slice of records wanted."""

    buf: bytes
    at: int
    body_len: int
    base: int
    count: int
    first: int  # index in the frame of the first record to return
    stop: int  # index in the frame after the last record to return


class _Reader:
    """A reader's cached view of one partition: open files, the sparse index, and a cursor.

    The cursor remembers where the previous read stopped, so a consumer that reads on from there
    (the common case) goes straight to the right frame without touching the index.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
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
        return _read_end(self.end_fd, self.directory)

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
            whole = size - size % _INDEX_ENTRY.size
            if whole > self.index_loaded:
                raw = _pread_exact(fd, whole - self.index_loaded, self.index_loaded)
                raw = raw[: len(raw) - len(raw) % _INDEX_ENTRY.size]
                offsets, positions = self.index_offsets, self.index_positions
                for off, pos in _INDEX_ENTRY.iter_unpack(raw):
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
        best = (0, 0)
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


def _read_end(fd: int, where: Path) -> tuple[int, int]:
    """Read an end file, retrying while a concurrent 32-byte ``pwrite`` is caught half-done."""
    for attempt in range(200):
        raw = os.pread(fd, _END_SIZE, 0)
        if not raw:
            return 0, 0  # created by a writer that has not published anything yet
        end = _unpack_end(raw)
        if end is not None:
            return end
        time.sleep(0 if attempt < 20 else 0.001)
    raise CorruptLogError(f"{where / 'end'}: the committed end is unreadable (bad checksum)")


# --------------------------------------------------------------------------------------------------
# The log


class EmbeddedLog:
    """A partitioned log in ``directory``, shared by processes on one machine (see the module docstring).

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
        if not 1 <= max_record_bytes <= _HARD_MAX_RECORD_BYTES:
            raise ValueError(f"max_record_bytes must be between 1 and {_HARD_MAX_RECORD_BYTES}")
        self._root = Path(directory).absolute()
        self._fsync: FsyncPolicy = fsync
        self._max_record_bytes = max_record_bytes
        self._topics_dir = self._root / "topics"
        self._lock = threading.RLock()
        self._writers: dict[tuple[str, int], _Writer] = {}
        self._readers: OrderedDict[tuple[str, int], _Reader] = OrderedDict()
        self._counts: dict[str, int] = {}
        self._closed = False
        self._init_directory()

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

    def _init_directory(self) -> None:
        marker = self._root / "regroup-log.json"
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            self._topics_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise LogError(f"cannot create the embedded log directory {self._root}: {e}") from e
        if marker.exists():
            try:
                meta = json.loads(marker.read_text())
                ok = meta.get("format") == FORMAT_NAME
                version = meta.get("version")
            except (OSError, ValueError, AttributeError) as e:
                raise LogError(f"{marker} is unreadable: {e}") from e
            if not ok:
                raise LogError(f"{self._root} is not an embedded regroup log ({marker} says otherwise)")
            if version != FORMAT_VERSION:
                raise LogError(
                    f"{self._root} holds format version {version}; "
                    f"this regroup reads version {FORMAT_VERSION}"
                )
            return
        with self._meta_lock():
            if not marker.exists():
                self._atomic_write(marker, {"format": FORMAT_NAME, "version": FORMAT_VERSION})

    @contextmanager
    def _meta_lock(self) -> Iterator[None]:
        """Serialise topic creation and growth across processes (blocking: these are quick)."""
        fd = os.open(self._root / ".meta.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _atomic_write(self, path: Path, content: Mapping[str, object]) -> None:
        """Replace ``path`` so that readers see the old or the new content, never a mix."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        data = (json.dumps(dict(content), sort_keys=True) + "\n").encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _pwrite_all(fd, data, 0)
            if self._fsync == "batch":
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if self._fsync == "batch":
            _fsync_dir(path.parent)

    def _read_count(self, topic: str) -> int | None:
        try:
            raw = (self._topics_dir / topic / "meta.json").read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            count = json.loads(raw)["partitions"]
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptLogError(f"{self._topics_dir / topic / 'meta.json'} is unreadable: {e}") from e
        if not isinstance(count, int) or count < 1:
            raise CorruptLogError(f"{self._topics_dir / topic / 'meta.json'}: bad partition count {count!r}")
        return count

    def _partition_count(self, topic: str) -> int:
        count = self._read_count(topic)
        if count is None:
            raise UnknownTopicError(topic, str(self._root))
        self._counts[topic] = count
        return count

    def _check_partition(self, topic: str, partition: int) -> None:
        """Raise unless ``topic``/``partition`` exists (a cached count only ever grows, so a hit is final)."""
        check_topic_name(topic)
        check_partition_index(partition)
        if partition < self._counts.get(topic, 0):
            return
        count = self._partition_count(topic)
        if partition >= count:
            raise UnknownPartitionError(topic, partition, count)

    def topic_partitions(self) -> dict[str, int]:
        """``{topic: partition count}`` for every topic, read fresh from the directory."""
        self._check_open()
        out: dict[str, int] = {}
        try:
            entries = sorted(os.listdir(self._topics_dir))
        except FileNotFoundError:
            return out
        for name in entries:
            try:
                check_topic_name(name)
            except InvalidTopicError:
                continue  # not ours (a file someone put there)
            count = self._read_count(name)
            if count is not None:  # a directory without meta.json is a topic being created
                out[name] = count
                self._counts[name] = count
        return out

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions; :class:`TopicExistsError` if it exists."""
        self._check_open()
        check_topic_name(topic)
        check_partition_count(partitions)
        with self._lock, self._meta_lock():
            existing = self._read_count(topic)
            if existing is not None:
                raise TopicExistsError(topic, existing)
            (self._topics_dir / topic).mkdir(exist_ok=True)
            if self._fsync == "batch":
                _fsync_dir(self._topics_dir)
            self._atomic_write(self._topics_dir / topic / "meta.json", {"partitions": partitions})
            self._counts[topic] = partitions

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (a no-op if it has that many; shrinking is refused)."""
        self._check_open()
        check_topic_name(topic)
        check_partition_count(total, "new partition total")
        with self._lock, self._meta_lock():
            current = self._partition_count(topic)
            if total < current:
                raise InvalidPartitionsError(
                    f"topic {topic!r} has {current} partitions; partitions can only be added "
                    f"(asked for a total of {total})"
                )
            if total > current:
                self._atomic_write(self._topics_dir / topic / "meta.json", {"partitions": total})
                self._counts[topic] = total

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
        self._check_partition(topic, partition)
        while True:
            w = self._writer(topic, partition)
            with w.lock:
                if w.closed:  # closed or discarded by another thread meanwhile
                    self._check_open()
                    continue
                return self._append(w, records)

    def _append(self, w: _Writer, records: Sequence[LogRecord]) -> int:
        first = w.next_offset
        if not records:
            return first
        data, frames = _encode_batch(records, first, self._max_record_bytes)
        next_offset = first + len(records)
        position = w.position + len(data)
        last_index = w.last_index_position
        entries = []
        for base, rel in frames:
            pos = w.position + rel
            if pos - last_index >= INDEX_INTERVAL_BYTES:
                entries.append(_INDEX_ENTRY.pack(base, pos))
                last_index = pos
        try:
            _pwrite_all(w.data_fd, data, w.position)
            if self._fsync == "batch":
                os.fdatasync(w.data_fd)
            if entries:
                self._append_index(w, b"".join(entries))
            # Publishing the end is the commit point: readers see the batch from here on.
            _pwrite_all(w.end_fd, _pack_end(next_offset, position), 0)
        except OSError as e:
            # Nothing was published: cut the data back (best effort) and let the next produce reopen
            # the partition and recover, rather than trust in-memory state after a failed write.
            with suppress(OSError):
                os.ftruncate(w.data_fd, w.position)
            self._discard_writer(w)
            raise ProduceError(f"writing to {w.directory / 'log'} failed: {e}") from e
        w.next_offset, w.position, w.last_index_position = next_offset, position, last_index
        return first

    def _discard_writer(self, w: _Writer) -> None:
        """Close a writer's files (releasing its lock) and forget it; the caller holds ``w.lock``."""
        with self._lock:
            for key, known in list(self._writers.items()):
                if known is w:
                    del self._writers[key]
        if not w.closed and w.pid == os.getpid():
            w.closed = True
            os.close(w.data_fd)
            os.close(w.end_fd)  # releases the flock

    def _append_index(self, w: _Writer, data: bytes) -> None:
        fd = os.open(w.directory / "index", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            _pwrite_all(fd, data, w.index_size)
        finally:
            os.close(fd)
        w.index_size += len(data)

    def _writer(self, topic: str, partition: int) -> _Writer:
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
            w = self._open_writer(topic, partition)
            self._writers[(topic, partition)] = w
            return w

    def _open_writer(self, topic: str, partition: int) -> _Writer:
        directory = self._topics_dir / topic / str(partition)
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
                f"partition {topic}/{partition} of {self._root} is already being written "
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
                _pwrite_all(fd, info, 0)
            finally:
                os.close(fd)
            if created and self._fsync == "batch":
                _fsync_dir(directory)
                _fsync_dir(directory.parent)
            w = self._recover(directory, end_fd, data_fd)
        except BaseException:
            os.close(data_fd)
            os.close(end_fd)
            raise
        return w

    def _recover(self, directory: Path, end_fd: int, data_fd: int) -> _Writer:
        """Find the true end of a partition we now own; cut a torn tail; republish the end."""
        size = os.fstat(data_fd).st_size
        published = _unpack_end(os.pread(end_fd, _END_SIZE, 0))
        index = self._load_index(directory)
        start = (0, 0)
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
                if pos < size and self._frame_base_at(data_fd, pos) == off:
                    start = (off, pos)
                    break
        good_off, good_pos = start
        off, pos = start
        while pos < size:
            head = _pread_exact(data_fd, FRAME_HEADER_SIZE, pos)
            if len(head) < FRAME_HEADER_SIZE:
                break
            magic, body_len, base, count = _FRAME_HEAD.unpack_from(head)
            (crc,) = _CRC.unpack_from(head, _FRAME_HEAD.size)
            if magic != _FRAME_MAGIC or base != off or count == 0:
                break
            if pos + FRAME_HEADER_SIZE + body_len > size:
                break
            body = _pread_exact(data_fd, body_len, pos + FRAME_HEADER_SIZE)
            if len(body) != body_len or zlib.crc32(body, zlib.crc32(head[: _FRAME_HEAD.size])) != crc:
                break
            pos += FRAME_HEADER_SIZE + body_len
            off += count
            if _BODY_HEAD.unpack_from(body)[0] & _FLAG_BATCH_END:
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
            if self._fsync == "batch":
                os.fsync(data_fd)
        kept = [(o, p) for o, p in index if p < good_pos and o < good_off]
        # A torn append leaves garbage at the index's tail: drop entries until one points at its frame.
        while kept and self._frame_base_at(data_fd, kept[-1][1]) != kept[-1][0]:
            kept.pop()
        index_path = directory / "index"
        if len(kept) != len(index) or (
            index_path.exists() and index_path.stat().st_size != len(kept) * _INDEX_ENTRY.size
        ):
            fd = os.open(directory / "index", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, 0)
                _pwrite_all(fd, b"".join(_INDEX_ENTRY.pack(o, p) for o, p in kept), 0)
            finally:
                os.close(fd)
        if published != (good_off, good_pos):
            _pwrite_all(end_fd, _pack_end(good_off, good_pos), 0)
        return _Writer(
            directory=directory,
            end_fd=end_fd,
            data_fd=data_fd,
            next_offset=good_off,
            position=good_pos,
            last_index_position=kept[-1][1] if kept else 0,
            index_size=len(kept) * _INDEX_ENTRY.size,
            pid=os.getpid(),
        )

    @staticmethod
    def _load_index(directory: Path) -> list[tuple[int, int]]:
        try:
            raw = (directory / "index").read_bytes()
        except FileNotFoundError:
            return []
        raw = raw[: len(raw) - len(raw) % _INDEX_ENTRY.size]
        out: list[tuple[int, int]] = []
        for off, pos in _INDEX_ENTRY.iter_unpack(raw):
            if off < 0 or pos < 0 or (out and (off <= out[-1][0] or pos <= out[-1][1])):
                break
            out.append((off, pos))
        return out

    @staticmethod
    def _frame_base_at(fd: int, pos: int) -> int | None:
        head = _pread_exact(fd, _FRAME_HEAD.size, pos)
        if len(head) < _FRAME_HEAD.size:
            return None
        magic, _, base, _ = _FRAME_HEAD.unpack_from(head)
        return int(base) if magic == _FRAME_MAGIC else None

    # ------------------------------------------------------------------------------------ reading

    def _reader(self, topic: str, partition: int) -> _Reader:
        key = (topic, partition)
        with self._lock:
            r = self._readers.get(key)
            if r is None:
                r = _Reader(self._topics_dir / topic / str(partition))
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
        count = self._partition_count(topic)
        out: dict[int, int] = {}
        for p in range(count):
            try:
                fd = os.open(self._topics_dir / topic / str(p) / "end", os.O_RDONLY)
            except FileNotFoundError:
                out[p] = 0
                continue
            try:
                out[p] = _read_end(fd, self._topics_dir / topic / str(p))[0]
            finally:
                os.close(fd)
        return out

    def _collect(
        self, topic: str, partition: int, start: int, max_records: int, max_bytes: int
    ) -> list[_Frame]:
        """Find the frames holding records ``start .. start+max_records`` (up to the committed end)."""
        self._check_open()
        self._check_partition(topic, partition)
        check_read_args(start, max_records)
        while True:
            r = self._reader(topic, partition)
            with r.lock:
                if r.closed:  # evicted from the cache between the lookup and the lock
                    self._check_open()
                    continue
                end_offset, end_pos = r.committed()
                if start < 0 or start > end_offset:
                    raise OffsetOutOfRangeError(
                        topic, partition, start,
                        f"the partition holds offsets 0 to {end_offset - 1} (end {end_offset})",
                    )
                if start == end_offset or max_records == 0:
                    return []
                stop = min(end_offset, start + max_records)
                try:
                    return self._scan(r, start, stop, end_pos, max_bytes, use_hints=True)
                except _StaleHint:
                    r.forget_hints()
                    return self._scan(r, start, stop, end_pos, max_bytes, use_hints=False)

    def _scan(
        self, r: _Reader, start: int, stop: int, end_pos: int, max_bytes: int, use_hints: bool
    ) -> list[_Frame]:
        """Walk frames from the best known position to ``stop``, checking each frame it returns.

        A hint (index entry, cursor) that does not point at the expected frame raises ``_StaleHint``;
        the caller then walks again from the start of the file, without hints.
        """
        fd = r.data()
        base, pos = r.seek_hint(start) if use_hints else (0, 0)
        hint_pos = pos
        if pos != 0 and not (0 < pos < end_pos and 0 < base <= start):
            raise _StaleHint
        frames: list[_Frame] = []
        buf = b""
        buf_pos = 0
        chunk = _FIRST_READ_BYTES
        taken = 0

        def corrupt(why: str) -> CorruptLogError:
            return CorruptLogError(
                f"{r.directory / 'log'}: {why} at byte {pos} (expected the frame of offset {base}; the "
                f"committed end is byte {end_pos}). The partition is corrupt from there."
            )

        while base < stop:
            if pos >= end_pos:
                raise corrupt("the committed end claims more records than the bytes hold")
            cached = r.frame
            if cached is not None and cached[0] == pos:
                # The frame the previous read stopped inside: already read and checked.
                fbuf = cached[1]
                _, body_len, fbase, count = _FRAME_HEAD.unpack_from(fbuf)
                if fbase == base and base + count > start:
                    first = max(0, start - base)
                    last = min(count, stop - base)
                    frames.append(_Frame(fbuf, FRAME_HEADER_SIZE, body_len, base, count, first, last))
                    if last < count:
                        r.cursor = (base + last, base, pos)
                        return frames
                    r.frame = None
                    taken += len(fbuf)
                    pos, base = pos + len(fbuf), base + count
                    if taken >= max_bytes:
                        break
                    continue
            rel = pos - buf_pos
            if rel < 0 or rel + FRAME_HEADER_SIZE > len(buf):
                buf = _pread_exact(fd, min(chunk, end_pos - pos), pos)
                buf_pos, rel = pos, 0
                chunk = min(chunk * 2, _MAX_READ_CHUNK)
                if len(buf) < FRAME_HEADER_SIZE:
                    raise corrupt("the file is shorter than its committed end")
            magic, body_len, fbase, count = _FRAME_HEAD.unpack_from(buf, rel)
            if magic != _FRAME_MAGIC or fbase != base or count == 0:
                if pos == hint_pos != 0:
                    raise _StaleHint
                raise corrupt("bad frame header")
            frame_end = pos + FRAME_HEADER_SIZE + body_len
            if frame_end > end_pos:
                raise corrupt("a frame runs past the committed end")
            if fbase + count <= start:  # skipping forward from an index entry
                pos, base = frame_end, base + count
                continue
            if rel + FRAME_HEADER_SIZE + body_len > len(buf):
                buf = _pread_exact(fd, max(min(chunk, end_pos - pos), FRAME_HEADER_SIZE + body_len), pos)
                buf_pos, rel = pos, 0
                chunk = min(chunk * 2, _MAX_READ_CHUNK)
                if len(buf) < FRAME_HEADER_SIZE + body_len:
                    raise corrupt("the file is shorter than its committed end")
            (crc,) = _CRC.unpack_from(buf, rel + _FRAME_HEAD.size)
            mv = memoryview(buf)
            body_at = rel + FRAME_HEADER_SIZE
            head_crc = zlib.crc32(mv[rel : rel + _FRAME_HEAD.size])
            if zlib.crc32(mv[body_at : body_at + body_len], head_crc) != crc:
                raise corrupt("checksum mismatch")
            first = max(0, start - fbase)
            last = min(count, stop - fbase)
            frames.append(_Frame(buf, body_at, body_len, fbase, count, first, last))
            taken += FRAME_HEADER_SIZE + body_len
            if last < count:  # stopped inside this frame: the next read starts in it
                r.cursor = (fbase + last, fbase, pos)
                # Keep just this frame (a copy, so the whole chunk can be freed) for that read.
                r.frame = (pos, bytes(mv[rel : body_at + body_len]))
                return frames
            pos, base = frame_end, base + count
            if taken >= max_bytes:
                break
        r.cursor = (base, base, pos)
        return frames

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
            out += _decode_records(topic, partition, f)
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
        return _frames_to_arrow(topic, partition, start, frames)

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
                self._discard_writer(w)
        for r in readers:
            with r.lock:
                r.close()
        with self._lock:
            self._readers.clear()


class _StaleHint(Exception):
    """A cached frame position no longer matches the file (only after a recovery rewrote the tail)."""


# --------------------------------------------------------------------------------------------------
# Decoding


def _slices(buf: bytes, lengths: array[int], at: int, i0: int, i1: int) -> list[bytes]:
    """``buf`` cut into the values ``i0 .. i1`` of a column whose values start at ``buf[at]``.

    Only the wanted range is walked in Python; the bytes before it are skipped with a C-level sum, so
    a small read from the middle of a big frame costs little more than its own records.
    """
    offs = list(itertools.accumulate(lengths[i0:i1], initial=at + sum(lengths[:i0])))
    return list(map(buf.__getitem__, map(slice, offs, offs[1:])))


def _decode_records(topic: str, partition: int, f: _Frame) -> list[ConsumedRecord]:
    buf = f.buf
    try:
        b = _parse_body(buf, f.at, f.body_len, f.count)
    except ValueError as e:
        raise CorruptLogError(f"frame of offset {f.base} in {topic}/{partition}: {e}") from e
    n = f.count
    i0, i1 = f.first, f.stop
    ts = _ints(buf, "q", b.ts + 8 * i0, i1 - i0).tolist()
    keys: list[bytes | None] = list(_slices(buf, _ints(buf, "i", b.klens, n), b.keys, i0, i1))
    values: list[bytes | None] = list(_slices(buf, _ints(buf, "i", b.vlens, n), b.values, i0, i1))
    if b.flags & (_FLAG_KEY_NULLS | _FLAG_VALUE_NULLS):
        nulls = buf[b.nulls + i0 : b.nulls + i1]
        if b.flags & _FLAG_KEY_NULLS:
            keys = [None if nb & 1 else k for k, nb in zip(keys, nulls, strict=True)]
        if b.flags & _FLAG_VALUE_NULLS:
            values = [None if nb & 2 else v for v, nb in zip(values, nulls, strict=True)]
    headers: list[tuple[tuple[str, bytes], ...]]
    if b.flags & _FLAG_HEADERS:
        hcounts = _ints(buf, "i", b.hcounts, n)
        h0 = sum(hcounts[:i0])
        h1 = h0 + sum(hcounts[i0:i1])
        raw_names = _slices(buf, _ints(buf, "i", b.hnlens, b.n_headers), b.hnames, h0, h1)
        hvalues = _slices(buf, _ints(buf, "i", b.hvlens, b.n_headers), b.hvalues, h0, h1)
        decoded: dict[bytes, str] = {}
        names = [decoded.get(r) or decoded.setdefault(r, r.decode()) for r in raw_names]
        pairs = list(zip(names, hvalues, strict=True))
        bounds = list(itertools.accumulate(hcounts[i0:i1], initial=0))
        headers = [tuple(pairs[a:z]) for a, z in itertools.pairwise(bounds)]
    else:
        headers = [()] * (i1 - i0)
    return make_consumed_records(topic, partition, range(f.base + i0, f.base + i1), keys, values, ts, headers)


def _frames_to_arrow(topic: str, partition: int, start: int, frames: list[_Frame]) -> pa.RecordBatch:
    """Concatenate the wanted slices of each frame column by column and wrap them as Arrow arrays."""
    ts_p: list[memoryview] = []
    kl_p: list[memoryview] = []
    vl_p: list[memoryview] = []
    kb_p: list[memoryview] = []
    vb_p: list[memoryview] = []
    nulls_p: list[bytes | memoryview] = []
    hc_p: list[bytes | memoryview] = []
    hnl_p: list[memoryview] = []
    hvl_p: list[memoryview] = []
    hnb_p: list[memoryview] = []
    hvb_p: list[memoryview] = []
    any_nulls = any_headers = False
    n = 0
    for f in frames:
        mv = memoryview(f.buf)
        try:
            b = _parse_body(f.buf, f.at, f.body_len, f.count)
        except ValueError as e:
            raise CorruptLogError(f"frame of offset {f.base} in {topic}/{partition}: {e}") from e
        i0, i1, c = f.first, f.stop, f.count
        k = i1 - i0
        n += k
        whole = i0 == 0 and i1 == c
        ts_p.append(mv[b.ts + 8 * i0 : b.ts + 8 * i1])
        kl_p.append(mv[b.klens + 4 * i0 : b.klens + 4 * i1])
        vl_p.append(mv[b.vlens + 4 * i0 : b.vlens + 4 * i1])
        if whole:
            kb_p.append(mv[b.keys : b.values])
            vb_p.append(mv[b.values : b.hnames])
        else:
            klens = _ints(f.buf, "i", b.klens, c)
            vlens = _ints(f.buf, "i", b.vlens, c)
            ka = b.keys + sum(klens[:i0])
            va = b.values + sum(vlens[:i0])
            kb_p.append(mv[ka : ka + sum(klens[i0:i1])])
            vb_p.append(mv[va : va + sum(vlens[i0:i1])])
        if b.flags & (_FLAG_KEY_NULLS | _FLAG_VALUE_NULLS):
            any_nulls = True
            nulls_p.append(mv[b.nulls + i0 : b.nulls + i1])
        else:
            nulls_p.append(bytes(k))
        if b.flags & _FLAG_HEADERS:
            any_headers = True
            hc_p.append(mv[b.hcounts + 4 * i0 : b.hcounts + 4 * i1])
            if whole:
                h0, h1 = 0, b.n_headers
                hnl_p.append(mv[b.hnlens : b.hvlens])
                hvl_p.append(mv[b.hvlens : b.keys])
                hnb_p.append(mv[b.hnames : b.hvalues])
                hvb_p.append(mv[b.hvalues : b.end])
            else:
                hcounts = _ints(f.buf, "i", b.hcounts, c)
                h0 = sum(hcounts[:i0])
                h1 = h0 + sum(hcounts[i0:i1])
                hnlens = _ints(f.buf, "i", b.hnlens, b.n_headers)
                hvlens = _ints(f.buf, "i", b.hvlens, b.n_headers)
                hna = b.hnames + sum(hnlens[:h0])
                hva = b.hvalues + sum(hvlens[:h0])
                hnl_p.append(mv[b.hnlens + 4 * h0 : b.hnlens + 4 * h1])
                hvl_p.append(mv[b.hvlens + 4 * h0 : b.hvlens + 4 * h1])
                hnb_p.append(mv[hna : hna + sum(hnlens[h0:h1])])
                hvb_p.append(mv[hva : hva + sum(hvlens[h0:h1])])
        else:
            hc_p.append(bytes(4 * k))

    join = b"".join
    key_valid = value_valid = None
    key_nulls = value_nulls = 0
    if any_nulls:
        flags = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(join(nulls_p))])
        kv = pc.equal(pc.bit_wise_and(flags, pa.scalar(1, pa.uint8())), pa.scalar(0, pa.uint8()))
        vv = pc.equal(pc.bit_wise_and(flags, pa.scalar(2, pa.uint8())), pa.scalar(0, pa.uint8()))
        key_nulls = n - pc.sum(kv).as_py()
        value_nulls = n - pc.sum(vv).as_py()
        key_valid = kv.buffers()[1] if key_nulls else None
        value_valid = vv.buffers()[1] if value_nulls else None
    keys = _binary_from_lengths(pa.binary(), join(kl_p), join(kb_p), n, key_valid, key_nulls)
    values = _binary_from_lengths(pa.binary(), join(vl_p), join(vb_p), n, value_valid, value_nulls)
    timestamps = pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(join(ts_p))])
    hcounts_arr = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(join(hc_p))])
    list_offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum_checked(hcounts_arr)])
    if any_headers:
        nh = list_offsets[-1].as_py()
        names = _binary_from_lengths(pa.string(), join(hnl_p), join(hnb_p), nh, None, 0)
        hvalues = _binary_from_lengths(pa.binary(), join(hvl_p), join(hvb_p), nh, None, 0)
    else:
        names = pa.array([], pa.string())
        hvalues = pa.array([], pa.binary())
    structs = pa.StructArray.from_arrays([names, hvalues], fields=list(HEADER_STRUCT))
    headers = pa.ListArray.from_arrays(list_offsets, structs, type=HEADERS_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.arange(start, start + n),
            keys,
            values,
            timestamps,
            headers,
        ],
        schema=ARROW_SCHEMA,
    )
