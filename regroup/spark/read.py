"""The executor side of the regroup source: read one offset range and yield Arrow record batches.

Runs in Spark's reused Python workers. Logs are opened once per worker process and kept (opening the
Kafka backend means a broker connection); the embedded log re-reads its files on every call, so a
cached instance sees what the producer appended since.

A key range (`regroup.protocol.keyrange`) is read as its partition's records ``[start, end)``, keeping
those whose key hash falls in the range and that no skip piece drops (`keyrange.kept`: one C call per
key for the hash, numpy for the comparisons, on the Arrow key column). A whole partition without skip
pieces is not filtered at all: the common case costs what it always did.

A partition split on the producer side (`regroup.log.embedded.layout`) has no one sequence of offsets
to read columnar frames from: its keys' records lie in pieces with offsets of their own. There a range
(a lane, `regroup.protocol.microbatch`) is read with `EmbeddedLog.read_keys` — one read per open piece
its keys lie in now, should a split since the plan have cut it — from ``start`` up to ``end``, each
read saying where the next begins (it may jump over offsets that piece never had); the records are
converted to Arrow row by row (`records_to_arrow`), which costs more than the columnar path.

Several key ranges of one partition owned by one query are read together (`read_ranges`): the
partition's records from the lowest start to the highest end are read once, each record's point is
hashed once, and a record is kept when the range holding its key keeps it (its offset inside that
range's ``[start, end)``, no skip piece dropping it). The ranges of one partition hold disjoint keys,
so each record goes to at most one; every key's records come out in offset order. A partition split
on the producer side is read range by range, as above — also from where the read had come when a
split lands during it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pyarrow as pa

from regroup.log import open_log
from regroup.log.arrow import ARROW_SCHEMA, HEADER_STRUCT, records_to_arrow
from regroup.log.base import PartitionedLog
from regroup.log.embedded import EmbeddedLog
from regroup.log.embedded.layout import SpansOpenPieces
from regroup.protocol.keyrange import kept, kept_points, points
from regroup.protocol.microbatch import ShardRange, lanes_of
from regroup.protocol.shard import Shard

#: The source's schema as Spark sees it (and as `spark.readStream.format("regroup").load()` shows it).
SPARK_SCHEMA_DDL = (
    "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)

#: The Arrow schema Spark expects from read(): its timestamps are microseconds in UTC.
SPARK_ARROW_SCHEMA = pa.schema([
    *ARROW_SCHEMA.remove(6).remove(5),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("headers", pa.list_(pa.field("element", HEADER_STRUCT))),
])

#: Records per Arrow batch handed to Spark (big enough to amortise, small enough for memory).
BATCH_RECORDS = 65_536

_logs: dict[str, PartitionedLog] = {}
_logs_lock = threading.Lock()


def _log(spec: str) -> PartitionedLog:
    with _logs_lock:
        log = _logs.get(spec)
        if log is None:
            log = _logs[spec] = open_log(spec)
        return log


def read_range(
    spec: str, shard: Shard, start: int, end: int, skip: Sequence[tuple[int, int, int]] = ()
) -> Iterator[pa.RecordBatch]:
    """Records ``[start, end)`` of ``shard`` as batches with :data:`SPARK_ARROW_SCHEMA`.

    For a key range (or with ``skip`` pieces, disjoint as in `keyrange.Resume`), the partition's
    records ``[start, end)`` are read and only those of the range that no piece drops are yielded;
    a range may keep none of them, and then yields nothing. A partition split on the producer side is
    read by key (see the module docstring).

    Raises if the log ends before ``end``: the driver planned the range from the log's end offsets,
    so a shorter log means records were lost (e.g. a truncated or recreated topic), and silently
    reading less would turn that into unnoticed data loss.
    """
    log = _log(spec)
    if isinstance(log, EmbeddedLog) and not log.layout(shard.topic, shard.partition).trivial:
        yield from _read_by_key(log, shard, start, end, skip)
        return
    filtered = not shard.whole or bool(skip)
    at = start
    while at < end:
        try:
            batch = log.read_arrow(shard.topic, shard.partition, at, min(BATCH_RECORDS, end - at))
        except SpansOpenPieces:  # split since the check above: the rest by key
            assert isinstance(log, EmbeddedLog)
            yield from _read_by_key(log, shard, at, end, skip)
            return
        if batch.num_rows == 0:
            raise _ended(shard, at, end)
        at = batch.column(2)[-1].as_py() + 1  # offsets may skip (Kafka compaction, transaction markers)
        if filtered:
            batch = keep_range(batch, shard, skip)
            if batch.num_rows == 0:
                continue  # none of this read is the range's: not an error, the log did not end
        yield batch.cast(SPARK_ARROW_SCHEMA)


def read_ranges(spec: str, ranges: Sequence[ShardRange]) -> Iterator[pa.RecordBatch]:
    """Several ranges of one partition (disjoint keys) read once: the records each of them keeps, as
    :func:`read_range` would give them one by one, in offset order (see the module docstring)."""
    if len(ranges) == 1:
        r = ranges[0]
        yield from read_range(spec, r.shard, r.start, r.end, r.skip)
        return
    first = ranges[0].shard
    if any(r.shard.partition_key != first.partition_key for r in ranges):
        raise ValueError(f"read_ranges reads ranges of one partition, got {[str(r.shard) for r in ranges]}")
    log = _log(spec)
    if isinstance(log, EmbeddedLog) and not log.layout(first.topic, first.partition).trivial:
        for r in ranges:  # split on the producer side: by key, range by range
            yield from read_range(spec, r.shard, r.start, r.end, r.skip)
        return
    at, end = min(r.start for r in ranges), max(r.end for r in ranges)
    while at < end:
        try:
            batch = log.read_arrow(first.topic, first.partition, at, min(BATCH_RECORDS, end - at))
        except SpansOpenPieces:  # split since the check above: the rest range by range, by key
            for r in ranges:  # every record below ``at`` was read (or was not the range's) already
                if max(r.start, at) < r.end:
                    yield from read_range(spec, r.shard, max(r.start, at), r.end, r.skip)
            return
        if batch.num_rows == 0:
            raise _ended(first, at, end)
        at = batch.column(2)[-1].as_py() + 1
        offsets = batch.column("offset").to_numpy()
        where = points(batch.column("key").to_pylist(), offsets)
        mask = None
        for r in ranges:
            keep = kept_points(where, offsets, r.shard.lo, r.shard.hi, r.skip) & (offsets >= r.start) \
                & (offsets < r.end)
            mask = keep if mask is None else mask | keep
        batch = batch.filter(pa.array(mask))
        if batch.num_rows:
            yield batch.cast(SPARK_ARROW_SCHEMA)


def _read_by_key(
    log: EmbeddedLog, shard: Shard, start: int, end: int, skip: Sequence[tuple[int, int, int]]
) -> Iterator[pa.RecordBatch]:
    """`read_range` on a partition split on the producer side: the records of ``shard``'s keys with
    offsets in ``[start, end)``, read one open piece's keys at a time (a range planned inside one piece
    may lie across several by now: its records below ``end`` are then in the sealed piece those were
    split from). Each key's records come out in offset order."""
    todo = [(part, start) for part in lanes_of(shard, log.key_pieces(shard.topic, shard.partition))]
    todo.reverse()
    whole = Shard(shard.topic, shard.partition)
    while todo:
        part, at = todo.pop()
        while at < end:
            try:
                got = log.read_keys(shard.topic, shard.partition, part.lo, part.hi, at,
                                    min(BATCH_RECORDS, end - at))
            except SpansOpenPieces:  # split again meanwhile: each part on its own from here
                parts = lanes_of(part, log.key_pieces(shard.topic, shard.partition))
                if parts == (part,):
                    raise
                todo.extend((p, at) for p in reversed(parts))
                break
            if not got.records and got.next_offset <= at:
                raise RuntimeError(
                    f"regroup source: keys [{part.lo:#x}, {part.hi:#x}) of {shard.topic}:{shard.partition}, "
                    f"split on the producer side, have no records at offset {at} although the batch was "
                    f"planned up to {end}: records were lost, or the range was planned past the end of its "
                    "piece (each piece of a split partition has its own end: plan it per piece)")
            at = got.next_offset
            # A read past a gap begins at its piece's start and may look beyond ``end``.
            records = [r for r in got.records if r.offset < end]
            if not records:
                continue
            batch = records_to_arrow(records)
            if skip:  # the keys are the range's already: only the skip pieces drop records here
                batch = keep_range(batch, whole, skip)
                if batch.num_rows == 0:
                    continue
            yield batch.cast(SPARK_ARROW_SCHEMA)


def _ended(shard: Shard, at: int, end: int) -> RuntimeError:
    return RuntimeError(
        f"regroup source: {shard} has no records at offset {at} although the batch was planned "
        f"up to {end}; was the topic truncated or recreated?")


def keep_range(
    batch: pa.RecordBatch, shard: Shard, skip: Sequence[tuple[int, int, int]] = ()
) -> pa.RecordBatch:
    """The rows of ``batch`` (the log's Arrow schema) that ``shard``'s key range keeps and no ``skip``
    piece drops."""
    keys = batch.column("key").to_pylist()  # bytes objects (None: keyless), built in C: what xxhash takes
    offsets = batch.column("offset").to_numpy()
    return batch.filter(pa.array(kept(keys, offsets, shard.lo, shard.hi, skip)))
