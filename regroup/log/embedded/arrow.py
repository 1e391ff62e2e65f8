"""Frames to Arrow: ``read_arrow``'s batches, built from the frames' columns with no Python object per record.

Rules of this module:

1. The result has exactly :data:`regroup.log.arrow.ARROW_SCHEMA` and the same records, in the same
   order, as ``read`` would return for the same frames (the tests compare the two paths).
2. Work is per frame and per column, never per record: the wanted slices of each column are joined
   (``memcpy`` speed) and wrapped with ``pyarrow.Array.from_buffers``; a column of lengths becomes
   Arrow offsets with one vectorised prefix sum. A slice in the middle of a frame only costs a C-level
   sum over the lengths before it.
3. The frames were checked (CRC) by the reader; a body whose sizes do not add up is corruption.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from regroup.log.arrow import ARROW_SCHEMA, HEADER_STRUCT, HEADERS_TYPE, TIMESTAMP_TYPE
from regroup.log.embedded.frames import (
    FLAG_HEADERS,
    FLAG_KEY_NULLS,
    FLAG_VALUE_NULLS,
    Frame,
    ints,
    parse_body,
)
from regroup.log.errors import CorruptLogError


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


def frames_to_arrow(topic: str, partition: int, start: int, frames: list[Frame]) -> pa.RecordBatch:
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
            b = parse_body(f.buf, f.at, f.body_len, f.count)
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
            klens = ints(f.buf, "i", b.klens, c)
            vlens = ints(f.buf, "i", b.vlens, c)
            ka = b.keys + sum(klens[:i0])
            va = b.values + sum(vlens[:i0])
            kb_p.append(mv[ka : ka + sum(klens[i0:i1])])
            vb_p.append(mv[va : va + sum(vlens[i0:i1])])
        if b.flags & (FLAG_KEY_NULLS | FLAG_VALUE_NULLS):
            any_nulls = True
            nulls_p.append(mv[b.nulls + i0 : b.nulls + i1])
        else:
            nulls_p.append(bytes(k))
        if b.flags & FLAG_HEADERS:
            any_headers = True
            hc_p.append(mv[b.hcounts + 4 * i0 : b.hcounts + 4 * i1])
            if whole:
                h0, h1 = 0, b.n_headers
                hnl_p.append(mv[b.hnlens : b.hvlens])
                hvl_p.append(mv[b.hvlens : b.keys])
                hnb_p.append(mv[b.hnames : b.hvalues])
                hvb_p.append(mv[b.hvalues : b.end])
            else:
                hcounts = ints(f.buf, "i", b.hcounts, c)
                h0 = sum(hcounts[:i0])
                h1 = h0 + sum(hcounts[i0:i1])
                hnlens = ints(f.buf, "i", b.hnlens, b.n_headers)
                hvlens = ints(f.buf, "i", b.hvlens, b.n_headers)
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
