"""The `regroup` commands of this stage, run as real processes."""

from __future__ import annotations

import json
import subprocess
import sys


def run(*args: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, "-m", "regroup.cli", *args], capture_output=True, text=True,
                         check=True, timeout=300)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_walkthrough_json_tells_the_story() -> None:
    result = run("walkthrough", "--json")
    steps = {s["step"]: s for s in result["steps"]}
    assert [s["state"] for s in result["steps"]] == ["stable"] * 5
    scale_out = steps["Scale out: d joins"]
    restart = steps["Static restart of c"]
    # The static restart keeps the group epoch and gives the new process the same partitions.
    assert restart["group_epoch"] == scale_out["group_epoch"]
    before = {m["instance_id"]: m["assigned"] for m in scale_out["members"] if m["instance_id"]}
    after = {m["instance_id"]: m["assigned"] for m in restart["members"] if m["instance_id"]}
    assert before == after == {"worker-c": ["orders-2"]}
    crash = steps["b crashes"]
    assert any(e["kind"] == "fenced" and e["member"] == "b" for e in crash["events"])
    owned = [p for m in crash["members"] for p in m["assigned"]]
    assert sorted(owned) == sorted(f"orders-{i}" for i in range(6))
    grown = steps["The topic grows to 12 partitions"]
    assert sorted(len(m["assigned"]) for m in grown["members"]) == [4, 4, 4]


def test_heartbeat_bench_prints_figures() -> None:
    result = run("bench", "heartbeat", "--members", "200", "--json")
    assert result["members"] == 200
    assert result["us_per_heartbeat_delta"] > 0 and result["heartbeats_per_second_one_core"] > 0


def test_demo_loses_nothing() -> None:
    """The main job, short: real coordinator and consumer processes; scale out, in, roll, kill -9."""
    result = run("demo", "--consumers", "--duration", "24", "--rate", "1000", "--json")
    assert result["lost"] == 0 and result["produced"] == result["in_log"] > 0
    assert result["unique_processed"] == result["produced"]
    assert [e["event"].split(":")[0] for e in result["events"]] == [
        "scale out", "scale in", "roll the static member", "kill -9 a member"]
    roll = result["events"][2]
    assert roll["group_epoch_after"] == roll["group_epoch_before"], "a static roll must not bump the epoch"


def test_rebalance_bench_grow_runs_real_processes() -> None:
    result = run("bench", "rebalance", "--scenario", "grow", "--added", "90", "--json")
    grow = result["grow"]
    assert grow["partitions_added"] == 90 and 0 < grow["seconds_to_stable"] < 60
