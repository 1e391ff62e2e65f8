"""One read for several key ranges of one partition (`microbatch.grouped_ranges`, `read.read_ranges`):
the records each range keeps, as its own read would give them, from one read of the partition."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pytest

from regroup.log import LogRecord, open_log
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.keyrange import KEY_SPACE, range_shards
from regroup.protocol.microbatch import ShardRange, grouped_ranges
from regroup.protocol.shard import Shard
from regroup.spark import read as readmod
from regroup.spark.read import read_range, read_ranges

Q = KEY_SPACE // 4


def _rows(batches: Iterable[pa.RecordBatch]) -> list[tuple[int, bytes]]:
    got = list(batches)
    if not got:
        return []
    table = pa.Table.from_batches(got)
    return sorted(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(), strict=True))


def _each(spec: str, ranges: list[ShardRange]) -> list[tuple[int, bytes]]:
    return sorted(row for r in ranges for row in _rows(read_range(spec, r.shard, r.start, r.end, r.skip)))


def test_ranges_of_one_partition_are_planned_as_one_read_per_slice() -> None:
    a, b = Shard("t", 0, 0, Q), Shard("t", 0, Q, 2 * Q)
    c = Shard("t", 1)
    ranges = [ShardRange(a, 10, 30, ((0, 5, 20),)), ShardRange(b, 0, 25), ShardRange(c, 0, 12)]
    got = grouped_ranges(ranges, 15)
    assert got == [
        (ShardRange(a, 10, 15, ((0, 5, 20),)), ShardRange(b, 0, 15)),
        (ShardRange(a, 15, 30, ((0, 5, 20),)), ShardRange(b, 15, 25)),
        (ShardRange(c, 0, 12),),
    ]


def test_the_lanes_of_a_split_partition_stay_reads_of_their_own() -> None:
    """A partition split on the producer side: its lanes (of different pieces, offsets of their own)
    are read by key anyway, so each slice of each lane is an input partition, read side by side; a
    partition in one piece (never split, or merged back) is still read once for all its ranges."""
    lo, hi = Shard("t", 0, 0, 2 * Q), Shard("t", 0, 2 * Q, KEY_SPACE)
    a, b = Shard("u", 0, 0, Q), Shard("u", 0, Q, 2 * Q)
    ranges = [ShardRange(lo, 0, 30), ShardRange(hi, 5, 20), ShardRange(a, 0, 20), ShardRange(b, 0, 20)]
    pieces = {("t", 0): ((0, 2 * Q), (2 * Q, KEY_SPACE)), ("u", 0): ((0, KEY_SPACE),)}
    assert grouped_ranges(ranges, 15, pieces) == [
        (ShardRange(lo, 0, 15),), (ShardRange(lo, 15, 30),), (ShardRange(hi, 5, 20),),
        (ShardRange(a, 0, 15), ShardRange(b, 0, 15)), (ShardRange(a, 15, 20), ShardRange(b, 15, 20)),
    ]
    # Without pieces every partition counts as one piece (a log that is never split).
    assert len(grouped_ranges(ranges, 15)) == 4


def test_one_read_keeps_what_each_range_keeps(tmp_path: Path) -> None:
    spec = str(tmp_path / "log")
    log = open_log(spec)
    log.create_topic("t", 1)
    log.produce("t", 0, [LogRecord(b"k%d" % (i % 97), b"v", 0) for i in range(3_000)])
    shards = range_shards("t", 0, 4)
    # Ranges at different positions, one skipping what a former owner did for part of its keys.
    ranges = [ShardRange(shards[0], 100, 2_500), ShardRange(shards[1], 0, 3_000),
              ShardRange(shards[3], 700, 2_900, ((shards[3].lo, shards[3].lo + Q // 2, 1_500),))]
    for read in grouped_ranges(ranges, 1_000):
        assert _rows(read_ranges(spec, list(read))) == _each(spec, list(read))
    assert sum(len(_rows(read_ranges(spec, list(r)))) for r in grouped_ranges(ranges, 1_000)) == \
        len(_each(spec, ranges)) > 0
    log.close()


def test_a_split_partition_is_read_range_by_range(tmp_path: Path) -> None:
    spec = str(tmp_path / "log")
    log = open_log(spec)
    assert isinstance(log, EmbeddedLog)
    log.create_topic("t", 1)
    log.produce("t", 0, [LogRecord(b"k%d" % (i % 31), b"v", 0) for i in range(200)])
    log.split_partition("t", 0, 2)
    log.produce("t", 0, [LogRecord(b"k%d" % (i % 31), b"v", 0) for i in range(100)])
    lo, hi = range_shards("t", 0, 2)
    ends = log.piece_ends("t", 0)
    ranges = [ShardRange(lo, 50, ends[(lo.lo, lo.hi)]), ShardRange(hi, 120, ends[(hi.lo, hi.hi)])]
    assert _rows(read_ranges(spec, ranges)) == _each(spec, ranges)
    log.close()


def test_a_split_during_the_read_goes_on_range_by_range_from_where_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = str(tmp_path / "log")
    log = open_log(spec)
    assert isinstance(log, EmbeddedLog)
    log.create_topic("t", 1)
    log.produce("t", 0, [LogRecord(b"k%d" % (i % 53), b"v", 0) for i in range(300)])
    shards = range_shards("t", 0, 4)
    ranges = [ShardRange(shards[0], 20, 300),
              ShardRange(shards[1], 0, 250, ((shards[1].lo, shards[1].hi, 40),)),  # a former owner's
              ShardRange(shards[3], 100, 300)]
    want = _each(spec, ranges)
    shared = readmod._log(spec)
    assert isinstance(shared, EmbeddedLog)
    real = shared.read_arrow
    reads = {"n": 0}

    def split_after_the_first_read(topic: str, partition: int, at: int, n: int) -> pa.RecordBatch:
        reads["n"] += 1
        if reads["n"] == 2:  # the producer splits the partition between two reads of it
            log.split_partition("t", 0, 2)
        return real(topic, partition, at, n)

    monkeypatch.setattr(readmod, "BATCH_RECORDS", 64)
    monkeypatch.setattr(shared, "read_arrow", split_after_the_first_read)
    assert _rows(read_ranges(spec, ranges)) == want
    assert reads["n"] == 2  # one columnar read, then by key
    log.close()
