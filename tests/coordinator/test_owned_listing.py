"""A heartbeat's owned list is decoded as listed (`regroup.protocol.validation.shards_from_listing`,
`regroup.protocol.streams.fencing.tasks_from_listing`): a partition or task listed twice, or more of
them than the coordinator's ``max_owned_shards``, is refused at decoding, naming it, before a single
shard or task is built — so 15 million copies of one partition cost the coordinator a parse, no more.
Through the wire functions, then through a real coordinator process."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.store import DurableStore
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.topology import TaskId
from regroup.protocol.topics import TopicMetadata
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import streams_wire, wire
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import WireError
from regroup.rpc.wire import SERVICE_NAME
from tests.coordinator.server_proc import ServerProc, start_server

#: Copies of one partition in the big requests: 15 MB on the wire, under the coordinator's 16 MiB limit.
COPIES = 15_000_000
LIMIT = CoordinatorConfig().max_owned_shards


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(message: type, name: str, payload: bytes) -> bytes:
    """One length-delimited field of ``message`` (a message, or packed integers), as bytes: appending
    it to a serialized message adds it (protobuf merges concatenated messages)."""
    number = message.DESCRIPTOR.fields_by_name[name].number  # type: ignore[attr-defined]
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _copies_of_partition_0(group: type, name_field: str, name: str, copies: int) -> bytes:
    """A ``TopicPartitions`` / ``SubtopologyTasks`` listing partition 0 ``copies`` times, built as
    bytes (one zero byte each, packed): far quicker than extending a repeated field in Python."""
    return group(**{name_field: name}).SerializeToString() + _field(group, "partitions", b"\0" * copies)


def heartbeat_owning_copies(copies: int) -> bytes:
    head = pb.HeartbeatRequest(group_id="g", member_id="m", member_epoch=3).SerializeToString()
    topic = _copies_of_partition_0(pb.TopicPartitions, "topic", "t", copies)
    return head + _field(pb.HeartbeatRequest, "owned", _field(pb.ShardSet, "topics", topic))


def streams_heartbeat_owning_copies(copies: int) -> bytes:
    head = pb.StreamsHeartbeatRequest(group_id="g", member_id="m", member_epoch=3).SerializeToString()
    sub = _copies_of_partition_0(pb.SubtopologyTasks, "subtopology", "s", copies)
    return head + _field(pb.StreamsHeartbeatRequest, "owned", _field(pb.MemberTasks, "active", sub))


def owning(*groups: tuple[str, list[int]]) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(group_id="g", member_id="m", member_epoch=3, owned=pb.ShardSet(
        topics=[pb.TopicPartitions(topic=t, partitions=ps) for t, ps in groups]))


def streams_owning(**roles: list[tuple[str, list[int]]]) -> pb.StreamsHeartbeatRequest:
    tasks = {role: [pb.SubtopologyTasks(subtopology=s, partitions=ps) for s, ps in groups]
             for role, groups in roles.items()}
    return pb.StreamsHeartbeatRequest(group_id="g", member_id="m", member_epoch=3,
                                      owned=pb.MemberTasks(**tasks))


# ---------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize(("msg", "twice"), [
    (owning(("t", [0, 1, 0])), "t:0"),
    (owning(("t", [0, 1]), ("u", [5]), ("t", [2, 1])), "t:1"),  # the topic listed again, the partition too
])
def test_a_partition_owned_twice_is_refused_naming_it(msg: pb.HeartbeatRequest, twice: str) -> None:
    with pytest.raises(WireError, match=re.escape(f"owned lists partition {twice} twice")):
        wire.heartbeat_request_from_pb(pb.HeartbeatRequest.FromString(msg.SerializeToString()))


def test_the_owned_limit_counts_the_partitions_as_listed() -> None:
    msg = owning(("t", [0, 1]), ("u", [0, 1]))
    assert wire.heartbeat_request_from_pb(msg, max_owned=4).owned == {
        Shard("t", 0), Shard("t", 1), Shard("u", 0), Shard("u", 1)}
    with pytest.raises(WireError, match=re.escape("owned lists at least 4 partitions; the limit is 3")):
        wire.heartbeat_request_from_pb(msg, max_owned=3)
    # Absent is "unchanged", present and empty is "owns nothing": both still decode.
    assert wire.heartbeat_request_from_pb(pb.HeartbeatRequest(group_id="g")).owned is None
    empty = wire.heartbeat_request_to_pb(HeartbeatRequest("g", "m", 0, owned=EMPTY))
    assert wire.heartbeat_request_from_pb(empty, max_owned=0).owned == EMPTY


def test_a_response_still_folds_a_repeat() -> None:
    """Answers and assignments are the coordinator's own: `shards_from_pb` keeps taking them as sets."""
    listed = pb.ShardSet(topics=[pb.TopicPartitions(topic="t", partitions=[1, 1])])
    resp = pb.HeartbeatResponse(assignment=listed)
    assert wire.heartbeat_response_from_pb(resp).assignment == {Shard("t", 1)}


def test_fifteen_million_copies_of_one_partition_are_refused_by_their_count() -> None:
    msg = pb.HeartbeatRequest.FromString(heartbeat_owning_copies(COPIES))
    assert len(msg.owned.topics[0].partitions) == COPIES
    with pytest.raises(WireError, match=re.escape(f"owned lists at least {COPIES} partitions; the limit is "
                                                  f"{LIMIT}")):
        wire.heartbeat_request_from_pb(msg)


def test_streams_tasks_are_counted_in_all_roles_before_any_is_built() -> None:
    msg = streams_owning(active=[("s", [0, 1])], standby=[("s", [2, 3])], warmup=[("t", [0])])
    assert streams_wire.streams_heartbeat_request_from_pb(msg, max_owned=5).owned == MemberTasks(
        frozenset({TaskId("s", 0), TaskId("s", 1)}), frozenset({TaskId("s", 2), TaskId("s", 3)}),
        frozenset({TaskId("t", 0)}))
    with pytest.raises(WireError, match=re.escape("owned lists 5 tasks in all roles; the limit is 4")):
        streams_wire.streams_heartbeat_request_from_pb(msg, max_owned=4)
    twice = streams_owning(standby=[("s", [3]), ("s", [3])])
    with pytest.raises(WireError, match=re.escape("owned.standby lists task s_3 twice; list each task once")):
        streams_wire.streams_heartbeat_request_from_pb(twice)

    big = pb.StreamsHeartbeatRequest.FromString(streams_heartbeat_owning_copies(COPIES))
    assert len(big.owned.active[0].partitions) == COPIES
    with pytest.raises(WireError, match=re.escape(f"owned lists {COPIES} tasks in all roles; the limit is "
                                                  f"{LIMIT}")):
        streams_wire.streams_heartbeat_request_from_pb(big)


# ---------------------------------------------------------------------------------------- a real coordinator


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    s = start_server(tmp_path_factory.mktemp("owned") / "data", "--log", "static:t=4")
    try:
        yield s
    finally:
        assert s.terminate() == 0, s.log()


@pytest.fixture
def channel(server: ServerProc) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def _call(channel: grpc.Channel, method: str, response: type, payload: bytes) -> object:
    call = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=lambda b: b,
                               response_deserializer=response.FromString)  # type: ignore[attr-defined]
    return call(payload, timeout=60)


def test_the_coordinator_refuses_them_with_invalid_request_and_goes_on(server: ServerProc,
                                                                       channel: grpc.Channel) -> None:
    twice = _call(channel, "Heartbeat", pb.HeartbeatResponse, owning(("t", [2, 2])).SerializeToString())
    assert isinstance(twice, pb.HeartbeatResponse)
    assert twice.error == pb.ERROR_CODE_INVALID_REQUEST
    assert twice.message == "owned lists partition t:2 twice; list each partition once"

    big = _call(channel, "Heartbeat", pb.HeartbeatResponse, heartbeat_owning_copies(COPIES))
    assert isinstance(big, pb.HeartbeatResponse)
    assert big.error == pb.ERROR_CODE_INVALID_REQUEST
    assert big.message == f"owned lists at least {COPIES} partitions; the limit is {LIMIT}"

    streams = _call(channel, "StreamsHeartbeat", pb.StreamsHeartbeatResponse,
                    streams_owning(warmup=[("s", [1, 1])]).SerializeToString())
    assert isinstance(streams, pb.StreamsHeartbeatResponse)
    assert streams.error == pb.ERROR_CODE_INVALID_REQUEST
    assert streams.message == "owned.warmup lists task s_1 twice; list each task once"

    with CoordinatorClient(server.address, timeout_s=30) as c:  # still serving, nothing changed
        joined = c.heartbeat(HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=30_000,
                                              subscribed_topics=("t",), owned=EMPTY))
        assert joined.error is ErrorCode.NONE and joined.member_epoch == 1, joined.message
    assert "Traceback" not in server.log()


def test_the_service_decodes_with_its_own_limit(tmp_path: Path) -> None:
    """The limit at decoding is the coordinator's configured ``max_owned_shards``, not the default."""

    async def main() -> tuple[pb.HeartbeatResponse, pb.StreamsHeartbeatResponse, pb.HeartbeatResponse]:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        coord = Coordinator(CoordinatorConfig(max_owned_shards=2), topics=TopicMetadata({"t": 4}))
        service = CoordinatorService(coord, store)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((service.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                heartbeat = ch.unary_unary(f"/{SERVICE_NAME}/Heartbeat",
                                           request_serializer=pb.HeartbeatRequest.SerializeToString,
                                           response_deserializer=pb.HeartbeatResponse.FromString)
                streams = ch.unary_unary(f"/{SERVICE_NAME}/StreamsHeartbeat",
                                         request_serializer=pb.StreamsHeartbeatRequest.SerializeToString,
                                         response_deserializer=pb.StreamsHeartbeatResponse.FromString)
                three = await heartbeat(owning(("t", [0, 1, 2])), timeout=30)
                roles = await streams(streams_owning(active=[("s", [0])], warmup=[("s", [1, 2])]), timeout=30)
                join = wire.heartbeat_request_to_pb(HeartbeatRequest(
                    "g", "m", 0, rebalance_timeout_ms=30_000, subscribed_topics=("t",), owned=EMPTY))
                joined = await heartbeat(join, timeout=30)
        finally:
            await server.stop(0)
            await service.close()
            await store.close()
        return three, roles, joined

    three, roles, joined = asyncio.run(main())
    assert (three.error, three.message) == (pb.ERROR_CODE_INVALID_REQUEST,
                                            "owned lists at least 3 partitions; the limit is 2")
    assert (roles.error, roles.message) == (pb.ERROR_CODE_INVALID_REQUEST,
                                            "owned lists 3 tasks in all roles; the limit is 2")
    assert joined.error == pb.ERROR_CODE_NONE and joined.member_epoch == 1, joined.message
