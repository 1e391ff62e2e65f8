"""A compact, stable JSON encoding of the protocol core's records, for the durable store.

One record is one JSON array: ``[tag, group_id, ...fields]``. Shard sets are ``{topic: [partitions]}``
with sorted keys and partitions, so equal records always encode to equal bytes. The tags and field
orders are a storage format: change them only together with a new ``FORMAT`` and a migration.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadata,
    MemberMetadataRecord,
    MemberStatus,
    OffsetRecord,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from regroup.protocol.shard import Shard, ShardSet, from_topic_map, group_by_topic

#: Stored with the data; a store written in another format is refused, not misread.
FORMAT = 1


class CodecError(ValueError):
    """A stored record that this version cannot decode (damaged, or another format)."""


def _shards(s: ShardSet) -> dict[str, list[int]]:
    return dict(sorted(group_by_topic(s).items()))


def _unshards(d: dict[str, list[int]]) -> ShardSet:
    return from_topic_map(d)


def _meta(m: MemberMetadata | None) -> list[Any] | None:
    if m is None:
        return None
    return [m.instance_id, m.rack_id, m.rebalance_timeout_ms, sorted(m.subscribed_topics), m.subscribed_regex,
            m.assignor, list(m.client_assignors)]


def _unmeta(v: list[Any] | None) -> MemberMetadata | None:
    if v is None:
        return None
    inst, rack, timeout, topics, regex, assignor, client = v
    return MemberMetadata(inst, rack, timeout, frozenset(topics), regex, assignor, tuple(client))


def _current(c: CurrentAssignment | None) -> list[Any] | None:
    if c is None:
        return None
    return [c.epoch, c.previous_epoch, c.status.value, _shards(c.assigned), _shards(c.pending_revocation)]


def _uncurrent(v: list[Any] | None) -> CurrentAssignment | None:
    if v is None:
        return None
    epoch, prev, status, assigned, pending = v
    return CurrentAssignment(epoch, prev, MemberStatus(status), _unshards(assigned), _unshards(pending))


def _to_list(r: Record) -> list[Any]:
    if isinstance(r, GroupEpochRecord):
        return ["E", r.group_id, r.epoch]
    if isinstance(r, SubscribedTopicsRecord):
        return ["S", r.group_id, dict(sorted(r.topics.items()))]
    if isinstance(r, RegexRecord):
        return ["X", r.group_id, r.regex, None if r.topics is None else sorted(r.topics)]
    if isinstance(r, MemberMetadataRecord):
        return ["M", r.group_id, r.member_id, _meta(r.metadata)]
    if isinstance(r, TargetEpochRecord):
        return ["T", r.group_id, r.target_epoch, r.assignor]
    if isinstance(r, TargetMemberRecord):
        return ["t", r.group_id, r.member_id, None if r.shards is None else _shards(r.shards)]
    if isinstance(r, CurrentAssignmentRecord):
        return ["C", r.group_id, r.member_id, _current(r.current)]
    if isinstance(r, OffsetRecord):
        return ["O", r.group_id, r.shard.topic, r.shard.partition, r.offset, r.metadata, r.commit_epoch]
    raise TypeError(f"not a record: {r!r}")


_DECODERS: dict[str, Callable[[list[Any]], Record]] = {
    "E": lambda v: GroupEpochRecord(v[1], v[2]),
    "S": lambda v: SubscribedTopicsRecord(v[1], dict(v[2])),
    "X": lambda v: RegexRecord(v[1], v[2], None if v[3] is None else frozenset(v[3])),
    "M": lambda v: MemberMetadataRecord(v[1], v[2], _unmeta(v[3])),
    "T": lambda v: TargetEpochRecord(v[1], v[2], v[3]),
    "t": lambda v: TargetMemberRecord(v[1], v[2], None if v[3] is None else _unshards(v[3])),
    "C": lambda v: CurrentAssignmentRecord(v[1], v[2], _uncurrent(v[3])),
    "O": lambda v: OffsetRecord(v[1], Shard(v[2], v[3]), v[4], v[5], v[6]),
}


def encode(record: Record) -> str:
    return json.dumps(_to_list(record), separators=(",", ":"))


def decode(text: str) -> Record:
    try:
        value = json.loads(text)
        return _DECODERS[value[0]](value)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise CodecError(f"cannot decode stored record {text[:200]!r}: {e}") from e


def encode_all(records: Iterable[Record]) -> list[str]:
    return [encode(r) for r in records]
