"""The PySpark demo: its pure computations (without Spark), and one short run for real (slow)."""

from __future__ import annotations

import array
import json
import os
import sys
from pathlib import Path

import pytest

from regroup.demo.common import Workload, amount_of, customer_key, customer_of, partition_of
from regroup.demo.report import ReportData, ownership_segments, throughput_series, write_report
from regroup.demo.spark_demo import (
    Event,
    OffsetSpan,
    ReadRange,
    count_coverage,
    expected_from_reads,
    longest_gap,
    moved_partitions,
    typical_gap,
)
from regroup.demo.spark_member import summarise


def rr(partition: int, first: int, last: int, member: str = "m1", batch: int = 0,
       t: float = 0.0) -> ReadRange:
    return ReadRange(member, batch, t, partition, first, last, last - first + 1)


# --------------------------------------------------------------------------- coverage
def test_coverage_exactly_once() -> None:
    cov = count_coverage([rr(0, 0, 4), rr(0, 5, 9, batch=1), rr(1, 0, 2)], {0: 10, 1: 3})
    assert (cov.distinct, cov.reads, cov.lost, cov.duplicates) == (13, 13, 0, 0)
    assert cov.duplicate_spans == () and cov.lost_spans == ()


def test_coverage_counts_lost_offsets_and_where() -> None:
    cov = count_coverage([rr(0, 0, 3), rr(0, 7, 9)], {0: 10, 1: 2})
    assert cov.lost == 3 + 2
    assert cov.lost_spans == (OffsetSpan(0, 4, 6, 0), OffsetSpan(1, 0, 1, 0))
    assert cov.distinct == 7


def test_coverage_counts_duplicates_and_who_read_them() -> None:
    # m2 took partition 0 over from a killed m1 and re-read 8..9, which m1 had read but not committed.
    ranges = [rr(0, 0, 9, "m1", 0, t=1.0), rr(0, 8, 14, "m2", 3, t=5.0), rr(1, 0, 4, "m2", 3, t=5.0)]
    cov = count_coverage(ranges, {0: 15, 1: 5})
    assert (cov.distinct, cov.reads, cov.lost, cov.duplicates) == (20, 22, 0, 2)
    assert cov.duplicate_spans == (OffsetSpan(0, 8, 9, 2, ("m1", "m2"), 5.0),)
    assert cov.duplicate_spans[0].records == 2


def test_coverage_a_replayed_batch_counts_once_and_a_triple_read_twice() -> None:
    cov = count_coverage([rr(0, 0, 4), rr(0, 3, 4, "m2"), rr(0, 4, 4, "m3")], {0: 5})
    assert cov.duplicates == 1 + 2  # offset 3 read twice, offset 4 three times
    assert [(s.first, s.last, s.times) for s in cov.duplicate_spans] == [(3, 3, 2), (4, 4, 3)]


def test_coverage_flags_ranges_with_holes() -> None:
    gapped = ReadRange("m1", 0, 0.0, 0, 0, 9, 8)
    assert count_coverage([gapped], {0: 10}).gapped_ranges == 1


def test_coverage_of_an_empty_log() -> None:
    cov = count_coverage([], {0: 0, 1: 0})
    assert (cov.distinct, cov.lost, cov.duplicates) == (0, 0, 0)


# --------------------------------------------------------------------------- pauses
def test_longest_gap_inside_the_window() -> None:
    times = [0.0, 1.0, 2.0, 7.0, 8.0, 9.0]
    assert longest_gap(times, 1.5, 8.5) == 5.0  # 2 -> 7


def test_longest_gap_counts_a_gap_that_began_before_the_window() -> None:
    assert longest_gap([0.0, 10.0, 11.0], 5.0, 12.0) == 10.0


def test_longest_gap_counts_a_gap_still_open_at_the_end() -> None:
    assert longest_gap([0.0, 1.0, 2.0], 1.5, 9.0) == 7.0  # stopped at 2, nothing until the window ends


def test_longest_gap_of_a_member_that_joins_is_the_wait_for_its_first_batch() -> None:
    assert longest_gap([13.0, 14.0], 10.0, 15.0) == 3.0
    assert longest_gap([], 10.0, 15.0) == 5.0


def test_longest_gap_of_a_steady_member_is_its_rhythm() -> None:
    times = [i * 2.0 for i in range(20)]
    assert longest_gap(times, 11.0, 25.0) == 2.0
    assert typical_gap(times) == 2.0
    assert typical_gap([1.0]) == 0.0


def test_longest_gap_of_an_empty_window() -> None:
    assert longest_gap([1.0, 2.0], 5.0, 5.0) == 0.0


def test_moved_partitions_and_touched() -> None:
    before, after = {0: "m1", 1: "m1", 2: "m2"}, {0: "m1", 1: "m3", 2: "m2", 3: "m3"}
    assert moved_partitions(before, after) == [1, 3]
    ev = Event("static-roll", "m2", 0.0, 5, before, owners_after=after)
    assert ev.touched == [1, 2, 3]  # moved, and the member's own (a static member's wait)
    ev.stable_at, ev.resumed_at = 4.0, 6.0
    assert ev.window == (0.0, 8.0)  # until processing resumed, plus the margin


# --------------------------------------------------------------------------- workload and output
def test_workload_keys_are_spread_and_stable() -> None:
    customers = {customer_of(i) for i in range(1000)}
    assert len(customers) == 1000  # every customer once per 1,000 events
    assert all(1 <= amount_of(i) <= 100 for i in range(1000))
    key = customer_key(42).encode()
    assert partition_of(key, 12) == partition_of(key, 12)


def test_workload_remembers_what_it_produced(tmp_path: Path) -> None:
    from regroup.log import open_log

    spec = str(tmp_path / "log")
    log = open_log(spec)
    log.create_topic("events", 3)
    w = Workload(spec, "events", 3, rate=100)
    w._produce_tick(log, 50)
    w._produce_tick(log, 50)
    assert w.produced == 100
    assert sum(len(c) for c, _ in w.at_offset.values()) == 100
    assert log.end_offsets("events") == {p: len(c) for p, (c, _) in w.at_offset.items()}
    assert sum(n for n, _ in w.totals.values()) == 100
    rec = log.read("events", 0, 0, 1)[0]
    value = json.loads(rec.value or b"")
    assert value["customer"] == customer_key(w.at_offset[0][0][0]) == (rec.key or b"").decode()
    assert value["amount"] == w.at_offset[0][1][0]
    log.close()


def test_expected_output_follows_the_reads_duplicates_included() -> None:
    w = Workload("unused", "events", 1, rate=1)
    w.at_offset[0] = (array.array("i", [1, 2, 1]), array.array("i", [10, 20, 30]))
    got = expected_from_reads([rr(0, 0, 2), rr(0, 2, 2)], w)
    assert got == {customer_key(1): [3, 70], customer_key(2): [1, 20]}


def test_summarise_splits_the_job_rows_into_totals_and_ranges() -> None:
    rows = [{"partition": 0, "customer": "c1", "events": 2, "amount": 5, "first": 3, "last": 7},
            {"partition": 0, "customer": "c2", "events": 3, "amount": 9, "first": 4, "last": 6},
            {"partition": 2, "customer": "c3", "events": 1, "amount": 1, "first": 0, "last": 0}]
    totals, ranges = summarise(rows)
    assert totals == {"c1": [2, 5], "c2": [3, 9], "c3": [1, 1]}
    assert ranges == [{"partition": 0, "first": 3, "last": 7, "count": 5},
                      {"partition": 2, "first": 0, "last": 0, "count": 1}]


# --------------------------------------------------------------------------- report
def test_ownership_segments_join_consecutive_samples() -> None:
    none: frozenset[int] = frozenset()
    samples = [(0.0, {0: "m1"}, none), (1.0, {0: "m1"}, none), (2.0, {}, none), (3.0, {0: "m2"}, none),
               (4.0, {0: "m2"}, frozenset({0})), (5.0, {0: "m2"}, none)]
    assert ownership_segments(samples, 0) == [(0.0, 2.0, "m1", False), (3.0, 4.0, "m2", False),
                                              (4.0, 5.0, "m2", True)]


def test_throughput_series_averages_over_a_sliding_window() -> None:
    xs, ys = throughput_series([(100.5, 10), (101.5, 10), (104.0, 8)], 100.0, 105.0, window_s=2.0)
    assert xs == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert ys == [0.0, 5.0, 10.0, 5.0, 4.0, 4.0]


def test_write_report(tmp_path: Path) -> None:
    data = ReportData(
        title="t", t0=0.0, partitions=2,
        ownership=[(0.0, {0: "m1", 1: "m2"}, frozenset({1})), (2.0, {0: "m1", 1: "m1"}, frozenset())],
        batches={"m1": [(1.0, 100), (3.0, 50)], "m2": [(1.0, 80)]}, events=[(1.5, "kill -9")],
        summary=[("lost", "0")], event_header=["event"], event_rows=[["kill -9 <m2>"]])
    paths = write_report(tmp_path / "r", data)
    png, page = Path(paths["png"]), Path(paths["html"])
    assert png.read_bytes().startswith(b"\x89PNG")
    text = page.read_text()
    assert "data:image/png;base64," in text and "kill -9 &lt;m2&gt;" in text


# --------------------------------------------------------------------------- the demo, for real
@pytest.mark.slow
@pytest.mark.xdist_group("spark")  # with the other Spark tests, one at a time: 2 cores
def test_spark_demo_short_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from regroup.demo.spark_demo import run_spark_demo

    result = run_spark_demo(members=2, partitions=6, rate=500, duration=30.0, json_output=True,
                            report=tmp_path / "report")
    printed = json.loads(capsys.readouterr().out)  # --json: one JSON object and nothing else
    assert printed["produced"] == result["produced"]
    assert result["produced"] > 0 and result["drained"]
    assert result["lost"] == 0
    assert result["processed"] == result["produced"]
    assert result["output_matches_reads"]
    if result["duplicates"] == 0:
        assert result["totals_match"]
    else:  # only the kill -9 may re-read what its victim had not committed
        assert {s["event"] for s in result["duplicate_spans"]} <= {"kill-9"}
    assert [e["event"] for e in result["events"]] == ["scale-out", "scale-in", "static-roll", "kill-9"]
    assert result["static_roll_epoch_unchanged"] is True
    roll = next(e for e in result["events"] if e["event"] == "static-roll")
    assert roll["partitions_moved"] == []
    assert Path(result["report"]["png"]).exists() and Path(result["report"]["html"]).exists()
    assert result["data_dir"] is None  # removed: not kept
