"""A compact, stable JSON encoding of the protocol core's records, for the durable store.

One record is one JSON array: ``[tag, group_id, ...fields]``. Shard sets are ``{topic: [partitions]}``
with sorted keys and partitions, so equal records always encode to equal bytes; a key range of a
partition is the entry ``[partition, lo, hi]`` in that list, and a committed offset of a key range
has a tag of its own (``K``), so data written before key ranges existed reads exactly as before. A
migration's external hold (``H``, `regroup.protocol.external`) is ``[holder, known, shards]``, or null
once the migration ended. An offsets-retention mark (``R``, `regroup.protocol.retention`) is
``[since_ms, epoch]`` after the group id: since_ms null is the mark's tombstone.
The tags and field orders are a storage format: change them only together with a new ``FORMAT``
and a migration (and a new store format in `store`, which keeps the store's format — this text plus a
checksum per row — and refuses to import with another ``FORMAT`` until it has one).

Records of both kinds of group (`AnyRecord`) go through `encode` and `decode`: the consumer-group
records here (one-character tags), the streams-group records in `streams_codec` (two-character tags
starting with ``"s"``). The streams tags were added later without a new ``FORMAT``: adding tags is
backwards compatible — data written before they existed still decodes, and the tags are checked at
import never to clash — so ``FORMAT`` is still 1. Changing what an existing tag means would need a
new ``FORMAT``.

`decode` refuses what it cannot read with a `CodecError` naming the problem: not text at all (a
damaged row can read back as NULL, a number or a blob), not a JSON array, an unknown tag, the wrong
number of fields for the tag, or a field of the wrong type (every field of every record is checked,
with `streams_codec`'s readers: a damaged number is refused, never misread as another number's type)
— prefixed with the record type the tag stands for. It does not know which row it reads: `store` adds
that (the record's sequence number, or the snapshot row).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from regroup.coordinator import streams_codec
from regroup.coordinator.streams_codec import (
    read_dict,
    read_int,
    read_list,
    read_opt_int,
    read_opt_str,
    read_str,
    shown,
)
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
from regroup.protocol.shard import PartitionEntry, Shard, ShardSet, group_by_topic

__all__ = ["FORMAT", "AnyRecord", "CodecError", "decode", "encode", "encode_all"]

#: The format of the stored text; `store.FORMAT` (kept with the data) implies it: a store written in
#: another format is refused, not misread.
FORMAT = 1


class CodecError(ValueError):
    """A stored record that this version cannot decode (damaged, or another format)."""


def _shards(s: ShardSet) -> dict[str, list[PartitionEntry]]:
    return dict(sorted(group_by_topic(s).items()))


def _unshards(x: object, what: str) -> ShardSet:
    """A shard set as `_shards` writes it: ``{topic: [partition or [partition, lo, hi], ...]}``."""
    out: list[Shard] = []
    for topic, entries in read_dict(x, what).items():
        for e in read_list(entries, f"the partitions of topic {topic!r} in {what}"):
            if isinstance(e, list):
                p, lo, hi = read_list(e, f"a key range of topic {topic!r} in {what}", 3)
                out.append(Shard(topic, *(read_int(n, f"a key range of topic {topic!r} in {what}")
                                          for n in (p, lo, hi))))
            else:
                out.append(Shard(topic, read_int(e, f"a partition of topic {topic!r} in {what}")))
    shards = frozenset(out)
    if len(shards) != len(out):  # written from a set: a repeat is damage, not data
        raise ValueError(f"{what}: a partition is listed twice in {shown(x)}")
    return shards


def _meta(m: MemberMetadata | None) -> list[Any] | None:
    if m is None:
        return None
    return [m.instance_id, m.rack_id, m.rebalance_timeout_ms, sorted(m.subscribed_topics), m.subscribed_regex,
            m.assignor, list(m.client_assignors)]


def _strings(x: object, what: str) -> list[str]:
    return [read_str(t, f"an element of {what}") for t in read_list(x, what)]


def _unmeta(x: object) -> MemberMetadata | None:
    if x is None:
        return None
    inst, rack, timeout, topics, regex, assignor, client = read_list(x, "the member's metadata", 7)
    return MemberMetadata(read_opt_str(inst, "the member's instance id"),
                          read_opt_str(rack, "the member's rack id"),
                          read_int(timeout, "the member's rebalance timeout"),
                          frozenset(_strings(topics, "the member's subscribed topics")),
                          read_opt_str(regex, "the member's subscribed regex"),
                          read_opt_str(assignor, "the member's assignor"),
                          tuple(_strings(client, "the member's client assignors")))


def _current(c: CurrentAssignment | None) -> list[Any] | None:
    if c is None:
        return None
    return [c.epoch, c.previous_epoch, c.status.value, _shards(c.assigned), _shards(c.pending_revocation)]


def _status(x: object) -> MemberStatus:
    try:
        return MemberStatus(read_str(x, "the member's status"))
    except ValueError:
        known = ", ".join(repr(s.value) for s in MemberStatus)
        raise ValueError(f"the member's status must be one of {known}, found {shown(x)}") from None


def _uncurrent(x: object) -> CurrentAssignment | None:
    if x is None:
        return None
    epoch, prev, status, assigned, pending = read_list(x, "the member's current assignment", 5)
    return CurrentAssignment(read_int(epoch, "the member's epoch"),
                             read_int(prev, "the member's previous epoch"), _status(status),
                             _unshards(assigned, "the assigned partitions"),
                             _unshards(pending, "the partitions pending revocation"))


def _unhold(x: object) -> ExternalHold | None:
    if x is None:
        return None
    holder, known, shards = read_list(x, "an external hold [holder, known, shards]", 3)
    if not isinstance(known, bool):
        raise ValueError(f"the external hold's known flag must be true or false, found {shown(known)}")
    return ExternalHold(read_str(holder, "the external hold's holder"),
                        _unshards(shards, "the held partitions"), known)


def _unmark(v: list[Any]) -> EmptySinceRecord:
    return EmptySinceRecord(_group(v), read_opt_int(v[2], "the empty-since time"),
                            read_int(v[3], "the group epoch"))


def _group(v: list[Any]) -> str:
    return read_str(v[1], "the group id")


def _member(v: list[Any]) -> str:
    return read_str(v[2], "the member id")


def _topic_counts(x: object) -> dict[str, int]:
    return {t: read_int(n, f"the partition count of topic {t!r}")
            for t, n in read_dict(x, "the subscribed topics").items()}


def _offset(v: list[Any]) -> OffsetRecord:
    shard = Shard(read_str(v[2], "the topic"), read_int(v[3], "the partition"))
    return OffsetRecord(_group(v), shard, read_opt_int(v[4], "the offset"),
                        read_str(v[5], "the commit metadata"), read_int(v[6], "the commit epoch"))


def _range_offset(v: list[Any]) -> OffsetRecord:
    shard = Shard(read_str(v[2], "the topic"), read_int(v[3], "the partition"),
                  read_int(v[4], "the key range's lo"), read_int(v[5], "the key range's hi"))
    return OffsetRecord(_group(v), shard, read_opt_int(v[6], "the offset"),
                        read_str(v[7], "the commit metadata"), read_int(v[8], "the commit epoch"))


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


#: ``tag -> (record type name, array length with the tag, decoder)``, as in `streams_codec`. Every
#: field's type is checked (`streams_codec` rule 3): a damaged record is refused, never misread.
_CONSUMER_DECODERS: dict[str, tuple[str, int, Callable[[list[Any]], Record]]] = {
    "E": ("GroupEpochRecord", 3,
          lambda v: GroupEpochRecord(_group(v), read_opt_int(v[2], "the group epoch"))),
    "S": ("SubscribedTopicsRecord", 3, lambda v: SubscribedTopicsRecord(_group(v), _topic_counts(v[2]))),
    "X": ("RegexRecord", 4, lambda v: RegexRecord(
        _group(v), read_str(v[2], "the regex"),
        None if v[3] is None else frozenset(_strings(v[3], "the topics the regex matched")))),
    "M": ("MemberMetadataRecord", 4, lambda v: MemberMetadataRecord(_group(v), _member(v), _unmeta(v[3]))),
    "T": ("TargetEpochRecord", 4, lambda v: TargetEpochRecord(_group(v), read_int(v[2], "the target epoch"),
                                                              read_str(v[3], "the assignor"))),
    "t": ("TargetMemberRecord", 4, lambda v: TargetMemberRecord(
        _group(v), _member(v), None if v[3] is None else _unshards(v[3], "the target"))),
    "C": ("CurrentAssignmentRecord", 4,
          lambda v: CurrentAssignmentRecord(_group(v), _member(v), _uncurrent(v[3]))),
    "O": ("OffsetRecord", 7, _offset),
    "K": ("OffsetRecord", 9, _range_offset),
    "P": ("ParallelismRecord", 4, lambda v: ParallelismRecord(_group(v), read_str(v[2], "the topic"),
                                                              read_opt_int(v[3], "the parallelism"))),
    "H": ("ExternalHoldRecord", 3, lambda v: ExternalHoldRecord(_group(v), _unhold(v[2]))),
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


def decode(text: object) -> AnyRecord:
    """The record stored as ``text``; `CodecError` naming the problem for anything else — including
    what is not text at all (a damaged row can read as NULL, a number or a blob)."""
    if not isinstance(text, str):
        raise CodecError(f"cannot decode stored record: it must be text, found {type(text).__name__} "
                         f"{shown(text, 200)}")
    try:
        return _decode(text)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise CodecError(f"cannot decode stored record {shown(text, 200)}: {e}") from e


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
