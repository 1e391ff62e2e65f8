"""`StreamsPipeline`'s control thread without Spark (unit tests of one module): which queries start
when, what a stop does to queued copies, and what a failed query leads to. Spark, the membership
and the query start are stand-ins; `test_tasks.py` runs the same paths with real Spark."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.topology import TaskId
from regroup.spark.tasks import pipeline as pipeline_module
from regroup.spark.tasks.pipeline import _COPY_RETRY_MAX_S, StreamsPipeline, StreamsPipelineError, _TaskQuery

A, B, C, D = (TaskId("s", p) for p in range(4))


@dataclass
class FakeMembership:
    actions_waiting: bool = False
    cut: bool = False

    def has_actions(self) -> bool:
        return self.actions_waiting

    def cut_off(self) -> bool:
        return self.cut


@dataclass
class FakeMachine:
    owned: MemberTasks = field(default_factory=MemberTasks)
    epoch: int = 1


class FakeQuery:
    """A Spark query handle: ``isActive`` until stopped or failed."""

    def __init__(self) -> None:
        self.isActive = True
        self.stopped = False
        self.error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        self.isActive, self.error = False, error

    def stop(self) -> None:
        self.isActive, self.stopped = False, True

    def exception(self) -> BaseException | None:
        return self.error


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr("regroup.spark.startup.register_source", lambda spark, source: None)
    p = StreamsPipeline(object(), group="g", topology={"s": ["t"]}, build=lambda df, t: df,
                        sink=lambda df, b: None, coordinator="127.0.0.1:1", log=str(tmp_path / "log"),
                        state=tmp_path / "state")
    p.membership = FakeMembership()  # type: ignore[assignment]
    p._machine = FakeMachine()  # type: ignore[assignment]
    p.started = []  # type: ignore[attr-defined]
    clock = [1000.0]
    monkeypatch.setattr(pipeline_module.time, "monotonic", lambda: clock[0])
    p.clock = clock  # type: ignore[attr-defined]

    def start(task: TaskId, role: str) -> None:  # what `_start` leaves behind, without Spark
        p.started.append((task, role))  # type: ignore[attr-defined]
        q = _TaskQuery(task, role, f"tasks/{task}/x.1", tmp_path / f"{task}.json", 1, begin={}, ends={})
        q.handle = FakeQuery()
        p._queries[task] = q

    monkeypatch.setattr(p, "_start", start)
    monkeypatch.setattr(p, "_fetch_committed", lambda tasks: None)
    yield p
    p._client.close()


def own(p: Any, **roles: set[TaskId]) -> None:
    p._machine.owned = MemberTasks(**{k: frozenset(v) for k, v in roles.items()})


def test_actives_start_at_once_and_copies_one_per_turn(pipeline: Any) -> None:
    p = pipeline
    p._start_tasks(MemberTasks(frozenset({A}), frozenset({B}), frozenset({C})))
    assert p.started == [(A, "active")]
    own(p, active={A}, standby={B}, warmup={C})
    p._start_queued()
    assert p.started[1:] == [(B, "standby")]
    p._start_queued()
    assert p.started[2:] == [(C, "warm-up")]
    p._start_queued()
    assert len(p.started) == 3 and not p._queued


def test_a_waiting_action_goes_before_a_queued_copy(pipeline: Any) -> None:
    p = pipeline
    p._start_tasks(MemberTasks(standby=frozenset({B})))
    own(p, standby={B})
    p.membership.actions_waiting = True
    p._start_queued()
    assert p.started == []
    p.membership.actions_waiting = False
    p._start_queued()
    assert p.started == [(B, "standby")]


def test_a_stop_or_a_loss_takes_a_queued_copy_out_and_nothing_starts(pipeline: Any) -> None:
    p = pipeline
    p._start_tasks(MemberTasks(standby=frozenset({B, D}), warmup=frozenset({C})))
    p._stop_tasks(MemberTasks(warmup=frozenset({C})))
    p._handle([pipeline_module.LostTasks(MemberTasks(standby=frozenset({D})), "fenced")])
    assert set(p._queued) == {B}


def test_a_queued_copy_no_longer_owned_is_dropped_not_started(pipeline: Any) -> None:
    p = pipeline
    p._start_tasks(MemberTasks(warmup=frozenset({C})))
    own(p, standby={C})  # the coordinator wants it in another role now: a Stop/Start will say so
    p._start_queued()
    assert p.started == [] and not p._queued


def test_a_failed_copy_is_started_again_after_a_doubling_back_off(pipeline: Any) -> None:
    p, clock = pipeline, pipeline.clock
    own(p, warmup={C})
    waits = []
    for _ in range(7):
        p._start(C, "warm-up")
        query = p._queries[C].handle
        query.fail(RuntimeError("Python worker failed to connect back"))
        p._watch()
        assert C not in p._queries and query.stopped
        role, at = p._queued[C]
        waits.append(at - clock[0])
        assert role == "warm-up"
        p._start_queued()
        assert p.started[-1] == (C, "warm-up")  # not due yet: the one started above
        clock[0] = at
        p._start_queued()
        assert C in p._queries
    assert waits == [2.0, 4.0, 8.0, 16.0, _COPY_RETRY_MAX_S, _COPY_RETRY_MAX_S, _COPY_RETRY_MAX_S]


def test_a_failed_parked_copy_is_dropped_and_a_failed_active_retried_then_given_up(pipeline: Any) -> None:
    p = pipeline
    p._start(B, "standby")
    p._stop_tasks(MemberTasks(standby=frozenset({B})))
    assert p.tasks == {B: "parked"}
    p._queries[B].handle.fail(RuntimeError("boom"))
    p._watch()
    assert B not in p._queries and B not in p._queued
    p._start(A, "active")
    for _ in range(3):
        p._queries[A].handle.fail(RuntimeError("boom"))
        p._watch()
        assert p.tasks == {A: "active"}
    p._queries[A].handle.fail(RuntimeError("boom"))
    with pytest.raises(StreamsPipelineError, match="failed 4 times"):
        p._watch()


def test_actives_stopped_together_are_gated_together(pipeline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline
    for t in (A, B):
        p._start(t, "active")
    gates: list[tuple[str, bool]] = []

    def write_control(path: Path, control: Any) -> None:
        gates.append((path.name, control.gate))

    monkeypatch.setattr(pipeline_module, "write_control", write_control)
    monkeypatch.setattr(pipeline_module, "read_ack", lambda path: 10**18)  # every reader obeyed
    halt = p._stop_tasks(MemberTasks(active=frozenset({A, B})))
    assert gates == [(f"{A}.json", True), (f"{B}.json", True)]
    assert halt == [A, B] and all(p._queries[t].fenced for t in (A, B))
    p._halt_all(halt)
    assert p.tasks == {} and set(p._dormant) == set()


def test_a_stopped_active_is_reported_before_its_query_is_stopped(
        pipeline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 4: once the reader obeyed the gate (its last batch committed) and the query is fenced,
    the coordinator is told at once; stopping the Spark query (a second or more) comes after, so
    that the next owner does not wait for it."""
    p = pipeline
    p._start(A, "active")
    events: list[str] = []
    p.membership.tasks_stopped = lambda tasks: events.append(f"reported {sorted(tasks.active)}")
    query = p._queries[A].handle
    stop = query.stop
    query.stop = lambda: (events.append("query stopped"), stop())
    monkeypatch.setattr(pipeline_module, "read_ack", lambda path: 10**18)
    p._handle([pipeline_module.StopTasks(MemberTasks(active=frozenset({A})))])
    assert events == [f"reported {[A]}", "query stopped"] and p.tasks == {}


def _log_offsets(checkpoint: Path, batch: int, ends: dict[Any, int]) -> None:
    """An entry of a task query's offset log, as Spark writes it (see `checkpoint.batch_ends`)."""
    from regroup.spark.tasks.source import task_offset

    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    text = json.dumps(json.dumps(task_offset(ends)))
    (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{text}\n')


def test_a_warm_up_follows_the_actives_planned_batch_and_a_standby_the_commit(pipeline: Any) -> None:
    """Rule 3: a warm-up's limit is the end of the newest batch the active planned after the batch
    of record (so it runs that batch beside the active and is at the commit when the active hands
    over); a standby's is the commit (it must be promotable when its active is killed mid-batch)."""
    from regroup.protocol.streams.checkpoints import CheckpointRecord
    from regroup.spark.tasks.control import read_control

    p = pipeline
    shard = pipeline_module.Shard("t", 0)
    record = CheckpointRecord("tasks/s_0/other.7", 4)
    active_dir = p.root.path / record.directory  # a local state root
    for batch, end in ((3, 80), (4, 100)):
        _log_offsets(active_dir, batch, {shard: end})
    p._committed = {C: ({shard: 100}, record), D: ({shard: 100}, record)}
    p._start(C, "warm-up")
    p._start(D, "standby")
    limits = lambda: {t: read_control(q.control).limit for t, q in p._queries.items()}  # noqa: E731
    p._refresh()
    assert limits() == {C: {shard: 100}, D: {shard: 100}}  # nothing planned past the record
    _log_offsets(active_dir, 5, {shard: 130})  # the active plans batch 5: the warm-up follows
    p._refresh()
    assert limits() == {C: {shard: 130}, D: {shard: 100}}
    _log_offsets(active_dir, 6, {shard: 150})  # and on, while the committed offsets are not refreshed
    p._refresh()
    assert limits() == {C: {shard: 150}, D: {shard: 100}}
    p._committed[C] = ({shard: 200}, record)  # a plan behind the commit (stale): the commit
    p._refresh()
    assert limits()[C] == {shard: 200}
    (active_dir / "offsets" / "7").write_text("garbage")  # unreadable: the commit, no error
    p._committed[C] = ({shard: 100}, record)
    p._refresh()
    assert limits()[C] == {shard: 100}


def test_a_copy_reports_its_position_only_once_its_query_ran_a_batch(pipeline: Any) -> None:
    """Spark restores a query's state in its first batch: a copy reported at the batch it copied
    would be promoted before it restored anything (found by `regroup bench spark-stateful`)."""
    p = pipeline
    shard = pipeline_module.Shard("t", 2)
    p._start(C, "warm-up")
    q = p._queries[C]
    q.ends, q.limit = {shard: 1114}, {shard: 1489}
    assert C not in p._task_offsets()
    q.batches, q.ends = 1, {shard: 1300}
    assert p._task_offsets()[C] == {shard: 1300}
    p._start(D, "standby")  # nothing to read: its copy is at the commit, no record waits on a restore
    p._queries[D].ends = p._queries[D].limit = {shard: 1489}
    assert p._task_offsets()[D] == {shard: 1489}
    p._start(A, "active")
    p._queries[A].ends = {shard: 5}
    assert p._task_offsets()[A] == {shard: 5}


def test_cut_off_gates_the_actives_readers_until_the_coordinator_answers(pipeline: Any) -> None:
    """Rule 8: the actives plan no batch while the member is cut off (failover rules 7 and 12); the
    copies, whose sinks are off, follow on; an active started or promoted meanwhile is gated too."""
    from regroup.spark.tasks.control import read_control

    p = pipeline
    p._start_tasks(MemberTasks(frozenset({A}), frozenset({B})))
    own(p, active={A}, standby={B})
    p._start_queued()
    for q in p._queries.values():
        p._write_control(q)
    gates = lambda: {t: read_control(q.control).gate for t, q in p._queries.items()}  # noqa: E731
    assert gates() == {A: False, B: False}
    p.membership.cut = True
    p._pause_if_cut_off()
    assert gates() == {A: True, B: False}
    p._start_tasks(MemberTasks(active=frozenset({C})))
    p._write_control(p._queries[C])
    assert gates()[C] is True
    p.membership.cut = False
    p._pause_if_cut_off()
    assert gates() == {A: False, B: False, C: False}


def test_a_new_warm_up_starts_from_the_actives_plan_and_a_standby_from_the_commit(pipeline: Any) -> None:
    """A new warm-up at the bare commit while its active runs a batch would count as having nothing
    to read, be reported caught up and promoted before Spark restored its state."""
    from regroup.protocol.streams.checkpoints import CheckpointRecord

    p = pipeline
    shard = pipeline_module.Shard("t", 0)
    record = CheckpointRecord("tasks/s_2/other.7", 4)
    _log_offsets(p.root.path / record.directory, 5, {shard: 130})
    assert p._copy_limit("warm-up", {shard: 100}, record, C) == {shard: 130}
    assert p._copy_limit("standby", {shard: 100}, record, C) == {shard: 100}
    assert p._copy_limit("active", {shard: 100}, record, C) is None
    assert p._copy_limit("warm-up", {shard: 100}, None, C) == {shard: 100}  # no checkpoint of record


def test_a_warm_up_walks_the_plan_on_from_where_it_was_and_a_parked_one_follows_it(pipeline: Any) -> None:
    from regroup.protocol.streams.checkpoints import CheckpointRecord
    from regroup.spark.tasks.control import read_control

    p = pipeline
    shard = pipeline_module.Shard("t", 0)
    record = CheckpointRecord("tasks/s_2/other.7", 4)
    active_dir = p.root.path / record.directory
    _log_offsets(active_dir, 5, {shard: 130})
    p._committed = {C: ({shard: 100}, record)}
    p._start(C, "warm-up")
    p._refresh()
    (active_dir / "offsets" / "5").unlink()  # Spark purges old entries: the walk goes on from 5
    _log_offsets(active_dir, 6, {shard: 150})
    p._refresh()
    assert read_control(p._queries[C].control).limit == {shard: 150}
    p._stop_tasks(MemberTasks(warmup=frozenset({C})))  # parked: a promotion may follow
    assert p.tasks == {C: "parked"}
    _log_offsets(active_dir, 7, {shard: 170})  # the active's last batch before it is gated
    p._refresh()
    assert read_control(p._queries[C].control).limit == {shard: 170}


def test_a_reader_that_did_not_obey_the_gate_is_stopped_before_the_release(
        pipeline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its batch may still run (and run the sink): nobody may start on those offsets before it ends."""
    p = pipeline
    p.rebalance_timeout_ms = 0
    p._start(A, "active")
    p._start(B, "active")
    events: list[str] = []
    p.membership.tasks_stopped = lambda tasks: events.append("reported")
    for t in (A, B):
        query = p._queries[t].handle
        query.stop = lambda t=t, stop=query.stop: (events.append(f"{t} stopped"), stop())
    monkeypatch.setattr(pipeline_module, "read_ack", lambda path: 10**18 if path.name == f"{A}.json" else -1)
    p._handle([pipeline_module.StopTasks(MemberTasks(active=frozenset({A, B})))])
    assert events == [f"{B} stopped", "reported", f"{A} stopped"]


def test_a_leaving_member_stops_its_queries_before_it_reports_them_stopped(
        pipeline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A static member's next incarnation resumes the same directories (rule 2: one query each)."""
    p = pipeline
    p._start(A, "active")
    events: list[str] = []
    p.membership.tasks_stopped = lambda tasks: events.append("reported")
    query = p._queries[A].handle
    stop = query.stop
    query.stop = lambda: (events.append("query stopped"), stop())
    monkeypatch.setattr(pipeline_module, "read_ack", lambda path: 10**18)
    p._stop.set()
    p._handle([pipeline_module.StopTasks(MemberTasks(active=frozenset({A})))])
    assert events == ["query stopped", "reported"]


def test_a_promoted_copy_that_overran_the_commit_starts_again_from_the_record(pipeline: Any) -> None:
    """Checkpoints rule 5: its batch read past a commit that never came with its sink off. Starting
    again from the batch of record is not a failure of the query (nothing counts towards giving up)."""
    p = pipeline
    p._start(A, "active")
    q = p._queries[A]
    q.overran = True
    q.handle.fail(pipeline_module.OverranCommitError("crossed the commit"))
    p._watch()
    assert p.started == [(A, "active"), (A, "active")] and q.handle.stopped
    assert p._failures[A] == 0 and p._queries[A] is not q


def test_a_copy_whose_start_spark_refuses_is_queued_again_after_a_back_off(
        pipeline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 7 (seen in CI: ``load()`` raised a ConcurrentModificationException inside Spark): the
    pipeline goes on, and the copy is tried again later."""
    p, clock = pipeline, pipeline.clock
    own(p, warmup={C})
    p._start_tasks(MemberTasks(warmup=frozenset({C})))

    def refused(task: TaskId, role: str) -> None:
        raise RuntimeError("java.util.ConcurrentModificationException")

    monkeypatch.setattr(p, "_start", refused)
    p._start_queued()
    role, at = p._queued[C]
    assert role == "warm-up" and at - clock[0] == 2.0 and C not in p._queries
