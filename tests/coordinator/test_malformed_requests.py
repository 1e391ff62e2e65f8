"""A request body that is not the method's protobuf message is answered INVALID_ARGUMENT with
"malformed <Method> request: ...", on every kind of call; the coordinator logs one warning per call
(no traceback) and goes on serving. Raw bytes through a real coordinator process."""

from __future__ import annotations

import re
from collections.abc import Iterator

import grpc
import pytest

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import EMPTY
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.wire import SERVICE_NAME
from tests.coordinator.server_proc import ServerProc, start_server

CORRUPT = b"\xff\xff\xff\xff"  # field 31, wire type 7: no such wire type
BAD_UTF8 = b"\x0a\x02\xff\xfe"  # field 1 (a string in these requests) with bytes that are not UTF-8
TRUNCATED = b"\x0a\x10abc"  # field 1 claims 16 bytes, 3 follow

UNARY = ["Heartbeat", "CommitOffsets", "FetchOffsets", "GetAssignmentSpec", "InstallAssignment",
         "DescribeGroup", "ListGroups", "DeleteGroup", "ResetOffsets", "DeleteOffsets", "Topics",
         "RefreshTopics", "StreamsHeartbeat", "DescribeStreamsGroup"]
#: Requests whose field 1 is a string (the others have no field 1, or none at all).
FIELD_1_STRING = ["Heartbeat", "CommitOffsets", "FetchOffsets", "DescribeGroup", "DeleteGroup",
                  "StreamsHeartbeat"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    s = start_server(tmp_path_factory.mktemp("malformed") / "data", "--log", "static:orders=2")
    try:
        yield s
    finally:
        assert s.terminate() == 0, s.log()


@pytest.fixture
def channel(server: ServerProc) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def identity(b: bytes) -> bytes:
    return b


def refusal(call: object, payload: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        result = call(payload, timeout=10)  # type: ignore[operator]
        if not isinstance(result, bytes):
            list(result)  # a response stream: the status comes with its end
    return e.value


@pytest.mark.parametrize("method", UNARY)
def test_unary_calls(channel: grpc.Channel, method: str) -> None:
    call = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=identity,
                               response_deserializer=identity)
    payloads = [CORRUPT, TRUNCATED] + ([BAD_UTF8] if method in FIELD_1_STRING else [])
    for payload in payloads:
        e = refusal(call, payload)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (payload, e.details())
        assert e.details().startswith(f"malformed {method} request: not a valid regroup.v1."), e.details()
    if method in FIELD_1_STRING:
        assert "bad UTF-8" in refusal(call, BAD_UTF8).details()


def test_streaming_calls(channel: grpc.Channel) -> None:
    watch = channel.unary_stream(f"/{SERVICE_NAME}/Watch", request_serializer=identity,
                                 response_deserializer=identity)
    e = refusal(watch, CORRUPT)
    assert (e.code(), e.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "malformed Watch request: not a valid regroup.v1.WatchRequest message (wire format was corrupt)")

    stream = channel.stream_stream(f"/{SERVICE_NAME}/HeartbeatStream", request_serializer=identity,
                                   response_deserializer=identity)
    e = refusal(stream, iter([CORRUPT]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.details().startswith("malformed HeartbeatStream request: not a valid "
                                  "regroup.v1.HeartbeatRequest message")


def test_the_coordinator_goes_on_serving_and_logs_warnings_only(server: ServerProc,
                                                                channel: grpc.Channel) -> None:
    heartbeat = channel.unary_unary(f"/{SERVICE_NAME}/Heartbeat", request_serializer=identity,
                                    response_deserializer=identity)
    assert refusal(heartbeat, BAD_UTF8).code() == grpc.StatusCode.INVALID_ARGUMENT
    with CoordinatorClient(server.address, timeout_s=10) as c:
        r = c.heartbeat(HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=30_000,
                                         subscribed_topics=("orders",), owned=EMPTY))
        assert r.error is ErrorCode.NONE and r.member_epoch == 1, r.message
    log = server.log()
    assert re.search(r"WARNING regroup\.coordinator: Heartbeat from ipv4:127\.0\.0\.1:\d+ ended with "
                     r"INVALID_ARGUMENT: malformed Heartbeat request: .*bad UTF-8", log), log
    assert "Traceback" not in log and "ERROR" not in log and "DecodeError" not in log, log
