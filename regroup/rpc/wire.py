"""Conversions between the protobuf messages and the protocol core's values — the only place for them.

Both the server and the client use these functions, so a value survives ``to_pb`` then ``from_pb``
unchanged (the tests check it). "None = unchanged" travels as field presence: proto3 ``optional``
scalars and message fields that are set or not (`StringList`, `ShardSet`).

Decoding checks only what the protobuf types cannot say and the core's values cannot hold (an enum
value this version does not know, a partition given two offsets, a member listed twice, a partition
count below 1): it raises `WireError`, which the server answers with INVALID_REQUEST. A heartbeat's
owned shards are decoded as listed, by the core's `shards_from_listing` (`owned_from_pb`): a partition
listed twice, or more than ``max_owned`` partitions, is refused before a single `Shard` is built. The
other lists a request carries — the shards of an offset fetch or deletion, a commit's or reset's
offsets, a delegate's assignment — are counted the same way first (more than the coordinator's
``max_owned_shards`` in all: refused in the core's words, before anything is built; `regroup chaos
fuzz` found millions of them built first, the event loop held for tens of seconds), then become sets,
a repeat folded in (answers as they come, `shards_from_pb`). Everything else (id lengths, epochs,
negative partitions or offsets) is the protocol core's validation, with the core's messages.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping

from google.protobuf.message import Message

from regroup.protocol.assignors.base import GroupSpec, MemberSpec
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import DelegatedSpec
from regroup.protocol.describe import GroupDescription, MemberDescription
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import (
    Ack,
    CommittedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetResetRequest,
)
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard, ShardSet
from regroup.protocol.state import GroupState
from regroup.protocol.streams.state import StreamsGroupState
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import shards_from_listing
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.errors import WireError
from regroup.rpc.types import (
    EpochChange,
    GroupDetails,
    GroupListing,
    MemberClient,
    Nudge,
    OffsetStatus,
    TopicsInfo,
)

#: The gRPC service, as declared in proto/regroup.proto.
SERVICE_NAME = "regroup.v1.Coordinator"
#: Metadata carrying the API token: ``authorization: Bearer <token>``.
AUTH_HEADER = "authorization"
#: Metadata a client may send to name itself (describe shows it as CLIENT-ID).
CLIENT_ID_HEADER = "regroup-client-id"
#: The owned shards a decoded request may list unless the caller says otherwise (the server passes
#: its own ``CoordinatorConfig.max_owned_shards``).
DEFAULT_MAX_OWNED = CoordinatorConfig().max_owned_shards

# ---------------------------------------------------------------------------------------- enums


def _enum_map(prefix: str, names: Iterable[str], wrapper: object) -> dict[str, int]:
    out = {}
    for name in names:
        try:
            out[name] = wrapper.Value(prefix + name)  # type: ignore[attr-defined]
        except ValueError as e:  # pragma: no cover - caught by the tests when the proto lags the core
            raise ImportError(f"proto/regroup.proto has no {prefix}{name}: regenerate the proto") from e
    return out


_ERROR_TO_PB = {ErrorCode[n]: v for n, v in _enum_map("ERROR_CODE_", ErrorCode.__members__,
                                                       pb.ErrorCode).items()}
_ERROR_FROM_PB = {v: k for k, v in _ERROR_TO_PB.items()}
_STATE_TO_PB = {GroupState[n]: v for n, v in _enum_map("GROUP_STATE_", GroupState.__members__,
                                                        pb.GroupState).items()}
_STATE_FROM_PB = {v: k for k, v in _STATE_TO_PB.items()}
_STATUS_TO_PB = {MemberStatus[n]: v for n, v in _enum_map("MEMBER_STATUS_", MemberStatus.__members__,
                                                           pb.MemberStatus).items()}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}


def error_to_pb(code: ErrorCode) -> pb.ErrorCode:
    return _ERROR_TO_PB[code]  # type: ignore[return-value]


def error_from_pb(value: int) -> ErrorCode:
    code = _ERROR_FROM_PB.get(value)
    if code is None:
        raise WireError(f"unknown error code {value}: the coordinator is newer than this client")
    return code


def state_to_pb(state: GroupState) -> pb.GroupState:
    return _STATE_TO_PB[state]  # type: ignore[return-value]


def state_from_pb(value: int) -> GroupState:
    state = _STATE_FROM_PB.get(value)
    if state is None:
        raise WireError(f"unknown group state {value}")
    return state


def _status_from_pb(value: int) -> MemberStatus:
    status = _STATUS_FROM_PB.get(value)
    if status is None:
        raise WireError(f"unknown member status {value}")
    return status


# ---------------------------------------------------------------------------------------- shards


def shards_to_pb(shards: Iterable[Shard], out: pb.ShardSet | None = None) -> pb.ShardSet:
    """Shards grouped by topic, topics and partitions sorted (a stable encoding)."""
    msg = pb.ShardSet() if out is None else out
    msg.SetInParent()  # an empty set is present, not "unchanged"
    by_topic: dict[str, list[Shard]] = {}
    for s in shards:
        by_topic.setdefault(s.topic, []).append(s)
    for topic in sorted(by_topic):
        ss = sorted(by_topic[topic])
        tp = msg.topics.add(topic=topic, partitions=[s.partition for s in ss if s.whole])
        for s in ss:
            if not s.whole:
                tp.ranges.add(partition=s.partition, lo=s.lo, hi=s.hi)
    return msg


def _range_shards(tp: pb.TopicPartitions) -> Iterator[Shard]:
    return (Shard(tp.topic, r.partition, r.lo, r.hi) for r in tp.ranges)


def shards_from_pb(msg: pb.ShardSet) -> ShardSet:
    """Shards as a set, a repeat folded in (answers, assignments; a heartbeat's owned list is
    `owned_from_pb`'s)."""
    whole = frozenset(Shard(tp.topic, p) for tp in msg.topics for p in tp.partitions)
    if not any(tp.ranges for tp in msg.topics):
        return whole
    return whole | frozenset(s for tp in msg.topics for s in _range_shards(tp))


def owned_from_pb(msg: pb.ShardSet, max_owned: int = DEFAULT_MAX_OWNED) -> ShardSet:
    """A request's owned shards, refused (`WireError`, naming the partition) when listed twice or more
    than ``max_owned`` in all — counted before any shard is built, so a huge list costs nothing."""
    ranges = sum(len(tp.ranges) for tp in msg.topics)
    try:
        whole = shards_from_listing("owned", ((tp.topic, tp.partitions) for tp in msg.topics),
                                    max_owned - ranges)
    except ProtocolError as e:
        raise WireError(e.message) from e
    if not ranges:
        return whole
    return whole | _unique_ranges(msg, "owned")


def _unique_ranges(msg: pb.ShardSet, field: str) -> ShardSet:
    out: set[Shard] = set()
    for tp in msg.topics:
        for s in _range_shards(tp):
            if s in out:
                raise WireError(f"{field} lists key range {s} twice; list each shard once")
            out.add(s)
    return frozenset(out)


def _shard_list_from_pb(msg: pb.ShardSet, field: str = "shards", limit: int = DEFAULT_MAX_OWNED,
                        ) -> tuple[Shard, ...]:
    """A request's shard list (an offset fetch or deletion) as sorted shards, a repeat folded in. More
    than ``limit`` partitions listed in all is refused (`WireError`, the core's words) before a single
    shard is built, and the rest is sorted as integers, topic by topic, never as shards: a 16 MiB list
    of millions of partitions used to hold the event loop (and every other group) for tens of seconds
    before the core's limit refused it (found by `regroup chaos fuzz`)."""
    listed = sum(len(tp.partitions) + len(tp.ranges) for tp in msg.topics)
    if listed > limit:
        raise WireError(f"{field} lists {listed} shards; the limit is {limit}")
    by_topic: dict[str, set[int]] = {}
    for tp in msg.topics:
        by_topic.setdefault(tp.topic, set()).update(tp.partitions)
    whole = tuple(Shard(t, p) for t in sorted(by_topic) for p in sorted(by_topic[t]))
    if not any(tp.ranges for tp in msg.topics):
        return whole
    return tuple(sorted(set(whole) | {s for tp in msg.topics for s in _range_shards(tp)}))


def _key_range(s: Shard) -> dict[str, int]:
    """The wire's key-range fields of a shard: none for a whole partition (``key_hi`` 0)."""
    return {} if s.whole else {"key_lo": s.lo, "key_hi": s.hi}


def _shard_at(topic: str, partition: int, key_lo: int, key_hi: int) -> Shard:
    return Shard(topic, partition) if key_hi == 0 else Shard(topic, partition, key_lo, key_hi)


def _offsets_to_pb(offsets: Mapping[Shard, int]) -> list[pb.TopicOffsets]:
    by_topic: dict[str, list[tuple[Shard, int]]] = {}
    for s, o in offsets.items():
        by_topic.setdefault(s.topic, []).append((s, o))
    return [pb.TopicOffsets(topic=t, partitions=[pb.PartitionOffset(partition=s.partition, offset=o,
                                                                    **_key_range(s))
                                                 for s, o in sorted(by_topic[t])])
            for t in sorted(by_topic)]


def _offsets_from_pb(topics: Collection[pb.TopicOffsets], limit: int = DEFAULT_MAX_OWNED) -> dict[Shard, int]:
    """Offsets by shard; more than ``limit`` of them is refused before any is built (as shard lists)."""
    listed = sum(len(t.partitions) for t in topics)
    if listed > limit:
        raise WireError(f"offsets lists {listed} shards; the limit is {limit}")
    out: dict[Shard, int] = {}
    for t in topics:
        for po in t.partitions:
            shard = _shard_at(t.topic, po.partition, po.key_lo, po.key_hi)
            if shard in out:
                raise WireError(f"offsets list {shard} twice; give each partition one offset")
            out[shard] = po.offset
    return out


def _opt(msg: Message, name: str) -> str | None:
    """A proto3 ``optional string`` as ``str | None``."""
    if not msg.HasField(name):
        return None
    value = getattr(msg, name)
    assert isinstance(value, str)
    return value


# ---------------------------------------------------------------------------------------- heartbeat


def heartbeat_request_to_pb(req: HeartbeatRequest) -> pb.HeartbeatRequest:
    msg = pb.HeartbeatRequest(group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch)
    if req.instance_id is not None:
        msg.instance_id = req.instance_id
    if req.rack_id is not None:
        msg.rack_id = req.rack_id
    if req.rebalance_timeout_ms is not None:
        msg.rebalance_timeout_ms = req.rebalance_timeout_ms
    if req.subscribed_topics is not None:
        msg.subscribed_topics.SetInParent()
        msg.subscribed_topics.values.extend(req.subscribed_topics)
    if req.subscribed_regex is not None:
        msg.subscribed_regex = req.subscribed_regex
    if req.assignor is not None:
        msg.assignor = req.assignor
    if req.client_assignors is not None:
        msg.client_assignors.SetInParent()
        msg.client_assignors.values.extend(req.client_assignors)
    if req.owned is not None:
        shards_to_pb(req.owned, msg.owned)
    return msg


def heartbeat_request_from_pb(msg: pb.HeartbeatRequest, max_owned: int = DEFAULT_MAX_OWNED,
                              ) -> HeartbeatRequest:
    """``max_owned``: the coordinator's ``max_owned_shards`` (see `owned_from_pb`)."""
    return HeartbeatRequest(
        group_id=msg.group_id,
        member_id=msg.member_id,
        member_epoch=msg.member_epoch,
        instance_id=_opt(msg, "instance_id"),
        rack_id=_opt(msg, "rack_id"),
        rebalance_timeout_ms=msg.rebalance_timeout_ms if msg.HasField("rebalance_timeout_ms") else None,
        subscribed_topics=tuple(msg.subscribed_topics.values) if msg.HasField("subscribed_topics") else None,
        subscribed_regex=_opt(msg, "subscribed_regex"),
        assignor=_opt(msg, "assignor"),
        client_assignors=tuple(msg.client_assignors.values) if msg.HasField("client_assignors") else None,
        owned=owned_from_pb(msg.owned, max_owned) if msg.HasField("owned") else None,
    )


def heartbeat_response_to_pb(resp: HeartbeatResponse) -> pb.HeartbeatResponse:
    msg = pb.HeartbeatResponse(
        error=error_to_pb(resp.error), message=resp.message, member_id=resp.member_id,
        member_epoch=resp.member_epoch, heartbeat_interval_ms=resp.heartbeat_interval_ms,
        should_compute_assignment=resp.should_compute_assignment,
        session_timeout_ms=resp.session_timeout_ms, failover_grace_ms=resp.failover_grace_ms)
    if resp.assignment is not None:
        shards_to_pb(resp.assignment, msg.assignment)
    return msg


def heartbeat_response_from_pb(msg: pb.HeartbeatResponse) -> HeartbeatResponse:
    return HeartbeatResponse(
        error=error_from_pb(msg.error), message=msg.message, member_id=msg.member_id,
        member_epoch=msg.member_epoch, heartbeat_interval_ms=msg.heartbeat_interval_ms,
        assignment=shards_from_pb(msg.assignment) if msg.HasField("assignment") else None,
        should_compute_assignment=msg.should_compute_assignment,
        session_timeout_ms=msg.session_timeout_ms, failover_grace_ms=msg.failover_grace_ms)


# ---------------------------------------------------------------------------------------- offsets


def ack_to_pb(ack: Ack) -> pb.Ack:
    return pb.Ack(error=error_to_pb(ack.error), message=ack.message)


def ack_from_pb(msg: pb.Ack) -> Ack:
    return Ack(error_from_pb(msg.error), msg.message)


def commit_request_to_pb(req: OffsetCommitRequest) -> pb.OffsetCommitRequest:
    return pb.OffsetCommitRequest(group_id=req.group_id, member_id=req.member_id,
                                  member_epoch=req.member_epoch, topics=_offsets_to_pb(req.offsets),
                                  metadata=req.metadata)


def commit_request_from_pb(msg: pb.OffsetCommitRequest) -> OffsetCommitRequest:
    return OffsetCommitRequest(msg.group_id, msg.member_id, msg.member_epoch,
                               _offsets_from_pb(msg.topics), msg.metadata)


def reset_request_to_pb(req: OffsetResetRequest) -> pb.ResetOffsetsRequest:
    return pb.ResetOffsetsRequest(group_id=req.group_id, topics=_offsets_to_pb(req.offsets),
                                  metadata=req.metadata)


def reset_request_from_pb(msg: pb.ResetOffsetsRequest) -> OffsetResetRequest:
    return OffsetResetRequest(msg.group_id, _offsets_from_pb(msg.topics), msg.metadata)


def fetch_request_to_pb(req: OffsetFetchRequest) -> pb.OffsetFetchRequest:
    msg = pb.OffsetFetchRequest(group_id=req.group_id, member_id=req.member_id,
                                member_epoch=req.member_epoch)
    if req.shards is not None:
        shards_to_pb(req.shards, msg.shards)
    return msg


def fetch_request_from_pb(msg: pb.OffsetFetchRequest) -> OffsetFetchRequest:
    return OffsetFetchRequest(msg.group_id, msg.member_id, msg.member_epoch,
                              _shard_list_from_pb(msg.shards) if msg.HasField("shards") else None)


def fetch_response_to_pb(resp: OffsetFetchResponse) -> pb.OffsetFetchResponse:
    by_topic: dict[str, list[pb.CommittedOffset]] = {}
    for s, c in sorted(resp.offsets.items()):
        by_topic.setdefault(s.topic, []).append(pb.CommittedOffset(
            partition=s.partition, offset=c.offset, metadata=c.metadata, commit_epoch=c.commit_epoch,
            **_key_range(s)))
    return pb.OffsetFetchResponse(
        error=error_to_pb(resp.error), message=resp.message,
        topics=[pb.TopicCommitted(topic=t, partitions=ps) for t, ps in by_topic.items()])


def fetch_response_from_pb(msg: pb.OffsetFetchResponse) -> OffsetFetchResponse:
    offsets = {_shard_at(t.topic, c.partition, c.key_lo, c.key_hi):
               CommittedOffset(c.offset, c.metadata, c.commit_epoch)
               for t in msg.topics for c in t.partitions}
    return OffsetFetchResponse(error_from_pb(msg.error), msg.message, offsets)


def delete_offsets_to_pb(group_id: str, shards: Iterable[Shard] | None) -> pb.DeleteOffsetsRequest:
    msg = pb.DeleteOffsetsRequest(group_id=group_id)
    if shards is not None:
        shards_to_pb(shards, msg.shards)
    return msg


def delete_offsets_from_pb(msg: pb.DeleteOffsetsRequest) -> tuple[str, tuple[Shard, ...] | None]:
    return msg.group_id, (_shard_list_from_pb(msg.shards) if msg.HasField("shards") else None)


# ---------------------------------------------------------------------------------------- delegation


def _member_spec_to_pb(m: MemberSpec) -> pb.MemberSpec:
    msg = pb.MemberSpec(member_id=m.member_id, topics=sorted(m.topics))
    shards_to_pb(m.current, msg.current)
    if m.instance_id is not None:
        msg.instance_id = m.instance_id
    if m.rack is not None:
        msg.rack = m.rack
    return msg


def spec_response_to_pb(spec: DelegatedSpec) -> pb.AssignmentSpecResponse:
    return pb.AssignmentSpecResponse(
        error=error_to_pb(ErrorCode.NONE), group_epoch=spec.group_epoch, assignor=spec.assignor,
        members=[_member_spec_to_pb(m) for _, m in sorted(spec.spec.members.items())],
        topics=dict(spec.spec.topics.partitions))


def spec_response_from_pb(msg: pb.AssignmentSpecResponse) -> DelegatedSpec:
    members: dict[str, MemberSpec] = {}
    for m in msg.members:
        if m.member_id in members:
            raise WireError(f"member {m.member_id!r} listed twice in the assignment spec")
        members[m.member_id] = MemberSpec(m.member_id, frozenset(m.topics), shards_from_pb(m.current),
                                          _opt(m, "instance_id"), _opt(m, "rack"))
    return DelegatedSpec(msg.group_epoch, msg.assignor, GroupSpec(members, topics_from_map(msg.topics)))


def install_request_to_pb(group_id: str, member_id: str, member_epoch: int, group_epoch: int,
                          assignment: Mapping[str, Iterable[Shard]]) -> pb.InstallAssignmentRequest:
    msg = pb.InstallAssignmentRequest(group_id=group_id, member_id=member_id, member_epoch=member_epoch,
                                      group_epoch=group_epoch)
    for mid in sorted(assignment):
        shards_to_pb(assignment[mid], msg.assignment.add(member_id=mid).shards)
    return msg


def install_assignment_from_pb(msg: pb.InstallAssignmentRequest, limit: int = DEFAULT_MAX_OWNED,
                               ) -> dict[str, ShardSet]:
    """A delegate's assignment by member; more than ``limit`` shards listed in all is refused before any
    is built (a valid assignment lists each subscribed partition once)."""
    listed = sum(len(tp.partitions) for a in msg.assignment for tp in a.shards.topics)
    if listed > limit:
        raise WireError(f"assignment lists {listed} shards; the limit is {limit}")
    out: dict[str, ShardSet] = {}
    for a in msg.assignment:
        if a.member_id in out:
            raise WireError(f"member {a.member_id!r} appears twice in the assignment")
        out[a.member_id] = shards_from_pb(a.shards)
    return out


# ---------------------------------------------------------------------------------------- describe


def _member_to_pb(m: MemberDescription, client: MemberClient | None) -> pb.MemberDescription:
    msg = pb.MemberDescription(
        member_id=m.member_id, epoch=m.epoch, previous_epoch=m.previous_epoch,
        status=_STATUS_TO_PB[m.status],  # type: ignore[arg-type]
        subscribed_topics=sorted(m.subscribed_topics), resolved_topics=sorted(m.resolved_topics),
        rebalance_timeout_ms=m.rebalance_timeout_ms)
    for name in ("instance_id", "rack_id", "subscribed_regex", "assignor"):
        value = getattr(m, name)
        if value is not None:
            setattr(msg, name, value)
    shards_to_pb(m.assigned, msg.assigned)
    shards_to_pb(m.pending_revocation, msg.pending_revocation)
    shards_to_pb(m.awaiting, msg.awaiting)
    shards_to_pb(m.target, msg.target)
    c = client or MemberClient()
    msg.client_id, msg.client_host, msg.last_heartbeat_age_ms = (c.client_id, c.client_host,
                                                                 c.last_heartbeat_age_ms)
    return msg


def _member_from_pb(msg: pb.MemberDescription) -> MemberDescription:
    return MemberDescription(
        member_id=msg.member_id, instance_id=_opt(msg, "instance_id"), rack_id=_opt(msg, "rack_id"),
        epoch=msg.epoch, previous_epoch=msg.previous_epoch, status=_status_from_pb(msg.status),
        assigned=shards_from_pb(msg.assigned), pending_revocation=shards_from_pb(msg.pending_revocation),
        awaiting=shards_from_pb(msg.awaiting), target=shards_from_pb(msg.target),
        subscribed_topics=frozenset(msg.subscribed_topics), subscribed_regex=_opt(msg, "subscribed_regex"),
        resolved_topics=frozenset(msg.resolved_topics), assignor=_opt(msg, "assignor"),
        rebalance_timeout_ms=msg.rebalance_timeout_ms)


def _offset_status_to_pb(o: OffsetStatus) -> pb.OffsetStatus:
    return pb.OffsetStatus(
        topic=o.shard.topic, partition=o.shard.partition,
        committed_offset=-1 if o.committed is None else o.committed, metadata=o.metadata,
        commit_epoch=o.commit_epoch, log_end_offset=-1 if o.log_end_offset is None else o.log_end_offset,
        lag=-1 if o.lag is None else o.lag, owner=o.owner or "", **_key_range(o.shard))


def _offset_status_from_pb(msg: pb.OffsetStatus) -> OffsetStatus:
    return OffsetStatus(
        shard=_shard_at(msg.topic, msg.partition, msg.key_lo, msg.key_hi),
        committed=None if msg.committed_offset < 0 else msg.committed_offset, metadata=msg.metadata,
        commit_epoch=msg.commit_epoch, log_end_offset=None if msg.log_end_offset < 0 else msg.log_end_offset,
        lag=None if msg.lag < 0 else msg.lag, owner=msg.owner or None)


def group_details_to_pb(d: GroupDetails) -> pb.GroupDescription:
    g = d.description
    return pb.GroupDescription(
        group_id=g.group_id, state=state_to_pb(g.state), epoch=g.epoch, target_epoch=g.target_epoch,
        assignor=g.assignor, subscribed_topics=dict(g.subscribed_topics), parallelism=dict(g.parallelism),
        members=[_member_to_pb(m, d.clients.get(m.member_id)) for m in g.members],
        offsets=[_offset_status_to_pb(o) for o in d.offsets],
        history=[pb.EpochChange(at_unix_ms=h.at_unix_ms, kind=h.kind, epoch=h.epoch, cause=h.cause)
                 for h in d.history],
        coordinator=d.coordinator)


def group_details_from_pb(msg: pb.GroupDescription) -> GroupDetails:
    members = tuple(_member_from_pb(m) for m in msg.members)
    committed = {o.shard: CommittedOffset(o.committed, o.metadata, o.commit_epoch)
                 for o in (_offset_status_from_pb(x) for x in msg.offsets) if o.committed is not None}
    description = GroupDescription(
        group_id=msg.group_id, state=state_from_pb(msg.state), epoch=msg.epoch,
        target_epoch=msg.target_epoch, assignor=msg.assignor,
        subscribed_topics=dict(sorted(msg.subscribed_topics.items())), members=members,
        offsets=dict(sorted(committed.items())), parallelism=dict(sorted(msg.parallelism.items())))
    clients = {m.member_id: MemberClient(m.client_id, m.client_host, m.last_heartbeat_age_ms)
               for m in msg.members if m.client_id or m.client_host or m.last_heartbeat_age_ms >= 0}
    return GroupDetails(
        description=description, clients=clients,
        offsets=tuple(_offset_status_from_pb(o) for o in msg.offsets),
        history=tuple(EpochChange(h.at_unix_ms, h.kind, h.epoch, h.cause) for h in msg.history),
        coordinator=msg.coordinator)


def list_groups_to_pb(groups: Iterable[tuple[str, GroupState, int]],
                      streams: Iterable[tuple[str, str, int]] = ()) -> pb.ListGroupsResponse:
    """Consumer groups as the core's `list_groups`, streams groups as its `list_streams_groups`
    (state by value), each kind in its own list (see proto: ListGroupsResponse)."""
    from regroup.rpc.streams_wire import streams_state_to_pb  # streams_wire builds on this module

    return pb.ListGroupsResponse(
        groups=[pb.GroupListing(group_id=g, state=state_to_pb(s), members=n) for g, s, n in groups],
        streams_groups=[pb.StreamsGroupListing(group_id=g, state=streams_state_to_pb(StreamsGroupState(s)),
                                               members=n) for g, s, n in streams])


def list_groups_from_pb(msg: pb.ListGroupsResponse) -> list[GroupListing]:
    """Every group of both kinds, by group id (an older coordinator sends consumer groups only)."""
    from regroup.rpc.streams_wire import streams_state_from_pb

    out = [GroupListing(g.group_id, state_from_pb(g.state), g.members) for g in msg.groups]
    for g in msg.streams_groups:
        try:
            out.append(GroupListing(g.group_id, streams_state_from_pb(g.state), g.members))
        except WireError as e:
            raise WireError(f"streams group {g.group_id!r}: {e}") from e
    return sorted(out, key=lambda g: g.group_id)


# ---------------------------------------------------------------------------------------- topics, nudges


def topics_from_map(partitions: Mapping[str, int]) -> TopicMetadata:
    try:
        return TopicMetadata(dict(partitions))
    except ValueError as e:
        raise WireError(str(e)) from e


def topics_to_pb(info: TopicsInfo) -> pb.TopicsResponse:
    return pb.TopicsResponse(topics=dict(info.topics), age_ms=info.age_ms, error=info.error)


def topics_from_pb(msg: pb.TopicsResponse) -> TopicsInfo:
    return TopicsInfo(dict(sorted(msg.topics.items())), msg.age_ms, msg.error)


def nudge_to_pb(n: Nudge) -> pb.Nudge:
    return pb.Nudge(kind=pb.NUDGE_KIND_HEARTBEAT_NOW, group_id=n.group_id, member_id=n.member_id,
                    group_epoch=n.group_epoch)


def nudge_from_pb(msg: pb.Nudge) -> Nudge:
    return Nudge(msg.group_id, msg.member_id, msg.group_epoch)
