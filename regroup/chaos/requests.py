"""Requests for every method of the coordinator's gRPC service, in four modes.

* ``structured`` — the method's request message built field by field from its protobuf descriptor:
  each field drawn from the pools of `values` for its type (boundary integers, hostile and huge
  strings, unknown enum values, repeated fields empty, long or full of duplicates, message fields
  present, empty or absent), often from the field's own plausible values instead (a group that
  exists, a member that joined, an epoch near the member's) so that the coordinator gets past the
  first check.
* ``plausible`` — what a real member or operator sends: a join, then heartbeats at the epoch and with
  the assignment its answers gave (`World` learns them), commits of what it owns, a delegate's
  assignment for the spec it fetched, streams members with topologies and task offsets. This is how
  the fuzzer reaches deep states: reconciliation, revocation, delegation, static take-overs.
* ``inconsistent`` — a plausible request with one rule broken: a join that owns shards, epoch -2
  without an instance id, a leave naming another member's instance id, a future epoch, a shard listed
  twice, a commit at another member's epoch, a partition assigned to two members, a task in two
  roles, or any one field set to a hostile value.
* ``raw`` — bytes that are not (quite) the message: random bytes, a plausible encoding truncated or
  with bits flipped, invalid UTF-8 in a string field, an out-of-range varint, wrong wire types,
  unknown fields, deeply nested groups, two encodings concatenated (protobuf merges them: repeated
  fields doubled), rarely a body over the coordinator's 16 MiB limit.

`METHODS` lists the service's methods from its descriptor; `check_generators` fails when one has no
plausible generator (a method added to the proto is not silently left out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from regroup.chaos.values import (
    HUGE_COUNTS,
    REGEX_POOL,
    REPEAT_COUNTS,
    Chooser,
    int32,
    pick_int,
    pick_string,
)
from regroup.rpc import regroup_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Coordinator"]
#: The fuzz coordinator's topics (``--log static:...``); the canary's topic is not among them.
FUZZ_TOPICS: dict[str, int] = {"fz-a": 4, "fz-b": 3, "fz-c": 2, "fz-d": 1}
MODES = ("structured", "plausible", "inconsistent", "raw")
#: A body over the coordinator's default --max-message-bytes (16 MiB).
OVERSIZED = 16 * 1024 * 1024 + 1024


@dataclass(frozen=True, slots=True)
class MethodSpec:
    name: str
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def path(self) -> str:
        return f"/{SERVICE.full_name}/{self.name}"


def _class(desc: Any) -> type[Message]:
    cls = getattr(pb, desc.name, None)
    if cls is None:  # pragma: no cover - a nested type; regroup.proto has none
        raise LookupError(f"no message class for {desc.full_name}")
    return cls  # type: ignore[no-any-return]


METHODS: tuple[MethodSpec, ...] = tuple(
    MethodSpec(m.name, _class(m.input_type), _class(m.output_type), m.client_streaming, m.server_streaming)
    for m in SERVICE.methods)
BY_NAME = {m.name: m for m in METHODS}


@dataclass
class Member:
    """A member the fuzzer joined and follows (what its answers told it)."""

    group_id: str
    member_id: str
    streams: bool
    epoch: int = 0
    instance_id: str | None = None
    owned: Message | None = None  # pb.ShardSet (consumer) or pb.MemberTasks (streams)
    delegate: bool = False


@dataclass
class World:
    """What the fuzzer knows of the coordinator's state: its groups, members, epochs, assignments."""

    prefix: str = "fz-"
    topics: dict[str, int] = field(default_factory=lambda: dict(FUZZ_TOPICS))
    members: dict[tuple[str, str], Member] = field(default_factory=dict)
    specs: dict[str, pb.AssignmentSpecResponse] = field(default_factory=dict)
    #: The last spec fetched: (group, member, epoch) of the delegate that asked.
    asked: tuple[str, str, int] | None = None
    serial: int = 0
    offset: int = 0
    #: The last member watched (watched again often: a member may hold 4 Watch streams, not 5).
    watched: tuple[str, str] | None = None

    @property
    def groups(self) -> list[str]:
        return [f"{self.prefix}g{i}" for i in range(4)]

    @property
    def streams_groups(self) -> list[str]:
        return [f"{self.prefix}s{i}" for i in range(3)]

    def new_member_id(self) -> str:
        self.serial += 1
        return f"{self.prefix}m{self.serial}"

    def next_offset(self) -> int:
        self.offset += 1
        return self.offset

    def member(self, ch: Chooser, streams: bool | None = None) -> Member | None:
        known = [m for m in self.members.values() if streams is None or m.streams == streams]
        return ch.pick(sorted(known, key=lambda m: (m.group_id, m.member_id))) if known else None

    def group(self, ch: Chooser, streams: bool | None = None) -> str:
        if streams is None:
            return ch.pick(self.groups + self.streams_groups)
        return ch.pick(self.streams_groups if streams else self.groups)

    def partitions_of(self, topic: str) -> list[int]:
        return list(range(self.topics.get(topic, 2)))

    def learn(self, method: str, requests: tuple[Message | None, ...], responses: tuple[Any, ...]) -> None:
        """Follow what the answers say: epochs, assignments, delegates, members gone; specs fetched."""
        for req, resp in zip(requests, responses, strict=False):
            if req is None:
                continue
            if method in ("Heartbeat", "HeartbeatStream", "StreamsHeartbeat"):
                self._learn_heartbeat(req, resp, streams=method == "StreamsHeartbeat")
            elif method == "GetAssignmentSpec" and resp.error == pb.ERROR_CODE_NONE:
                spec = pb.AssignmentSpecResponse()
                spec.CopyFrom(resp)
                self.specs[req.group_id] = spec  # type: ignore[attr-defined]
                self.asked = (req.group_id, req.member_id, req.member_epoch)  # type: ignore[attr-defined]

    def _learn_heartbeat(self, req: Any, resp: Any, streams: bool) -> None:
        key = (req.group_id, resp.member_id or req.member_id)
        if resp.error in (pb.ERROR_CODE_UNKNOWN_MEMBER_ID, pb.ERROR_CODE_FENCED_MEMBER_EPOCH,
                          pb.ERROR_CODE_FENCED_INSTANCE_ID):
            self.members.pop((req.group_id, req.member_id), None)
            return
        if resp.error != pb.ERROR_CODE_NONE:
            return
        if req.member_epoch < 0:
            self.members.pop(key, None)
            return
        m = self.members.get(key)
        if m is None or m.streams != streams:
            instance = req.instance_id if req.HasField("instance_id") else None
            m = self.members[key] = Member(key[0], key[1], streams, instance_id=instance)
        m.epoch = resp.member_epoch
        if resp.HasField("assignment"):
            owned = pb.MemberTasks() if streams else pb.ShardSet()
            owned.CopyFrom(resp.assignment)
            m.owned = owned
        if not streams:
            m.delegate = resp.should_compute_assignment


# ============================================================================ structured, by descriptor

def _group_id(ch: Chooser, w: World) -> str:
    return w.group(ch)


def _member_id(ch: Chooser, w: World) -> str:
    m = w.member(ch)
    return m.member_id if m is not None and ch.chance(70) else w.new_member_id()


def _epoch(ch: Chooser, w: World) -> int:
    m = w.member(ch)
    if m is not None and ch.chance(50):
        return int32(m.epoch + ch.pick((0, 0, -1, 1)))
    return ch.pick((-2, -1, 0, 1, 2, 3))


def _topic(ch: Chooser, w: World) -> str:
    return ch.pick(sorted(w.topics))


#: Plausible values of a field, by its name (``values`` by the name of the field that holds it).
HINTS: dict[str, Callable[[Chooser, World], Any]] = {
    "group_id": _group_id,
    "member_id": _member_id,
    "member_epoch": _epoch,
    "group_epoch": _epoch,
    "instance_id": lambda ch, w: ch.pick(("i0", "i1", "i2")),
    "rack_id": lambda ch, w: ch.pick(("r0", "r1", "")),
    "process_id": lambda ch, w: ch.pick(("p0", "p1", "p2")),
    "rebalance_timeout_ms": lambda ch, w: ch.pick((1, 100, 5_000, 30_000, 60_000)),
    "topic": _topic,
    "subscribed_topics": _topic,
    "source_topics": _topic,
    "client_assignors": lambda ch, w: ch.pick(("mine", "uniform", "yours")),
    "partitions": lambda ch, w: ch.integer(0, 5),
    "partition": lambda ch, w: ch.integer(0, 5),
    "offset": lambda ch, w: w.next_offset(),
    "subtopology": lambda ch, w: ch.pick(("s0", "s1", "s2")),
    "subtopology_id": lambda ch, w: ch.pick(("s0", "s1", "s2")),
    "subscribed_regex": lambda ch, w: ch.pick(REGEX_POOL),
    "assignor": lambda ch, w: ch.pick(("uniform", "range", "mine", "nope")),
    "metadata": lambda ch, w: ch.pick(("", "by fuzz", "m" * 4_096, "m" * 4_097)),
}

_F = FieldDescriptor
_INT_BITS = {_F.TYPE_INT32: 32, _F.TYPE_SINT32: 32, _F.TYPE_SFIXED32: 32,
             _F.TYPE_INT64: 64, _F.TYPE_SINT64: 64, _F.TYPE_SFIXED64: 64}
_UINT_BITS = {_F.TYPE_UINT32: 32, _F.TYPE_FIXED32: 32, _F.TYPE_UINT64: 64, _F.TYPE_FIXED64: 64}


def scalar(f: Any, ch: Chooser, w: World, hint: str) -> Any:
    """A value for one scalar of field ``f``: its plausible value half of the time, else hostile."""
    plausible = HINTS.get(hint)
    if plausible is not None and ch.chance(50):
        return plausible(ch, w)
    t = f.type
    if t in _INT_BITS:
        return pick_int(ch, _INT_BITS[t])
    if t in _UINT_BITS:
        return pick_int(ch, _UINT_BITS[t], signed=False)
    if t == FieldDescriptor.TYPE_STRING:
        return ch.pick(REGEX_POOL) if "regex" in f.name and ch.chance(50) else pick_string(ch)
    if t == FieldDescriptor.TYPE_BOOL:
        return ch.chance(50)
    if t == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in f.enum_type.values]
        return ch.pick(known) if ch.chance(80) else ch.pick((99, -1, 2**31 - 1, len(known)))
    if t == FieldDescriptor.TYPE_BYTES:
        return ch.binary(64)
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return ch.pick((0.0, -1.0, float("inf"), float("nan"), 1e308))
    raise TypeError(f"no generator for field {f.full_name} of type {t}")  # pragma: no cover


def build(desc: Any, ch: Chooser, w: World, depth: int = 0, hint: str = "") -> Message:
    """A message of type ``desc``, field by field (a `StringList`'s values take the hint of the field
    that holds it: ``subscribed_topics`` gets topic names)."""
    msg = _class(desc)()
    for f in desc.fields:
        fill(msg, f, ch, w, depth, hint if f.name == "values" and hint else f.name)
    return msg


def fill(msg: Any, f: Any, ch: Chooser, w: World, depth: int, hint: str) -> None:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        if f.message_type.GetOptions().map_entry:
            target = getattr(msg, f.name)
            key_f, value_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            for _ in range(ch.pick(REPEAT_COUNTS)):
                target[scalar(key_f, ch, w, hint)] = scalar(value_f, ch, w, "")
        elif f.is_repeated:
            items = getattr(msg, f.name)
            for _ in range(0 if depth >= 4 else ch.pick(REPEAT_COUNTS)):
                items.add().CopyFrom(build(f.message_type, ch, w, depth + 1, hint))
        elif ch.chance(60):
            sub = getattr(msg, f.name)
            sub.SetInParent()  # present, even when it stays empty
            if depth < 4 and ch.chance(80):
                sub.CopyFrom(build(f.message_type, ch, w, depth + 1, hint))
        return
    if f.is_repeated:
        values = getattr(msg, f.name)
        if f.type in _INT_BITS and ch.chance(2):  # a packed list of hundreds of thousands
            n = ch.pick(HUGE_COUNTS)
            values.extend(range(n) if ch.chance(50) else [ch.integer(0, 3)] * n)
            return
        values.extend(scalar(f, ch, w, hint) for _ in range(ch.pick(REPEAT_COUNTS)))
        if len(values) and ch.chance(20):  # a duplicate on purpose
            values.append(values[0])
        return
    if f.has_presence and not ch.chance(50):  # proto3 optional: absent means "unchanged"
        return
    setattr(msg, f.name, scalar(f, ch, w, hint))


# ============================================================================ plausible, by method

def _shard_set(entries: dict[str, list[int]]) -> pb.ShardSet:
    out = pb.ShardSet()
    for t, ps in sorted(entries.items()):
        out.topics.add(topic=t, partitions=ps)
    return out


def _some_shards(ch: Chooser, w: World) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in sorted(w.topics):
        if ch.chance(40):
            out[t] = [p for p in w.partitions_of(t) if ch.chance(60)]
    return out


def _owned_shards(m: Member | None) -> dict[str, list[int]]:
    if m is None or not isinstance(m.owned, pb.ShardSet):
        return {}
    return {tp.topic: list(tp.partitions) for tp in m.owned.topics}


def _join(ch: Chooser, w: World) -> pb.HeartbeatRequest:
    msg = pb.HeartbeatRequest(group_id=w.group(ch, streams=False), member_id=w.new_member_id(),
                              member_epoch=0, rebalance_timeout_ms=ch.pick((30_000, 60_000, 5_000, 100, 1)))
    if ch.chance(25):
        msg.instance_id = ch.pick(("i0", "i1", "i2"))
    if ch.chance(15):
        msg.subscribed_regex = ch.pick(("fz-.*", "fz-a|fz-b", "fz-[cd]"))
    else:
        msg.subscribed_topics.values.extend(t for t in sorted(w.topics) if ch.chance(50) or t == "fz-a")
    if ch.chance(20):
        msg.assignor = ch.pick(("uniform", "range", "mine"))
        if msg.assignor == "mine":
            msg.client_assignors.values.append("mine")
    if ch.chance(10):
        msg.rack_id = ch.pick(("r0", "r1"))
    msg.owned.SetInParent()
    return msg


def plausible_heartbeat(ch: Chooser, w: World) -> pb.HeartbeatRequest:
    m = w.member(ch, streams=False)
    if m is None or ch.chance(20):
        return _join(ch, w)
    r = ch.integer(0, 99)
    msg = pb.HeartbeatRequest(group_id=m.group_id, member_id=m.member_id, member_epoch=m.epoch)
    if r < 75:  # follow: at its epoch, owning what it was given
        if ch.chance(85):
            msg.owned.CopyFrom(_shard_set(_owned_shards(m)))
            msg.owned.SetInParent()
    elif r < 85:
        msg.member_epoch = -1
        if m.instance_id is not None:
            msg.instance_id = m.instance_id
    elif r < 92 and m.instance_id is not None:
        msg.member_epoch, msg.instance_id = -2, m.instance_id
    else:  # a rejoin of a known member (a retry after a lost answer)
        msg = _join(ch, w)
        msg.group_id, msg.member_id = m.group_id, m.member_id
        if m.instance_id is not None:
            msg.instance_id = m.instance_id
    return msg


def plausible_commit(ch: Chooser, w: World) -> pb.OffsetCommitRequest:
    m = w.member(ch)
    owned = _owned_shards(m) or _some_shards(ch, w)
    msg = pb.OffsetCommitRequest(group_id=m.group_id if m else w.group(ch),
                                 member_id=m.member_id if m else w.new_member_id(),
                                 member_epoch=m.epoch if m else 1)
    if m is not None and m.streams and isinstance(m.owned, pb.MemberTasks):
        owned = {"fz-a": [t for s in m.owned.active for t in s.partitions]}
    for t, ps in sorted(owned.items()):
        msg.topics.add(topic=t, partitions=[pb.PartitionOffset(partition=p, offset=w.next_offset())
                                            for p in ps])
    if ch.chance(20):
        msg.metadata = ch.pick(("by fuzz", "m" * 4_096))
    return msg


def plausible_fetch(ch: Chooser, w: World) -> pb.OffsetFetchRequest:
    m = w.member(ch) if ch.chance(50) else None
    msg = pb.OffsetFetchRequest(group_id=m.group_id if m else w.group(ch), member_id=m.member_id if m else "",
                                member_epoch=m.epoch if m else -1)
    if ch.chance(40):
        msg.shards.CopyFrom(_shard_set(_some_shards(ch, w)))
        msg.shards.SetInParent()
    return msg


def plausible_spec(ch: Chooser, w: World) -> pb.AssignmentSpecRequest:
    delegates = [m for m in w.members.values() if m.delegate]
    m = ch.pick(sorted(delegates, key=lambda d: d.member_id)) if delegates else w.member(ch, streams=False)
    if m is None:
        return pb.AssignmentSpecRequest(group_id=w.group(ch, False), member_id=w.new_member_id(),
                                        member_epoch=1)
    return pb.AssignmentSpecRequest(group_id=m.group_id, member_id=m.member_id, member_epoch=m.epoch)


def plausible_install(ch: Chooser, w: World) -> pb.InstallAssignmentRequest:
    req = plausible_spec(ch, w)
    if w.asked is not None and ch.chance(70):  # the delegate that just fetched the spec
        req = pb.AssignmentSpecRequest(group_id=w.asked[0], member_id=w.asked[1], member_epoch=w.asked[2])
    msg = pb.InstallAssignmentRequest(group_id=req.group_id, member_id=req.member_id,
                                      member_epoch=req.member_epoch)
    spec = w.specs.get(req.group_id)
    if spec is None or not spec.members:
        msg.group_epoch = ch.integer(0, 5)
        return msg
    msg.group_epoch = spec.group_epoch
    shares: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in spec.members}
    ids = sorted(shares)
    n = 0
    for topic, count in sorted(spec.topics.items()):
        subscribers = [m.member_id for m in spec.members if topic in m.topics] or ids
        for p in range(min(count, 64)):
            shares[subscribers[n % len(subscribers)]].setdefault(topic, []).append(p)
            n += 1
    for mid in ids:
        msg.assignment.add(member_id=mid, shards=_shard_set(shares[mid])).shards.SetInParent()
    return msg


_TOPOLOGIES: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = (
    (("s0", ("fz-a",)),),
    (("s0", ("fz-a",)), ("s1", ("fz-b",))),
    (("s0", ("fz-a", "fz-b")),),  # co-partitioned topics of 4 and 3 partitions: not ready
    (("s0", ("fz-none",)),),  # a missing topic: not ready
)


def _tasks_of(m: Member) -> list[tuple[str, str, int]]:
    if not isinstance(m.owned, pb.MemberTasks):
        return []
    return [(role, s.subtopology, p) for role in ("active", "standby", "warmup")
            for s in getattr(m.owned, role) for p in s.partitions]


def plausible_streams(ch: Chooser, w: World) -> pb.StreamsHeartbeatRequest:
    m = w.member(ch, streams=True)
    if m is None or ch.chance(20):
        msg = pb.StreamsHeartbeatRequest(group_id=w.group(ch, streams=True), member_id=w.new_member_id(),
                                         member_epoch=0, process_id=ch.pick(("p0", "p1", "p2")),
                                         rebalance_timeout_ms=ch.pick((30_000, 5_000, 100)))
        if ch.chance(25):
            msg.instance_id = ch.pick(("i0", "i1"))
        for sub, topics in ch.pick(_TOPOLOGIES):
            msg.topology.subtopologies.add(subtopology_id=sub, source_topics=list(topics))
        msg.owned.SetInParent()
        return msg
    msg = pb.StreamsHeartbeatRequest(group_id=m.group_id, member_id=m.member_id, member_epoch=m.epoch)
    r = ch.integer(0, 99)
    if r < 80:
        if ch.chance(80) and isinstance(m.owned, pb.MemberTasks):
            msg.owned.CopyFrom(m.owned)
        msg.owned.SetInParent()
        if ch.chance(50):
            msg.task_offsets.SetInParent()
            for _, sub, p in _tasks_of(m):
                msg.task_offsets.tasks.add(subtopology=sub, partition=p, topics=[pb.TopicOffsets(
                    topic="fz-a", partitions=[pb.PartitionOffset(partition=p, offset=w.next_offset())])])
    elif r < 92 or m.instance_id is None:
        msg.member_epoch = -1
    else:
        msg.member_epoch, msg.instance_id = -2, m.instance_id
    return msg


def _group_request(cls: type[Message]) -> Callable[[Chooser, World], Message]:
    return lambda ch, w: cls(group_id=w.group(ch))


def plausible_reset(ch: Chooser, w: World) -> pb.ResetOffsetsRequest:
    msg = pb.ResetOffsetsRequest(group_id=w.group(ch))
    for t, ps in sorted(_some_shards(ch, w).items()):
        msg.topics.add(topic=t, partitions=[pb.PartitionOffset(partition=p, offset=ch.integer(0, 50))
                                            for p in ps])
    return msg


def plausible_delete_offsets(ch: Chooser, w: World) -> pb.DeleteOffsetsRequest:
    msg = pb.DeleteOffsetsRequest(group_id=w.group(ch))
    if ch.chance(50):
        msg.shards.CopyFrom(_shard_set(_some_shards(ch, w)))
        msg.shards.SetInParent()
    return msg


def plausible_parallelism(ch: Chooser, w: World) -> pb.SetParallelismRequest:
    """Mostly small legal parallelisms (a live group then rebalances in key ranges), sometimes 1
    (back to whole partitions), sometimes out of range."""
    n = ch.pick((1, 2, 3, 4, 8)) if ch.chance(85) else ch.pick((0, -1, 1025, 2**31 - 1))
    return pb.SetParallelismRequest(group_id=w.group(ch), topic=ch.pick(tuple(FUZZ_TOPICS)), parallelism=n)


def plausible_watch(ch: Chooser, w: World) -> pb.WatchRequest:
    if w.watched is not None and ch.chance(50):
        return pb.WatchRequest(group_id=w.watched[0], member_id=w.watched[1])
    m = w.member(ch)
    if m is None or ch.chance(20):
        return pb.WatchRequest(group_id=w.group(ch), member_id=w.new_member_id())
    w.watched = (m.group_id, m.member_id)
    return pb.WatchRequest(group_id=m.group_id, member_id=m.member_id)


#: One plausible request of each method (HeartbeatStream sends several heartbeats).
PLAUSIBLE: dict[str, Callable[[Chooser, World], Message]] = {
    "Heartbeat": plausible_heartbeat,
    "HeartbeatStream": plausible_heartbeat,
    "Watch": plausible_watch,
    "CommitOffsets": plausible_commit,
    "FetchOffsets": plausible_fetch,
    "GetAssignmentSpec": plausible_spec,
    "InstallAssignment": plausible_install,
    "DescribeGroup": _group_request(pb.DescribeGroupRequest),
    "ListGroups": lambda ch, w: pb.ListGroupsRequest(),
    "DeleteGroup": _group_request(pb.DeleteGroupRequest),
    "ResetOffsets": plausible_reset,
    "DeleteOffsets": plausible_delete_offsets,
    "SetParallelism": plausible_parallelism,
    "Topics": lambda ch, w: pb.TopicsRequest(),
    "RefreshTopics": lambda ch, w: pb.TopicsRequest(),
    "StreamsHeartbeat": plausible_streams,
    "DescribeStreamsGroup": _group_request(pb.DescribeGroupRequest),
}


def check_generators() -> None:
    """Every method of the service has a plausible generator, and nothing else does."""
    declared = {m.name for m in METHODS}
    missing, extra = sorted(declared - PLAUSIBLE.keys()), sorted(PLAUSIBLE.keys() - declared)
    if missing or extra:
        raise LookupError(f"regroup.chaos has no generator for {missing} (or one for methods the service "
                          f"does not declare: {extra}): add them to regroup.chaos.requests.PLAUSIBLE")
