"""A commit answered STALE_MEMBER_EPOCH: the member's session waits for the heartbeat answer that
brings its newer epoch and sends the commit again at that epoch — however long that answer takes —
but never after the member lost its membership meanwhile.

The coordinator here is the real protocol core, in process, behind a fake client whose heartbeat
answers can be held back: exactly the window in which `regroup bench vs-kafka`'s 100 members had
their commits refused (the coordinator had moved a member to a new epoch in a heartbeat whose answer
had not reached it yet, and a single retry 50 ms later was refused again on a loaded machine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from regroup.client import session as session_mod
from regroup.client.errors import CommitFailedError
from regroup.client.membership import Membership
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import Assign, MemberStateMachine
from regroup.protocol.messages import (
    Ack,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.topics import TopicMetadata

T0 = Shard("t", 0)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class _Stream(Iterator[object]):
    """A nudge stream that never nudges; ends when cancelled."""

    ended_by_coordinator = False

    def __init__(self) -> None:
        self._done = threading.Event()

    def __next__(self) -> object:
        self._done.wait()
        raise StopIteration

    def cancel(self) -> None:
        self._done.set()


class InProcessClient:
    """The `CoordinatorClient` calls a `Session` makes, answered by an in-process `Coordinator`.

    ``release`` gates the heartbeat answers: while it is clear, a heartbeat is processed by the
    coordinator at once but its answer waits (a slow network or a starved client thread).
    ``inject`` replaces the next heartbeat answer."""

    def __init__(self, coord: Coordinator, lock: threading.Lock) -> None:
        self.coord, self.lock = coord, lock
        self.release = threading.Event()
        self.release.set()
        self.inject: HeartbeatResponse | None = None
        self.commit_answers: list[tuple[int, ErrorCode]] = []
        self.on_commit_answer: Callable[[Ack], None] | None = None
        self._streams: list[_Stream] = []

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        with self.lock:
            resp = self.coord.heartbeat(req, session_mod.now_ms()).response
        self.release.wait()
        with self.lock:
            injected, self.inject = self.inject, None
        return injected or resp

    def commit_offsets(self, req: OffsetCommitRequest) -> Ack:
        with self.lock:
            ack = self.coord.commit_offsets(req, session_mod.now_ms()).response
            self.commit_answers.append((req.member_epoch, ack.error))
        if self.on_commit_answer is not None:
            self.on_commit_answer(ack)
        return ack

    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        with self.lock:
            return self.coord.fetch_offsets(req)

    def watch(self, _group: str, _member: str) -> _Stream:
        s = _Stream()
        self._streams.append(s)
        return s

    def close(self) -> None:
        self.release.set()
        for s in self._streams:
            s.cancel()


@pytest.fixture
def setup() -> Iterator[tuple[Coordinator, threading.Lock, InProcessClient, Membership]]:
    """Member ``a`` of group ``g`` owning t-0 at epoch 1, heartbeating every 50 ms."""
    coord = Coordinator(CoordinatorConfig(heartbeat_interval_ms=50, session_timeout_ms=30_000),
                        topics=TopicMetadata({"t": 1, "u": 1}))
    lock = threading.Lock()
    client = InProcessClient(coord, lock)
    machine = MemberStateMachine("g", "a", subscribed_topics=("t",), rebalance_timeout_ms=30_000)
    m = Membership(client, machine)  # type: ignore[arg-type]
    try:
        taken: list[Any] = []

        def assigned() -> bool:
            taken.extend(m.take_actions())
            return any(isinstance(x, Assign) for x in taken)

        wait_for(assigned, "the first assignment")
        m.assignment_done(frozenset({T0}))

        def owns_t0() -> bool:
            with lock:
                cur = coord.groups["g"].current["a"]
                return cur.epoch == 1 and cur.assigned == {T0} and machine.owned == {T0}

        wait_for(owns_t0, "a owning t-0 at epoch 1")
        yield coord, lock, client, m
    finally:
        client.release.set()
        m.close()


def move_epoch_with_answer_held(coord: Coordinator, lock: threading.Lock, client: InProcessClient) -> None:
    """Another member joins (on another topic: a's target does not change, only its epoch); a's next
    heartbeat moves it to epoch 2 on the coordinator, and its answer is held back."""
    client.release.clear()
    with lock:
        join = HeartbeatRequest("g", "b", 0, rebalance_timeout_ms=30_000, subscribed_topics=("u",),
                                owned=EMPTY)
        assert coord.heartbeat(join, session_mod.now_ms()).response.error is ErrorCode.NONE

    def moved() -> bool:
        with lock:
            return coord.groups["g"].current["a"].epoch == 2

    wait_for(moved, "the coordinator moving a to epoch 2")


def test_a_commit_refused_as_stale_is_sent_again_once_the_new_epoch_arrives(setup) -> None:  # type: ignore[no-untyped-def]
    coord, lock, client, m = setup
    move_epoch_with_answer_held(coord, lock, client)
    assert m.epoch == 1  # the member has not heard of epoch 2 yet

    # The held answer arrives well after the refusal: a slow heartbeat answer on a loaded machine
    # (the old single retry, 50 ms later, was refused again and the commit failed).
    def answer_late(ack: Ack) -> None:
        if ack.error is ErrorCode.STALE_MEMBER_EPOCH:
            threading.Timer(0.5, client.release.set).start()

    client.on_commit_answer = answer_late
    m.commit({T0: 7})

    assert client.commit_answers[0] == (1, ErrorCode.STALE_MEMBER_EPOCH)
    assert client.commit_answers[-1] == (2, ErrorCode.NONE)
    with lock:
        assert coord.groups["g"].offsets[T0].offset == 7
        assert coord.groups["g"].offsets[T0].commit_epoch == 2


def test_an_offset_fetch_refused_as_stale_is_sent_again_too(setup) -> None:  # type: ignore[no-untyped-def]
    coord, lock, client, m = setup
    m.commit({T0: 3})
    move_epoch_with_answer_held(coord, lock, client)
    threading.Timer(0.5, client.release.set).start()
    assert m.fetch_committed([T0]) == {T0: 3}
    assert m.epoch == 2


def test_a_stale_commit_is_not_sent_again_after_the_member_lost_its_membership(setup) -> None:  # type: ignore[no-untyped-def]
    coord, lock, client, m = setup
    move_epoch_with_answer_held(coord, lock, client)
    # The answer that finally comes says the member was fenced: it drops everything and rejoins. Its
    # commit must not be sent again at whatever epoch the rejoin brings.
    client.inject = HeartbeatResponse(ErrorCode.FENCED_MEMBER_EPOCH, "fenced for the test")

    def answer_fenced(ack: Ack) -> None:
        if ack.error is ErrorCode.STALE_MEMBER_EPOCH:
            client.release.set()

    client.on_commit_answer = answer_fenced
    with pytest.raises(CommitFailedError) as e:
        m.commit({T0: 9})
    assert e.value.code is ErrorCode.STALE_MEMBER_EPOCH
    assert client.commit_answers == [(1, ErrorCode.STALE_MEMBER_EPOCH)]
    with lock:
        assert T0 not in coord.groups["g"].offsets


def test_a_commit_refused_as_stale_fails_when_no_newer_epoch_comes(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    coord, lock, client, m = setup
    monkeypatch.setattr(session_mod, "STALE_EPOCH_WAIT_S", 0.3)
    move_epoch_with_answer_held(coord, lock, client)  # and never released
    with pytest.raises(CommitFailedError) as e:
        m.commit({T0: 4})
    assert e.value.code is ErrorCode.STALE_MEMBER_EPOCH
    assert [a for _, a in client.commit_answers] == [ErrorCode.STALE_MEMBER_EPOCH]
