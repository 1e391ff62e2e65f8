"""The embedded log's on-disk format: frames, the end record and index entries. Pure bytes in, bytes out.

Rules of this module:

1. Everything that decides how a byte is laid out on disk lives here, and nothing else does: the
   writer, the reader and the Arrow path call these codecs and never pack or unpack a frame themselves.
2. No files, no clocks, no locks: the callers do the I/O. A frame is checked (CRC) by whoever read it,
   before :func:`parse_body` is asked where its columns are.
3. The format is little-endian, like Arrow's buffers on every platform regroup targets; importing this
   module on a big-endian host fails rather than read or write wrong bytes.

Frames. A produce call is written as one or more *frames*, like Kafka's record batches::

    header (24 bytes)   magic "RGF1" | body length u32 | base offset i64 | record count u32 | CRC-32 u32
    body                flags u32 | header count u32 | bytes of keys, values, header names,
                        header values (u32 each)
                        timestamps i64[count] | key lengths i32[count] | value lengths i32[count]
                        [null flags u8[count]]                        if FLAG_KEY_NULLS or FLAG_VALUE_NULLS
                        [header counts i32[count]]                    if FLAG_HEADERS
                        header name lengths i32[headers] | header value lengths i32[headers]
                        keys | values | header names | header values  (each concatenated)

The CRC covers the first 20 bytes of the header and the whole body. Null flags: bit 0 a null key,
bit 1 a null value (stored as empty bytes). Why columnar: ``read_arrow`` turns a run of frames into an
Arrow batch with a handful of ``memcpy``-speed joins and one vectorised prefix sum per column, without
a Python object per record; ``read`` decodes a frame with a few ``array`` conversions. Why a CRC per
frame rather than per record: it detects the same torn writes and bit rot, at a fraction of the cost.
Large produce calls are split into frames of at most :data:`MAX_FRAME_RECORDS` records or about
:data:`FRAME_TARGET_BYTES`, so reading from any offset never decodes much more than it returns. The
last frame of a produce call carries :data:`FLAG_BATCH_END`, which makes a produce call atomic across a
crash: recovery cuts back to the last batch end.

The end record (the ``end`` file, 32 bytes): magic "RGE1" | format version u32 | end offset i64 | end
byte position i64 | CRC-32 u32 of the 24 bytes before it | 4 zero bytes. It is rewritten in place with
one ``pwrite``; a reader that catches it half-written sees a bad CRC and reads it again.

Index entries (the ``index`` file): offset i64 | byte position i64 of a frame's header, appended in
increasing order. The index is only a hint: every entry is checked against the frame it points at.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from regroup.log.base import LogRecord
from regroup.log.errors import InvalidRecordError, RecordTooLargeError
from regroup.log.validation import first_invalid_record

if sys.byteorder != "little":  # pragma: no cover - every platform regroup targets is little-endian
    raise ImportError("the embedded log's format is little-endian and so are Arrow's buffers on this host")

#: Written into every end record (and the directory's marker): a reader refuses any other version.
FORMAT_VERSION = 1

FRAME_MAGIC = b"RGF1"
FRAME_HEAD = struct.Struct("<4sIqI")  # magic, body length, base offset, count
CRC = struct.Struct("<I")
FRAME_HEADER_SIZE = 24  # FRAME_HEAD (20 bytes) + CRC
BODY_HEAD = struct.Struct("<IIIIII")  # flags, headers, keys, values, header names, values
END_MAGIC = b"RGE1"
END = struct.Struct("<4sIqq")  # magic, format version, end offset, end position
END_SIZE = 32  # END (24 bytes) + CRC + padding
INDEX_ENTRY = struct.Struct("<qq")  # offset, position

FLAG_KEY_NULLS = 1
FLAG_VALUE_NULLS = 2
FLAG_HEADERS = 4
FLAG_BATCH_END = 8

MAX_FRAME_RECORDS = 4096
FRAME_TARGET_BYTES = 1 << 20
#: A frame body length is a u32 and Arrow's binary offsets are int32: a record must stay well below both.
HARD_MAX_RECORD_BYTES = 1 << 30


# --------------------------------------------------------------------------------------------------
# Encoding


def _invalid_record(records: Sequence[LogRecord]) -> InvalidRecordError:
    """The precise complaint about a batch that failed to encode (only on the error path)."""
    return first_invalid_record(records, HARD_MAX_RECORD_BYTES) or InvalidRecordError(
        "invalid records (a field has the wrong type)"
    )


def encode_batch(
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
    null_flags = (FLAG_KEY_NULLS if key_nulls else 0) | (FLAG_VALUE_NULLS if value_nulls else 0)
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
        flags = null_flags | (FLAG_HEADERS if has_headers else 0)
        if fi == len(bounds) - 1:
            flags |= FLAG_BATCH_END
        parts = [
            BODY_HEAD.pack(flags, h1 - h0, len(kblob), len(vblob), len(hnblob), len(hvblob)),
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
        head = FRAME_HEAD.pack(FRAME_MAGIC, len(body), base_offset + i, count)
        out += [head, CRC.pack(zlib.crc32(body, zlib.crc32(head))), body]
        frames.append((base_offset + i, position))
        position += FRAME_HEADER_SIZE + len(body)
        h0 = h1
    return b"".join(out), frames


# --------------------------------------------------------------------------------------------------
# Decoding


class Body(NamedTuple):
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


def parse_body(buf: bytes, at: int, body_len: int, count: int) -> Body:
    """Locate the columns of a frame body starting at ``buf[at]`` (the CRC has been checked)."""
    flags, nh, kl, vl, hnl, hvl = BODY_HEAD.unpack_from(buf, at)
    p = at + BODY_HEAD.size
    ts = p
    p += 8 * count
    klens = p
    p += 4 * count
    vlens = p
    p += 4 * count
    nulls = p
    if flags & (FLAG_KEY_NULLS | FLAG_VALUE_NULLS):
        p += count
    hcounts = p
    if flags & FLAG_HEADERS:
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
    return Body(flags, count, nh, ts, klens, vlens, nulls, hcounts, hnlens, hvlens, keys, values, hnames,
                hvalues, end)


def ints(buf: bytes | memoryview, typecode: str, at: int, n: int) -> array[int]:
    """``n`` little-endian integers of ``array`` type ``typecode`` from ``buf[at]``."""
    a = array(typecode)
    a.frombytes(memoryview(buf)[at : at + a.itemsize * n])
    return a


def frame_crc_ok(head: bytes | memoryview, body: bytes | memoryview, crc: int) -> bool:
    """Whether ``crc`` is the checksum of a frame's first 20 header bytes and its body."""
    return zlib.crc32(body, zlib.crc32(head[: FRAME_HEAD.size])) == crc


@dataclass(slots=True)
class Frame:
    """A frame found by a read: its bytes (``buf[at:]``), offsets and the slice of records wanted."""

    buf: bytes
    at: int
    body_len: int
    base: int
    count: int
    first: int  # index in the frame of the first record to return
    stop: int  # index in the frame after the last record to return


# --------------------------------------------------------------------------------------------------
# The end record


def pack_end(end_offset: int, end_position: int) -> bytes:
    head = END.pack(END_MAGIC, FORMAT_VERSION, end_offset, end_position)
    return head + CRC.pack(zlib.crc32(head)) + bytes(END_SIZE - END.size - CRC.size)


def unpack_end(raw: bytes) -> tuple[int, int] | None:
    """``(end offset, end position)`` from an end file's bytes; None if torn or not an end file."""
    if len(raw) < END.size + CRC.size:
        return None
    magic, version, end_offset, end_position = END.unpack_from(raw)
    (crc,) = CRC.unpack_from(raw, END.size)
    if magic != END_MAGIC or crc != zlib.crc32(raw[: END.size]) or version != FORMAT_VERSION:
        return None
    return end_offset, end_position
