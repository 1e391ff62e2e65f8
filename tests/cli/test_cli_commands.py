"""The `regroup` commands of this stage, run as real processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.messages import LEAVE_EPOCH, StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import start_server
from tests.coordinator.test_server import M, settle


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
    assert before == after == {"worker-c": ["orders:2"]}
    crash = steps["b crashes"]
    assert any(e["kind"] == "fenced" and e["member"] == "b" for e in crash["events"])
    owned = [p for m in crash["members"] for p in m["assigned"]]
    assert sorted(owned) == sorted(f"orders:{i}" for i in range(6))
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


# ----------------------------------------------------------------------------------- streams groups
def text(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "regroup.cli", *args], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def test_groups_describe_and_list_show_a_streams_group(tmp_path: Path) -> None:
    """`groups describe` (text and --json) and `groups list` against a real coordinator with a streams
    group of two processes: actives on one, a standby and warm-ups restoring on the other, then a
    warm-up caught up and moving; a streams group that cannot run; a consumer group beside them."""
    s = start_server(tmp_path / "data", "--log", "static:orders=4", "--standby-replicas", "1",
                     "--acceptable-recovery-lag", "100")
    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            a = _streams_join(c, "counts", "a", "P1", COUNT)
            b = _streams_join(c, "counts", "b", "P2", COUNT)
            assert a.assignment is not None and a.assignment.active == ALL_TASKS
            assert b.assignment is not None and b.assignment.warmup and not b.assignment.active
            warming = sorted(map(str, b.assignment.warmup))
            committed = {Shard("orders", p): 1000 for p in range(4)}
            ack = c.commit_offsets(OffsetCommitRequest("counts", "a", a.member_epoch, committed))
            assert ack.ok, ack.message
            _report(c, "counts", "a", a.member_epoch, 1000)
            _report(c, "counts", "b", b.member_epoch, 200)  # every copy of P2 is 800 behind
            broken = _streams_join(c, "broken", "x", "P9", Topology.of({"join": ["clicks"]}))
            assert not broken.status.ready
            plain = M("plain", "m1")
            plain.join(c)
            settle(c, [plain])

            doc = run("groups", "describe", "counts", "--json", "--coordinator", s.address)
            assert (doc["group"], doc["kind"], doc["ready"], doc["not_ready_reasons"]) == \
                ("counts", "streams", True, [])
            assert doc["topology"] == {"count": ["orders"]} and doc["epoch"] == doc["target_epoch"] == 2
            by_id = {m["member_id"]: m for m in doc["members"]}
            assert by_id["a"]["assigned"] == {"active": [f"count_{p}" for p in range(4)], "standby": [],
                                              "warmup": []}
            assert by_id["a"]["lags"] == {f"count_{p}": 0 for p in range(4)}
            assert by_id["b"]["process_id"] == "P2" and by_id["b"]["assigned"]["warmup"] == warming
            assert by_id["b"]["lags"] == {f"count_{p}": 800 for p in range(4)}
            assert by_id["b"]["warmups"] == [
                {"task": t, "lag": 800, "acceptable_lag": 100, "caught_up": False} for t in warming]
            out = text("groups", "describe", "counts", "--coordinator", s.address)
            assert "counts  streams group  state stable  group epoch 2  target epoch 2" in out
            assert "ready: the topology runs" in out and "topology: count <- orders" in out
            assert "count[0,1,2,3]" in out  # a's actives, grouped by subtopology
            for t in warming:  # each warm-up copy: its role, its lag and how far from caught up
                assert re.search(rf"P2 .*{t} .*warm-up .*800 .*restoring: 800 behind, caught up at <= 100",
                                 out), out

            # P2's copies catch up: the epoch moves, the targets change, b awaits its new actives.
            _report(c, "counts", "b", b.member_epoch, 950)
            doc = run("groups", "describe", "counts", "--json", "--coordinator", s.address)
            by_id = {m["member_id"]: m for m in doc["members"]}
            assert doc["epoch"] == 3 and by_id["b"]["target"]["active"] == warming
            assert by_id["a"]["target"] != by_id["a"]["assigned"]
            out = text("groups", "describe", "counts", "--coordinator", s.address)
            for t in warming:
                assert re.search(rf"P2 .*{t} .*warm-up, awaiting active .*50", out), out
            moving = "[" + ",".join(t.split("_")[1] for t in warming) + "]"
            # a's target column: what it hands over it keeps as a standby.
            assert re.search(rf"\ba .*P1 .*standby count{re.escape(moving)}", out), out

            out = text("groups", "describe", "broken", "--coordinator", s.address)
            assert "state not ready" in out and "not ready" in out and "clicks" in out
            doc = run("groups", "describe", "broken", "--json", "--coordinator", s.address)
            assert not doc["ready"] and any("clicks" in r for r in doc["not_ready_reasons"])

            listing = run("groups", "list", "--json", "--coordinator", s.address)
            assert listing["groups"] == [
                {"group": "broken", "kind": "streams", "state": "not ready", "members": 1},
                {"group": "counts", "kind": "streams", "state": "reconciling", "members": 2},
                {"group": "plain", "kind": "consumer", "state": "stable", "members": 1}]
            out = text("groups", "list", "--coordinator", s.address)
            assert re.search(r"counts .*streams .*reconciling .*2", out), out
            assert re.search(r"plain .*consumer .*stable .*1", out), out
    finally:
        assert s.terminate() == 0, s.log()


COUNT = Topology.of({"count": ["orders"]})
ALL_TASKS = frozenset(TaskId("count", p) for p in range(4))


def _streams_join(c: CoordinatorClient, group: str, member: str, process: str,
                  topology: Topology) -> StreamsHeartbeatResponse:
    r = c.streams_heartbeat(StreamsHeartbeatRequest(group, member, 0, process_id=process,
                                                    rebalance_timeout_ms=30_000, topology=topology))
    assert r.error is ErrorCode.NONE, r.message
    return r


def _report(c: CoordinatorClient, group: str, member: str, epoch: int, reached: int) -> None:
    """A heartbeat reporting every task copy of the member's process at ``reached`` on orders."""
    offsets = {t: {Shard("orders", t.partition): reached} for t in ALL_TASKS}
    r = c.streams_heartbeat(StreamsHeartbeatRequest(group, member, epoch, task_offsets=offsets))
    assert r.error is ErrorCode.NONE, r.message


def test_groups_describe_shows_key_range_tasks(tmp_path: Path) -> None:
    """A streams group whose subtopology cuts each partition into 2 key ranges: the topology says so,
    tasks are spelled partition.RofK, and a range task's lag is measured on its range's commit."""
    s = start_server(tmp_path / "data", "--log", "static:orders=1")
    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            hot = Topology.of({"count": ["orders"]}, parallelism={"count": 2})
            a = _streams_join(c, "hot", "a", "P1", hot)
            ranged = [TaskId("count", 0, r, 2) for r in range(2)]
            assert a.assignment is not None and a.assignment.active == frozenset(ranged)
            ack = c.commit_offsets(OffsetCommitRequest("hot", "a", a.member_epoch,
                                                       {t.shard("orders"): 100 for t in ranged}))
            assert ack.ok, ack.message
            r = c.streams_heartbeat(StreamsHeartbeatRequest(
                "hot", "a", a.member_epoch, task_offsets={t: {t.shard("orders"): 60} for t in ranged}))
            assert r.error is ErrorCode.NONE, r.message

            doc = run("groups", "describe", "hot", "--json", "--coordinator", s.address)
            assert doc["topology"] == {"count": ["orders"]} and doc["parallelism"] == {"count": 2}
            (member,) = doc["members"]
            assert member["assigned"]["active"] == ["count_0.0of2", "count_0.1of2"]
            assert member["lags"] == {"count_0.0of2": 40, "count_0.1of2": 40}
            out = text("groups", "describe", "hot", "--coordinator", s.address)
            assert "topology: count <- orders (2 key ranges per partition)" in out, out
            assert "count[0.0of2,0.1of2]" in out, out
            assert re.search(r"P1 .*count_0\.1of2 .*active .*40", out), out
    finally:
        assert s.terminate() == 0, s.log()


def test_offsets_of_a_streams_group_cut_into_key_ranges(tmp_path: Path) -> None:
    """`offsets reset` and `offsets delete` on a streams group that cuts ``orders`` into 2 key ranges:
    a whole partition stands for both ranges, and one range is named as ``0.1of2`` (a task's
    spelling) or ``0[00000000,80000000)`` (how a key range is printed)."""
    s = start_server(tmp_path / "data", "--log", "static:orders=1")
    ranged = [TaskId("count", 0, r, 2).shard("orders") for r in range(2)]

    def committed() -> dict[Shard, int]:
        got = c.fetch_offsets(OffsetFetchRequest("hot", "", -1, None))
        assert got.error is ErrorCode.NONE, got.message
        return {sh: o.offset for sh, o in got.offsets.items()}

    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            hot = Topology.of({"count": ["orders"]}, parallelism={"count": 2})
            a = _streams_join(c, "hot", "a", "P1", hot)
            assert c.commit_offsets(OffsetCommitRequest("hot", "a", a.member_epoch,
                                                        dict.fromkeys(ranged, 100))).ok
            left = c.streams_heartbeat(StreamsHeartbeatRequest("hot", "a", LEAVE_EPOCH))
            assert left.error is ErrorCode.NONE, left.message
            at = ("--coordinator", s.address)
            text("offsets", "reset", "hot", "--to", "orders:0=5", *at)
            assert committed() == dict.fromkeys(ranged, 5)
            text("offsets", "reset", "hot", "--to", "orders:0.1of2=7", *at)
            assert committed() == {ranged[0]: 5, ranged[1]: 7}
            text("offsets", "delete", "hot", "--partition", "orders:0[00000000,80000000)", *at)
            assert committed() == {ranged[1]: 7}
            text("offsets", "delete", "hot", "--partition", "orders:0", *at)
            assert committed() == {}
            bad = subprocess.run([sys.executable, "-m", "regroup.cli", "offsets", "delete", "hot",
                                  "--partition", "orders:0.2of2", *at], capture_output=True, text=True,
                                 timeout=120)
            said = " ".join(bad.stderr.replace("│", " ").split())  # rich wraps it in a box
            assert bad.returncode != 0 and "key range 2 of 2 needs 0 <= R < K" in said, bad.stderr
    finally:
        assert s.terminate() == 0, s.log()
