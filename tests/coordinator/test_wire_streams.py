"""Protobuf <-> core conversions of streams groups: values survive bytes, presence included, and
malformed messages are refused naming the field."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.errors import ErrorCode
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.streams.describe import (
    StreamsGroupDescription,
    StreamsMemberDescription,
    WarmupProgress,
)
from regroup.protocol.streams.messages import (
    READY,
    GroupStatus,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
)
from regroup.protocol.streams.state import StreamsGroupState
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import regroup_pb2_grpc, streams_wire
from regroup.rpc.errors import WireError
from tests.coordinator.test_codec import member_tasks, task_ids, topologies
from tests.protocol.streams.fake_members import GROUP, Deployment

text = st.text(max_size=12)
ids = st.text(min_size=1, max_size=12)
opt = st.none() | text
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
shard = st.builds(lambda t, p: Shard(t, p), st.sampled_from(["in", "clicks", "ü-topic"]),
                  st.integers(0, 2**31 - 1))
task_offsets = st.dictionaries(task_ids, st.dictionaries(shard, int64, max_size=3), max_size=5)
statuses = st.just(READY) | st.builds(GroupStatus, st.booleans(), st.lists(text, max_size=3).map(tuple))


def through_bytes(msg: Any) -> Any:
    return type(msg).FromString(msg.SerializeToString())


# ---------------------------------------------------------------------------------------- heartbeat

requests = st.builds(
    StreamsHeartbeatRequest, ids, ids, int32, opt, opt, st.none() | st.integers(0, 2**31 - 1),
    st.none() | topologies(), st.none() | member_tasks, st.none() | task_offsets)
responses = st.builds(StreamsHeartbeatResponse, st.sampled_from(list(ErrorCode)), text, text, int32, int32,
                      st.none() | member_tasks, statuses, int32, int32)


@settings(max_examples=150)
@given(requests)
def test_heartbeat_request_round_trip(req: StreamsHeartbeatRequest) -> None:
    back = streams_wire.streams_heartbeat_request_from_pb(
        through_bytes(streams_wire.streams_heartbeat_request_to_pb(req)))
    assert back == req


@settings(max_examples=150)
@given(responses)
def test_heartbeat_response_round_trip(resp: StreamsHeartbeatResponse) -> None:
    back = streams_wire.streams_heartbeat_response_from_pb(
        through_bytes(streams_wire.streams_heartbeat_response_to_pb(resp)))
    assert back == resp


def test_unchanged_and_empty_are_different() -> None:
    unchanged = StreamsHeartbeatRequest("g", "m", 3)
    empty = StreamsHeartbeatRequest("g", "m", 3, owned=NO_TASKS, task_offsets={})
    copy_without_offsets = StreamsHeartbeatRequest("g", "m", 3, task_offsets={TaskId("s", 0): {}})
    for req in (unchanged, empty, copy_without_offsets):
        msg = through_bytes(streams_wire.streams_heartbeat_request_to_pb(req))
        assert streams_wire.streams_heartbeat_request_from_pb(msg) == req
    assert not through_bytes(streams_wire.streams_heartbeat_request_to_pb(unchanged)).HasField("owned")
    assert through_bytes(streams_wire.streams_heartbeat_request_to_pb(empty)).HasField("owned")
    for assignment in (None, NO_TASKS):
        resp = StreamsHeartbeatResponse(ErrorCode.NONE, member_epoch=2, assignment=assignment)
        back = streams_wire.streams_heartbeat_response_from_pb(
            through_bytes(streams_wire.streams_heartbeat_response_to_pb(resp)))
        assert back.assignment == assignment


def test_a_response_without_status_is_ready() -> None:
    """What another client or an older server leaves out is the core's default."""
    back = streams_wire.streams_heartbeat_response_from_pb(pb.StreamsHeartbeatResponse(member_epoch=1))
    assert back.status == READY and back.assignment is None
    not_ready = GroupStatus(False, ("subtopology 's': source topic 'in' does not exist",))
    resp = StreamsHeartbeatResponse(ErrorCode.NONE, status=not_ready)
    assert streams_wire.streams_heartbeat_response_from_pb(
        through_bytes(streams_wire.streams_heartbeat_response_to_pb(resp))).status == not_ready


@given(member_tasks)
def test_equal_tasks_give_equal_bytes(tasks: MemberTasks) -> None:
    """Sets go out sorted: how a set was built never shows on the wire."""
    rebuilt = MemberTasks(*(frozenset(sorted(s, reverse=True)) for s in (tasks.active, tasks.standby,
                                                                         tasks.warmup)))
    assert (streams_wire.member_tasks_to_pb(rebuilt).SerializeToString(deterministic=True)
            == streams_wire.member_tasks_to_pb(tasks).SerializeToString(deterministic=True))


def test_key_range_tasks_travel_and_whole_partition_tasks_are_unchanged_on_the_wire() -> None:
    """K=1 writes none of the key-range fields (old peers read the same bytes); K>1 round-trips."""
    whole = MemberTasks(frozenset({TaskId("s", 0), TaskId("s", 1)}))
    msg = streams_wire.member_tasks_to_pb(whole)
    assert msg.SerializeToString(deterministic=True) == pb.MemberTasks(
        active=_subs(("s", [0, 1]))).SerializeToString(deterministic=True)
    ranged = MemberTasks(frozenset({TaskId("s", 0, 1, 4), TaskId("s", 2, 0, 4), TaskId("t", 0)}),
                         warmup=frozenset({TaskId("s", 0, 3, 4)}))
    assert streams_wire.member_tasks_from_pb(through_bytes(streams_wire.member_tasks_to_pb(ranged))) == ranged
    topology = Topology.of({"s": ["a"], "t": ["b"]}, parallelism={"s": 4})
    back = streams_wire.topology_from_pb(through_bytes(streams_wire.topology_to_pb(topology)))
    assert back == topology and back.subtopology("s").parallelism == 4  # type: ignore[union-attr]
    offsets = {TaskId("s", 0, 1, 4): {TaskId("s", 0, 1, 4).shard("a"): 7}}
    back_offsets = streams_wire.task_offsets_from_pb(through_bytes(streams_wire.task_offsets_to_pb(offsets)))
    assert back_offsets == offsets


def test_topology_goes_out_sorted() -> None:
    msg = streams_wire.topology_to_pb(Topology.of({"join": ["views", "clicks"], "count": ["orders"]}))
    assert [(s.subtopology_id, list(s.source_topics)) for s in msg.subtopologies] == [
        ("count", ["orders"]), ("join", ["clicks", "views"])]


# ---------------------------------------------------------------------------------------- describe


@st.composite
def descriptions(draw: st.DrawFn) -> StreamsGroupDescription:
    lags = st.dictionaries(task_ids, st.integers(0, 2**62), max_size=4)
    warmup = st.builds(WarmupProgress, task_ids, st.none() | st.integers(0, 2**62), st.integers(0, 2**62))
    member = st.builds(StreamsMemberDescription, ids, opt, text, int32, int32,
                       st.sampled_from(list(MemberStatus)), member_tasks, member_tasks, member_tasks, lags,
                       st.lists(warmup, max_size=3).map(tuple))
    members = tuple(draw(st.lists(member, max_size=3)))
    return StreamsGroupDescription(draw(ids), draw(st.sampled_from(list(StreamsGroupState))), draw(statuses),
                                   draw(int32), draw(int32), draw(st.none() | topologies()), members)


@settings(max_examples=60)
@given(descriptions())
def test_description_round_trip(d: StreamsGroupDescription) -> None:
    back = streams_wire.streams_description_from_pb(through_bytes(streams_wire.streams_description_to_pb(d)))
    assert back == d


def test_a_real_description_round_trips() -> None:
    """A group the core really describes: standbys, a warm-up restoring, lags, pending revocation."""
    d = Deployment(config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=10))
    d.join("a", "P1")
    d.commit("a", 500)
    d.heartbeat("a")
    d.join("b", "P2")
    d.heartbeat("a")
    d.heartbeat("b")
    real = d.sg.describe_group(GROUP)
    assert any(m.warmups for m in real.members) and any(m.lags for m in real.members)
    assert any(m.target.standby for m in real.members)
    back = streams_wire.streams_description_from_pb(
        through_bytes(streams_wire.streams_description_to_pb(real)))
    assert back == real
    wrapped = through_bytes(pb.DescribeStreamsGroupResponse(
        error=pb.ERROR_CODE_NONE, group=streams_wire.streams_description_to_pb(real)))
    assert streams_wire.streams_description_from_pb(wrapped.group) == real


def test_every_streams_group_state_has_a_proto_value() -> None:
    assert {streams_wire.streams_state_from_pb(streams_wire.streams_state_to_pb(s))
            for s in StreamsGroupState} == set(StreamsGroupState)


# ---------------------------------------------------------------------------------------- malformed


def _subs(*pairs: tuple[str, list[int]]) -> list[pb.SubtopologyTasks]:
    return [pb.SubtopologyTasks(subtopology=s, partitions=ps) for s, ps in pairs]


def _position(sub: str, p: int, *offsets: tuple[str, int, int]) -> pb.TaskPosition:
    return pb.TaskPosition(subtopology=sub, partition=p, topics=[
        pb.TopicOffsets(topic=t, partitions=[pb.PartitionOffset(partition=q, offset=o)])
        for t, q, o in offsets])


def _topology(*subs: tuple[str, list[str]]) -> pb.Topology:
    return pb.Topology(subtopologies=[pb.Subtopology(subtopology_id=s, source_topics=ts) for s, ts in subs])


def _request(**fields: Any) -> pb.StreamsHeartbeatRequest:
    return pb.StreamsHeartbeatRequest(group_id="g", member_id="m", member_epoch=0, **fields)


@pytest.mark.parametrize(("msg", "problem"), [
    (_request(owned=pb.MemberTasks(active=_subs(("s", [0, 1]), ("s", [1])))),
     "owned.active lists task s_1 twice"),
    (_request(owned=pb.MemberTasks(warmup=_subs(("s", [2, 2])))), "owned.warmup lists task s_2 twice"),
    (_request(task_offsets=pb.TaskOffsets(tasks=[_position("s", 0), _position("s", 0)])),
     "task_offsets lists task s_0 twice"),
    (_request(task_offsets=pb.TaskOffsets(tasks=[_position("s", 0, ("in", 0, 5), ("in", 0, 6))])),
     "task_offsets of task s_0: offsets list in:0 twice"),
    (_request(topology=pb.Topology()), "topology: a topology needs at least one subtopology"),
    (_request(topology=_topology(("s", ["a"]), ("s", ["b"]))), "topology: subtopology id 's' is used twice"),
    (_request(topology=_topology(("s", ["a"]), ("t", ["a"]))),
     "topology: topic 'a' is a source of both subtopology 's' and 't'"),
    (_request(topology=_topology(("s", ["a", "b", "a"]))),
     "topology: subtopology 's' lists source topic 'a' twice"),
    (_request(topology=_topology((" ", ["a"]))), "topology: a subtopology id must be a non-empty string"),
    (_request(topology=_topology(("s", []))), "topology: subtopology 's' has no source topics"),
    (_request(owned=pb.MemberTasks(active=[pb.SubtopologyTasks(subtopology="s", partitions=[0, 0],
                                                               parallelism=2, parts=[1, 1])])),
     "owned.active lists task s_0.1of2 twice"),
    (_request(owned=pb.MemberTasks(active=[pb.SubtopologyTasks(subtopology="s", partitions=[0],
                                                               parallelism=2, parts=[2])])),
     "owned.active: subtopology 's' lists key range 2 of 2; ranges are 0..1"),
    (_request(owned=pb.MemberTasks(active=[pb.SubtopologyTasks(subtopology="s", partitions=[0, 1],
                                                               parallelism=2, parts=[0])])),
     "lists 2 partitions and 1 key ranges"),
    (_request(owned=pb.MemberTasks(active=[pb.SubtopologyTasks(subtopology="s", partitions=[0], parts=[0])])),
     "lists key ranges with parallelism 0"),
    (_request(task_offsets=pb.TaskOffsets(tasks=[pb.TaskPosition(subtopology="s", partition=0, part=3,
                                                                  parallelism=2)])),
     "task_offsets: task s_0 names key range 3 of 2"),
    (_request(topology=pb.Topology(subtopologies=[pb.Subtopology(subtopology_id="s", source_topics=["a"],
                                                                 parallelism=2000)])),
     "topology: subtopology 's' has parallelism 2000"),
])
def test_a_malformed_request_is_refused_naming_the_field(msg: pb.StreamsHeartbeatRequest,
                                                        problem: str) -> None:
    with pytest.raises(WireError, match=re.escape(problem)):
        streams_wire.streams_heartbeat_request_from_pb(through_bytes(msg))


def test_a_malformed_response_is_refused_naming_the_field() -> None:
    with pytest.raises(WireError, match=re.escape("assignment.standby lists task s_3 twice")):
        streams_wire.streams_heartbeat_response_from_pb(pb.StreamsHeartbeatResponse(
            assignment=pb.MemberTasks(standby=_subs(("s", [3]), ("s", [3])))))
    with pytest.raises(WireError, match="unknown error code 999"):
        streams_wire.streams_heartbeat_response_from_pb(pb.StreamsHeartbeatResponse(error=999))  # type: ignore[arg-type]


def _member(**fields: Any) -> pb.StreamsMemberDescription:
    return pb.StreamsMemberDescription(**{"member_id": "m1", "process_id": "P1",
                                          "status": pb.MEMBER_STATUS_STABLE, **fields})


def _description(**fields: Any) -> pb.StreamsGroupDescription:
    return pb.StreamsGroupDescription(**{"group_id": "g", "state": pb.STREAMS_GROUP_STATE_STABLE, **fields})


@pytest.mark.parametrize(("msg", "problem"), [
    (_description(state=99), "state: unknown streams group state 99"),
    (_description(state=pb.STREAMS_GROUP_STATE_UNSPECIFIED), "state: unknown streams group state 0"),
    (_description(members=[_member(status=pb.MEMBER_STATUS_UNKNOWN)]),
     "member 'm1': status: unknown member status 4"),
    (_description(members=[_member(lags=[
        pb.TaskLag(subtopology="s", partition=0, lag=1), pb.TaskLag(subtopology="s", partition=0, lag=2)])]),
     "member 'm1': lags gives the lag of task s_0 twice"),
    (_description(members=[_member(
        pending_revocation=pb.MemberTasks(active=_subs(("s", [1, 1]))))]),
     "member 'm1': pending_revocation.active lists task s_1 twice"),
    (_description(topology=pb.Topology()),
     "topology: a topology needs at least one subtopology"),
])
def test_a_malformed_description_is_refused_naming_the_field(msg: pb.StreamsGroupDescription,
                                                            problem: str) -> None:
    with pytest.raises(WireError, match=re.escape(problem)):
        streams_wire.streams_description_from_pb(through_bytes(msg))


# ---------------------------------------------------------------------------------------- the service


def test_the_proto_declares_the_streams_calls_and_the_stubs_have_them() -> None:
    methods = {m.name: m for m in pb.DESCRIPTOR.services_by_name["Coordinator"].methods}
    heartbeat, describe = methods["StreamsHeartbeat"], methods["DescribeStreamsGroup"]
    assert (heartbeat.input_type.name, heartbeat.output_type.name) == ("StreamsHeartbeatRequest",
                                                                       "StreamsHeartbeatResponse")
    assert (describe.input_type.name, describe.output_type.name) == ("DescribeGroupRequest",
                                                                     "DescribeStreamsGroupResponse")
    assert not any(m.client_streaming or m.server_streaming for m in (heartbeat, describe))
    servicer = regroup_pb2_grpc.CoordinatorServicer
    assert all(hasattr(servicer, name) for name in methods)  # the old calls are all still there
    assert hasattr(servicer, "StreamsHeartbeat") and hasattr(servicer, "DescribeStreamsGroup")
