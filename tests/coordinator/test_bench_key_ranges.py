"""`regroup bench ranges` (alias `key-ranges`) briefly: a real coordinator process, one partition drained
by one member and by K members on key ranges (threads and separate processes); every run checked
(exactly once, key order), figures as JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from regroup.bench.key_ranges import PcSettings, _pc_records, check_drain
from regroup.bench.key_ranges_member import Tally
from regroup.cli import app


@pytest.mark.slow  # about ten seconds: four drains of a few hundred records
def test_bench_key_ranges_drains_one_partition_with_workers_and_checks_every_run() -> None:
    result = CliRunner().invoke(app, [
        "bench", "key-ranges", "--shape", "fixed", "--records", "400", "--keys", "16", "--work-ms", "0.5",
        "--workers", "2,4", "--handlers", "io", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"] is True
    runs = out["runs"]
    assert [(r["handler"], r["workers"]) for r in runs] == [("io", 1), ("io", 2), ("io", 4)]
    for r in runs:
        assert r["records"] == 400 and r["exactly_once"] and r["key_order_kept"] and not r["errors"]
        assert r["drain_s"] > 0 and r["records_per_s"] > 0
    assert runs[0]["speedup"] == 1.0


@pytest.mark.slow  # 13 s on an idle 2-core machine, over 20 s on a busy one: 8 drains, 6 member processes
def test_bench_ranges_parallel_consumer_shape_as_threads_and_as_member_processes() -> None:
    """The issue's shape, small: K = 1, 2 as threads and as processes, both handlers."""
    result = CliRunner().invoke(app, [
        "bench", "ranges", "--records", "400", "--keys", "64", "--workers", "2", "--cpu-records", "200",
        "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"] is True and out["shape"] == "parallel-consumer"
    assert out["settings"]["mean_work_ms"] == 2.5 and out["settings"]["seed"] == 42
    assert out["settings"]["whole_ms"] is False
    runs = out["runs"]
    assert [(r["handler"], r["deployment"], r["workers"]) for r in runs] == [
        (h, d, k) for h in ("io", "cpu") for d in ("threads", "members") for k in (1, 2)]
    for r in runs:
        k, n = r["workers"], r["records"]
        assert n == (400 if r["handler"] == "io" else 200)
        assert r["exactly_once"] and r["key_order_kept"] and not r["errors"], r
        assert len(r["handled_per_member"]) == k and sum(r["handled_per_member"]) == n
        assert all(r["handled_per_member"]), "a member got no records"
        assert r["join_s"] >= 0 and r["pickup_s"] >= 0 and r["drain_s"] > 0 and r["records_per_s"] > 0
        # An io drain cannot beat the heaviest range's waits (cpu work is as calibrated: nominal); each
        # member reads the whole partition.
        assert r["heaviest_range_s"] > 0 and 1 <= r["balance_limit"] <= k
        assert r["handler"] == "cpu" or r["drain_s"] >= r["heaviest_range_s"]
        assert abs(r["read_amplification"] - k) <= 0.25 * k
        assert r["efficiency"] == pytest.approx(r["speedup"] / k, abs=0.01)
    assert [r["speedup"] for r in runs if r["workers"] == 1] == [1.0] * 4
    io = {(r["deployment"], r["workers"]): r["drain_s"] for r in runs if r["handler"] == "io"}
    vs = out["parallel_consumer"]
    assert vs["one_at_a_time_s"] == 22.221 and vs["key_order_16_threads_s"] == 2.056
    assert vs["regroup_one_at_a_time_s"] == {"threads": io[("threads", 1)], "members": io[("members", 1)]}
    assert vs["regroup_16_s"] == {}  # K = 16 was not run


def test_the_work_of_the_records_is_seeded_and_the_same_for_every_configuration() -> None:
    keys, work = _pc_records(PcSettings(records=1_000, keys=10, cpu_records=100))
    assert (keys, work) == _pc_records(PcSettings(records=1_000, keys=10, cpu_records=100))
    assert len(keys) == len(work) == 1_000 and keys[:2] == [b"key-0", b"key-1"] and keys[10] == b"key-0"
    assert all(0 <= w <= 5_000 for w in work) and 2_300 < sum(work) / len(work) < 2_700  # µs: mean 2.5 ms
    _, whole = _pc_records(PcSettings(records=1_000, keys=10, cpu_records=100, whole_ms=True))
    assert set(whole) == {0, 1_000, 2_000, 3_000, 4_000}  # parallel-consumer's (long) (Math.random() * 5)
    assert all(0 <= w - wh <= 1_000 for w, wh in zip(work, whole, strict=True))  # the draws, rounded down


def test_the_drain_check_finds_lost_repeated_and_reordered_records() -> None:
    keys = [b"a", b"b", b"a", b"b"]
    one, two = Tally(first=0.0, handled=[(0, 1.0), (2, 3.0)]), Tally(first=0.0, handled=[(1, 1.5), (3, 2.0)])
    assert check_drain(keys, [one, two], 4) == (True, True, [])
    lost = Tally(first=0.0, handled=[(0, 1.0)])
    exactly, ordered, problems = check_drain(keys, [lost, two], 4)
    assert not exactly and ordered and "1 of 4 records not handled" in problems[0]
    again = Tally(first=0.0, handled=[(0, 1.0), (2, 3.0), (0, 4.0)])  # offset 0 twice, and after 2
    exactly, ordered, problems = check_drain(keys, [again, two], 4)
    assert not exactly and not ordered
    # key a's offset 2 handled (by member 1) before its offset 0 (by member 0): out of order
    moved = [Tally(first=0.0, handled=[(0, 5.0)]), Tally(first=0.0, handled=[(1, 1.0), (2, 2.0), (3, 3.0)])]
    exactly, ordered, problems = check_drain(keys, moved, 4)
    assert exactly and not ordered and "offset 0 handled (member 0) after offset 2" in problems[0]


@pytest.mark.parametrize("command", ["ranges", "key-ranges"])
@pytest.mark.parametrize("args, wrong", [
    (["--workers", "1"], "--workers"), (["--workers", "x"], "--workers"),
    (["--handlers", "gpu"], "--handlers"), (["--shape", "wide"], "--shape"),
    (["--deployments", "pods"], "--deployments"), (["--cpu-workers", "1"], "--cpu-workers"),
    (["--workers", "2,128"], "--workers")])
def test_bench_key_ranges_refuses_bad_options(command: str, args: list[str], wrong: str) -> None:
    result = CliRunner().invoke(app, ["bench", command, *args])
    assert result.exit_code == 2 and wrong in result.output
