"""`regroup bench stateful` on tiny state: it starts the processes, moves tasks cold and warm, kills a
member with and without a standby, and reports figures that tell the cases apart. No timing is
asserted beyond the failure detection bound: figures belong to the benchmark, not to unit tests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from regroup.bench.stateful import COLD_RECOVERY_LAG, Settings, parse_size, run_stateful_bench

KEYS = 2_000
SETTINGS = Settings(tasks=3, value_bytes=100, rate_per_task=40, acceptable_lags=(100,), steady_s=1.0,
                    tail_s=0.5, session_timeout_ms=1_500, heartbeat_interval_ms=250)


def test_parse_size_reads_units_and_names_what_it_cannot_read() -> None:
    assert parse_size("10MB") == 10_000_000
    assert parse_size(" 1 gb") == 10**9
    assert parse_size("1.5KB") == 1_500
    with pytest.raises(ValueError, match="10XB"):
        parse_size("10XB")


def test_scale_out_cold_restores_the_whole_changelog_and_a_warm_up_almost_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_stateful_bench([KEYS * SETTINGS.value_bytes], ["scale-out"], SETTINGS, json_output=True,
                                directory=str(tmp_path))
    assert json.loads(capsys.readouterr().out) == result
    cold, warm = result["runs"]
    assert (cold["scenario"], warm["scenario"]) == ("scale-out cold", "scale-out warm, lag 100")
    assert cold["acceptable_recovery_lag"] == COLD_RECOVERY_LAG and cold["max_warmups"] == 0
    for run in (cold, warm):
        assert run["lost"] == 0 and run["members"] == "2 -> 3" and run["keys_per_task"] == KEYS
        (moved,) = run["moved"]  # 3 tasks on 2 members, then 1 each: one task moves to m3
        assert moved["to"] == "m3" and moved["gap_ms"] > 0 and moved["restored_records"] is not None
    assert cold["moved"][0]["restored_records"] >= KEYS  # every key, from the changelog, at take-over
    assert warm["moved"][0]["restored_records"] < KEYS // 2  # the warm-up had it already


def test_kill_9_fails_over_to_the_standby_or_restores_everything_without_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = dataclasses.replace(SETTINGS, tasks=6)  # 2 per member, then 3: only m3's tasks move
    result = run_stateful_bench([KEYS * settings.value_bytes], ["kill"], settings, json_output=True,
                                directory=str(tmp_path))
    capsys.readouterr()
    standby, none = result["runs"]
    assert (standby["scenario"], none["scenario"]) == ("kill -9, 1 standby", "kill -9, no standby")
    for run in (standby, none):
        assert run["lost"] == 0 and run["members"] == "3 -> 2"
        assert 0 < run["detection_s"] <= settings.session_timeout_ms / 1000 + 2
        assert [m["from"] for m in run["moved"]] == ["m3", "m3"]
    assert all(m["to"] in m["standby_on"] and m["restored_records"] < KEYS // 2 for m in standby["moved"])
    assert all(m["restored_records"] >= KEYS for m in none["moved"])
