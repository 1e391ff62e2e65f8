"""The changelog protocol of a task's state: its topic, its records, and the offset-commit metadata.

Every change an active makes to a task's state store is also written to a *changelog* partition, so
that a standby or warm-up elsewhere, or the same member after a restart, rebuilds the state by
reading it. The difficulty is that the changelog and the coordinator's committed source offsets are
written separately (no transaction spans both), yet the state a restore produces must be exactly the
state at the *committed* source offsets. Rules:

1. Topic and partition. A subtopology's changelog is the topic ``f"{group}-{subtopology}-changelog"``
   (a legal topic name, or `InvalidTopicError` naming it); task ``TaskId(s, i)`` writes partition
   ``i``, and a key-range task ``TaskId(s, i, r, K)`` partition ``i·K + r`` (its
   ``changelog_partition``). `ensure_changelog` creates it with one partition per task. If it
   exists with *fewer* partitions the source topics have grown, so it is grown too (`add_partitions`): the old
   partitions keep their history and the new tasks start empty. (As in Kafka Streams, keys already
   partitioned by the old count now land in other tasks; that is the user's choice to add
   partitions, not something a store can repair.) More partitions than tasks are left unused.
2. Three kinds of records. A *change*: key = the store's key (bytes, never None), value = the new
   value or None (a tombstone), header ``regroup.gen`` = the writer's generation. A *BEGIN* and a
   *COMMIT* marker: key None, header ``regroup.changelog`` = ``begin`` / ``commit``, value a small
   JSON object (`Begin`, `Commit`). Anything else in a changelog partition is a `ChangelogError`.
3. Generations fence zombies. An active starts by writing ``BEGIN(resume_from, epoch)``; the offset
   of that BEGIN is its *generation*, carried by every change and COMMIT it writes. ``epoch`` is the
   member epoch at which the coordinator granted it the task as active, which grows from one owner
   to the next (the coordinator grants the task only after the previous owner released it or was
   fenced, at a later target epoch). Readers follow the latest BEGIN whose epoch is at least the
   current one's, and ignore every record of any other generation: a fenced active that keeps
   writing (a "zombie"), and even a zombie's late BEGIN, change nothing.
4. Segments. The changes of a generation up to its next COMMIT form a *segment*, named by the
   COMMIT's offset and carrying the source offsets the state reached with it. A segment is
   *pending* until it is known to be *final* — its COMMIT offset was accepted by the coordinator as
   commit metadata (rule 7) — or *void*. Only final segments are ever applied by a copy. A segment
   becomes final when (a) a later COMMIT of its generation says ``confirmed >= it`` (the active writes
   there the last COMMIT the coordinator accepted), (b) a BEGIN resumes from it or a later one, or
   (c) the reader is told the coordinator's current commit (``committed=``) and reads that COMMIT.
   Once one segment is final, so are the pending ones before it (they are its history).
5. ``BEGIN(resume_from=c)`` says: the state is the state at COMMIT ``c`` (empty when ``c`` is None).
   Every pending segment after ``c`` is void, and so are the changes of the previous generation that
   no COMMIT closed (an active that crashed mid-batch). The new active reads ``c`` from the
   coordinator's commit metadata, so whatever an active wrote after its last accepted commit —
   changes, even a COMMIT whose offset never reached the coordinator — is ignored by every restore.
6. Why these rules and not simply "apply a segment when its COMMIT arrives, and let a BEGIN void
   the rest": a standby tailing the changelog would apply a crashed active's last segment as soon as
   its COMMIT arrived and could not un-apply it when the new active's BEGIN voided it. Holding
   segments pending until final (a standby lags the active by one commit; a warm-up passes
   ``committed=`` to catch up exactly) removes that, generations remove the zombie's interleaved
   records, and the COMMIT is produced in a call of its own because a Kafka produce of many records
   is neither atomic nor contiguous: its offset must be known exactly.
7. Commit metadata. After a flush the member commits the task's source offsets to the coordinator
   with metadata naming the COMMIT's changelog offset (`format_commit_metadata`; one string may name
   several tasks, since a commit request carries one string for all its offsets; more tasks than
   one string under the coordinator's limit can name are committed in several requests, each
   carrying its tasks' offsets with the string naming their COMMITs: `split_commit_metadata`). A
   new active reads it back (`resume_point`) and passes it to ``TaskStore.become_active``. Empty
   metadata (no commit, or an operator's reset) means "start from empty state".
8. The changelog must not be compacted or expire records: compaction keeps the last record of a
   key even when it belongs to a void segment, and expiry loses history a fresh copy needs. The
   embedded log does neither; a Kafka changelog needs ``cleanup.policy=delete`` and
   ``retention.ms=-1`` (set by whoever creates topics there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from regroup.log.base import ConsumedRecord, LogRecord, PartitionedLog
from regroup.log.errors import TopicExistsError
from regroup.log.validation import check_partition_count, check_topic_name
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.streams.topology import TaskId
from regroup.streams.errors import ChangelogError

__all__ = [
    "GEN_HEADER",
    "MARKER_HEADER",
    "METADATA_PREFIX",
    "Begin",
    "Commit",
    "begin_record",
    "change_gen",
    "change_records",
    "changelog_topic",
    "check_source_offsets",
    "commit_record",
    "decode_marker",
    "ensure_changelog",
    "format_commit_metadata",
    "parse_commit_metadata",
    "resume_point",
    "source_offsets_of",
    "split_commit_metadata",
]

#: Header of a change record: the decimal offset of its writer's BEGIN (rule 3).
GEN_HEADER = "regroup.gen"
#: Header of a marker record: ``begin`` or ``commit``.
MARKER_HEADER = "regroup.changelog"
_BEGIN = b"begin"
_COMMIT = b"commit"
_VERSION = 1
#: Commit metadata starts with this, so that metadata written by something else is recognised.
METADATA_PREFIX = "regroup-changelog:v1:"


def changelog_topic(group_id: str, subtopology: str) -> str:
    """The changelog topic of ``subtopology`` in ``group_id`` (rule 1); `InvalidTopicError` if illegal."""
    if not isinstance(group_id, str) or not group_id:
        raise ValueError(f"a group id must be a non-empty str, got {group_id!r}")
    if not isinstance(subtopology, str) or not subtopology:
        raise ValueError(f"a subtopology id must be a non-empty str, got {subtopology!r}")
    return check_topic_name(f"{group_id}-{subtopology}-changelog")


def ensure_changelog(log: PartitionedLog, topic: str, partitions: int) -> None:
    """Make ``topic`` exist with at least ``partitions`` partitions (rule 1); safe to race."""
    check_partition_count(partitions, "changelog partition count")
    existing = log.topic_partitions().get(topic)
    if existing is None:
        try:
            log.create_topic(topic, partitions)
            return
        except TopicExistsError:  # another member created it meanwhile
            existing = log.topic_partitions().get(topic, 0)
    if existing < partitions:
        log.add_partitions(topic, partitions)  # the source topics grew; a no-op if someone else did it


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


# ------------------------------------------------------------------------------------ the records


@dataclass(frozen=True, slots=True)
class Begin:
    """``BEGIN``: a new active's generation starts here, resuming from COMMIT ``resume_from``."""

    offset: int
    resume_from: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class Commit:
    """``COMMIT``: the end of a segment of generation ``gen``, and the source offsets it reached."""

    offset: int
    gen: int
    source_offsets: Mapping[str, int]
    #: The last COMMIT of this changelog that the coordinator accepted, as the writer knew it.
    confirmed: int | None


def check_source_offsets(source_offsets: object) -> dict[str, int]:
    """``{topic: next offset to read}`` as a plain dict, or a ValueError naming the bad entry."""
    if not isinstance(source_offsets, Mapping):
        raise ValueError("source offsets are a mapping of topic to offset, not "
                         f"{type(source_offsets).__name__}")
    out: dict[str, int] = {}
    for topic, offset in source_offsets.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"a source topic must be a non-empty str, got {topic!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"the source offset of {topic!r} must be an int >= 0, got {offset!r}")
        out[topic] = offset
    return dict(sorted(out.items()))


def change_records(gen: int, changes: Iterable[tuple[bytes, bytes | None]]) -> list[LogRecord]:
    """The change records of ``(key, value)`` pairs (``value`` None: deleted) by generation ``gen``."""
    ts, headers = _now_ms(), ((GEN_HEADER, b"%d" % gen),)
    return [LogRecord(k, v, ts, headers) for k, v in changes]


def begin_record(resume_from: int | None, epoch: int) -> LogRecord:
    value = _json({"v": _VERSION, "resume_from": resume_from, "epoch": epoch})
    return LogRecord(None, value, _now_ms(), ((MARKER_HEADER, _BEGIN),))


def commit_record(gen: int, source_offsets: Mapping[str, int], confirmed: int | None) -> LogRecord:
    value = _json({"v": _VERSION, "gen": gen, "source": dict(source_offsets), "confirmed": confirmed})
    return LogRecord(None, value, _now_ms(), ((MARKER_HEADER, _COMMIT),))


def _broken(record: ConsumedRecord, why: str) -> ChangelogError:
    return ChangelogError(
        f"{record.topic}/{record.partition} offset {record.offset} is not a changelog record of "
        f"regroup's protocol: {why}. Is another program writing to this topic?")


def change_gen(record: ConsumedRecord) -> int:
    """The generation of a change record (key not None), or `ChangelogError`."""
    headers = record.headers
    if len(headers) != 1 or headers[0][0] != GEN_HEADER:
        raise _broken(record, f"a change record carries exactly one {GEN_HEADER!r} header, got {headers!r}")
    try:
        return int(headers[0][1])
    except ValueError:
        raise _broken(record, f"its {GEN_HEADER!r} header is {headers[0][1]!r}, not an offset") from None


def _int_or_none(obj: dict[str, Any], name: str, record: ConsumedRecord) -> int | None:
    v = obj.get(name)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
        raise _broken(record, f"{name!r} must be an offset or null, got {v!r}")
    return v


def decode_marker(record: ConsumedRecord) -> Begin | Commit:
    """The BEGIN or COMMIT marker that ``record`` (key None) is, or `ChangelogError`."""
    kinds = [v for n, v in record.headers if n == MARKER_HEADER]
    if len(kinds) != 1 or kinds[0] not in (_BEGIN, _COMMIT):
        raise _broken(record, f"a record without a key must carry one {MARKER_HEADER!r} header, "
                              f"'begin' or 'commit'; headers {record.headers!r}")
    try:
        obj = json.loads(record.value or b"")
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or obj.get("v") != _VERSION:
        raise _broken(record, f"a marker's value is a JSON object with \"v\": {_VERSION}, "
                              f"got {record.value!r}")
    if kinds[0] == _BEGIN:
        epoch = obj.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise _broken(record, f"a BEGIN's epoch must be an int >= 0, got {epoch!r}")
        return Begin(record.offset, _int_or_none(obj, "resume_from", record), epoch)
    gen = _int_or_none(obj, "gen", record)
    if gen is None:
        raise _broken(record, "a COMMIT names its generation")
    try:
        source = check_source_offsets(obj.get("source"))
    except ValueError as e:
        raise _broken(record, str(e)) from None
    return Commit(record.offset, gen, source, _int_or_none(obj, "confirmed", record))


def source_offsets_of(commit_value: bytes) -> dict[str, int]:
    """The source offsets in the value of a COMMIT marker that `decode_marker` accepted."""
    return check_source_offsets(json.loads(commit_value)["source"])


# ------------------------------------------------------------------------------ commit metadata


def _metadata_entry(task: object, offset: object) -> list[str | int]:
    if not (isinstance(task, tuple) and len(task) in (2, 4) and isinstance(task[0], str)
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in task[1:])):
        raise ValueError(f"commit metadata is keyed by TaskId(subtopology, partition), got {task!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"the COMMIT offset of task {task} must be an int >= 0, got {offset!r}")
    # A key-range task adds its range and parallelism; a whole partition's entry is as it was.
    parts = task[3] if len(task) == 4 else 1
    return [task[0], task[1], offset] if parts == 1 else [task[0], task[1], offset, task[2], parts]


def _limit(max_length: int | None) -> int:
    return CoordinatorConfig().max_offset_metadata_length if max_length is None else max_length


def format_commit_metadata(commits: Mapping[TaskId, int], max_length: int | None = None) -> str:
    """The offset-commit metadata naming, per task, the changelog offset of its COMMIT (rule 7).

    ``max_length`` defaults to the coordinator's default limit; a longer string raises ValueError
    (commit those tasks in separate requests: `split_commit_metadata`).
    """
    entries = sorted(_metadata_entry(task, offset) for task, offset in commits.items())
    text = METADATA_PREFIX + json.dumps(entries, separators=(",", ":"))
    limit = _limit(max_length)
    if len(text) > limit:
        raise ValueError(f"the commit metadata for {len(entries)} tasks is {len(text)} characters, over "
                         f"the limit of {limit}; commit fewer tasks per request")
    return text


def split_commit_metadata(commits: Mapping[TaskId, int],
                          max_length: int | None = None) -> list[tuple[list[TaskId], str]]:
    """``commits`` cut into as few groups of tasks as fit, each with its metadata under ``max_length``
    (`format_commit_metadata`'s limit): one offset-commit request per group, carrying the source
    offsets of exactly its tasks (rule 7: a task's offsets and the COMMIT they name travel together).
    Tasks in key order; ValueError if one task's entry alone is over the limit."""
    limit = _limit(max_length)
    # The text is PREFIX + "[" + entries joined by "," + "]": its length is known entry by entry.
    sized = sorted((_metadata_entry(task, offset), task) for task, offset in commits.items())
    groups: list[list[TaskId]] = []
    length = 0
    for entry, task in sized:
        size = len(json.dumps(entry, separators=(",", ":")))
        if groups and length + 1 + size <= limit:
            groups[-1].append(task)
            length += 1 + size
        else:
            groups.append([task])
            length = len(METADATA_PREFIX) + 2 + size
    return [(tasks, format_commit_metadata({t: commits[t] for t in tasks}, limit)) for tasks in groups]


def parse_commit_metadata(metadata: str) -> dict[TaskId, int]:
    """``{task: COMMIT offset}`` from metadata `format_commit_metadata` wrote; ``{}`` for ``""``.

    Anything else raises ValueError: a changelog position guessed from foreign metadata could only
    resume from the wrong state.
    """
    if not isinstance(metadata, str):
        raise ValueError(f"commit metadata is a str, not {type(metadata).__name__}")
    if metadata == "":
        return {}
    if not metadata.startswith(METADATA_PREFIX):
        raise ValueError(f"offset commit metadata {metadata[:80]!r} was not written by a regroup streams "
                         f"member (it starts with {METADATA_PREFIX!r})")
    try:
        entries = json.loads(metadata[len(METADATA_PREFIX):])
    except ValueError:
        entries = None
    out: dict[TaskId, int] = {}
    if isinstance(entries, list):
        for e in entries:
            if not (isinstance(e, list) and len(e) in (3, 5) and isinstance(e[0], str)
                    and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in e[1:])):
                break
            if len(e) == 5 and not e[3] < e[4]:
                break
            out[TaskId(e[0], e[1]) if len(e) == 3 else TaskId(e[0], e[1], e[3], e[4])] = e[2]
        else:
            return out
    raise ValueError(f"offset commit metadata {metadata[:80]!r} is malformed: expected "
                     f"{METADATA_PREFIX}[[subtopology, partition, offset(, range, parallelism)], ...]")


def resume_point(metadata: Iterable[str], task: TaskId) -> int | None:
    """Where ``task``'s new active resumes: the latest COMMIT named for it by the metadata of its
    source partitions' committed offsets (None: no commit, start from empty state).

    An active commits all of its task's source partitions in each request, so they name the same
    COMMIT; each partition keeps the metadata of the request that last committed it, and taking the
    latest also covers a commit that reached only some of them. ``TaskStore.become_active`` checks
    that COMMIT's source offsets against the coordinator's when given them.
    """
    if isinstance(metadata, str):
        raise ValueError("resume_point takes the metadata strings of the task's source partitions, "
                         "not one string; wrap it in a list")
    found = [c[task] for c in map(parse_commit_metadata, metadata) if task in c]
    return max(found) if found else None
