"""The stored encoding of streams-group records (`regroup.protocol.streams.records`); `codec` calls it.

Rules (the consumer-group records' rules in `codec`, extended):

1. One record is one JSON array ``[tag, group_id, ...fields]``. Streams tags are two characters,
   ``"s"`` and the letter of the consumer record they mirror (``"sE"`` is the streams group epoch as
   ``"E"`` is the consumer group's); consumer tags are one character, so the two never clash, and
   `codec` checks that at import.
2. Every set and mapping is written sorted, so equal records always encode to equal bytes: a task set
   is ``{subtopology: [partitions]}``, a member's tasks ``[active, standby, warm-up]`` of those, a
   topology ``{subtopology: [source topics]}``.
5. Key-range tasks (`regroup.protocol.streams.topology` rule 4) add to this without changing what a
   K=1 group writes: a key-range task is the entry ``[partition, range, K]`` in its subtopology's
   list, a cut subtopology is ``{"topics": [source topics], "parallelism": K}`` in the topology, and a
   committed offset of a task's key range is an ``sK`` record (as the consumer records' ``K``), and
   the cut of a source topic the current topology no longer reads is an ``sP`` record (as the
   consumer records' ``P``; only snapshots write it, and data without it still decodes).
3. Decoding checks the type of every field and says which record and which field was wrong (a
   damaged record is refused, never misread). A stored topology is checked again by `Topology`'s own
   rules. Errors are `ValueError`s; `codec.decode` wraps them in its `CodecError`. The field readers
   (``read_int``, ``read_str``, ...) are shared with `codec`'s consumer records, which follow this
   rule too.
4. The tags and field orders are a storage format, like the consumer records': adding a tag is
   backwards compatible (old data still decodes), changing one needs a new ``codec.FORMAT``.

What is stored for each record (``|null`` marks a tombstone or an absent value)::

    sE  group, epoch|null                                       StreamsEpochRecord
    sY  group, topology                                         TopologyRecord
    sS  group, {topic: partitions}                              SourceTopicsRecord
    sP  group, topic, parallelism                               SourceParallelismRecord
    sM  group, member, [instance|null, process, timeout]|null   StreamsMemberRecord
    sT  group, target epoch                                     StreamsTargetEpochRecord
    st  group, member, tasks|null                               StreamsTargetRecord
    sC  group, member, [epoch, previous epoch, status, assigned tasks, pending tasks]|null
                                                                StreamsCurrentRecord
    sO  group, topic, partition, offset|null, metadata, commit epoch     StreamsOffsetRecord
    sK  group, topic, partition, lo, hi, offset|null, metadata, commit epoch
                                                                StreamsOffsetRecord of a key range
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from regroup.protocol.errors import ProtocolError
from regroup.protocol.keyrange import MAX_PARALLELISM
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.records import (
    SourceParallelismRecord,
    SourceTopicsRecord,
    StreamsCurrent,
    StreamsCurrentRecord,
    StreamsEpochRecord,
    StreamsMember,
    StreamsMemberRecord,
    StreamsOffsetRecord,
    StreamsRecord,
    StreamsTargetEpochRecord,
    StreamsTargetRecord,
    TopologyRecord,
)
from regroup.protocol.streams.topology import Subtopology, TaskId, Topology

__all__ = ["DECODERS", "read_dict", "read_int", "read_list", "read_opt_int", "read_opt_str", "read_str",
           "shown", "to_list"]

# ---------------------------------------------------------------------------------------- encoding


def _tasks(tasks: Iterable[TaskId]) -> dict[str, list[int | list[int]]]:
    by_sub: dict[str, list[TaskId]] = {}
    for t in tasks:
        by_sub.setdefault(t.subtopology, []).append(t)
    return {sub: [t.partition if t.parts == 1 else [t.partition, t.part, t.parts]
                  for t in sorted(by_sub[sub])]
            for sub in sorted(by_sub)}


def _member_tasks(m: MemberTasks) -> list[Any]:
    return [_tasks(m.active), _tasks(m.standby), _tasks(m.warmup)]


def _topology(t: Topology) -> dict[str, Any]:
    return {s.subtopology_id: sorted(s.source_topics) if s.parallelism == 1 else
            {"parallelism": s.parallelism, "topics": sorted(s.source_topics)}
            for s in sorted(t.subtopologies, key=lambda s: s.subtopology_id)}


def _member(m: StreamsMember) -> list[Any]:
    return [m.instance_id, m.process_id, m.rebalance_timeout_ms]


def _current(c: StreamsCurrent) -> list[Any]:
    return [c.epoch, c.previous_epoch, c.status.value, _member_tasks(c.assigned),
            _member_tasks(c.pending_revocation)]


def to_list(r: StreamsRecord) -> list[Any]:
    """The JSON array of one streams record (rule 1); `TypeError` for anything else."""
    if isinstance(r, StreamsEpochRecord):
        return ["sE", r.group_id, r.epoch]
    if isinstance(r, TopologyRecord):
        return ["sY", r.group_id, _topology(r.topology)]
    if isinstance(r, SourceTopicsRecord):
        return ["sS", r.group_id, dict(sorted(r.topics.items()))]
    if isinstance(r, SourceParallelismRecord):
        return ["sP", r.group_id, r.topic, r.parallelism]
    if isinstance(r, StreamsMemberRecord):
        return ["sM", r.group_id, r.member_id, None if r.member is None else _member(r.member)]
    if isinstance(r, StreamsTargetEpochRecord):
        return ["sT", r.group_id, r.target_epoch]
    if isinstance(r, StreamsTargetRecord):
        return ["st", r.group_id, r.member_id, None if r.tasks is None else _member_tasks(r.tasks)]
    if isinstance(r, StreamsCurrentRecord):
        return ["sC", r.group_id, r.member_id, None if r.current is None else _current(r.current)]
    if isinstance(r, StreamsOffsetRecord):
        sh = r.shard
        if not sh.whole:
            return ["sK", r.group_id, sh.topic, sh.partition, sh.lo, sh.hi, r.offset, r.metadata,
                    r.commit_epoch]
        return ["sO", r.group_id, sh.topic, sh.partition, r.offset, r.metadata, r.commit_epoch]
    raise TypeError(f"not a record: {r!r}")


# ---------------------------------------------------------------------------------------- decoding
# Each reader takes the value and what it is ("the member's process id"), for the error message. The
# readers are shared with `codec`, whose consumer records follow rule 3 too.


def shown(x: object, limit: int = 80) -> str:
    """``repr(x)`` cut to ``limit`` characters: a damaged field can be large, the message stays a line."""
    text = repr(x)
    return text if len(text) <= limit else text[:limit] + "..."


def read_int(x: object, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):  # JSON true would pass isinstance(int)
        raise ValueError(f"{what} must be an integer, found {shown(x)}")
    return x


def read_opt_int(x: object, what: str) -> int | None:
    return None if x is None else read_int(x, what)


def read_str(x: object, what: str) -> str:
    if not isinstance(x, str):
        raise ValueError(f"{what} must be a string, found {shown(x)}")
    return x


def read_opt_str(x: object, what: str) -> str | None:
    return None if x is None else read_str(x, what)


def read_list(x: object, what: str, length: int | None = None) -> list[Any]:
    if not isinstance(x, list):
        raise ValueError(f"{what} must be a list, found {shown(x)}")
    if length is not None and len(x) != length:
        raise ValueError(f"{what} must have {length} elements, found {len(x)}")
    return x


def read_dict(x: object, what: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise ValueError(f"{what} must be an object, found {shown(x)}")
    return x


def _untask(sub: str, x: object, what: str) -> TaskId:
    if not isinstance(x, list):
        return TaskId(sub, read_int(x, f"a partition of subtopology {sub!r} in {what}"))
    p, r, k = (read_int(n, f"a key-range task of subtopology {sub!r} in {what}")
               for n in read_list(x, f"a key-range task of subtopology {sub!r} in {what}", 3))
    if not (k > 1 and 0 <= r < k):
        raise ValueError(f"{what}: subtopology {sub!r} has key-range task {shown(x)}; a range r of K "
                         f"needs K > 1 and 0 <= r < K")
    return TaskId(sub, p, r, k)


def _untasks(x: object, what: str) -> frozenset[TaskId]:
    out: set[TaskId] = set()
    for sub, parts in read_dict(x, what).items():
        listed = [_untask(sub, p, what)
                  for p in read_list(parts, f"the partitions of subtopology {sub!r} in {what}")]
        if len(set(listed)) != len(listed):
            raise ValueError(f"{what}: subtopology {sub!r} has a partition listed twice: "
                             f"{', '.join(map(str, listed))}")
        out.update(listed)
    return frozenset(out)


def _unmember_tasks(x: object, what: str) -> MemberTasks:
    active, standby, warmup = read_list(x, what, 3)
    return MemberTasks(_untasks(active, f"the active tasks of {what}"),
                       _untasks(standby, f"the standby tasks of {what}"),
                       _untasks(warmup, f"the warm-up tasks of {what}"))


def _untopology(x: object) -> Topology:
    subs = []
    for sid, value in read_dict(x, "the topology").items():
        topics, parallelism = value, 1
        if isinstance(value, dict):  # a cut subtopology (rule 5)
            if sorted(value) != ["parallelism", "topics"]:
                raise ValueError(f"subtopology {sid!r} of the topology must have exactly 'topics' and "
                                 f"'parallelism', found {shown(sorted(value))}")
            topics = value["topics"]
            parallelism = read_int(value["parallelism"], f"the parallelism of subtopology {sid!r}")
        names = [read_str(t, f"a source topic of subtopology {sid!r}")
                 for t in read_list(topics, f"the source topics of subtopology {sid!r}")]
        subs.append(Subtopology(sid, frozenset(names), parallelism))
    try:
        return Topology(tuple(subs))
    except ProtocolError as e:
        raise ValueError(f"the stored topology breaks a topology rule: {e.message}") from e


def _untopic_counts(x: object) -> dict[str, int]:
    return {t: read_int(n, f"the partition count of source topic {t!r}")
            for t, n in sorted(read_dict(x, "the source topics").items())}


def _unparallelism(v: list[Any]) -> SourceParallelismRecord:
    topic = read_str(v[2], "the topic")
    k = read_int(v[3], f"the parallelism of source topic {topic!r}")
    if not 1 <= k <= MAX_PARALLELISM:
        raise ValueError(f"the parallelism of source topic {topic!r} must be 1..{MAX_PARALLELISM}, found {k}")
    return SourceParallelismRecord(_group(v), topic, k)


def _unmember(x: object) -> StreamsMember | None:
    if x is None:
        return None
    instance, process, timeout = read_list(x, "the member", 3)
    return StreamsMember(read_opt_str(instance, "the member's instance id"),
                         read_str(process, "the member's process id"),
                         read_int(timeout, "the member's rebalance timeout"))


def _uncurrent(x: object) -> StreamsCurrent | None:
    if x is None:
        return None
    epoch, previous, status, assigned, pending = read_list(x, "the member's current assignment", 5)
    try:
        member_status = MemberStatus(read_str(status, "the member's status"))
    except ValueError:
        known = ", ".join(repr(s.value) for s in MemberStatus)
        raise ValueError(f"the member's status must be one of {known}, found {shown(status)}") from None
    return StreamsCurrent(read_int(epoch, "the member's epoch"),
                          read_int(previous, "the member's previous epoch"),
                          member_status, _unmember_tasks(assigned, "the assigned tasks"),
                          _unmember_tasks(pending, "the tasks pending revocation"))


def _group(v: list[Any]) -> str:
    return read_str(v[1], "the group id")


def _member_id(v: list[Any]) -> str:
    return read_str(v[2], "the member id")


def _offset(v: list[Any]) -> StreamsOffsetRecord:
    shard = Shard(read_str(v[2], "the topic"), read_int(v[3], "the partition"))
    return StreamsOffsetRecord(_group(v), shard, read_opt_int(v[4], "the offset"),
                               read_str(v[5], "the commit metadata"), read_int(v[6], "the commit epoch"))


def _range_offset(v: list[Any]) -> StreamsOffsetRecord:
    shard = Shard(read_str(v[2], "the topic"), read_int(v[3], "the partition"),
                  read_int(v[4], "the key range's low end"), read_int(v[5], "the key range's high end"))
    if not 0 <= shard.lo < shard.hi <= KEY_SPACE:
        raise ValueError(f"the key range [{shard.lo}, {shard.hi}) is not a range of the key space "
                         f"[0, {KEY_SPACE})")
    return StreamsOffsetRecord(_group(v), shard, read_opt_int(v[6], "the offset"),
                               read_str(v[7], "the commit metadata"), read_int(v[8], "the commit epoch"))


#: ``tag -> (record type name, array length with the tag, decoder)``; `codec` checks the length.
DECODERS: Mapping[str, tuple[str, int, Callable[[list[Any]], StreamsRecord]]] = {
    "sE": ("StreamsEpochRecord", 3,
           lambda v: StreamsEpochRecord(_group(v), read_opt_int(v[2], "the group epoch"))),
    "sY": ("TopologyRecord", 3, lambda v: TopologyRecord(_group(v), _untopology(v[2]))),
    "sS": ("SourceTopicsRecord", 3, lambda v: SourceTopicsRecord(_group(v), _untopic_counts(v[2]))),
    "sP": ("SourceParallelismRecord", 4, _unparallelism),
    "sM": ("StreamsMemberRecord", 4,
           lambda v: StreamsMemberRecord(_group(v), _member_id(v), _unmember(v[3]))),
    "sT": ("StreamsTargetEpochRecord", 3,
           lambda v: StreamsTargetEpochRecord(_group(v), read_int(v[2], "the target epoch"))),
    "st": ("StreamsTargetRecord", 4,
           lambda v: StreamsTargetRecord(_group(v), _member_id(v),
                                         None if v[3] is None else _unmember_tasks(v[3], "the target"))),
    "sC": ("StreamsCurrentRecord", 4,
           lambda v: StreamsCurrentRecord(_group(v), _member_id(v), _uncurrent(v[3]))),
    "sO": ("StreamsOffsetRecord", 7, _offset),
    "sK": ("StreamsOffsetRecord", 9, _range_offset),
}
