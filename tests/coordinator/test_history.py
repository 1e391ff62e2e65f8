"""Epoch history worded from the epoch events the core reports with each step."""

from __future__ import annotations

from regroup.coordinator.history import EpochHistory, derive
from regroup.coordinator.memory_store import MemoryStore
from regroup.coordinator.runtime import Runtime
from regroup.protocol.causes import GroupCreated, GroupDeleted
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import HeartbeatRequest, OffsetResetRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.topology import Topology
from regroup.protocol.topics import TopicMetadata


def join(c: Coordinator, mid: str, now: int = 0):  # type: ignore[no-untyped-def]
    return c.heartbeat(HeartbeatRequest("g", mid, 0, rebalance_timeout_ms=1_000, subscribed_topics=("t",),
                                        owned=EMPTY), now)


def test_joins_leaves_fences_and_topic_changes_are_explained() -> None:
    c = Coordinator(topics=TopicMetadata({"t": 4}))
    h = EpochHistory(limit=4)
    h.apply(derive(join(c, "a").epoch_events, 1))
    assert [(e.kind, e.epoch, e.cause) for e in h.of("g")] == [
        ("group", 0, "group created"),
        ("group", 1, "member a joined; subscribed topics now t=4"),
        ("target", 1, "assignor uniform; 1 member target(s) changed")]
    h.apply(derive(join(c, "b").epoch_events, 2))
    assert h.of("g")[-2].cause == "member b joined"
    out = c.expire(10**9)  # both sessions time out
    h.apply(derive(out.epoch_events, 3))
    causes = [e.cause for e in h.of("g") if e.kind == "group"]
    assert "member a fenced (session timeout)" in causes[-2]
    assert len(h.of("g")) == 4  # bounded
    out2 = c.update_topics(TopicMetadata({"t": 6}), 10**9)
    assert derive(out2.epoch_events, 4) == []  # empty group: nothing moves
    deleted = c.delete_group("g")
    h.apply(derive(deleted.epoch_events, 5))
    assert h.of("g") == ()


def test_a_streams_group_taking_over_an_empty_consumer_group_keeps_its_history() -> None:
    """The first streams member joins an id that held only operator-set offsets: in the one step, the
    empty consumer group is deleted and the streams group created. The deletion comes first, so the
    history it drops is the old group's, not the new one's (the runtime's store applies it in order,
    as the service and the durable store do)."""
    store = MemoryStore()
    rt = Runtime(Coordinator(topics=TopicMetadata({"in": 2})), store, lambda: 1_700_000_000_000)
    rt.step(lambda c: c.reset_offsets(OffsetResetRequest("p", {Shard("in", 0): 5}), 0))
    assert "p" in rt.coord.groups
    join = StreamsHeartbeatRequest("p", "a", 0, process_id="P1", rebalance_timeout_ms=5_000,
                                   topology=Topology.of({"count": ["in"]}))
    eff = rt.step(lambda c: c.streams_heartbeat(join, 1), ("p", "a"))
    assert "p" not in rt.coord.groups and rt.coord.streams.groups["p"].offsets[Shard("in", 0)].offset == 5
    assert [(e.kind, e.epoch, e.cause) for e in store.history.of("p")] == [
        ("group", 0, "group created"),
        ("group", 1, "member a joined; subscribed topics now in=2"),
        ("target", 1, "assignor highly-available; 1 member target(s) changed")]
    assert [type(e) for e in eff.epoch_events][:2] == [GroupDeleted, GroupCreated]
