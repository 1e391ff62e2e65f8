"""Inconsistent requests and raw bytes, and `generate`: one request of a method in a mode.

See `regroup.chaos.requests` for the four modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from regroup.chaos.requests import (
    BY_NAME,
    MODES,
    OVERSIZED,
    PLAUSIBLE,
    World,
    _owned_shards,
    _tasks_of,
    build,
    scalar,
)
from regroup.chaos.values import INT32_MAX, UINT64_MAX, Chooser, int32
from regroup.rpc import regroup_pb2 as pb


@dataclass(frozen=True)
class Request:
    """What one call sends: one body (a stream: several), and the messages they encode when they were
    built by protobuf (``None`` for raw bytes)."""

    method: str
    mode: str
    payloads: tuple[bytes, ...]
    messages: tuple[Message | None, ...]

    @property
    def well_formed(self) -> bool:
        """Every body is a serialized message (the coordinator must answer it, not refuse to read it)."""
        return all(m is not None for m in self.messages)

    def describe(self, limit: int = 600) -> str:
        """The request for a report: the messages as text, else the bytes (both cut at ``limit``)."""
        parts = []
        for body, msg in zip(self.payloads, self.messages, strict=True):
            if msg is not None:
                text = text_format.MessageToString(msg, as_one_line=True)
            else:
                text = f"{len(body)} bytes: {body[:limit // 2].hex()}"
            parts.append(text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")
        return f"{self.method} ({self.mode}): " + " | ".join(parts)


# ============================================================================ inconsistent

def _set_any_field(msg: Message, ch: Chooser, w: World) -> None:
    """Set one scalar field, anywhere in ``msg``, to a hostile value (or duplicate a list element)."""
    slots: list[tuple[Any, Any]] = []

    def walk(m: Any, depth: int) -> None:
        for f in m.DESCRIPTOR.fields:
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                if f.message_type.GetOptions().map_entry or depth > 4:
                    continue
                if f.is_repeated:
                    for item in getattr(m, f.name):
                        walk(item, depth + 1)
                elif m.HasField(f.name):
                    walk(getattr(m, f.name), depth + 1)
            else:
                slots.append((m, f))

    walk(msg, 0)
    if not slots:
        return
    target, f = ch.pick(slots)
    if f.is_repeated:
        values = getattr(target, f.name)
        if len(values) and ch.chance(50):
            values.append(values[ch.integer(0, len(values) - 1)])
        else:
            values.append(scalar(f, ch, w, ""))
    else:
        setattr(target, f.name, scalar(f, ch, w, ""))


def _broken_heartbeat(msg: pb.HeartbeatRequest, ch: Chooser, w: World) -> None:
    other = w.member(ch, streams=False)
    rule = ch.integer(0, 6)
    if rule == 0:  # a join that claims to own shards
        msg.member_epoch = 0
        msg.owned.topics.add(topic="fz-a", partitions=[0, 1])
    elif rule == 1:  # a temporary leave without an instance id
        msg.member_epoch = -2
        msg.ClearField("instance_id")
    elif rule == 2 and other is not None:  # a leave naming someone else's instance id
        msg.member_epoch = -1
        msg.instance_id = other.instance_id or "i0"
    elif rule == 3:  # an epoch from the future
        msg.member_epoch = int32(ch.pick((msg.member_epoch + 1, msg.member_epoch + 1000, INT32_MAX)))
    elif rule == 4:  # a shard listed twice, or one owned by another member
        owned = _owned_shards(other) or {"fz-a": [0]}
        topic = sorted(owned)[0]
        msg.owned.topics.add(topic=topic, partitions=owned[topic] or [0])
        if ch.chance(50):
            msg.owned.topics.add(topic=topic, partitions=owned[topic][:1] or [0])
    elif rule == 5:  # a subscription to nothing, or to topics and a broken regex at once
        msg.subscribed_topics.SetInParent()
        if ch.chance(50):
            msg.subscribed_topics.values.append("fz-missing")
            msg.subscribed_regex = ch.pick(("(a)\\1", "["))
    else:
        msg.rebalance_timeout_ms = ch.pick((0, -1, INT32_MAX))


def _broken_commit(msg: pb.OffsetCommitRequest, ch: Chooser, w: World) -> None:
    other = w.member(ch)
    rule = ch.integer(0, 3)
    if rule == 0 and other is not None:  # another member's epoch
        msg.member_epoch = other.epoch
    elif rule == 1:  # a partition twice
        msg.topics.add(topic="fz-a", partitions=[pb.PartitionOffset(partition=0, offset=1)] * 2)
    elif rule == 2:  # backwards, or negative
        for t in msg.topics:
            for po in t.partitions:
                po.offset = ch.pick((0, -1))
    else:  # a partition nobody has
        msg.topics.add(topic="fz-a", partitions=[pb.PartitionOffset(partition=ch.pick((99, -1)), offset=5)])


def _broken_install(msg: pb.InstallAssignmentRequest, ch: Chooser, w: World) -> None:
    rule = ch.integer(0, 3)
    if rule == 0 and msg.assignment:  # a partition to two members
        msg.assignment.add(member_id=w.new_member_id()).shards.topics.add(topic="fz-a", partitions=[0])
        msg.assignment[0].shards.topics.add(topic="fz-a", partitions=[0])
    elif rule == 1 and msg.assignment:  # a member listed twice
        msg.assignment.add().CopyFrom(msg.assignment[0])
    elif rule == 2:
        msg.group_epoch = int32(ch.pick((msg.group_epoch - 1, msg.group_epoch + 1, -1)))
    else:
        msg.assignment.add(member_id=ch.pick(("", w.new_member_id()))).shards.topics.add(
            topic="fz-missing", partitions=[0, -1])


def _broken_streams(msg: pb.StreamsHeartbeatRequest, ch: Chooser, w: World) -> None:
    m = w.member(ch, streams=True)
    rule = ch.integer(0, 4)
    if rule == 0:  # a task in two roles
        msg.owned.active.add(subtopology="s0", partitions=[0])
        msg.owned.standby.add(subtopology="s0", partitions=[0])
    elif rule == 1:  # a topology change, or one that cannot exist
        msg.topology.SetInParent()
        msg.topology.subtopologies.add(subtopology_id=ch.pick(("s0", "", "s9")),
                                       source_topics=ch.pick((["fz-a"], ["fz-c", "fz-c"], [])))
    elif rule == 2:  # task offsets twice, negative, or of tasks that do not exist
        msg.task_offsets.tasks.add(subtopology="s0", partition=ch.pick((0, -1, 99)), topics=[
            pb.TopicOffsets(topic="fz-a", partitions=[pb.PartitionOffset(partition=0, offset=-5)])])
        msg.task_offsets.tasks.add(subtopology="s0", partition=0)
    elif rule == 3:
        msg.member_epoch = -2
        msg.ClearField("instance_id")
    elif m is not None:  # another member's tasks
        for role, sub, p in _tasks_of(m):
            getattr(msg.owned, role).add(subtopology=sub, partitions=[p])


_BREAK: dict[str, Callable[[Message, Chooser, World], None]] = {
    "Heartbeat": _broken_heartbeat,  # type: ignore[dict-item]
    "HeartbeatStream": _broken_heartbeat,  # type: ignore[dict-item]
    "CommitOffsets": _broken_commit,  # type: ignore[dict-item]
    "InstallAssignment": _broken_install,  # type: ignore[dict-item]
    "StreamsHeartbeat": _broken_streams,  # type: ignore[dict-item]
}


def inconsistent(method: str, ch: Chooser, w: World) -> Message:
    msg = PLAUSIBLE[method](ch, w)
    rule = _BREAK.get(method)
    for _ in range(ch.integer(1, 2)):
        if rule is not None and ch.chance(60):
            rule(msg, ch, w)
        else:
            _set_any_field(msg, ch, w)
    return msg


# ============================================================================ raw bytes

def varint(n: int) -> bytes:
    n &= UINT64_MAX
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


@dataclass(frozen=True)
class Heavy:
    """How often a raw request is heavy: a body over the 16 MiB limit, or a flood — the method's
    shard (or task, or offset) list with up to ``flood_max`` partitions."""

    oversized_per_10k: int = 0
    flood_per_10k: int = 0
    flood_max: int = 100_000


#: Flood sizes: small, and beyond the documented limit of 1,000,000 shards per request (refused before
#: anything is built). Not the limit itself: that costs the event loop seconds, a known issue
#: (tests/coordinator/test_fuzz.py::test_a_request_at_the_owned_limit_holds_the_event_loop_briefly).
FLOOD_SIZES = (1_000, 10_000, 100_000, 1_000_001, 4_000_000)
_FLOODS: dict[tuple[str, int], bytes] = {}


def _wrap(number: int, payload: bytes) -> bytes:
    return _tag(number, 2) + varint(len(payload)) + payload


def _partitions(n: int) -> bytes:
    """A TopicPartitions (or SubtopologyTasks: the same layout) listing partitions 0..n-1 of fz-a."""
    key = ("partitions", n)
    if key not in _FLOODS:
        _FLOODS[key] = pb.TopicPartitions(topic="fz-a", partitions=range(n)).SerializeToString()
    return _FLOODS[key]


def _offsets(n: int) -> bytes:
    """A TopicOffsets of fz-a with an offset for each of partitions 0..n-1."""
    key = ("offsets", n)
    if key not in _FLOODS:
        entries = (_wrap(2, b"\x08" + varint(p) + b"\x10\x01") for p in range(n))
        _FLOODS[key] = b"\x0a\x04fz-a" + b"".join(entries)
    return _FLOODS[key]


def flood(method: str, n: int) -> bytes:
    """Fields appended to a request of ``method`` that list ``n`` partitions (tasks, offsets) where it
    lists any; for the others a field of ``n`` bytes nobody reads."""
    if method in ("Heartbeat", "HeartbeatStream"):
        return _wrap(11, _wrap(1, _partitions(n)))  # owned.topics
    if method == "FetchOffsets":
        return _wrap(4, _wrap(1, _partitions(n)))  # shards.topics
    if method == "DeleteOffsets":
        return _wrap(2, _wrap(1, _partitions(n)))
    if method == "InstallAssignment":  # assignment[{member_id: "x", shards.topics}]
        return _wrap(5, b"\x0a\x01x" + _wrap(2, _wrap(1, _partitions(n))))
    if method == "StreamsHeartbeat":  # owned.active, or task_offsets of one task
        return _wrap(8, _wrap(1, _partitions(n)))
    if method in ("CommitOffsets", "ResetOffsets"):
        return _wrap(4 if method == "CommitOffsets" else 2, _offsets(min(n, 1_000_001)))
    return _wrap(99, b"\0" * n)


def oversized() -> bytes:
    """A body over the coordinator's 16 MiB limit (field 1, a string in most requests)."""
    return _tag(1, 2) + varint(OVERSIZED) + b"x" * OVERSIZED


def raw(method: str, ch: Chooser, w: World, heavy: Heavy | None = None) -> bytes:
    """Bytes for ``method`` that are not (quite) its request message."""
    heavy = heavy or Heavy()
    if heavy.oversized_per_10k and ch.integer(0, 9_999) < heavy.oversized_per_10k:
        return oversized()
    base = PLAUSIBLE[method](ch, w).SerializeToString()
    if heavy.flood_per_10k and ch.integer(0, 9_999) < heavy.flood_per_10k:
        return base + flood(method, ch.pick([n for n in FLOOD_SIZES if n <= heavy.flood_max] or [1_000]))
    kind = ch.integer(0, 9)
    if kind == 0:
        return ch.binary(96)
    if kind == 1 and base:  # cut anywhere
        return base[:ch.integer(0, len(base) - 1)]
    if kind == 2 and base:  # bits flipped
        out = bytearray(base)
        for _ in range(ch.integer(1, 4)):
            out[ch.integer(0, len(out) - 1)] ^= 1 << ch.integer(0, 7)
        return bytes(out)
    if kind == 3:  # invalid UTF-8 in a string field (1 or 2: ids in most requests)
        return base + _tag(ch.pick((1, 2, 4, 5, 8)), 2) + b"\x02\xff\xfe"
    if kind == 4:  # an int32 field given a 64-bit varint, or an 11-byte varint
        number = ch.pick((3, 4, 6))
        if ch.chance(50):
            return base + _tag(number, 0) + varint(ch.pick((2**40, UINT64_MAX, 2**31)))
        return base + _tag(number, 0) + b"\xff" * 10 + b"\x01"
    if kind == 5:  # a known field with the wrong wire type, or a length past the end
        if ch.chance(50):
            return base + _tag(ch.pick((1, 2, 3, 11)), ch.pick((0, 1, 5, 2))) + b"\x05abc"
        return base + _tag(1, 2) + varint(ch.pick((2**31, 1_000, 2**63)))
    if kind == 6:  # unknown fields (must be skipped), or a start-group never ended
        if ch.chance(70):
            return base + _tag(ch.pick((99, 1000, 2**29 - 1)), 0) + varint(7) + _tag(77, 2) + b"\x01z"
        return base + _tag(50, 3)
    if kind == 7:  # deeply nested groups: the parser's recursion limit
        depth = ch.pick((50, 101, 5_000))
        return base + _tag(60, 3) * depth + _tag(60, 4) * depth
    if kind == 8:  # two encodings concatenated: protobuf merges them (repeated fields doubled)
        return base + (base if ch.chance(50) else PLAUSIBLE[method](ch, w).SerializeToString())
    return base[: len(base) // 2] + ch.binary(16)


# ============================================================================ one request

def generate(method: str, ch: Chooser, w: World, mode: str | None = None,
             heavy: Heavy | None = None) -> Request:
    """One request of ``method``; ``mode`` drawn when not given."""
    spec = BY_NAME[method]
    if mode is None:
        mode = ch.pick(("structured", "structured", "plausible", "plausible", "plausible",
                        "inconsistent", "inconsistent", "raw", "raw"))
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
    count = ch.integer(0, 3) if spec.client_streaming else 1  # a stream may also close at once, empty
    payloads: list[bytes] = []
    messages: list[Message | None] = []
    for _ in range(count):
        msg: Message | None
        if mode == "raw" and (not spec.client_streaming or ch.chance(50)):
            msg, body = None, raw(method, ch, w, heavy)
        else:
            if mode == "structured":
                msg = build(spec.request.DESCRIPTOR, ch, w)
            elif mode == "inconsistent":
                msg = inconsistent(method, ch, w)
            else:
                msg = PLAUSIBLE[method](ch, w)
            body = msg.SerializeToString()
        payloads.append(body)
        messages.append(msg)
    return Request(method, mode, tuple(payloads), tuple(messages))
