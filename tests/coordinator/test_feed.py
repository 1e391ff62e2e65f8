"""The dashboard's feed on its own: timeline steps, hand-off durations, bounds, coalescing (fake clocks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regroup.coordinator.http.feed import CLIENT_QUEUE_LIMIT, CLOSED, Feed, FeedEvent
from regroup.coordinator.runtime import Effects
from regroup.protocol.causes import (
    EpochEvent,
    Fence,
    FenceReason,
    GroupCreated,
    GroupDeleted,
    GroupEpochBumped,
    MemberJoined,
    MemberLeft,
)
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    MemberStatus,
    OffsetRecord,
    Record,
)
from regroup.protocol.shard import EMPTY, Shard

G = "g"
P0, P1, P2 = Shard("t", 0), Shard("t", 1), Shard("t", 2)


class Clocks:
    def __init__(self) -> None:
        self.unix = 1_000_000
        self.mono = 100.0
        self.scheduled: list[tuple[float, Callable[[], None]]] = []

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.scheduled.append((self.mono + delay, fn))

    def advance(self, ms: int) -> None:
        self.unix += ms
        self.mono += ms / 1000
        due = [(t, fn) for t, fn in self.scheduled if t <= self.mono]
        self.scheduled = [(t, fn) for t, fn in self.scheduled if t > self.mono]
        for _, fn in due:
            fn()


def make(limit: int = 500) -> tuple[Feed, Clocks]:
    clocks = Clocks()
    epochs = {G: (3, 3)}
    feed = Feed(epochs.get, unix_ms=lambda: clocks.unix, monotonic=lambda: clocks.mono,
                schedule=clocks.schedule, limit=limit)
    return feed, clocks


def cur(epoch: int, assigned: frozenset[Shard] = EMPTY, pending: frozenset[Shard] = EMPTY,
        ) -> CurrentAssignment:
    status = MemberStatus.UNREVOKED if pending else MemberStatus.STABLE
    return CurrentAssignment(epoch, epoch - 1, status, assigned, pending)


def step(*records: Record, events: tuple[EpochEvent, ...] = (), fences: tuple[Fence, ...] = (),
         ) -> Effects[Any]:
    return Effects(None, 1, records=records, epoch_events=events, fences=fences)


def rec(member: str, c: CurrentAssignment | None) -> CurrentAssignmentRecord:
    return CurrentAssignmentRecord(G, member, c)


def steps(feed: Feed) -> list[tuple[str, str, tuple[str, ...], int | None]]:
    return [(s.member_id, s.step, s.partitions, s.handoff_ms) for s in feed.steps(G)]


def test_a_partition_moving_is_revoked_released_and_granted_with_its_hand_off_times() -> None:
    feed, clocks = make()
    feed.on_step(step(rec("a", cur(1, frozenset({P0, P1}))),
                      events=(GroupCreated(G), GroupEpochBumped(G, 1, (MemberJoined("a"),)))))
    clocks.advance(1000)
    feed.on_step(step(rec("b", cur(2)), events=(GroupEpochBumped(G, 2, (MemberJoined("b"),)),)))
    clocks.advance(100)
    feed.on_step(step(rec("a", cur(1, frozenset({P0}), frozenset({P1})))))
    clocks.advance(250)
    feed.on_step(step(rec("a", cur(2, frozenset({P0})))))
    clocks.advance(40)
    feed.on_step(step(rec("b", cur(2, frozenset({P1})))))
    assert steps(feed) == [
        ("a", "joined", (), None),
        ("a", "granted", ("t:0", "t:1"), None),  # never owned before: no hand-off
        ("b", "joined", (), None),
        ("a", "revoking", ("t:1",), None),
        ("a", "released", ("t:1",), 250),  # from the revocation request
        ("b", "granted", ("t:1",), 40),  # from the release
    ]
    assert [s["epoch"] for s in feed.timeline(G)] == [1, 1, 2, 1, 2, 2]
    assert feed.timeline(G)[0]["at_unix_ms"] == 1_000_000


def test_left_and_fenced_members_free_their_partitions_for_the_hand_off() -> None:
    feed, clocks = make()
    feed.on_step(step(rec("a", cur(1, frozenset({P0}))), rec("b", cur(1, frozenset({P1})))))
    feed.on_step(step(rec("a", None), events=(GroupEpochBumped(G, 2, (MemberLeft("a"),)),)))
    feed.on_step(step(rec("b", None), fences=(Fence(G, "b", FenceReason.SESSION_TIMEOUT),)))
    clocks.advance(70)
    feed.on_step(step(rec("c", cur(3, frozenset({P0, P1})))))
    assert steps(feed)[2:] == [
        ("a", "left", ("t:0",), None),
        ("b", "fenced", ("t:1",), None),
        ("c", "granted", ("t:0", "t:1"), 70),
    ]


def test_several_partitions_in_one_step_report_the_slowest_hand_off() -> None:
    feed, clocks = make()
    feed.on_step(step(rec("a", cur(1, frozenset({P0, P1, P2})))))
    feed.on_step(step(rec("a", cur(1, frozenset({P1, P2}), frozenset({P0})))))
    clocks.advance(100)
    feed.on_step(step(rec("a", cur(1, frozenset({P2}), frozenset({P0, P1})))))  # P1 revoked later
    clocks.advance(50)
    feed.on_step(step(rec("a", cur(2, frozenset({P2})))))
    assert steps(feed)[1:] == [("a", "revoking", ("t:0",), None), ("a", "revoking", ("t:1",), None),
                               ("a", "released", ("t:0", "t:1"), 150)]


def test_seeded_holdings_are_not_news_after_a_restart() -> None:
    from regroup.protocol.describe import GroupDescription, MemberDescription
    from regroup.protocol.state import GroupState

    feed, _ = make()
    member = MemberDescription(
        member_id="a", instance_id=None, rack_id=None, epoch=1, previous_epoch=0, status=MemberStatus.STABLE,
        assigned=frozenset({P0}), pending_revocation=EMPTY, awaiting=EMPTY, target=frozenset({P0}),
        subscribed_topics=frozenset({"t"}), subscribed_regex=None, resolved_topics=frozenset({"t"}),
        assignor=None, rebalance_timeout_ms=30_000)
    feed.seed([GroupDescription(G, GroupState.STABLE, 1, 1, "uniform", {"t": 1}, (member,), {})])
    feed.on_step(step(rec("a", cur(2, frozenset({P0})))))
    assert steps(feed) == []


def test_the_timeline_is_bounded_and_forgotten_with_its_group() -> None:
    feed, _ = make(limit=10)
    for i in range(30):
        feed.on_step(step(events=(GroupEpochBumped(G, i + 1, (MemberJoined(f"m{i}"),)),)))
    assert [s.member_id for s in feed.steps(G)] == [f"m{i}" for i in range(20, 30)]
    feed.on_step(step(events=(GroupDeleted(G),)))
    assert feed.timeline(G) == []


def drain(client: Any) -> list[FeedEvent]:
    out = []
    while not client.queue.empty():
        out.append(client.queue.get_nowait())
    return out


def test_events_are_coalesced_to_one_per_group_per_interval_and_only_built_for_listeners() -> None:
    feed, clocks = make()
    feed.on_step(step(OffsetRecord(G, P0, 5)))
    assert clocks.scheduled == []  # nobody listens: nothing to build or schedule
    client = feed.subscribe()
    feed.on_step(step(OffsetRecord(G, P0, 6), events=(GroupCreated(G),)))
    clocks.advance(0)
    assert [(e.kind, e.data) for e in drain(client)] == [
        ("groups", {}), ("group", {"group": G, "epoch": 3, "target_epoch": 3, "at_unix_ms": clocks.unix})]
    for _ in range(100):  # a burst of steps within one interval
        feed.on_step(step(OffsetRecord(G, P0, 7)))
        clocks.advance(1)
    assert drain(client) == []  # not yet: at most one flush per 250 ms
    clocks.advance(200)
    assert [e.kind for e in drain(client)] == ["group"]
    assert clocks.scheduled == []
    feed.unsubscribe(client)
    feed.on_step(step(OffsetRecord(G, P0, 8)))
    assert clocks.scheduled == []


def test_a_listener_too_far_behind_is_closed() -> None:
    feed, clocks = make()
    client = feed.subscribe()
    for _ in range(CLIENT_QUEUE_LIMIT + 5):
        feed.on_step(step(OffsetRecord(G, P0, 1)))
        clocks.advance(300)
    events = drain(client)
    assert len(events) == CLIENT_QUEUE_LIMIT + 1 and events[-1] is CLOSED
    assert client not in feed.clients
