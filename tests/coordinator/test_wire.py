"""Protobuf <-> core conversions: every value survives a trip through bytes, presence included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.protocol.assignors.base import GroupSpec, MemberSpec
from regroup.protocol.coordinator import DelegatedSpec
from regroup.protocol.describe import GroupDescription, MemberDescription
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import ranges
from regroup.protocol.messages import (
    Ack,
    CommittedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.state import GroupState
from regroup.protocol.topics import TopicMetadata
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import regroup_pb2_grpc, wire
from regroup.rpc.errors import WireError
from regroup.rpc.types import EpochChange, GroupDetails, MemberClient, OffsetStatus, TopicsInfo

text = st.text(max_size=12)
ids = st.text(min_size=1, max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
topic = st.sampled_from(["a", "b", "orders", "ü-topic"])
# Whole partitions, and key ranges of two parallelisms (regroup.protocol.keyrange).
shard = st.builds(lambda t, p: Shard(t, p), topic, st.integers(0, 50)) | st.builds(
    lambda t, p, r: Shard(t, p, *r), topic, st.integers(0, 50), st.sampled_from(ranges(2) + ranges(3)))
shard_sets = st.frozensets(shard, max_size=8)
opt = st.none() | text


def through_bytes(msg: Any) -> Any:
    return type(msg).FromString(msg.SerializeToString())


@settings(max_examples=150)
@given(st.builds(
    HeartbeatRequest, ids, ids, int32, opt, opt, st.none() | st.integers(0, 2**31 - 1),
    st.none() | st.tuples(*[topic] * 2), opt, opt, st.none() | st.tuples(ids), st.none() | shard_sets))
def test_heartbeat_request_round_trip(req: HeartbeatRequest) -> None:
    assert wire.heartbeat_request_from_pb(through_bytes(wire.heartbeat_request_to_pb(req))) == req


def test_absent_and_empty_are_different() -> None:
    unchanged = HeartbeatRequest("g", "m", 3)
    empty = HeartbeatRequest("g", "m", 0, subscribed_topics=(), subscribed_regex="", client_assignors=(),
                             owned=EMPTY)
    assert wire.heartbeat_request_from_pb(through_bytes(wire.heartbeat_request_to_pb(unchanged))) == unchanged
    assert wire.heartbeat_request_from_pb(through_bytes(wire.heartbeat_request_to_pb(empty))) == empty


@given(st.builds(HeartbeatResponse, st.sampled_from(list(ErrorCode)), text, text, int32, int32,
                 st.none() | shard_sets, st.booleans(), int32, int32))
def test_heartbeat_response_round_trip(resp: HeartbeatResponse) -> None:
    assert wire.heartbeat_response_from_pb(through_bytes(wire.heartbeat_response_to_pb(resp))) == resp


@given(st.builds(OffsetCommitRequest, ids, text, int32, st.dictionaries(shard, st.integers(-5, 2**62)), text))
def test_commit_round_trip(req: OffsetCommitRequest) -> None:
    back = wire.commit_request_from_pb(through_bytes(wire.commit_request_to_pb(req)))
    assert (back.group_id, back.member_id, back.member_epoch, dict(back.offsets), back.metadata) == (
        req.group_id, req.member_id, req.member_epoch, dict(req.offsets), req.metadata)


def test_a_shard_committed_twice_is_a_wire_error() -> None:
    msg = pb.OffsetCommitRequest(group_id="g", topics=[
        pb.TopicOffsets(topic="t", partitions=[pb.PartitionOffset(partition=0, offset=1)]),
        pb.TopicOffsets(topic="t", partitions=[pb.PartitionOffset(partition=0, offset=2)])])
    with pytest.raises(WireError, match="twice"):
        wire.commit_request_from_pb(msg)


@given(st.builds(OffsetFetchRequest, ids, text, int32, st.none() | st.lists(shard, unique=True).map(
    lambda s: tuple(sorted(s)))))
def test_fetch_request_round_trip(req: OffsetFetchRequest) -> None:
    assert wire.fetch_request_from_pb(through_bytes(wire.fetch_request_to_pb(req))) == req


@given(st.builds(OffsetFetchResponse, st.sampled_from(list(ErrorCode)), text, st.dictionaries(
    shard, st.builds(CommittedOffset, st.integers(0, 2**62), text, int32))))
def test_fetch_response_round_trip(resp: OffsetFetchResponse) -> None:
    back = wire.fetch_response_from_pb(through_bytes(wire.fetch_response_to_pb(resp)))
    assert (back.error, back.message, dict(back.offsets)) == (resp.error, resp.message, dict(resp.offsets))


@given(st.sampled_from(list(ErrorCode)), text)
def test_ack_round_trip(code: ErrorCode, message: str) -> None:
    assert wire.ack_from_pb(through_bytes(wire.ack_to_pb(Ack(code, message)))) == Ack(code, message)


def test_every_core_enum_value_has_a_proto_value() -> None:
    assert {wire.error_from_pb(wire.error_to_pb(c)) for c in ErrorCode} == set(ErrorCode)
    assert {wire.state_from_pb(wire.state_to_pb(s)) for s in GroupState} == set(GroupState)
    with pytest.raises(WireError, match="unknown error code"):
        wire.error_from_pb(999)


member_descriptions = st.builds(
    MemberDescription, ids, opt, opt, int32, int32, st.sampled_from(list(MemberStatus)), shard_sets,
    shard_sets, shard_sets, shard_sets, st.frozensets(topic), opt, st.frozensets(topic), opt,
    st.integers(0, 2**31 - 1))


@st.composite
def group_details(draw: st.DrawFn) -> GroupDetails:
    members = tuple(sorted({m.member_id: m for m in draw(st.lists(member_descriptions, max_size=4))}.values(),
                           key=lambda m: m.member_id))
    committed = draw(st.dictionaries(shard, st.builds(CommittedOffset, st.integers(0, 10**12), text, int32)))
    description = GroupDescription(
        draw(ids), draw(st.sampled_from(list(GroupState))), draw(int32), draw(int32), draw(text),
        draw(st.dictionaries(topic, st.integers(1, 100))), members, dict(sorted(committed.items())))
    small = st.none() | st.integers(0, 99)
    statuses = tuple(OffsetStatus(s, c.offset, c.metadata, c.commit_epoch, draw(small), draw(small),
                                  draw(st.none() | ids))
                     for s, c in sorted(committed.items()))
    clients = {m.member_id: MemberClient(draw(text), draw(text), draw(st.integers(-1, 10**6)))
               for m in members if draw(st.booleans())}
    clients = {k: v for k, v in clients.items()
               if v.client_id or v.client_host or v.last_heartbeat_age_ms >= 0}
    change = st.builds(EpochChange, st.integers(0, 2**50), st.sampled_from(["group", "target"]), int32, text)
    history = tuple(draw(st.lists(change, max_size=3)))
    return GroupDetails(description, clients, statuses, history, draw(text))


# Large nested draws: on a loaded machine generation alone can pass Hypothesis' speed checks.
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_details())
def test_group_details_round_trip(details: GroupDetails) -> None:
    assert wire.group_details_from_pb(through_bytes(wire.group_details_to_pb(details))) == details


def test_delegated_spec_and_install_round_trip() -> None:
    spec = DelegatedSpec(7, "mine", GroupSpec(
        {"a": MemberSpec("a", frozenset({"t"}), frozenset({Shard("t", 0)}), "i-a", "r1"),
         "b": MemberSpec("b", frozenset({"t"}))}, TopicMetadata({"t": 2})))
    back = wire.spec_response_from_pb(through_bytes(wire.spec_response_to_pb(spec)))
    assert back == spec
    assignment = {"a": frozenset({Shard("t", 0)}), "b": frozenset({Shard("t", 1)})}
    msg = through_bytes(wire.install_request_to_pb("g", "a", 3, 7, assignment))
    assert (msg.group_id, msg.member_id, msg.member_epoch, msg.group_epoch) == ("g", "a", 3, 7)
    assert wire.install_assignment_from_pb(msg) == assignment


def test_lists_topics_and_nudges_round_trip() -> None:
    groups = [("g", GroupState.STABLE, 3), ("h", GroupState.EMPTY, 0)]
    assert wire.list_groups_from_pb(through_bytes(wire.list_groups_to_pb(groups))) == groups
    info = TopicsInfo({"a": 1, "b": 4}, 12, "boom")
    assert wire.topics_from_pb(through_bytes(wire.topics_to_pb(info))) == info
    from regroup.rpc.types import Nudge
    n = Nudge("g", "m", 4)
    assert wire.nudge_from_pb(through_bytes(wire.nudge_to_pb(n))) == n
    assert wire.delete_offsets_from_pb(wire.delete_offsets_to_pb("g", None)) == ("g", None)
    some = wire.delete_offsets_to_pb("g", [Shard("t", 1)])
    assert wire.delete_offsets_from_pb(some) == ("g", (Shard("t", 1),))


def test_service_table_matches_the_proto(tmp_path: Any) -> None:
    """The methods the server registers are exactly those proto/regroup.proto declares."""
    from regroup.coordinator.service import CoordinatorService
    from regroup.coordinator.store import DurableStore
    from regroup.protocol.coordinator import Coordinator

    service = pb.DESCRIPTOR.services_by_name["Coordinator"]
    assert service.full_name == wire.SERVICE_NAME
    registered = CoordinatorService(Coordinator(), DurableStore(str(tmp_path))).method_handlers()
    assert set(registered) == {m.name for m in service.methods}
    for m in service.methods:
        assert registered[m.name].response_streaming == m.server_streaming
        assert registered[m.name].request_streaming == m.client_streaming
    assert hasattr(regroup_pb2_grpc, "CoordinatorStub")


def test_list_groups_carries_both_kinds_and_an_old_client_reads_its_consumer_groups() -> None:
    from regroup.protocol.streams.state import StreamsGroupState

    msg = through_bytes(wire.list_groups_to_pb([("g", GroupState.STABLE, 3)],
                                               [("counts", "not ready", 1), ("a-streams", "stable", 2)]))
    rows = wire.list_groups_from_pb(msg)
    assert rows == [("a-streams", StreamsGroupState.STABLE, 2), ("counts", StreamsGroupState.NOT_READY, 1),
                    ("g", GroupState.STABLE, 3)]
    assert [r.kind for r in rows] == ["streams", "streams", "consumer"]
    # A client older than streams groups reads `groups` only: the consumer groups, as before.
    assert [g.group_id for g in msg.groups] == ["g"]
    msg.streams_groups[0].state = 99  # type: ignore[assignment]
    with pytest.raises(WireError, match="streams group 'counts': unknown streams group state 99"):
        wire.list_groups_from_pb(msg)
