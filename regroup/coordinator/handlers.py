"""The coordinator's gRPC face: how a request's bytes become a message, and the guard around every
method.

Rules of this module:

1. A body that is not the method's protobuf message becomes `Malformed` (gRPC would answer UNKNOWN
   with the decoder's exception); the guard answers it INVALID_ARGUMENT, naming the method. A body
   over the core's ``large_request_bytes`` is not parsed here at all: it stays `Encoded`, to be
   parsed on the lane of large requests (`regroup.coordinator.large`), off the event loop.
2. The guard maps the service's own failures to gRPC statuses, never to protocol error codes: a
   stopping service (`Stopped`) UNAVAILABLE, anything unexpected INTERNAL (logged with its
   traceback); protocol refusals are answers, made by the service's methods.
3. The methods and their messages are those of proto/regroup.proto (`method_handlers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Never, TypeVar

import grpc
import grpc.aio

from regroup.coordinator.large import Encoded
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.wire import SERVICE_NAME

if TYPE_CHECKING:
    from regroup.coordinator.service import CoordinatorService

__all__ = ["DECODED_ON_THE_LANE", "Malformed", "Stopped", "abort", "generic_handler", "guarded",
           "guarded_stream", "method_handlers", "peer", "request_parser"]

log = logging.getLogger("regroup.coordinator")

R = TypeVar("R")
Ctx = grpc.aio.ServicerContext[Any, Any]


class Stopped(Exception):
    """The service hit a fatal condition and refuses calls until restarted."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """What a request deserializer gives for bytes that are not the method's protobuf message (or
    not valid UTF-8 in a string field); the handler's guard answers it INVALID_ARGUMENT."""

    method: str
    detail: str

    @property
    def message(self) -> str:
        return f"malformed {self.method} request: {self.detail}"


def request_parser(method: str, message_type: Any, large_bytes: int | None = None) -> Callable[[bytes], Any]:
    """``message_type.FromString`` that returns `Malformed` instead of raising (gRPC would answer
    UNKNOWN with the decoder's exception); a body over ``large_bytes`` is returned `Encoded`, to be
    parsed on the lane of large requests (`regroup.coordinator.large`), not on the event loop."""
    parse = message_type.FromString
    name = message_type.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:  # DecodeError; whatever else the decoder may raise on hostile bytes
            text = str(e)
            if text.startswith("Error parsing message") and ": " in text:
                text = text.split(": ", 1)[1]
            detail = f"not a valid {name} message" + (f" ({text[:1].lower()}{text[1:200]})" if text else "")
            return Malformed(method, detail)

    if large_bytes is None:
        return deserialize

    def deserialize_or_defer(data: bytes) -> Any:
        return Encoded(method, data, deserialize) if len(data) > large_bytes else deserialize(data)
    return deserialize_or_defer


def peer(context: Ctx | None) -> str:
    """Who called, as gRPC names it (``ipv4:127.0.0.1:5000``), for logs."""
    name = context.peer() if context is not None else None
    return name or "a client"


async def abort(context: Ctx, method: str, status: grpc.StatusCode, message: str) -> Never:
    """End the call with a gRPC status (not a protocol answer), and say so in the log."""
    log.warning("%s from %s ended with %s: %s", method, peer(context), status.name, message)
    await context.abort(status, message)


#: Methods whose handler decodes and checks a large request on the lane itself (the others get it
#: parsed there, then convert it on the loop).
DECODED_ON_THE_LANE = frozenset({"Heartbeat", "StreamsHeartbeat"})


def generic_handler(service: CoordinatorService) -> grpc.GenericRpcHandler:
    """The generic handler serving `SERVICE_NAME`."""
    return grpc.method_handlers_generic_handler(SERVICE_NAME, method_handlers(service))


def method_handlers(service: CoordinatorService) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """Handlers by method name, as declared in proto/regroup.proto."""
    large = service.coord.config.large_request_bytes

    def unary(name: str, fn: Callable[[Any, Ctx], Awaitable[Any]], req: Any, resp: Any,
              ) -> tuple[str, grpc.RpcMethodHandler[Any, Any]]:
        return name, grpc.unary_unary_rpc_method_handler(
            guarded(service, name, fn), request_deserializer=request_parser(name, req, large),
            response_serializer=resp.SerializeToString)

    methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = dict([
        unary("Heartbeat", service.heartbeat, pb.HeartbeatRequest, pb.HeartbeatResponse),
        ("HeartbeatStream", grpc.stream_stream_rpc_method_handler(
            guarded_stream(service, "HeartbeatStream", service.heartbeat_stream),
            request_deserializer=request_parser("HeartbeatStream", pb.HeartbeatRequest, large),
            response_serializer=pb.HeartbeatResponse.SerializeToString)),
        ("Watch", grpc.unary_stream_rpc_method_handler(
            guarded_stream(service, "Watch", service.watch),
            request_deserializer=request_parser("Watch", pb.WatchRequest, large),
            response_serializer=pb.Nudge.SerializeToString)),
        unary("CommitOffsets", service.commit_offsets, pb.OffsetCommitRequest, pb.Ack),
        unary("FetchOffsets", service.fetch_offsets, pb.OffsetFetchRequest, pb.OffsetFetchResponse),
        unary("GetAssignmentSpec", service.get_assignment_spec, pb.AssignmentSpecRequest,
              pb.AssignmentSpecResponse),
        unary("InstallAssignment", service.install_assignment, pb.InstallAssignmentRequest, pb.Ack),
        unary("DescribeGroup", service.describe_group, pb.DescribeGroupRequest, pb.DescribeGroupResponse),
        unary("ListGroups", service.list_groups, pb.ListGroupsRequest, pb.ListGroupsResponse),
        unary("DeleteGroup", service.delete_group, pb.DeleteGroupRequest, pb.Ack),
        unary("ResetOffsets", service.reset_offsets, pb.ResetOffsetsRequest, pb.Ack),
        unary("DeleteOffsets", service.delete_offsets, pb.DeleteOffsetsRequest, pb.Ack),
        unary("SetParallelism", service.set_parallelism, pb.SetParallelismRequest, pb.Ack),
        unary("Topics", service.topics, pb.TopicsRequest, pb.TopicsResponse),
        unary("RefreshTopics", service.refresh_topics, pb.TopicsRequest, pb.TopicsResponse),
        unary("StreamsHeartbeat", service.streams_heartbeat, pb.StreamsHeartbeatRequest,
              pb.StreamsHeartbeatResponse),
        unary("DescribeStreamsGroup", service.describe_streams_group, pb.DescribeGroupRequest,
              pb.DescribeStreamsGroupResponse),
    ])
    return methods


async def _admitted(service: CoordinatorService, method: str, request: Any, context: Ctx) -> None:
    """A malformed request INVALID_ARGUMENT, any request to a stopping service UNAVAILABLE (rule 2)."""
    if isinstance(request, Malformed):
        await abort(context, method, grpc.StatusCode.INVALID_ARGUMENT, request.message)
    if service.fatal_reason:
        await abort(context, method, grpc.StatusCode.UNAVAILABLE,
                    f"the coordinator is stopping: {service.fatal_reason}")


@contextlib.asynccontextmanager
async def _failures_mapped(method: str, context: Ctx) -> AsyncIterator[None]:
    """The service's own failures inside a call as gRPC statuses (rule 2): a stopping service
    UNAVAILABLE, anything unexpected INTERNAL; a cancelled call and an abort go on as they are."""
    try:
        yield
    except Stopped as e:
        await abort(context, method, grpc.StatusCode.UNAVAILABLE, f"the coordinator is stopping: {e}")
    except asyncio.CancelledError:
        log.debug("%s cancelled (the client went away or the server is stopping)", method)
        raise
    except Exception as e:
        if isinstance(e, grpc.aio.AbortError):
            raise
        log.exception("unexpected error in %s from %s", method, peer(context))
        await context.abort(grpc.StatusCode.INTERNAL, f"unexpected error: {type(e).__name__}")


def guarded(service: CoordinatorService, method: str, fn: Callable[[Any, Ctx], Awaitable[R]],
            ) -> Callable[[Any, Ctx], Awaitable[R]]:
    """Map the service's own failures to gRPC statuses (never a protocol error code): a malformed
    request INVALID_ARGUMENT, a stopping service UNAVAILABLE, anything unexpected INTERNAL."""
    @functools.wraps(fn)
    async def call(request: Any, context: Ctx) -> R:
        await _admitted(service, method, request, context)
        if method not in DECODED_ON_THE_LANE:
            request = await service.parsed(method, request, context)
        async with _failures_mapped(method, context):
            return await fn(request, context)
        raise AssertionError("unreachable: the failure was answered with an abort")
    return call


def guarded_stream(service: CoordinatorService, method: str,
                   fn: Callable[[Any, Ctx], AsyncGenerator[R, None]],
                   ) -> Callable[[Any, Ctx], AsyncGenerator[R, None]]:
    """`guarded` for a call that answers with a stream (a request stream checks its own messages)."""
    @functools.wraps(fn)
    async def call(request: Any, context: Ctx) -> AsyncGenerator[R, None]:
        await _admitted(service, method, request, context)
        request = await service.parsed(method, request, context)
        async with _failures_mapped(method, context), contextlib.aclosing(fn(request, context)) as answers:
            async for answer in answers:
                yield answer
    return call
