"""One call through a generic channel, and what its answer may be.

Bytes go out as they are (``request_serializer=None``), bytes come back, and every call has a
deadline. A server stream (Watch) is opened, its first message read, then cancelled; a client stream
(HeartbeatStream) sends its bodies, half-closes, and reads every answer.

What an answer may be:

* a response that parses as the method's response message, whose error code is one this version
  knows, that carries a message whenever the code is not NONE, and that the project's own client
  accepts (`regroup.rpc.wire` decodes it) — a heartbeat stream answers every request, a Watch starts
  with SUBSCRIBED;
* or a gRPC status with a message: INVALID_ARGUMENT for a body that is not the method's message
  (never for one protobuf built: the coordinator must answer those with an error code),
  RESOURCE_EXHAUSTED (over the size limit, too many Watch streams), CANCELLED (load shedding).

Anything else is a *finding*: UNKNOWN or INTERNAL (an exception escaped a handler), UNAVAILABLE (the
coordinator stopped itself, or died), DEADLINE_EXCEEDED (a hang), an unknown error code, an error
without a message, an answer the client refuses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from regroup.chaos.corrupt import Request
from regroup.chaos.requests import BY_NAME
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import streams_wire, wire

#: Statuses a request may be refused with (see the module docstring).
ALLOWED = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                     grpc.StatusCode.CANCELLED})
_ERRORS = frozenset(v.number for v in pb.ErrorCode.DESCRIPTOR.values)


def _ok(m: Message) -> bool:
    return bool(m.error == pb.ERROR_CODE_NONE)  # type: ignore[attr-defined]


#: The project's client decoder of each method's answer (None: it has nothing to decode).
CLIENT_DECODERS: dict[str, Callable[[Any], object]] = {
    "Heartbeat": wire.heartbeat_response_from_pb,
    "HeartbeatStream": wire.heartbeat_response_from_pb,
    "Watch": lambda m: (wire.error_from_pb(m.error), wire.nudge_from_pb(m)),
    "CommitOffsets": wire.ack_from_pb,
    "FetchOffsets": wire.fetch_response_from_pb,
    "GetAssignmentSpec": lambda m: wire.spec_response_from_pb(m) if _ok(m) else wire.error_from_pb(m.error),
    "InstallAssignment": wire.ack_from_pb,
    "DescribeGroup": lambda m: wire.group_details_from_pb(m.group) if _ok(m) else wire.error_from_pb(m.error),
    "ListGroups": wire.list_groups_from_pb,
    "DeleteGroup": wire.ack_from_pb,
    "ResetOffsets": wire.ack_from_pb,
    "DeleteOffsets": wire.ack_from_pb,
    "Topics": wire.topics_from_pb,
    "RefreshTopics": wire.topics_from_pb,
    "StreamsHeartbeat": streams_wire.streams_heartbeat_response_from_pb,
    "DescribeStreamsGroup": lambda m: (streams_wire.streams_description_from_pb(m.group) if _ok(m)
                                       else wire.error_from_pb(m.error)),
}


@dataclass(frozen=True)
class Answer:
    #: One label per answer: the error code's name for a response ("NONE", "INVALID_REQUEST", ...),
    #: ``grpc STATUS`` for a call ended with a status.
    outcomes: tuple[str, ...]
    responses: tuple[Message, ...]
    findings: tuple[str, ...]
    seconds: float
    #: A server stream left open (``call(..., hold=True)``): the caller cancels it.
    held: Any = None


#: Documented limits (docs/operations.md, "Validation and limits") by field name: a request answered
#: NONE never carries a longer string.
ID_FIELDS = frozenset({"group_id", "member_id", "instance_id", "rack_id", "process_id", "subtopology",
                       "subtopology_id", "assignor", "client_assignors"})
TOPIC_FIELDS = frozenset({"topic", "subscribed_topics", "source_topics"})
MAX_LENGTH = {**dict.fromkeys(ID_FIELDS, 255), **dict.fromkeys(TOPIC_FIELDS, 249), "subscribed_regex": 1_000,
              "metadata": 4_096}
#: Names never empty in an accepted request (a rack id may be; a member id is empty in an operator's
#: offset fetch).
NOT_EMPTY = (ID_FIELDS | TOPIC_FIELDS) - {"rack_id", "member_id"}
#: Fields never negative in an accepted request ("negative partitions or offsets").
NON_NEGATIVE = frozenset({"partition", "partitions", "offset"})


def over_limits(msg: Message) -> list[str]:
    """What ``msg`` carries beyond the documented limits (a request the coordinator must refuse)."""
    out: list[str] = []

    def walk(m: Any, where: str, hint: str) -> None:
        fields = m.DESCRIPTOR.fields_by_name
        # A topic (or subtopology) that lists no partitions names nothing: a request may carry it.
        empty_group = "partitions" in fields and fields["partitions"].is_repeated and not len(m.partitions)
        for f, value in m.ListFields():
            name = hint if f.name == "values" and hint else f.name
            if empty_group and name in ("topic", "subtopology"):
                continue
            path = f"{where}.{f.name}" if where else f.name
            if f.type == f.TYPE_MESSAGE:
                if f.message_type.GetOptions().map_entry:
                    continue
                for item in (value if f.is_repeated else [value]):
                    walk(item, path, f.name)
                continue
            for v in (value if f.is_repeated else [value]):
                if isinstance(v, str) and name in MAX_LENGTH and len(v) > MAX_LENGTH[name]:
                    out.append(f"{path} is {len(v)} characters long (the limit is {MAX_LENGTH[name]})")
                elif v == "" and name in NOT_EMPTY:
                    out.append(f"{path} is empty")
                elif isinstance(v, int) and name in NON_NEGATIVE and v < 0:
                    out.append(f"{path} is negative ({v})")

    walk(msg, "", "")
    return out[:3]


def code_name(value: int) -> str:
    name: str = pb.ErrorCode.Name(value)
    return name.removeprefix("ERROR_CODE_")


def call(channel: grpc.Channel, req: Request, deadline_s: float, hold: bool = False) -> Answer:
    """Send ``req`` and check the answer. ``hold``: leave a server stream open after its first message
    (and give it to the caller, who must cancel it) instead of cancelling it at once."""
    spec = BY_NAME[req.method]
    held = None
    t0 = time.perf_counter()
    bodies: list[bytes] = []
    findings: list[str] = []
    status: tuple[grpc.StatusCode, str] | None = None
    try:
        if spec.client_streaming:
            stream: Any = channel.stream_stream(spec.path, request_serializer=None,
                                                response_deserializer=None)
            bodies.extend(stream(iter(req.payloads), timeout=deadline_s))
        elif spec.server_streaming:
            opened: Any = channel.unary_stream(spec.path, request_serializer=None, response_deserializer=None)
            it = opened(req.payloads[0], timeout=deadline_s)
            try:
                bodies.append(next(it))
                if hold:
                    held, it = it, None
            except StopIteration:
                findings.append("the stream ended without a first message")
            finally:
                if it is not None:
                    it.cancel()
        else:
            unary: Any = channel.unary_unary(spec.path, request_serializer=None, response_deserializer=None)
            bodies.append(unary(req.payloads[0], timeout=deadline_s))
    except grpc.RpcError as e:
        status = (e.code(), e.details() or "")
    seconds = time.perf_counter() - t0
    responses: list[Message] = []
    outcomes: list[str] = []
    for body in bodies:
        msg, labels, problems = check_response(req.method, body)
        if msg is not None:
            responses.append(msg)
        outcomes.extend(labels)
        findings.extend(problems)
    for sent, label in zip(req.messages, outcomes, strict=False):  # one label per answer, in order
        if sent is not None and label == "NONE":
            findings.extend(f"accepted (NONE) beyond a documented limit: {p}" for p in over_limits(sent))
    if status is not None:
        outcomes.append(f"grpc {status[0].name}")
        findings.extend(check_status(req, *status, deadline_s))
    elif spec.client_streaming and len(bodies) != len(req.payloads):
        findings.append(f"{len(req.payloads)} requests on the stream, {len(bodies)} answers")
    return Answer(tuple(outcomes), tuple(responses), tuple(findings), seconds, held)


def check_status(req: Request, code: grpc.StatusCode, details: str, deadline_s: float) -> list[str]:
    out = []
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        out.append(f"no answer within the {deadline_s:g} s deadline (a hang)")
    elif code == grpc.StatusCode.UNAVAILABLE:
        out.append(f"UNAVAILABLE: the coordinator stopped or died ({details})")
    elif code not in ALLOWED:
        out.append(f"gRPC status {code.name}: {details}")
    elif code == grpc.StatusCode.INVALID_ARGUMENT and req.well_formed:
        out.append(f"a well-formed request refused with INVALID_ARGUMENT instead of an error code: {details}")
    if not details.strip():
        out.append(f"gRPC status {code.name} without a message")
    return out


def check_response(method: str, body: bytes) -> tuple[Message | None, list[str], list[str]]:
    """The response message, its outcome labels and the findings about it."""
    spec = BY_NAME[method]
    try:
        msg = spec.response.FromString(body)
    except Exception as e:
        return None, ["unparseable"], [f"the answer is not a {spec.response.DESCRIPTOR.name}: {e}"]
    findings = []
    label = "NONE"
    error_field = msg.DESCRIPTOR.fields_by_name.get("error")
    if error_field is not None and error_field.enum_type is not None:
        error = msg.error  # type: ignore[attr-defined]
        if error not in _ERRORS:
            findings.append(f"unknown error code {error}")
            label = f"error {error}"
        else:
            label = code_name(error)
            if error != pb.ERROR_CODE_NONE and not msg.message.strip():  # type: ignore[attr-defined]
                findings.append(f"{label} without a message")
    if method == "Watch" and msg.kind != pb.NUDGE_KIND_SUBSCRIBED:  # type: ignore[attr-defined]
        findings.append(f"a Watch stream's first message is {msg.kind}, not SUBSCRIBED")  # type: ignore[attr-defined]
    decode = CLIENT_DECODERS.get(method)
    if decode is not None and not findings:
        try:
            decode(msg)
        except Exception as e:
            findings.append(f"the project's client refuses the answer: {type(e).__name__}: {e}")
    return msg, [label], findings
