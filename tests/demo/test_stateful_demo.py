"""The stateful demo (the default `regroup demo`): its pure computations (without Spark), the CLI's
choice of demo, and one short run for real (slow)."""

from __future__ import annotations

import array
import json
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from regroup.demo.report import ReportData, copy_segments, write_report
from regroup.demo.stateful_demo.analysis import (
    LogRecords,
    OutputFile,
    analyse,
    batch_job,
    check_outputs,
    compare,
    read_outputs,
    starts_during,
    tiling,
    typical_wait,
    unavailability,
    window_of,
)
from regroup.demo.stateful_demo.live import event_rows, extra_tables, summary_rows
from regroup.demo.stateful_demo.processes import BatchOut, Member, TimedWorkload
from regroup.demo.stateful_demo.scenario import DemoConfig, Event
from regroup.demo.stateful_member import key_file
from regroup.protocol.streams.assignment import MemberTasks
from tests.demo.real_run import run_for_real


def out(partition: int, start: int, end: int, member: str = "m1",
        rows: tuple[tuple[int, str, int, int], ...] = ()) -> OutputFile:
    return OutputFile(f"s_{partition}:events/{partition}@{start}-{end}", partition, start, end, member, rows)


# --------------------------------------------------------------------------- the output check
def test_tiling_finds_the_chain_and_prefers_longer_batches() -> None:
    fs = [out(0, 0, 10), out(0, 10, 20), out(0, 10, 15), out(0, 15, 20), out(0, 20, 20)]
    assert [(f.start, f.end) for f in tiling(fs, 20) or []] == [(0, 10), (10, 20)]
    assert tiling([out(0, 0, 10), out(0, 12, 20)], 20) is None  # a gap
    assert tiling([], 0) == []


def test_check_outputs_counts_orphans_of_the_killed_member_only_as_explained() -> None:
    # m2 was killed after writing 10..18 uncommitted; m3 ran 10..25 again with other boundaries.
    fs = [out(0, 0, 10, "m2", ((0, "c1", 5, 50),)), out(0, 10, 18, "m2", ((0, "c1", 9, 90),)),
          out(0, 10, 25, "m3", ((0, "c1", 12, 120), (10, "c2", 3, 30))),
          out(1, 0, 5, "m1", ((0, "c3", 5, 5),))]
    check = check_outputs(fs, {0: 25, 1: 5}, killed={"m2"})
    assert (check.processed, check.lost, check.duplicates, check.tiled) == (30, 0, 8, True)
    assert [(o.key, o.member, o.records, o.explained) for o in check.orphans] == [
        ("s_0:events/0@10-18", "m2", 8, True)]
    assert check.final == {(0, 0, "c1"): [12, 120], (0, 10, "c2"): [3, 30], (1, 0, "c3"): [5, 5]}
    # The same batches without a kill -9 to explain them: the orphan is not explained.
    assert not check_outputs(fs, {0: 25, 1: 5}, killed=set()).orphans[0].explained


def test_check_outputs_counts_what_no_batch_covers_as_lost() -> None:
    check = check_outputs([out(0, 0, 10), out(0, 14, 20)], {0: 20, 1: 3}, killed=())
    assert (check.processed, check.lost, check.tiled) == (16, 4 + 3, False)
    assert check.untiled_tasks == ("s_0", "s_1")


def test_batch_job_windows_records_by_produce_time_and_compare_names_the_differences() -> None:
    records = LogRecords(
        customers={0: ["c1", "c1", "c2"], 1: ["c3"]},
        amounts={0: array.array("q", [1, 2, 3]), 1: array.array("q", [4])},
        times_ms={0: array.array("q", [1_000, 9_999, 10_000]), 1: array.array("q", [25_500])})
    assert window_of(9_999) == 0 and window_of(10_000) == 10
    expected = batch_job(records)
    assert expected == {(0, 0, "c1"): [2, 3], (0, 10, "c2"): [1, 3], (1, 20, "c3"): [1, 4]}
    assert compare(dict(expected), expected) == []
    got = {**expected, (0, 0, "c1"): [1, 1]}
    del got[(1, 20, "c3")]
    assert compare(got, expected) == ["s_0 window 0 c1: output [1, 1], batch job [2, 3]",
                                      "s_1 window 20 c3: output None, batch job [1, 4]"]


def test_read_outputs_reads_what_the_sink_writes(tmp_path: Path) -> None:
    key = "s_3:events/3@120-180"
    assert key_file(key) == "s_3~events~3@120-180.json"
    d = tmp_path / "output" / "s_3"
    d.mkdir(parents=True)
    (d / key_file(key)).write_text(json.dumps({"key": key, "task": "s_3", "member": "m2", "start": {"3": 120},
                                               "end": {"3": 180}, "rows": [[1700000000, "c0001", 2, 7]]}))
    assert read_outputs(tmp_path) == [OutputFile(key, 3, 120, 180, "m2", ((1700000000, "c0001", 2, 7),))]


# --------------------------------------------------------------------------- unavailability
def b(t: float, start: int, end: int, task: str = "s_0") -> BatchOut:
    return BatchOut(t, task, f"{task}:events/0@{start}-{end}", 0, start, end, 1)


def test_unavailability_counts_only_time_with_a_record_waiting() -> None:
    produced = [i * 100 for i in range(100)]  # record i produced at 0.1 * i s
    outputs = [b(1.0, 0, 9), b(2.0, 9, 19), b(12.0, 19, 30), b(13.0, 30, 40)]
    # 2.0 -> 12.0 with record 19 (produced at 1.9 s) waiting all along: 10 s.
    assert unavailability(outputs, produced, 5.0, 6.0) == 10.0
    # A task idle until its next record arrived is not unavailable before that record.
    late = [b(1.0, 0, 9), b(12.0, 90, 95)]  # record 90 produced at 9.0 s
    assert unavailability(late, produced, 5.0, 6.0) == 3.0
    # No output since 2.0 although record 19 waits: open until the window's end.
    assert unavailability(outputs[:2], produced, 5.0, 8.0) == 6.0
    assert unavailability(outputs, produced, 5.0, 5.0) == 0.0
    assert typical_wait(outputs, produced) == 1.0  # the median of 1, 10, 1


def test_starts_during_diffs_each_members_counter_and_adds_its_incarnations() -> None:
    def member(name: str, history: list[tuple[float, dict[str, int]]]) -> Member:
        m = Member(name, 1, None, types.SimpleNamespace(pid=1, returncode=None),  # type: ignore[arg-type]
                   Path("p"), Path("g"), Path("l"))
        m.history = [(t, {}, s) for t, s in history]
        return m

    old = member("m1", [(1.0, {"fresh active": 2})])
    new = member("m1", [(11.0, {"resumed active": 2}), (12.0, {"resumed active": 2, "copied standby": 1})])
    other = member("m2", [(1.0, {"fresh active": 1}), (30.0, {"fresh active": 1, "promoted active": 1})])
    assert starts_during([old, new, other], 10.0, 20.0) == {"m1": {"copied standby": 1, "resumed active": 2}}


def test_member_reads_its_progress_lines(tmp_path: Path) -> None:
    progress = tmp_path / "m1.jsonl"
    lines = [{"t": 1.0, "kind": "ready"}, {"t": 2.0, "kind": "joined", "process_id": "p1", "member_id": "x"},
             {"t": 3.0, "kind": "tasks", "tasks": {"s_0": "active", "s_1": "standby"},
              "starts": {"fresh active": 1, "fresh standby": 1}},
             {"t": 4.0, "kind": "batch", "task": "s_0", "key": "s_0:events/0@0-10", "batch": 0, "epoch": 3,
              "start": {"0": 0}, "end": {"0": 10}, "rows": 4}]
    progress.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"t": 5.0, "kind": "ba')  # torn tail
    m = Member("m1", 1, "static-1", types.SimpleNamespace(poll=lambda: None, pid=1),  # type: ignore[arg-type]
               progress, tmp_path / "gate", tmp_path / "log", state="joining", released_at=1.5)
    m.poll()
    assert (m.ready_at, m.process_id, m.state) == (1.0, "p1", "running")
    assert m.roles("active") == {"s_0"} and m.roles("standby") == {"s_1"}
    assert m.batches == [BatchOut(4.0, "s_0", "s_0:events/0@0-10", 0, 0, 10, 4)]
    assert m.starts_at(2.5) == {} and m.starts_at(3.5) == {"fresh active": 1, "fresh standby": 1}


def test_timed_workload_timestamps_never_go_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from regroup.log import open_log

    spec = str(tmp_path / "log")
    log = open_log(spec)
    log.create_topic("events", 2)
    w = TimedWorkload(spec, "events", 2, rate=10)
    clock = iter([100.0] * 10 + [99.0] * 10)  # the wall clock steps back
    monkeypatch.setattr("regroup.demo.common.time.time", lambda: next(clock))
    w._produce_tick(log, 10)
    w._produce_tick(log, 10)
    times = [r.timestamp_ms for p in (0, 1) for r in log.read("events", p, 0, 100)]
    assert min(times) == 100_000 and len(times) == 20  # none went back to 99 s
    log.close()


# --------------------------------------------------------------------------- the group, settled
def _desc(members: list[tuple[str, MemberTasks, MemberTasks]], state: Any = None,
          lags: Mapping[str, Mapping[Any, int]] | None = None) -> Any:
    from regroup.protocol.records import MemberStatus
    from regroup.protocol.streams.describe import StreamsGroupDescription, StreamsMemberDescription
    from regroup.protocol.streams.messages import GroupStatus
    from regroup.protocol.streams.state import StreamsGroupState

    return StreamsGroupDescription(
        "g", state or StreamsGroupState.STABLE, GroupStatus(), 5, 5, None,
        tuple(StreamsMemberDescription(f"id-{pid}", None, pid, 5, 4, MemberStatus.STABLE, assigned,
                                       MemberTasks(), target, dict((lags or {}).get(pid, {})), ())
              for pid, assigned, target in members))


def _running(name: str, tasks: dict[str, str], warnings: Sequence[str] = ()) -> Member:
    m = Member(name, 1, None, types.SimpleNamespace(pid=1, poll=lambda: None),  # type: ignore[arg-type]
               Path("p"), Path("g"), Path("l"), state="running", released_at=1.0, process_id=f"p-{name}")
    m.tasks, m.warnings = tasks, [(2.0, w) for w in warnings]
    return m


def test_settled_waits_for_warm_ups_but_not_for_copies_a_member_dropped() -> None:
    from regroup.demo.stateful_demo.watch import GroupWatch
    from regroup.protocol.streams.topology import TaskId

    def tasks(active: Sequence[int] = (), standby: Sequence[int] = (),
              warmup: Sequence[int] = ()) -> MemberTasks:
        def ids(ps: Sequence[int]) -> frozenset[TaskId]:
            return frozenset(TaskId("s", p) for p in ps)
        return MemberTasks(ids(active), ids(standby), ids(warmup))

    b_warming = tasks(active=[1], standby=[0], warmup=[2])
    watch = GroupWatch("events", 3, standby_replicas=1, acceptable_recovery_lag=500)
    m1 = _running("m1", {"s_0": "active", "s_1": "standby"})
    m2 = _running("m2", {"s_1": "active", "s_0": "standby", "s_2": "warm-up"})
    watch.description = _desc([("p-m1", tasks(active=[0, 2], standby=[1]), tasks(active=[0], standby=[1])),
                               ("p-m2", b_warming, b_warming)])
    m1.tasks["s_2"] = "active"
    assert not watch.settled([m1, m2])  # a warm-up under way (and s_2 has no standby)
    # The warm-up's query failed: the member dropped it, the coordinator still waits for it.
    m2 = _running("m2", {"s_1": "active", "s_0": "standby"},
                  ["task s_2: the warm-up query failed (Python worker failed to connect back."])
    assert m2.dropped_copies() == {"s_2"}
    watch.description = _desc([("p-m1", tasks(active=[0, 2], standby=[1]), tasks(active=[0, 2], standby=[1])),
                               ("p-m2", tasks(active=[1], standby=[0, 2], warmup=[2]),
                                tasks(active=[1], standby=[0, 2], warmup=[2]))])
    assert watch.settled([m1, m2])
    assert watch.copies_not_running([m1, m2]) == {"m2": {"s_2"}}
    m1.tasks.pop("s_2")  # a member not running an active it was assigned: not settled
    assert not watch.settled([m1, m2])


def test_events_start_once_every_standby_is_caught_up() -> None:
    """A move waiting for a standby to catch up is invisible in a settled group: the next event
    must not start (and count that move as its own) until every standby reports caught up."""
    from regroup.demo.stateful_demo.watch import GroupWatch
    from regroup.protocol.streams.topology import TaskId

    s0, s1 = TaskId("s", 0), TaskId("s", 1)
    a, b = MemberTasks(frozenset({s0}), frozenset({s1})), MemberTasks(frozenset({s1}), frozenset({s0}))
    watch = GroupWatch("events", 2, standby_replicas=1, acceptable_recovery_lag=500)
    assert not watch.standbys_caught_up()  # nothing described yet
    watch.description = _desc([("p-a", a, a), ("p-b", b, b)], lags={"p-a": {s0: 0, s1: 501}, "p-b": {s1: 0}})
    assert not watch.standbys_caught_up()  # p-a's standby of s_1 is behind; p-b's of s_0 unreported
    watch.description = _desc([("p-a", a, a), ("p-b", b, b)], lags={"p-a": {s1: 500}, "p-b": {s0: 3}})
    assert watch.standbys_caught_up()


# --------------------------------------------------------------------------- the typed result
def _fake_member(name: str, batches: list[BatchOut], history: list[tuple[float, dict[str, int]]],
                 instance: str | None = None, state: str = "stopped", returncode: int | None = 0) -> Member:
    m = Member(name, 1, instance, types.SimpleNamespace(pid=100, returncode=returncode),  # type: ignore[arg-type]
               Path("p"), Path("g"), Path("l"), state=state, released_at=0.5)
    m.batches = batches
    m.history = [(t, {}, s) for t, s in history]
    m.starts = history[-1][1] if history else {}
    return m


def _analysed() -> Any:
    """Two tasks of 20 records (one every 0.5 s), then a kill -9 of m2 at 10 s: its task s_1 moves to
    m1, which runs 10..14 again (m2 had written it, never committed)."""
    times = array.array("q", [i * 500 for i in range(20)])
    amounts = {0: array.array("q", [1] * 20), 1: array.array("q", [2] * 20)}
    records = LogRecords({0: ["c1"] * 20, 1: ["c2"] * 20}, amounts, {0: times, 1: times})
    files = [out(0, 0, 10, "m1", ((0, "c1", 10, 10),)), out(0, 10, 20, "m1", ((0, "c1", 20, 20),)),
             out(1, 0, 10, "m2", ((0, "c2", 10, 20),)), out(1, 10, 14, "m2", ((0, "c2", 14, 28),)),
             out(1, 10, 20, "m1", ((0, "c2", 20, 40),))]
    m1 = _fake_member("m1", [b(5.5, 0, 10), b(10.5, 10, 20), BatchOut(16.0, "s_1", "k", 0, 10, 20, 1)],
                      [(0.6, {"fresh active": 1}), (15.0, {"fresh active": 1, "promoted active": 1})],
                      instance="static-1")
    m2 = _fake_member("m2", [BatchOut(5.5, "s_1", "k", 0, 0, 10, 1), BatchOut(7.5, "s_1", "k", 0, 10, 14, 1)],
                      [(0.6, {"fresh active": 1})], state="killed", returncode=-9)
    kill = Event("kill-9", "m2", 10.0, 5, {0: "m1", 1: "m2"}, settled_at=15.0, resumed_at=16.0,
                 epoch_after=7, actives_after={0: "m1", 1: "m1"})
    return analyse(cfg=DemoConfig(2, 2, 4, 30.0), produced=40, records=records, members=[m1, m2],
                   events=[kill], t0=0.0, end=20.0, files=files, drained=True, log_spec="/tmp/log",
                   topic="events", data_dir="/tmp/d")


def test_analyse_checks_the_output_and_measures_the_event() -> None:
    r = _analysed()
    assert (r.produced, r.in_log, r.processed, r.lost, r.duplicates) == (40, 40, 40, 0, 4)
    assert r.output_matches_batch_job and r.tiled and r.orphans_explained
    assert [(o.task, o.member, o.records) for o in r.orphan_batches] == [("s_1", "m2", 4)]
    kill, = r.events
    assert kill.actives_moved == {"s_1": "m2 → m1"} and kill.touched_tasks == ("s_1",)
    assert kill.starts == {"m1": {"promoted active": 1}} and kill.duplicates == 4
    # s_1: last output 7.5 s (record 14, produced at 7.0 s, waiting), next at 16.0: 8.5 s.
    assert kill.unavailable_s == {"s_0": 5.0, "s_1": 8.5}
    assert (kill.max_unavailable_touched_s, kill.max_unavailable_other_s) == (8.5, 5.0)
    assert r.members["m2"].processes[0].end == "killed" and r.members["m1"].starts == {
        "fresh active": 1, "promoted active": 1}


def test_the_json_object_keeps_its_keys_and_is_plain_json() -> None:
    out_ = _analysed().to_json()
    assert list(out_) == [
        "demo", "produced", "in_log", "processed", "lost", "duplicates", "output_matches_batch_job",
        "output_keys", "mismatched_keys", "mismatches", "tiled", "untiled_tasks", "orphan_batches",
        "orphans_explained", "drained", "static_roll_nothing_moved", "pipeline_warnings", "events", "tasks",
        "members", "config", "data_dir", "timings_s", "wall_time_s", "report"]
    assert out_["demo"] == "stateful"
    assert list(out_["events"][0]) == [
        "event", "label", "member", "at_s", "settled_after_s", "resumed_after_s", "group_epoch_before",
        "group_epoch_after", "actives_moved", "touched_tasks", "starts", "unavailable_s",
        "max_unavailable_touched_s", "max_unavailable_other_s", "duplicates", "note"]
    assert out_["orphan_batches"][0]["records"] == 4
    assert json.loads(json.dumps(out_)) == out_


def test_result_rows_read_the_typed_result() -> None:
    r = _analysed()
    rows = dict(summary_rows(r))
    assert rows["lost"] == "0"
    assert rows["output = batch job over every record"].startswith("yes")
    assert rows["duplicates"] == ("4 records; 1 batches off the chain (all from the member killed with "
                                  "kill -9)")
    row = event_rows(r)[0]
    assert row[:7] == ["10.0", "kill -9", "m2", "5.0 s / 6.0 s", "5 → 7", "s_1: m2 → m1", "8.5 / 5.0"]
    (_, header, rows), (_, _, starts) = extra_tables(r)
    assert header == ["unavailability (s)", "s_0", "s_1"]
    # s_1 waited 2.0 s and 8.5 s between outputs: the median is 5.25.
    assert rows == [["kill -9", "5.0", "8.5*"], ["typical wait", "5.0", "5.2"]]
    assert starts == [["kill -9", "m1", "1 promoted active"]]


# --------------------------------------------------------------------------- report
def test_copy_segments_follow_each_members_copy() -> None:
    samples = [(0.0, {0: (("m2", "standby"),)}), (1.0, {0: (("m2", "standby"), ("m3", "warm-up"))}),
               (2.0, {0: (("m3", "standby"),)}), (3.0, {})]
    assert copy_segments(samples, 0, "standby") == [(0.0, 2.0, "m2"), (2.0, 3.0, "m3")]
    assert copy_segments(samples, 0, "warm-up") == [(1.0, 2.0, "m3")]


def test_write_report_with_roles(tmp_path: Path) -> None:
    data = ReportData(
        title="t", t0=0.0, partitions=2,
        ownership=[(0.0, {0: "m1", 1: "m2"}, frozenset()), (2.0, {0: "m1", 1: "m1"}, frozenset())],
        copies=[(0.0, {0: (("m2", "standby"),), 1: (("m1", "warm-up"),)}), (2.0, {})], row_label="task",
        batches={"m1": [(1.0, 100)]}, events=[(1.5, "kill -9")], summary=[("lost", "0")],
        event_header=["event"], event_rows=[["kill -9"]], tables=[("per task", ["task"], [["s_<0>"]])])
    paths = write_report(tmp_path / "r", data)
    assert Path(paths["png"]).read_bytes().startswith(b"\x89PNG")
    text = Path(paths["html"]).read_text()
    assert "<h3>per task</h3>" in text and "s_&lt;0&gt;" in text


# --------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize(("flags", "chosen"), [([], "stateful"), (["--stateless"], "stateless"),
                                               (["--consumers"], "consumers")])
def test_the_demo_command_runs_the_stateful_demo_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch, flags: list[str], chosen: str) -> None:
    from regroup import cli

    called: dict[str, tuple[Any, ...]] = {}

    def fake(name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
            called[name] = args
            return {"lost": 0}
        return run

    monkeypatch.setattr("regroup.demo.stateful_demo.run_stateful_demo", fake("stateful"))
    monkeypatch.setattr("regroup.demo.spark_demo.run_spark_demo", fake("stateless"))
    monkeypatch.setattr("regroup.demo.consumer_demo.run_consumer_demo", fake("consumers"))
    result = CliRunner().invoke(cli.app, ["demo", *flags])
    assert result.exit_code == 0, result.output
    assert list(called) == [chosen]
    members, partitions, rate, duration = called[chosen][:4]
    assert (members, partitions, rate, duration) == ((3, 6, 300, 90.0) if chosen == "stateful"
                                                     else (3, 12, 2_000, 120.0))


def test_the_demo_command_fails_when_the_output_differs_from_the_batch_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from regroup import cli

    monkeypatch.setattr("regroup.demo.stateful_demo.run_stateful_demo",
                        lambda *a, **k: {"lost": 0, "output_matches_batch_job": False})
    assert CliRunner().invoke(cli.app, ["demo"]).exit_code == 1
    assert CliRunner().invoke(cli.app, ["demo", "--stateless", "--consumers"]).exit_code != 0


# --------------------------------------------------------------------------- the demo, for real
@pytest.mark.slow
@pytest.mark.xdist_group("spark")  # with the other Spark tests, one at a time: 2 cores
def test_stateful_demo_short_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two members and three tasks (a spare joins, one leaves, the static one rolls, one is killed)."""
    from regroup.demo.stateful_demo import run_demo

    result, _ = run_for_real(run_demo, tmp_path, capsys, members=2, partitions=3, rate=200, duration=30.0)
    assert result.lost == 0 and result.processed == result.produced == result.in_log
    assert result.output_matches_batch_job and result.tiled, result.mismatches
    assert result.orphans_explained, result.orphan_batches  # duplicates: only the kill -9's
    scale_out, scale_in, roll, kill = result.events
    # Scale out: tasks reached the new member through warm-ups, promoted once caught up.
    assert scale_out.starts[scale_out.member].get("promoted active", 0) >= 1, scale_out.starts
    assert scale_out.starts[scale_out.member].get("copied warm-up", 0) >= 1, scale_out.starts
    # Scale in: the leaver's tasks went to the members holding their standbys.
    assert sum(s.get("promoted active", 0) for s in scale_in.starts.values()) >= 1, scale_in.starts
    # The static roll resumed its checkpoints in place: nothing moved.
    assert result.static_roll_nothing_moved and roll.actives_moved == {}
    assert roll.starts[roll.member].get("resumed active", 0) >= 1, roll.starts
    # kill -9: after the session timeout the standbys were promoted.
    assert kill.actives_moved and sum(s.get("promoted active", 0) for s in kill.starts.values()) >= 1
    assert all(set(e.unavailable_s) == {f"s_{p}" for p in range(3)} for e in result.events)
    assert all(e.settled_after_s is not None and e.resumed_after_s is not None for e in result.events)
