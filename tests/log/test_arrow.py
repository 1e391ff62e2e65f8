"""The embedded log's Arrow read path: the same records as read(), in ARROW_SCHEMA, built column-wise."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.log.arrow import ARROW_SCHEMA, empty_batch, records_to_arrow
from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.log.embedded.frames import MAX_FRAME_RECORDS

small_bytes = st.binary(max_size=40)
records = st.builds(
    LogRecord,
    key=st.none() | small_bytes,
    value=st.none() | small_bytes,
    timestamp_ms=st.integers(min_value=-(2**40), max_value=2**45),
    headers=st.lists(st.tuples(st.text(max_size=8), small_bytes), max_size=3).map(tuple),
)


@pytest.fixture
def log(tmp_path: Path):  # type: ignore[no-untyped-def]
    with EmbeddedLog(tmp_path, fsync="never") as lg:
        yield lg


def test_schema_and_values(log: EmbeddedLog) -> None:
    log.create_topic("t", 2)
    log.produce("t", 1, [
        LogRecord(b"k", b"v", 1_700_000_000_123, (("a", b"1"), ("b", b""))),
        LogRecord(None, None, 0),
    ])
    batch = log.read_arrow("t", 1, 0, 10)
    assert batch.schema == ARROW_SCHEMA
    batch.validate(full=True)
    rows = batch.to_pylist()
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == [
        ("t", 1, 0, b"k", b"v"), ("t", 1, 1, None, None),
    ]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123, 0]
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": b""}]
    assert rows[1]["headers"] == []
    assert batch.column("key").null_count == 1


def test_end_of_partition_gives_an_empty_batch_with_the_schema(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    batch = log.read_arrow("t", 0, 0, 10)
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
    assert empty_batch().schema == ARROW_SCHEMA


def test_spans_frames_with_and_without_nulls_and_headers(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    log.produce("t", 0, [LogRecord(b"a%d" % i, b"x" * i, i) for i in range(MAX_FRAME_RECORDS + 10)])
    log.produce("t", 0, [LogRecord(None, b"n", 1, (("h", b"v"),))])
    log.produce("t", 0, [LogRecord(b"z", None, 2)])
    total = MAX_FRAME_RECORDS + 12
    for start, k in ((0, total), (5, 3), (MAX_FRAME_RECORDS - 2, 8), (total - 2, 10), (7, MAX_FRAME_RECORDS)):
        arrow = log.read_arrow("t", 0, start, k)
        arrow.validate(full=True)
        assert arrow.equals(records_to_arrow(log.read("t", 0, start, k)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(records, min_size=1, max_size=30), min_size=1, max_size=5),
    start_frac=st.floats(0, 1),
    max_records=st.integers(1, 80),
)
def test_read_arrow_equals_read(
    tmp_path: Path, batches: list[list[LogRecord]], start_frac: float, max_records: int
) -> None:
    with EmbeddedLog(tempfile.mkdtemp(dir=tmp_path), fsync="never") as lg:  # one log per example
        lg.create_topic("t", 1)
        base = 0
        for b in batches:
            lg.produce("t", 0, b)
        flat = [r for b in batches for r in b]
        start = base + int(start_frac * (len(flat) - 1))
        via_records = lg.read("t", 0, start, max_records)
        want = flat[start - base : start - base + max_records]
        assert [(r.key, r.value, r.timestamp_ms, r.headers) for r in via_records] == [
            (r.key, r.value, r.timestamp_ms, r.headers) for r in want
        ]
        arrow = lg.read_arrow("t", 0, start, max_records)
        arrow.validate(full=True)
        assert arrow.equals(records_to_arrow(via_records))
