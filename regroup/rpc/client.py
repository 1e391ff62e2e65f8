"""The synchronous coordinator client (the consumer calls it from its background threads).

    client = CoordinatorClient("127.0.0.1:9650", token=None, tls_ca=None, timeout_s=10.0)
    resp = client.heartbeat(HeartbeatRequest(...))      # regroup.protocol.messages values in and out
    for nudge in client.watch(group_id, member_id):      # blocks; ends on close() / stream.cancel()
        ...

Errors: protocol decisions come back inside the response objects as the core's `ErrorCode`
(`HeartbeatResponse.error`, `Ack.error`, `OffsetFetchResponse.error`). Calls that return a plain value
(`describe_group`, `assignment_spec`, `watch`) raise `RequestRejected(code, message)` instead.
A request the coordinator could not read at all (gRPC INVALID_ARGUMENT: "malformed Heartbeat
request: ...", e.g. from a client of another version) is answered the same way as one its handler
could not decode: INVALID_REQUEST, in the response object or as `RequestRejected` — sending it again
fails again, so it is never `CoordinatorUnavailable`. Transport trouble raises `CoordinatorUnavailable`
(retry later) and a refused token (missing, wrong, or out of its scopes) `AuthenticationFailed`. The
client never retries by itself: the member state machine decides when to try again. It is thread-safe
(one channel, shared).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import grpc

from regroup.protocol.coordinator import DelegatedSpec
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import (
    Ack,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetResetRequest,
)
from regroup.protocol.shard import Shard
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import streams_wire, wire
from regroup.rpc.errors import AuthenticationFailed, CoordinatorUnavailable, RequestRejected, WireError
from regroup.rpc.types import GroupDetails, GroupListing, Nudge, TopicsInfo
from regroup.rpc.wire import AUTH_HEADER, CLIENT_ID_HEADER, SERVICE_NAME

M = TypeVar("M")
T = TypeVar("T")
Resp = TypeVar("Resp")

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # Reconnect quickly after a coordinator restart: the next attempt 100 ms after a failed one, the
    # pause growing to 2 s at most (gRPC's defaults: 1 s, growing to 2 minutes). While a coordinator
    # restarts, its port refuses connections, so each attempt fails at once and only these pace them.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # Despite its name, gRPC core reads this only as the least time one connection attempt is given
    # (TCP connect, TLS, the server's HTTP/2 SETTINGS frame): an attempt's deadline is the later of
    # "now + the backoff above" and "now + this". At 100 ms a busy machine failed connects ("connection
    # attempt timed out before receiving SETTINGS frame"). 20 s is gRPC's own default (MIN_CONNECT_TIMEOUT
    # in gRPC's doc/connection-backoff.md). It costs nothing when the coordinator is down (a refused
    # connect fails at once, and the backoff above applies) nor when it is slow: each call's deadline
    # (``timeout_s``) still bounds how long a caller waits.
    ("grpc.min_reconnect_backoff_ms", 20_000),
]


class NudgeStream(Iterator[Nudge]):
    """The nudges of one member, as a blocking iterator. `cancel()` (or the client's `close()`) ends it.

    The stream is registered on the coordinator before `watch()` returns, so nothing that happens
    after that can be missed (a nudge is only ever an invitation to heartbeat now).
    """

    def __init__(self, call: Any, address: str) -> None:
        self._call = call
        self._address = address
        self._cancelled = False
        #: The coordinator ended the stream itself (status OK: it does so when it shuts down), as
        #: opposed to a stream that broke or that we cancelled.
        self.ended_by_coordinator = False

    def __iter__(self) -> NudgeStream:
        return self

    def __next__(self) -> Nudge:
        while True:
            msg = self._next_message()
            if msg.kind == pb.NUDGE_KIND_HEARTBEAT_NOW:
                return wire.nudge_from_pb(msg)

    def _next_message(self) -> pb.Nudge:
        if self._cancelled:
            raise StopIteration
        try:
            msg: pb.Nudge = next(self._call)
            return msg
        except StopIteration:
            self.ended_by_coordinator = not self._cancelled
            raise
        except grpc.RpcError as e:
            if self._cancelled or e.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise _translate(e, self._address, "Watch") from None

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    close = cancel

    def __enter__(self) -> NudgeStream:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cancel()


class _HeartbeatStream:
    """One long-lived HeartbeatStream call: a request goes in, its response comes out, in order."""

    def __init__(self, channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._requests: queue.SimpleQueue[pb.HeartbeatRequest | None] = queue.SimpleQueue()
        self._call = channel.stream_stream(
            f"/{SERVICE_NAME}/HeartbeatStream", request_serializer=pb.HeartbeatRequest.SerializeToString,
            response_deserializer=pb.HeartbeatResponse.FromString,
        )(iter(self._requests.get, None), metadata=metadata)
        self.timed_out = False

    def exchange(self, request: pb.HeartbeatRequest, timeout_s: float) -> pb.HeartbeatResponse:
        self._requests.put(request)
        timer = threading.Timer(timeout_s, self._expire)
        timer.daemon = True
        timer.start()
        try:
            response: pb.HeartbeatResponse = next(self._call)
            return response
        finally:
            timer.cancel()

    def _expire(self) -> None:
        self.timed_out = True
        self._call.cancel()

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class CoordinatorClient:
    def __init__(self, address: str, *, token: str | None = None, tls_ca: str | None = None,
                 timeout_s: float = 10.0, client_id: str | None = None,
                 heartbeat_stream: bool = True) -> None:
        """``tls_ca``: PEM file of the CA that signed the coordinator's certificate (enables TLS).

        ``client_id`` names this process in ``describe`` (CLIENT-ID), like Kafka's client.id.
        ``heartbeat_stream``: send heartbeats on one long-lived HeartbeatStream call (several times
        cheaper for the coordinator) instead of one unary Heartbeat call each; same semantics.
        """
        self.address = address
        self.timeout_s = timeout_s
        metadata: list[tuple[str, str]] = []
        if token:
            metadata.append((AUTH_HEADER, f"Bearer {token}"))
        if client_id:
            metadata.append((CLIENT_ID_HEADER, client_id))
        self._metadata = tuple(metadata)
        if tls_ca is not None:
            with open(tls_ca, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(address, creds, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        self._streams: set[NudgeStream] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._use_stream = heartbeat_stream
        self._hb_lock = threading.Lock()
        self._hb_stream: _HeartbeatStream | None = None

    # ---------------------------------------------------------------- members
    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        msg = wire.heartbeat_request_to_pb(request)
        if self._use_stream:
            with self._hb_lock:
                answer = self._stream_heartbeat(msg)
            if answer is not None:
                return self._decode(wire.heartbeat_response_from_pb, answer)
        return self._decode(wire.heartbeat_response_from_pb,
                            self._unary("Heartbeat", msg, pb.HeartbeatResponse))

    def _stream_heartbeat(self, msg: pb.HeartbeatRequest) -> pb.HeartbeatResponse | None:
        """The answer on the heartbeat stream (opened on demand); None: the server has no stream."""
        self._check_open()
        stream = self._hb_stream
        if stream is None:
            stream = self._hb_stream = _HeartbeatStream(self._channel, self._metadata)
        try:
            return stream.exchange(msg, self.timeout_s)
        except (grpc.RpcError, StopIteration) as e:
            self._hb_stream = None
            stream.close()
            if isinstance(e, StopIteration):
                raise CoordinatorUnavailable(
                    f"coordinator {self.address} closed the heartbeat stream; retry") from None
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:  # an older coordinator: unary calls
                self._use_stream = False
                return None
            if stream.timed_out:
                raise CoordinatorUnavailable(
                    f"Heartbeat to coordinator {self.address} timed out after {self.timeout_s} s") from None
            error = _translate(e, self.address, "Heartbeat")
            if isinstance(error, RequestRejected):  # the request was unreadable: refused, not lost
                return _refusal(pb.HeartbeatResponse, error)
            raise error from None
        except ValueError as e:  # the channel was closed under us
            self._hb_stream = None
            raise CoordinatorUnavailable(f"Heartbeat to {self.address}: {e}") from None

    def streams_heartbeat(self, request: StreamsHeartbeatRequest) -> StreamsHeartbeatResponse:
        """A streams member's heartbeat (unary: a streams member heartbeats rarely, nudges do the rest)."""
        msg = self._unary("StreamsHeartbeat", streams_wire.streams_heartbeat_request_to_pb(request),
                          pb.StreamsHeartbeatResponse)
        return self._decode(streams_wire.streams_heartbeat_response_from_pb, msg)

    def watch(self, group_id: str, member_id: str) -> NudgeStream:
        """Open the member's nudge stream; returns once the coordinator registered it."""
        self._check_open()
        call = self._channel.unary_stream(
            f"/{SERVICE_NAME}/Watch", request_serializer=pb.WatchRequest.SerializeToString,
            response_deserializer=pb.Nudge.FromString,
        )(pb.WatchRequest(group_id=group_id, member_id=member_id), metadata=self._metadata)
        stream = NudgeStream(call, self.address)
        with self._lock:
            self._streams.add(stream)
        try:
            first = stream._next_message()
        except StopIteration:
            raise CoordinatorUnavailable(
                f"coordinator {self.address} ended the Watch stream at once") from None
        except BaseException:
            stream.cancel()
            raise
        if first.error != pb.ERROR_CODE_NONE:
            stream.cancel()
            raise RequestRejected(self._decode(wire.error_from_pb, first.error), first.message)
        return stream

    def commit_offsets(self, request: OffsetCommitRequest) -> Ack:
        return self._ack(self._unary("CommitOffsets", wire.commit_request_to_pb(request), pb.Ack))

    def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        msg = self._unary("FetchOffsets", wire.fetch_request_to_pb(request), pb.OffsetFetchResponse)
        return self._decode(wire.fetch_response_from_pb, msg)

    def assignment_spec(self, group_id: str, member_id: str, member_epoch: int) -> DelegatedSpec:
        """For a delegate member: the input of the client-side assignor (RequestRejected if refused)."""
        msg = self._unary("GetAssignmentSpec", pb.AssignmentSpecRequest(
            group_id=group_id, member_id=member_id, member_epoch=member_epoch), pb.AssignmentSpecResponse)
        self._raise_for(msg.error, msg.message)
        return self._decode(wire.spec_response_from_pb, msg)

    def install_assignment(self, group_id: str, member_id: str, member_epoch: int, group_epoch: int,
                           assignment: Mapping[str, Iterable[Shard]]) -> Ack:
        req = wire.install_request_to_pb(group_id, member_id, member_epoch, group_epoch, assignment)
        return self._ack(self._unary("InstallAssignment", req, pb.Ack))

    # ---------------------------------------------------------------- administration
    def describe_group(self, group_id: str) -> GroupDetails:
        """The group, its members' clients, offsets and lag, and its recent epoch history."""
        msg = self._unary("DescribeGroup", pb.DescribeGroupRequest(group_id=group_id),
                          pb.DescribeGroupResponse)
        self._raise_for(msg.error, msg.message)
        return self._decode(wire.group_details_from_pb, msg.group)

    def describe_streams_group(self, group_id: str) -> StreamsGroupDescription:
        """A streams group: its members, their tasks by role, the lags they reported, warm-ups."""
        msg = self._unary("DescribeStreamsGroup", pb.DescribeGroupRequest(group_id=group_id),
                          pb.DescribeStreamsGroupResponse)
        self._raise_for(msg.error, msg.message)
        return self._decode(streams_wire.streams_description_from_pb, msg.group)

    def list_groups(self) -> list[GroupListing]:
        """``(group id, state, member count)`` of every group of both kinds, by group id; ``.kind``
        says which (a streams group's state is a `StreamsGroupState`)."""
        msg = self._unary("ListGroups", pb.ListGroupsRequest(), pb.ListGroupsResponse)
        return self._decode(wire.list_groups_from_pb, msg)

    def delete_group(self, group_id: str) -> Ack:
        return self._ack(self._unary("DeleteGroup", pb.DeleteGroupRequest(group_id=group_id), pb.Ack))

    def reset_offsets(self, group_id: str, offsets: Mapping[Shard, int], metadata: str = "") -> Ack:
        """Admin reset (may move offsets backwards); the group must have no members."""
        req = wire.reset_request_to_pb(OffsetResetRequest(group_id, offsets, metadata))
        return self._ack(self._unary("ResetOffsets", req, pb.Ack))

    def delete_offsets(self, group_id: str, shards: Iterable[Shard] | None = None) -> Ack:
        """Delete committed offsets (all of the group's when ``shards`` is None); empty group only."""
        return self._ack(self._unary("DeleteOffsets", wire.delete_offsets_to_pb(group_id, shards), pb.Ack))

    def set_parallelism(self, group_id: str, topic: str, parallelism: int) -> Ack:
        """Cut every partition of ``topic`` into ``parallelism`` key ranges for this consumer group
        (1: whole partitions again); live groups rebalance to the new ranges."""
        req = pb.SetParallelismRequest(group_id=group_id, topic=topic, parallelism=parallelism)
        return self._ack(self._unary("SetParallelism", req, pb.Ack))

    def topics(self) -> dict[str, int]:
        return dict(self.topics_info().topics)

    def topics_info(self) -> TopicsInfo:
        return self._decode(wire.topics_from_pb, self._unary("Topics", pb.TopicsRequest(), pb.TopicsResponse))

    def refresh_topics(self) -> dict[str, int]:
        """Ask the coordinator to re-read topic metadata from the log now; returns what it knows."""
        info = self._decode(wire.topics_from_pb,
                            self._unary("RefreshTopics", pb.TopicsRequest(), pb.TopicsResponse))
        return dict(info.topics)

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """End every open Watch stream and the channel. Calls after close raise CoordinatorUnavailable."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
            self._streams.clear()
        for s in streams:
            s.cancel()
        hb, self._hb_stream = self._hb_stream, None
        if hb is not None:
            hb.close()
        self._channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- plumbing
    def _check_open(self) -> None:
        if self._closed:
            raise CoordinatorUnavailable(f"the client for {self.address} is closed")

    def _unary(self, method: str, request: Any, response_type: type[Resp]) -> Resp:
        self._check_open()
        call = self._channel.unary_unary(
            f"/{SERVICE_NAME}/{method}", request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString)  # type: ignore[attr-defined]
        try:
            result: Resp = call(request, timeout=self.timeout_s, metadata=self._metadata)
            return result
        except grpc.RpcError as e:
            error = _translate(e, self.address, method)
            if isinstance(error, RequestRejected) and _carries_error(response_type):
                return _refusal(response_type, error)  # read where the caller reads every refusal
            raise error from None
        except ValueError as e:  # grpc raises ValueError on a closed channel
            raise CoordinatorUnavailable(f"{method} to {self.address}: {e}") from None

    def _decode(self, fn: Callable[[M], T], msg: M) -> T:
        try:
            return fn(msg)
        except WireError as e:
            raise CoordinatorUnavailable(f"cannot understand the answer of {self.address}: {e} "
                                         "(client and coordinator versions differ?)") from None

    def _ack(self, msg: pb.Ack) -> Ack:
        return self._decode(wire.ack_from_pb, msg)

    def _raise_for(self, error: int, message: str) -> None:
        if error != pb.ERROR_CODE_NONE:
            raise RequestRejected(self._decode(wire.error_from_pb, error), message)


def _translate(e: grpc.RpcError, address: str, method: str) -> Exception:
    """A failed call as the client's exception. INVALID_ARGUMENT (the coordinator could not read the
    request) is `RequestRejected` with INVALID_REQUEST, the code its handlers answer a request they
    cannot decode with: a caller must not retry it as if the coordinator were away."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):  # token refused
        return AuthenticationFailed(f"coordinator {address} refused {method}: {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return RequestRejected(ErrorCode.INVALID_REQUEST,
                               f"coordinator {address} could not read the {method} request: {details} "
                               "(client and coordinator versions differ?); sending it again will not help")
    name = code.name if code is not None else "UNKNOWN"
    return CoordinatorUnavailable(f"{method} to coordinator {address} failed ({name}): {details}")


def _carries_error(response_type: Any) -> bool:
    """Whether an answer of this type carries the core's `ErrorCode` and a message (`pb.Ack`,
    `pb.HeartbeatResponse`, ...), where a refusal can be given to the caller."""
    fields = response_type.DESCRIPTOR.fields_by_name
    error = fields.get("error")
    return (error is not None and error.enum_type is pb.ErrorCode.DESCRIPTOR
            and "message" in fields)


def _refusal(response_type: Callable[..., Resp], error: RequestRejected) -> Resp:
    return response_type(error=pb.ERROR_CODE_INVALID_REQUEST, message=error.message)
