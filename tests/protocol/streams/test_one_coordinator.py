"""Streams groups behind the one `Coordinator`: one namespace of group ids, commits by actives only,
operator offsets taken over on the first join, deletion, and recovery of both kinds from records."""

from __future__ import annotations

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import (
    HeartbeatRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetResetRequest,
)
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.records import GroupEpochRecord
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.records import StreamsOffsetRecord
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.protocol.topics import TopicMetadata

G = "pipeline"
TOPOLOGY = Topology.of({"count": ["in"]})
IN0, IN1 = Shard("in", 0), Shard("in", 1)


def coordinator(**kw: object) -> tuple[Coordinator, list[AnyRecord]]:
    return Coordinator(topics=TopicMetadata({"in": 2, "other": 1}), **kw), []  # type: ignore[arg-type]


def consumer_join(group: str) -> HeartbeatRequest:
    return HeartbeatRequest(group, "c1", 0, rebalance_timeout_ms=5000, subscribed_topics=("in",),
                            owned=frozenset())


def join(c: Coordinator, log: list[AnyRecord], mid: str, pid: str, now: int = 0) -> StreamsHeartbeatResponse:
    out = c.streams_heartbeat(StreamsHeartbeatRequest(G, mid, 0, process_id=pid, rebalance_timeout_ms=5000,
                                                      topology=TOPOLOGY), now)
    log.extend(out.records)
    return out.response


def test_a_group_id_names_one_kind_of_group() -> None:
    c, log = coordinator()
    assert join(c, log, "s1", "P1").error is ErrorCode.NONE
    consumer = c.heartbeat(consumer_join(G), 0)
    assert consumer.response.error is ErrorCode.INVALID_REQUEST and not consumer.records
    assert "is a streams group" in consumer.response.message
    # ...and the other way round: a consumer group with members is never taken over.
    c.heartbeat(consumer_join("orders"), 0)
    refused = c.streams_heartbeat(StreamsHeartbeatRequest("orders", "s1", 0, process_id="P1",
                                                          rebalance_timeout_ms=5000, topology=TOPOLOGY), 0)
    assert refused.response.error is ErrorCode.INVALID_REQUEST
    assert "is a consumer group" in refused.response.message
    assert "orders" not in c.streams.groups


def test_only_the_active_of_a_task_commits_its_source_offsets() -> None:
    c, log = coordinator(streams=StreamsConfig(standby_replicas=1))
    a = join(c, log, "a", "P1")
    assert a.assignment == MemberTasks(active=frozenset({TaskId("count", 0), TaskId("count", 1)}))
    ok = c.commit_offsets(OffsetCommitRequest(G, "a", a.member_epoch, {IN0: 10, IN1: 7}, "changelog=3"), 1)
    assert ok.response.error is ErrorCode.NONE
    assert all(isinstance(r, StreamsOffsetRecord) for r in ok.records) and len(ok.records) == 2
    unread = c.commit_offsets(OffsetCommitRequest(G, "a", a.member_epoch, {Shard("other", 0): 1}), 1)
    assert unread.response.error is ErrorCode.NOT_OWNED and "reads topic 'other'" in unread.response.message
    back = c.commit_offsets(OffsetCommitRequest(G, "a", a.member_epoch, {IN0: 9}), 1)
    assert back.response.error is ErrorCode.OFFSET_OUT_OF_ORDER
    stale = c.commit_offsets(OffsetCommitRequest(G, "a", a.member_epoch + 1, {IN0: 11}), 1)
    assert stale.response.error is ErrorCode.STALE_MEMBER_EPOCH
    fetched = c.fetch_offsets(OffsetFetchRequest(G, "", -1, None))
    assert fetched.offsets[IN0].offset == 10 and fetched.offsets[IN0].metadata == "changelog=3"


def test_a_standby_does_not_commit() -> None:
    c, log = coordinator(streams=StreamsConfig(standby_replicas=1))
    a = join(c, log, "a", "P1")
    b = join(c, log, "b", "P2", now=1)
    # b was placed a standby of whatever a keeps active (or a warm-up): either way not an active yet.
    assert b.assignment is not None and not b.assignment.active
    refused = c.commit_offsets(OffsetCommitRequest(G, "b", b.member_epoch, {IN0: 1}), 2)
    assert refused.response.error is ErrorCode.NOT_OWNED and "as active" in refused.response.message
    assert a.error is ErrorCode.NONE


def test_offsets_an_operator_set_before_anyone_joined_become_the_streams_groups() -> None:
    c, log = coordinator()
    reset = c.reset_offsets(OffsetResetRequest(G, {IN0: 100, IN1: 50}), 0)
    log.extend(reset.records)
    assert G in c.groups  # kept as an empty consumer group: nobody knows the kind yet
    assert join(c, log, "a", "P1", now=1).error is ErrorCode.NONE
    assert G not in c.groups and c.streams.groups[G].offsets[IN0].offset == 100
    assert any(isinstance(r, GroupEpochRecord) and r.epoch is None for r in log)
    rebuilt = Coordinator.recover(log, 2)
    assert G not in rebuilt.groups and rebuilt.streams.groups[G].offsets == c.streams.groups[G].offsets


def test_an_operator_resets_and_deletes_only_a_streams_group_without_members() -> None:
    c, log = coordinator()
    a = join(c, log, "a", "P1")
    busy = c.reset_offsets(OffsetResetRequest(G, {IN0: 0}), 1)
    assert busy.response.error is ErrorCode.NON_EMPTY_GROUP
    assert c.delete_group(G).response.error is ErrorCode.NON_EMPTY_GROUP
    left = c.streams_heartbeat(StreamsHeartbeatRequest(G, "a", -1), 2)
    assert left.response.error is ErrorCode.NONE and a.error is ErrorCode.NONE
    assert c.reset_offsets(OffsetResetRequest(G, {IN0: 5}), 3).response.error is ErrorCode.NONE
    gone = c.delete_group(G)
    assert gone.response.error is ErrorCode.NONE and G not in c.streams.groups
    assert c.fetch_offsets(OffsetFetchRequest(G, "", -1, None)).offsets == {}


def test_recovery_and_snapshots_cover_both_kinds() -> None:
    c, log = coordinator(streams=StreamsConfig(standby_replicas=1))
    out = c.heartbeat(consumer_join("orders"), 0)
    log.extend(out.records)
    a = join(c, log, "a", "P1")
    join(c, log, "b", "P2", now=1)
    log.extend(c.commit_offsets(OffsetCommitRequest(G, "a", a.member_epoch, {IN0: 3}), 2).records)
    for rebuilt in (Coordinator.recover(log, 3), Coordinator.recover(c.snapshot(), 3)):
        assert rebuilt.groups == c.groups
        assert rebuilt.streams.groups == c.streams.groups
    assert c.next_deadline() is not None
    # Both kinds' sessions run out together when nobody heartbeats.
    expired = c.expire(10**9)
    assert {f.member_id for f in expired.fences} == {"c1", "a", "b"}


def test_describe_names_the_kind_of_group() -> None:
    c, log = coordinator()
    join(c, log, "a", "P1")
    assert c.describe_streams_group(G).members[0].member_id == "a"
    assert c.list_streams_groups() == [(G, "stable", 1)]
    try:
        c.describe_group(G)
    except ProtocolError as e:
        assert "is a streams group" in str(e)
    else:
        raise AssertionError("describe_group described a streams group")
