"""How `CoordinatorClient` reports a request the coordinator could not read at all (gRPC
INVALID_ARGUMENT, "malformed <Method> request: ..."): INVALID_REQUEST, like a request a handler could not
decode — in the response object, or as `RequestRejected` — never `CoordinatorUnavailable`, which
callers retry. A member session given such an answer stops with a Fatal action instead of retrying.

The typed client cannot send bytes the coordinator fails to parse, so a stand-in server answers every
call INVALID_ARGUMENT, as the coordinator answers malformed ones (tests/coordinator/
test_malformed_requests.py shows that side)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from regroup.client.membership import Membership
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import Fatal, MemberState, MemberStateMachine
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest, OffsetFetchRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import RequestRejected

STREAMING = {"Watch": "unary_stream", "HeartbeatStream": "stream_stream"}


def _details(method: str) -> str:
    return f"malformed {method} request: not a valid regroup.v1.{method}Request message (bad UTF-8)"


class RefuseAll(grpc.GenericRpcHandler):
    """Every call answered INVALID_ARGUMENT with the coordinator's wording."""

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method.rpartition("/")[2]  # type: ignore[attr-defined]

        def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, _details(method))

        def refuse_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            next(requests, None)  # as the coordinator does: the first request is the malformed one
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, _details(method))
            yield b""  # pragma: no cover - abort raised

        kind = STREAMING.get(method, "unary_unary")
        if kind == "unary_stream":
            return grpc.unary_stream_rpc_method_handler(refuse)
        if kind == "stream_stream":
            return grpc.stream_stream_rpc_method_handler(refuse_stream)
        return grpc.unary_unary_rpc_method_handler(refuse)


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((RefuseAll(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@pytest.fixture(params=[True, False], ids=["heartbeat-stream", "unary-heartbeats"])
def client(address: str, request: pytest.FixtureRequest) -> Iterator[CoordinatorClient]:
    with CoordinatorClient(address, timeout_s=30, heartbeat_stream=request.param) as c:
        yield c


def test_calls_that_answer_a_response_get_invalid_request_in_it(client: CoordinatorClient) -> None:
    calls: dict[str, Callable[[], Any]] = {
        "Heartbeat": lambda: client.heartbeat(HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1_000,
                                                               subscribed_topics=("t",), owned=EMPTY)),
        "StreamsHeartbeat": lambda: client.streams_heartbeat(StreamsHeartbeatRequest("g", "m", 3)),
        "CommitOffsets": lambda: client.commit_offsets(OffsetCommitRequest("g", "m", 1, {Shard("t", 0): 1})),
        "FetchOffsets": lambda: client.fetch_offsets(OffsetFetchRequest("g", "m", 1, None)),
        "DeleteGroup": lambda: client.delete_group("g"),
        "ResetOffsets": lambda: client.reset_offsets("g", {Shard("t", 0): 0}),
        "DeleteOffsets": lambda: client.delete_offsets("g"),
        "InstallAssignment": lambda: client.install_assignment("g", "m", 1, 1, {"m": [Shard("t", 0)]}),
    }
    for method, call in calls.items():
        resp = call()
        assert resp.error is ErrorCode.INVALID_REQUEST, (method, resp)
        assert "could not read the" in resp.message and "malformed" in resp.message, (method, resp.message)
        assert "sending it again will not help" in resp.message, resp.message


def test_calls_that_answer_a_value_raise_request_rejected(client: CoordinatorClient) -> None:
    calls: dict[str, Callable[[], Any]] = {
        "DescribeGroup": lambda: client.describe_group("g"),
        "DescribeStreamsGroup": lambda: client.describe_streams_group("g"),
        "GetAssignmentSpec": lambda: client.assignment_spec("g", "m", 1),
        "ListGroups": client.list_groups,
        "Topics": client.topics_info,
        "RefreshTopics": client.refresh_topics,
        "Watch": lambda: client.watch("g", "m"),
    }
    for method, call in calls.items():
        with pytest.raises(RequestRejected) as e:
            call()
        assert e.value.code is ErrorCode.INVALID_REQUEST, method
        assert f"could not read the {method} request: {_details(method)}" in e.value.message, e.value.message


def test_a_member_given_that_answer_stops_instead_of_retrying(address: str) -> None:
    with CoordinatorClient(address, timeout_s=30) as c:
        machine = MemberStateMachine("g", "m", subscribed_topics=("t",))
        session = Membership(c, machine)
        try:
            assert session.wait(lambda: machine.state is MemberState.FATAL, timeout=60), session.state
            fatal = [a for a in session.take_actions() if isinstance(a, Fatal)]
            assert len(fatal) == 1 and fatal[0].error is ErrorCode.INVALID_REQUEST
            expected = "could not read the Heartbeat request: malformed HeartbeatStream request"
            assert expected in fatal[0].message, fatal[0].message
        finally:
            session.close()
