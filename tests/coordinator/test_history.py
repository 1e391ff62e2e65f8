"""Epoch history worded from the epoch events the core reports with each step."""

from __future__ import annotations

from regroup.coordinator.history import EpochHistory, derive
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import EMPTY
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
