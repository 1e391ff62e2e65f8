"""A compact, stable JSON encoding of the protocol core's records, for the durable store.

One record is one JSON array: ``[tag, group_id, ...fields]``. Shard sets are ``{topic: [partitions]}``
with sorted keys and partitions, so equal records always encode to equal bytes; a key range of a
partition is the entry ``[partition, lo, hi]`` in that list, and a committed offset of a key range
has a tag of its own (``K``), so data written before key ranges existed reads exactly as before. A
migration's external hold (``H``, `regroup.protocol.external`) is ``[holder, known, shards]``, or null
once the migration ended. An offsets-retention mark (``R``, `regroup.protocol.retention`) is
``[since_ms, epoch]`` after the group id: since_ms null is the mark's tombstone.
The tags and field orders are a storage format: change them only together with a new ``FORMAT``
and a migration.

Records of both kinds of group (`AnyRecord`) go through `encode` and `decode`: the consumer-group
records here (one-character tags), the streams-group records in `streams_codec` (two-character tags
starting with ``"s"``). The streams tags were added later without a new ``FORMAT``: adding tags is
backwards compatible — data written before they existed still decodes, and the tags are checked at
import never to clash — so ``FORMAT`` is still 1. Changing what an existing tag means would need a
new ``FORMAT``.

`decode` refuses what it cannot read with a `CodecError` naming the problem: not a JSON array, an
unknown tag, the wrong number of fields for the tag, or (streams records check every field) a field
of the wrong type — prefixed with the record type the tag stands for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from regroup.coordinator import streams_codec
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    EmptySinceRecord,
    ExternalHold,
    ExternalHoldRecord,
    GroupEpochRecord,
    MemberMetadata,
    MemberMetadataRecord,
    MemberStatus,
    OffsetRecord,
    ParallelismRecord,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from regroup.protocol.shard import PartitionEntry, Shard, ShardSet, from_topic_map, group_by_topic

__all__ = ["FORMAT", "AnyRecord", "CodecError", "decode", "encode", "encode_all"]

#: Stored with the data; a store written in another format is refused, not misread.
FORMAT = 1


class CodecError(ValueError):
    """A stored record that this version cannot decode (damaged, or another format)."""


def _shards(s: ShardSet) -> dict[str, list[PartitionEntry]]:
    return dict(sorted(group_by_topic(s).items()))


def _unshards(d: dict[str, list[PartitionEntry]]) -> ShardSet:
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


def _unhold(v: list[Any] | None) -> ExternalHold | None:
    if v is None:
        return None
    holder, known, shards = v
    if not isinstance(holder, str) or not isinstance(known, bool):
        raise ValueError(f"an external hold is [holder, known, shards], got {v!r}")
    return ExternalHold(holder, _unshards(shards), known)


def _unmark(v: list[Any]) -> EmptySinceRecord:
    _, gid, since, epoch = v
    if not isinstance(gid, str) or not (since is None or _is_int(since)) or not _is_int(epoch):
        raise ValueError(f"a retention mark is [group id, since_ms or null, epoch], got {v[1:]!r}")
    return EmptySinceRecord(gid, since, epoch)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _to_list(r: AnyRecord) -> list[Any]:
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
        s = r.shard
        if not s.whole:
            return ["K", r.group_id, s.topic, s.partition, s.lo, s.hi, r.offset, r.metadata, r.commit_epoch]
        return ["O", r.group_id, s.topic, s.partition, r.offset, r.metadata, r.commit_epoch]
    if isinstance(r, ParallelismRecord):
        return ["P", r.group_id, r.topic, r.parallelism]
    if isinstance(r, ExternalHoldRecord):
        h = r.hold
        return ["H", r.group_id, None if h is None else [h.holder, h.known, _shards(h.shards)]]
    if isinstance(r, EmptySinceRecord):
        return ["R", r.group_id, r.since_ms, r.epoch]
    return streams_codec.to_list(r)  # a streams record, or TypeError


#: ``tag -> (record type name, array length with the tag, decoder)``, as in `streams_codec`.
_CONSUMER_DECODERS: dict[str, tuple[str, int, Callable[[list[Any]], Record]]] = {
    "E": ("GroupEpochRecord", 3, lambda v: GroupEpochRecord(v[1], v[2])),
    "S": ("SubscribedTopicsRecord", 3, lambda v: SubscribedTopicsRecord(v[1], dict(v[2]))),
    "X": ("RegexRecord", 4, lambda v: RegexRecord(v[1], v[2], None if v[3] is None else frozenset(v[3]))),
    "M": ("MemberMetadataRecord", 4, lambda v: MemberMetadataRecord(v[1], v[2], _unmeta(v[3]))),
    "T": ("TargetEpochRecord", 4, lambda v: TargetEpochRecord(v[1], v[2], v[3])),
    "t": ("TargetMemberRecord", 4,
          lambda v: TargetMemberRecord(v[1], v[2], None if v[3] is None else _unshards(v[3]))),
    "C": ("CurrentAssignmentRecord", 4, lambda v: CurrentAssignmentRecord(v[1], v[2], _uncurrent(v[3]))),
    "O": ("OffsetRecord", 7, lambda v: OffsetRecord(v[1], Shard(v[2], v[3]), v[4], v[5], v[6])),
    "K": ("OffsetRecord", 9, lambda v: OffsetRecord(v[1], Shard(v[2], v[3], v[4], v[5]), v[6], v[7], v[8])),
    "P": ("ParallelismRecord", 4, lambda v: ParallelismRecord(v[1], v[2], v[3])),
    "H": ("ExternalHoldRecord", 3, lambda v: ExternalHoldRecord(v[1], _unhold(v[2]))),
    "R": ("EmptySinceRecord", 4, _unmark),
}


def _all_decoders() -> dict[str, tuple[str, int, Callable[[list[Any]], AnyRecord]]]:
    clash = sorted(_CONSUMER_DECODERS.keys() & streams_codec.DECODERS.keys())
    if clash:  # a programming error: two record types would share stored data
        raise ImportError(f"record tags {clash} are used by both consumer and streams records")
    return {**_CONSUMER_DECODERS, **streams_codec.DECODERS}


_DECODERS = _all_decoders()


def encode(record: AnyRecord) -> str:
    return json.dumps(_to_list(record), separators=(",", ":"))


def decode(text: str) -> AnyRecord:
    try:
        return _decode(text)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise CodecError(f"cannot decode stored record {text[:200]!r}: {e}") from e


def _decode(text: str) -> AnyRecord:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e})") from e
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise ValueError("a stored record must be a JSON array that starts with its tag")
    tag = value[0]
    if tag not in _DECODERS:
        raise ValueError(f"unknown record tag {tag!r} (this version knows {' '.join(sorted(_DECODERS))})")
    name, length, decoder = _DECODERS[tag]
    if len(value) != length:
        raise ValueError(f"a {name} (tag {tag!r}) is stored as {length} elements, found {len(value)}")
    try:
        return decoder(value)
    except (ValueError, KeyError, IndexError, TypeError) as e:  # name the record the tag stands for
        raise ValueError(f"{name}: {e}") from e


def encode_all(records: Iterable[AnyRecord]) -> list[str]:
    return [encode(r) for r in records]
