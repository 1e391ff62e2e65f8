"""`regroup bench spark-stateful`: its scenario plan and its figures from made-up member files (fast),
and a tiny run with real Spark member processes — one warm scale-out and one kill -9 with a standby
(slow). No timing is asserted: figures belong to the benchmark, not to unit tests; the run checks
itself that no record was lost or counted twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from regroup.bench.spark_stateful import (
    SCENARIOS,
    Settings,
    parse_size,
    run_spark_stateful_bench,
    scenarios,
)
from regroup.bench.spark_stateful_figures import (
    Load,
    check_outputs,
    figures,
    how_started,
    key_name,
    max_gap,
    read_events,
)
from regroup.bench.stateful import COLD_RECOVERY_LAG

#: 3 tasks on 2 members (2 + 1), then one each: exactly one task moves to the newcomer.
SETTINGS = Settings(tasks=3, value_bytes=1_000, rate_per_task=10, steady_s=3.0, tail_s=1.0,
                    acceptable_lags=(500,))


def test_scenarios_by_name_and_group_in_run_order() -> None:
    settings = Settings(acceptable_lags=(10_000, 0))
    assert [s.name for s in scenarios(["all"], settings)] == [
        "scale-out cold", "scale-out warm, lag 10,000", "scale-out warm, lag 0", "kill -9, 1 standby",
        "kill -9, no standby"]
    cold, warm, warm0 = scenarios(["scale-out-warm", "scale-out-cold"], Settings())
    assert (cold.max_warmups, cold.acceptable_lag) == (0, COLD_RECOVERY_LAG)
    assert warm.flags() == ["--standby-replicas", "0", "--acceptable-recovery-lag", "500",
                            "--max-warmups", "2"]
    assert warm0.name == "scale-out warm, lag 0"
    (kill,) = scenarios(["kill-standby"], Settings())
    assert (kill.members_before, kill.members_after, kill.standby_replicas) == (3, 2, 1)
    assert len(scenarios(SCENARIOS, Settings())) == 5
    assert kill.flags()[:4] == ["--standby-replicas", "1", "--acceptable-recovery-lag", "500"]
    with pytest.raises(ValueError, match="scale-up"):
        scenarios(["scale-up"], Settings())


def test_settings_bound_a_batch_by_bytes_and_refuse_nonsense() -> None:
    assert Settings(value_bytes=10_000, batch_bytes=32_000_000).batch_records == 3_200
    assert Settings(value_bytes=10**9).batch_records == 1
    for bad in ({"tasks": 1}, {"value_bytes": 0}, {"rate_per_task": 0}, {"trigger_ms": 10},
                {"acceptable_lags": ()}, {"acceptable_lags": (-1,)}):
        with pytest.raises(ValueError):
            Settings(**bad)
    assert parse_size("10MB") == 10**7 and parse_size("1GB") == 10**9


def test_max_gap_is_the_longest_silence_overlapping_the_window() -> None:
    assert max_gap([1.0, 2.0, 5.0, 8.5, 20.0], 0.0, 10.0) == 3.5
    assert max_gap([1.0, 2.0, 5.0, 5.5, 20.0], 0.0, 10.0) == 4.5  # up to the window's end
    assert max_gap([-7.0, 1.0, 2.0], 0.0, 3.0) == 8.0  # silent since before the window
    assert max_gap([], 0.0, 10.0) == 10.0


def _log(t: float, member: str, msg: str) -> dict[str, Any]:
    return {"t": t, "member": member, "kind": "log", "msg": msg}


def _progress(t: float, member: str, task: str, at: int, role: str = "active") -> dict[str, Any]:
    return {"t": t, "member": member, "kind": "progress", "task": task, "role": role, "at": at}


def _spark(t: float, member: str, query: str, rows: int, ms: int) -> dict[str, Any]:
    return {"t": t, "member": member, "kind": "spark", "query": query, "batch": 1, "rows": rows,
            "ms": {"triggerExecution": ms, "addBatch": ms - 100},
            "state": [{"rows": 1000, "rocksdbLoadLatencyMs": 7}]}


#: A warm-up on m3 that copied batch 8 and was promoted (through a parked copy) before its query
#: finished a batch: the bug this bench shows when the acceptable lag is not small.
PROMOTED_COLD = [
    _log(100.1, "m3", "task agg_1: copied batch 8 of tasks/agg_1/a.1 for the warm-up in 0.01 s"),
    _log(103.0, "m3", "task agg_1: warm-up query started on tasks/agg_1/b.2 at input/1@10300"),
    _log(106.7, "m3", "task agg_1: parked copy here becomes active (at input/1@10300, committed "
                      "input/1@10401)"),
    {"t": 106.8, "member": "m3", "kind": "roles", "tasks": {"agg_1": "active"}, "starts": {}},
    _progress(128.6, "m3", "agg_1", 10401),
    _spark(128.6, "m3", "spark-stateful.agg_1.b.2", rows=101, ms=21_000),
]


def test_how_a_task_started_promoted_before_or_after_its_first_batch() -> None:
    how = how_started("agg_1", "m3", PROMOTED_COLD, t_event=100.0)
    assert how["how"] == "promoted warm-up"  # the role it started in, not "parked"
    assert how["copied_for"] == "warm-up" and how["copy_s"] == 0.01
    assert how["processed_before_promotion"] == 0 and how["query_dir"] == "tasks/agg_1/b.2"
    assert (how["query_started_at"], how["active_at"], how["first_batch_at"]) == (103.0, 106.7, 128.6)
    warm = [*PROMOTED_COLD[:2], _progress(104.0, "m3", "agg_1", 10350, "warm-up"),
            _log(106.7, "m3", "task agg_1: parked copy here becomes active (at input/1@10350, committed "
                              "input/1@10401)")]
    how = how_started("agg_1", "m3", warm, t_event=100.0)
    assert how["first_batch_at"] == 104.0 and how["processed_before_promotion"] == 50
    copied = [_log(101.0, "m3", "task agg_1: copied batch 8 of tasks/agg_1/a.1 for the active in 0.40 s"),
              _log(104.0, "m3", "task agg_1: active query started on tasks/agg_1/c.3 at input/1@10300")]
    how = how_started("agg_1", "m3", copied, t_event=100.0)
    assert (how["how"], how["copied_for"], how["active_at"]) == ("copied", "active", 104.0)
    assert how_started("agg_1", "m2", copied, t_event=100.0)["how"] is None  # another member


def _batch(t: float, task: str, member: str, key: str, file: str = "x.arrow") -> dict[str, Any]:
    return {"t": t, "task": task, "member": member, "key": key, "batch": 0, "epoch": 1, "rows": 1,
            "file": file}


def test_figures_of_a_moved_task_and_the_others() -> None:
    batches = [_batch(t, "agg_0", "m1", f"a{t}") for t in (92.0, 94.0, 96.0, 98.0, 100.5, 102.0, 130.0)]
    batches += [_batch(t, "agg_1", "m2", f"b{t}") for t in (93.0, 95.0, 97.0, 99.5)]
    batches += [_batch(t, "agg_1", "m3", f"c{t}") for t in (128.7, 130.0)]
    out = figures(batches, PROMOTED_COLD, placed={0: "m1", 1: "m2"}, standbys={}, moved_to={0: "m1", 1: "m3"},
                  t_event=100.0, t_end=131.0, tasks=2, steady_s=10.0)
    (row,) = out["moved"]
    assert row["task"] == "agg_1" and (row["from"], row["to"]) == ("m2", "m3")
    assert row["gap_ms"] == 29_200 and row["how"] == "promoted warm-up"
    assert row["warm_at_activation"] is False  # its first batch came 22 s after it became active
    assert (row["first_batch_ms"], row["first_batch_add_ms"], row["first_batch_rocksdb_load_ms"]) == \
        (21_000, 20_900, 7)
    assert (row["active_s"], row["first_output_s"], row["last_output_before_event_s"]) == (6.7, 28.7, 0.5)
    assert row["output_by"] == ["m3"] and row["active_on"] == ["m3"]
    assert out["others_gap_ms_max"] == 28_000  # agg_0: 102 -> 130
    assert out["baseline_gap_ms"] == 3_000  # agg_1: from the window's start (90) to its first output (93)
    assert out["moved_gap_ms_max"] == 29_200
    assert out["batch_ms_median"] is None  # no Spark progress in the steady window


def _write_batch(out: Path, name: str, rows: dict[str, int]) -> str:
    import pyarrow as pa

    table = pa.table({"key": list(rows), "count": list(rows.values())})
    with pa.OSFile(str(out / name), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    return name


def test_check_outputs_counts_lost_and_extra_and_the_latency(tmp_path: Path) -> None:
    load = Load()
    # Pre-load: two keys per task, one task. Then key 0 twice more (at 101 and 102), key 1 once (103).
    for i, n, at in ((0, 2, 101.0), (0, 3, 102.0), (1, 2, 103.0)):
        load.occurrences[(0, i)] = n
        load.records.append((0, i, n, at))
    k0, k1 = key_name(0, 0), key_name(0, 1)
    batches = [_batch(100.0, "agg_0", "m1", "b0", _write_batch(tmp_path, "b0.arrow", {k0: 1, k1: 1})),
               _batch(102.5, "agg_0", "m1", "b1", _write_batch(tmp_path, "b1.arrow", {k0: 3})),
               _batch(104.0, "agg_0", "m1", "b1", _write_batch(tmp_path, "b2.arrow", {k1: 2}))]
    out = check_outputs(tmp_path, batches, load, tasks=1, keys=2, t_event=100.5)
    assert (out["lost"], out["extra"], out["batches_run_twice"]) == (0, 0, 1)
    assert out["max_latency_ms"] == 1_500  # k0's 2nd record, produced at 101, first covered at 102.5
    load.occurrences[(0, 1)] = 3  # a record of k1 no output covers
    out = check_outputs(tmp_path, batches, load, tasks=1, keys=2, t_event=100.5)
    assert out["lost"] == 1 and out["lost_examples"] == [f"{k1}: 2 of 3"]
    load.occurrences[(0, 1)], load.occurrences[(0, 0)] = 2, 2  # k0 output with 3, produced twice
    assert check_outputs(tmp_path, batches, load, tasks=1, keys=2, t_event=100.5)["extra"] == 1


def test_read_events_skips_a_torn_last_line(tmp_path: Path) -> None:
    (tmp_path / "events-m1.jsonl").write_text(
        '{"t": 2, "kind": "left"}\n{"t": 1, "kind": "joining"}\n{"t": 3, "ki')
    (tmp_path / "events-m2.jsonl").write_text('{"t": 1.5, "kind": "joining"}\n')
    assert [(e["t"], e["member"]) for e in read_events(tmp_path)] == [(1, "m1"), (1.5, "m2"), (2, "m1")]
    assert [e["t"] for e in read_events(tmp_path, since=1.6)] == [2]


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_a_warm_scale_out_and_a_kill_with_a_standby_lose_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    size = parse_size("1MB")
    result = run_spark_stateful_bench([size], ["scale-out-warm", "kill-standby"], SETTINGS, json_output=True,
                                      directory=str(tmp_path))
    assert json.loads(capsys.readouterr().out) == result  # stdout holds the JSON object and nothing else
    assert result["lost"] == 0 and {"settings", "sizes", "runs", "wall_s", "load_average_1m"} <= set(result)
    warm, kill = result["runs"]
    for run in (warm, kill):
        assert run["lost"] == 0 and run["extra"] == 0 and run["load_records"] > 0, run
        assert run["keys_per_task"] == 1_000 and run["state_bytes_per_task"] == size
        assert run["moved"], run  # something moved
        for moved in run["moved"]:
            assert isinstance(moved["gap_ms"], int) and moved["gap_ms"] > 0, moved
            assert moved["how"] is not None and moved["first_output_s"] is not None, moved
        for figure in ("baseline_gap_ms", "others_gap_ms_max", "max_latency_ms", "moved_gap_ms_max",
                       "coordinator_stable_s", "preload_s", "spark_start_s", "producer_gap_ms"):
            assert isinstance(run[figure], int | float), figure
        assert run["checkpoint_mb_per_task"] > 0 and set(run["phases_s"]) >= {"spark_start", "preload"}
    assert warm["scenario"] == "scale-out warm, lag 500" and warm["members"] == "2 -> 3"
    (moved,) = warm["moved"]
    assert moved["to"] == "m3" and moved["from"] in ("m1", "m2")
    assert moved["how"] == "promoted warm-up", moved  # in place, through its warm-up
    assert moved["copied_for"] == "warm-up" and moved["copy_s"] is not None and warm["detection_s"] is None
    assert kill["scenario"] == "kill -9, 1 standby" and kill["members"] == "3 -> 2"
    assert kill["killed"] is not None and kill["detection_s"] > 0 and kill["standby_lag_at_event"] is not None
    # Every task of the killed member was taken over first by the survivor that held its standby
    # (balance may then move it on through a warm-up).
    for moved in kill["moved"]:
        if moved["from"] == kill["killed"]:
            assert moved["active_on"][0] in moved["standby_on"], moved
            assert moved["how"] in ("promoted standby", "promoted warm-up"), moved
