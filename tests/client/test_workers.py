"""Several workers in one process (`regroup.client.workers`), with the coordinator faked out: the loops
over stand-in consumers (what is handed out, committed, dropped and closed, and when a run ends), and
`Consumer(workers=N)` wired to them. The real thing, with a coordinator process and moving key ranges,
is in tests/e2e/test_key_range_workers.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from regroup import TopicPartition
from regroup.client import consumer as consumer_module
from regroup.client.errors import ConsumerClosedError
from regroup.client.workers import Worker, Workers
from regroup.log.base import ConsumedRecord, PartitionedLog
from regroup.protocol.member import Action, Assign, Revoke
from regroup.protocol.shard import Shard, ShardSet
from tests.client.test_consumer_shell import FakeMembership

A, B = Shard("t", 0), Shard("t", 1)


def record(offset: int) -> ConsumedRecord:
    return ConsumedRecord("t", 0, offset, b"k", b"v", 0)


class StandIn:
    """A single-worker consumer as a script: ``supply(n)`` gives its n-th batch (None: nothing yet);
    it commits what it handed out, and closing commits the rest unless it was dropped."""

    def __init__(self, member_id: str, supply: Callable[[int], list[ConsumedRecord] | None]) -> None:
        self.member_id = member_id
        self.member_epoch = 3
        self.paused = False
        self._supply, self._calls = supply, 0
        self.handed: list[int] = []  # offsets handed out since the last commit
        self.commits: list[list[int]] = []
        self.dropped: list[int] = []
        self.closed = False

    def consume(self, num_messages: int, timeout: float) -> list[ConsumedRecord]:
        batch = self._supply(self._calls)
        self._calls += 1
        if batch is None:
            threading.Event().wait(timeout)  # what a consumer with nothing to read does
            return []
        self.handed += [r.offset for r in batch]
        return batch

    def commit(self) -> None:
        self.commits.append(self.handed)
        self.handed = []

    def shards(self) -> ShardSet:
        return frozenset({Shard("t", 0, 0, 1 << 31)}) if self.member_id.endswith("0") else frozenset()

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("t", 0)} if self.member_id.endswith("0") else set()

    def committed(self) -> dict[TopicPartition, int]:
        return {TopicPartition("t", 0): 5 + int(self.member_id[-1])}

    def close(self, timeout: float) -> None:
        if self.handed:
            self.commit()
        self.closed = True

    def _drop_uncommitted(self) -> None:
        self.dropped, self.handed = self.handed, []


def endless(n: int) -> list[ConsumedRecord]:
    return [record(2 * n), record(2 * n + 1)]


class Handled:
    """What the handler was given, by worker, and a way to wait for enough of it."""

    def __init__(self) -> None:
        self.by_worker: dict[int, list[int]] = {}
        self.workers: dict[int, Worker] = {}
        self._changed = threading.Condition()

    def __call__(self, worker: Worker, records: list[ConsumedRecord]) -> None:
        with self._changed:
            self.by_worker.setdefault(worker.index, []).extend(r.offset for r in records)
            self.workers[worker.index] = worker
            self._changed.notify_all()

    def wait_for(self, enough: Callable[[dict[int, list[int]]], bool]) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: enough(self.by_worker), timeout=30), self.by_worker


def run_in_thread(workers: Workers, handler: Any,
                  **kwargs: Any) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def go() -> None:
        try:
            workers.run(handler, **{"stop": None, "batch": 10, "timeout": 0.01, **kwargs})
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=go)
    t.start()
    return t, raised


def test_a_stop_event_ends_the_run_after_each_worker_committed_what_it_handled() -> None:
    members = [StandIn(f"m-w{i}", endless) for i in range(3)]
    workers, handled, stop = Workers(members), Handled(), threading.Event()
    t, raised = run_in_thread(workers, handled, stop=stop)
    handled.wait_for(lambda by: len(by) == 3 and all(len(offs) >= 6 for offs in by.values()))
    stop.set()
    t.join(timeout=30)
    assert not t.is_alive() and not raised
    for i, m in enumerate(members):
        assert [o for c in m.commits for o in c] == handled.by_worker[i]  # each batch committed after
        assert m.handed == [] and not m.closed  # the run ended; the consumer is still open
        assert (handled.workers[i].index, handled.workers[i].member_id) == (i, f"m-w{i}")
    assert handled.workers[0].shards() == {Shard("t", 0, 0, 1 << 31)}
    assert handled.workers[0].assignment() == {TopicPartition("t", 0)}
    assert workers.assignment() == {TopicPartition("t", 0)} and len(workers.shards()) == 1
    assert workers.committed() == {TopicPartition("t", 0): 5} and workers.member_epoch == 3
    workers.close()
    assert all(m.closed for m in members)


def test_a_handler_error_stops_every_worker_and_is_raised_naming_the_worker() -> None:
    members = [StandIn(f"m-w{i}", endless) for i in range(3)]
    handled = Handled()

    def handler(worker: Worker, records: list[ConsumedRecord]) -> None:
        if worker.index == 1 and records[0].offset == 4:  # its third batch
            raise ValueError("bad record")
        handled(worker, records)

    workers = Workers(members)
    t, raised = run_in_thread(workers, handler)  # no stop event: only the error ends the run
    t.join(timeout=30)
    assert not t.is_alive()
    [e] = raised
    assert isinstance(e, ValueError) and str(e) == "bad record"
    assert "raised in worker 1 (member m-w1)" in e.__notes__
    assert all(m.closed for m in members), "every worker left"
    failed = members[1]
    assert failed.dropped == [4, 5] and [o for c in failed.commits for o in c] == [0, 1, 2, 3]
    for i in (0, 2):  # the others committed every batch they handled, and nothing else
        assert [o for c in members[i].commits for o in c] == handled.by_worker.get(i, [])
    with pytest.raises(ConsumerClosedError):
        workers.run(handler, stop=None, batch=10, timeout=0.01)


def test_close_from_another_thread_ends_the_run_and_closes_every_worker() -> None:
    members = [StandIn(f"m-w{i}", lambda n: endless(n) if n < 3 else None) for i in range(2)]
    workers, handled = Workers(members), Handled()
    t, raised = run_in_thread(workers, handled)
    handled.wait_for(lambda by: all(len(by.get(i, ())) == 6 for i in range(2)))
    workers.close()
    t.join(timeout=30)
    assert not t.is_alive() and not raised
    assert all(m.closed and [o for c in m.commits for o in c] == list(range(6)) for m in members)


def test_a_second_close_returns_only_once_every_worker_is_closed() -> None:
    """From review: a close() racing another returned at once, before the members had left."""
    leaving = threading.Event()
    proceed = threading.Event()

    class SlowToLeave(StandIn):
        def close(self, timeout: float) -> None:
            leaving.set()
            proceed.wait(30)
            super().close(timeout)

    members = [SlowToLeave(f"m-w{i}", lambda n: None) for i in range(2)]
    workers = Workers(members)
    first = threading.Thread(target=workers.close)
    first.start()
    assert leaving.wait(30)
    second_done = threading.Event()
    second = threading.Thread(target=lambda: (workers.close(), second_done.set()))
    second.start()
    assert not second_done.wait(0.2)  # still waiting for the first close to finish
    proceed.set()
    first.join(30)
    second.join(30)
    assert second_done.is_set() and all(m.closed for m in members)


def test_close_from_a_handler_is_refused_rather_than_waiting_for_itself() -> None:
    members = [StandIn("m-w0", endless)]
    workers = Workers(members)

    def handler(worker: Worker, records: list[ConsumedRecord]) -> None:
        workers.close()

    t, raised = run_in_thread(workers, handler)
    t.join(timeout=30)
    assert not t.is_alive()
    [e] = raised
    assert isinstance(e, RuntimeError) and "stop event" in str(e) and members[0].closed


def test_a_failing_member_leaves_the_ones_already_made() -> None:
    made: list[StandIn] = []

    def make(i: int) -> StandIn:
        if i == 2:
            raise OSError("cannot open the log")
        made.append(StandIn(f"m-w{i}", endless))
        return made[-1]

    with pytest.raises(OSError):
        Workers.join(3, make)
    assert len(made) == 2 and all(m.closed for m in made)


# ---------------------------------------------------------------------- Consumer(workers=N)
class LeavingMembership(FakeMembership):
    """`FakeMembership` that remembers its member state machine and leaves: a Revoke of ``held``."""

    def __init__(self, client: Any, machine: Any) -> None:
        super().__init__()
        self.machine = machine
        self.held: frozenset[Shard] = frozenset()
        self.left = False

    def leave(self, timeout: float, on_actions: Callable[[list[Action]], None] | None = None,
              *, permanent: bool = False) -> bool:
        if on_actions is not None and self.held:
            on_actions([Revoke(self.held)])
        self.left = True
        return True


def make(log: PartitionedLog, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> consumer_module.Consumer:
    monkeypatch.setattr(consumer_module, "Membership", LeavingMembership)
    monkeypatch.setattr(consumer_module, "CoordinatorClient", lambda *a, **k: None)
    return consumer_module.Consumer("g", coordinator="unused:1", log=log, topics=["t"], max_batch_records=3,
                                    **kwargs)


def membership(c: consumer_module.Consumer) -> LeavingMembership:
    m = c._membership
    assert isinstance(m, LeavingMembership)
    return m


@pytest.mark.parametrize("workers", [0, -1, 2.0, "2", True, None])
def test_workers_must_be_an_int_of_at_least_one(workers: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        consumer_module.Consumer("g", coordinator="unused:1", log=str(tmp_path / "log"), topics=["t"],
                                 workers=workers)


def test_a_consumer_with_workers_is_n_members_whose_records_only_run_hands_out(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    c = make(log, monkeypatch, workers=2, member_id="m", instance_id="i")
    members = [w._member for w in c._workers.workers]
    assert all(isinstance(m, consumer_module.Consumer) for m in members)
    fakes = [membership(m) for m in members if isinstance(m, consumer_module.Consumer)]
    assert [m.member_id for m in members] == ["m-w0", "m-w1"]
    assert [f.machine.instance_id for f in fakes] == ["i-w0", "i-w1"]  # a static restart: same ranges back
    for call in (lambda: c.poll(0), lambda: c.consume(), lambda: c.commit()):
        with pytest.raises(RuntimeError, match=r"workers=2: its records go to the workers.*run\(handler\)"):
            call()

    fakes[0].actions, fakes[1].actions = [Assign(frozenset({A}))], [Assign(frozenset({B}))]
    fakes[0].held, fakes[1].held = frozenset({A}), frozenset({B})
    handled, stop = Handled(), threading.Event()

    def handler(worker: Worker, records: list[ConsumedRecord]) -> None:
        handled(worker, records)
        if sum(map(len, handled.by_worker.values())) == 20:
            stop.set()

    c.run(handler, stop=stop, timeout=0.05)
    assert handled.by_worker == {0: list(range(10)), 1: list(range(10))}
    assert fakes[0].commits[-1] == {A: 10} and fakes[1].commits[-1] == {B: 10}
    assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)} and c.shards() == {A, B}
    assert c.committed() == {TopicPartition("t", 0): 10, TopicPartition("t", 1): 10}
    assert c.member_epoch == 1 and not c.paused
    c.close()
    assert all(f.left for f in fakes) and c.assignment() == set()
    with pytest.raises(ConsumerClosedError):
        c.run(handler)


def test_run_with_one_worker_commits_after_the_handler_and_a_failed_batch_is_never_committed(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    c = make(log, monkeypatch, member_id="solo")
    m = membership(c)
    m.actions, m.held = [Assign(frozenset({A}))], frozenset({A})
    got: list[tuple[int, str, int]] = []
    stop = threading.Event()

    def handler(worker: Worker, records: list[ConsumedRecord]) -> None:
        got.extend((worker.index, worker.member_id, r.offset) for r in records)
        if len(got) == 10:
            stop.set()

    c.run(handler, stop=stop, timeout=0.05)
    assert got == [(0, "solo", o) for o in range(10)] and m.commits[-1] == {A: 10}
    with pytest.raises(ValueError, match="batch must be"):
        c.run(handler, batch=0)

    failing = make(log, monkeypatch)
    f = membership(failing)
    f.actions, f.held, f.committed = [Assign(frozenset({B}))], frozenset({B}), {B: 4}

    def fails(worker: Worker, records: list[ConsumedRecord]) -> None:
        raise KeyError(records[0].offset)

    with pytest.raises(KeyError) as raised:
        failing.run(fails, timeout=0.05)
    assert raised.value.args == (4,) and "raised in worker 0" in raised.value.__notes__[0]
    # left the group — releasing B — without committing the batch the handler failed on
    assert f.left and f.commits == [] and ("revoked", frozenset({B})) in f.acks
    with pytest.raises(ConsumerClosedError):
        failing.consume()


def test_worker_and_handler_are_exported_from_the_package() -> None:
    import regroup
    from regroup.client import workers

    assert regroup.Worker is workers.Worker and regroup.Handler is workers.Handler
    assert {"Worker", "Handler"} <= set(regroup.__all__)
