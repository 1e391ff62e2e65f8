"""What the two PySpark demos share (`regroup.demo.spark_common`), without Spark: the member processes'
progress and lifecycle, the member side's progress file and gate, a run's data directory."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest

from regroup.demo.common import TOPIC, read_new_lines
from regroup.demo.spark_common.member import Progress, member_parser, wait_at_gate, write_atomic
from regroup.demo.spark_common.processes import MemberProcess
from regroup.demo.spark_common.result import ProcessStats, json_object, released_by_name
from regroup.demo.spark_common.run import cleanup, fresh_run
from regroup.demo.spark_demo.processes import Proc
from regroup.demo.stateful_demo.processes import Member


def test_read_new_lines_leaves_a_torn_tail_for_the_next_look(tmp_path: Path) -> None:
    f = tmp_path / "progress.jsonl"
    assert read_new_lines(f, 0) == ([], 0)  # not created yet
    f.write_bytes(b"one\ntwo\nthr")
    lines, pos = read_new_lines(f, 0)
    assert (lines, pos) == ([b"one", b"two"], 8)
    with open(f, "ab") as out:
        out.write(b"ee\n")
    assert read_new_lines(f, pos) == ([b"three"], 14)


def _member(cls: type[MemberProcess], progress: Path, exited: bool = False) -> MemberProcess:
    popen = types.SimpleNamespace(poll=lambda: 0 if exited else None, pid=1, returncode=0 if exited else None)
    return cls("m1", 1, None, popen, progress, progress.with_name("gate"), progress.with_name("log"),  # type: ignore[arg-type]
               state="joining", released_at=1.0)


@pytest.mark.parametrize(("cls", "line"), [(Proc, "query-failed"), (Member, "failed")])
def test_each_demos_member_fails_on_its_own_failure_line(tmp_path: Path, cls: type[MemberProcess],
                                                         line: str) -> None:
    progress = tmp_path / "m1.jsonl"
    progress.write_text(json.dumps({"t": 1.0, "kind": "ready"}) + "\n"
                        + json.dumps({"t": 2.0, "kind": line, "error": "boom"}) + "\n"
                        + json.dumps({"t": 3.0, "kind": "stopped"}) + "\n")
    m = _member(cls, progress)
    m.poll()
    assert (m.ready_at, m.state, m.error, m.ended_at) == (1.0, "failed", "boom", None)
    other = "failed" if line == "query-failed" else "query-failed"
    progress.write_text(json.dumps({"t": 2.0, "kind": other, "error": "boom"}) + "\n")
    m = _member(cls, progress)
    m.poll()
    assert m.state == "joining"  # the other demo's line means nothing here


def test_an_exit_the_demo_did_not_ask_for_is_a_failure(tmp_path: Path) -> None:
    m = _member(Proc, tmp_path / "none.jsonl", exited=True)
    m.poll()
    assert m.state == "failed" and m.ended_at is not None
    asked = _member(Proc, tmp_path / "none.jsonl", exited=True)
    asked.state = "stopping"
    asked.poll()
    assert asked.state == "stopped"
    assert ProcessStats.of(asked) == ProcessStats(1, "stopped", 0)


def test_released_by_name_groups_a_static_members_restarts(tmp_path: Path) -> None:
    first, second, spare = (_member(Proc, tmp_path / "p") for _ in range(3))
    second.incarnation = 2
    spare.name, spare.released_at = "m2", None  # never let into the group
    assert released_by_name([first, spare, second]) == {"m1": [first, second]}


def test_the_member_side_says_starting_then_ready_and_waits_at_its_gate(tmp_path: Path) -> None:
    p = member_parser("a member")
    p.add_argument("state", type=Path)
    args = p.parse_args(["m1", "host:1", "log", str(tmp_path / "out"), "st", "--instance", "static-1"])
    assert (args.topic, args.state, args.warm_up, args.wait_for) == (TOPIC, Path("st"), False, None)
    progress = Progress.start(args)
    gate = tmp_path / "gate"
    assert not wait_at_gate(progress, gate, lambda: True)  # told to stop before the gate opened
    gate.touch()
    assert wait_at_gate(progress, gate, lambda: False)
    lines = [json.loads(x) for x in (tmp_path / "out" / "progress" / "m1.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["starting", "ready", "ready"]
    assert lines[0]["instance"] == "static-1"
    write_atomic(tmp_path / "f.json", b"{}")
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []  # no temporary left


def test_fresh_run_and_cleanup_keep_only_the_report(tmp_path: Path) -> None:
    root, log, topic = fresh_run("regroup-test-", None)
    assert (log, topic) == (str(root / "log"), TOPIC)
    (root / "log").mkdir()
    (root / "report").mkdir()
    (root / "report" / "r.html").write_text("r")
    (root / "coordinator.log").write_text("c")
    cleanup(root, root / "report")
    assert [p.name for p in root.iterdir()] == ["report"]
    cleanup(root, tmp_path / "elsewhere")
    assert not root.exists()
    root, log, topic = fresh_run("regroup-test-", "kafka://localhost:9092")
    assert log == "kafka://localhost:9092" and topic.startswith(f"{TOPIC}-") and topic != TOPIC
    root.rmdir()


def test_json_object_adds_the_properties_a_result_names() -> None:
    @dataclasses.dataclass(frozen=True)
    class Span:
        JSON_PROPERTIES = ("records",)
        first: int
        last: int

        @property
        def records(self) -> int:
            return self.last - self.first

    @dataclasses.dataclass(frozen=True)
    class Result:
        spans: tuple[Span, ...]
        by_name: dict[str, tuple[int, ...]]

    assert json_object(Result((Span(3, 7),), {"m1": (1, 2)})) == {
        "spans": [{"first": 3, "last": 7, "records": 4}], "by_name": {"m1": [1, 2]}}
