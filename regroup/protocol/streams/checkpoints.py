"""Task checkpoints: how a task whose state is a Spark query's checkpoint moves between members.

A Spark member of a streams group runs one Structured Streaming query per task it holds; the
query's checkpoint directory *is* the task's state. Several copies of one task's checkpoint exist
(the active's, a warm-up's, a standby's, old ones left on disk), so the group must know which one
is the task's state of record. These are the rules, pure (the Spark shell, `regroup.spark.tasks`,
does the file copies and runs the queries):

1. **The commit names the checkpoint of record.** An active commits a batch's end offsets to the
   coordinator with metadata naming its checkpoint directory and the batch id (`CheckpointRecord`).
   The coordinator keeps the metadata with the offsets and fences it by epoch like the offsets, so
   the checkpoint of record is always the one whose batch produced the committed offsets. A zombie
   keeps writing its own directory; nobody copies from it (warm-ups read its offset log, rule 4).
2. **Every copy is its own directory.** A member never runs a query on a directory it did not
   create: to start from another member's checkpoint it copies *the batch of record* (the offset
   and commit logs up to that batch, the state versions that batch left) into a new directory of
   its own. Two queries therefore never write one directory, whatever the timing.
3. **Where a task starts** (`plan_start`), in this order: a copy already running here is kept in
   place — to become the active only if it has not read past the committed offsets (a warm-up or
   standby taking over), to stay a copy in any case (a warm-up kept as a standby may be past the
   commit by the batch the active is running, rule 4: it waits there for the commit); the
   checkpoint of record when it is this process's own directory is resumed in place (a static
   restart restores nothing and copies nothing); otherwise the batch of record is copied (a cold
   move, or a new warm-up or standby); with no checkpoint of record the query starts fresh at the
   committed offsets (after an operator's reset), or at the log's start.
4. **A copy reads no further than the active has planned.** A standby is given the task's
   committed offsets as its limit (refreshed as the active commits), so whatever it has processed
   is final. A warm-up follows the active closer (`warmup_limit`): its limit is the end of the
   batch the active has *planned* — the newest entry of the offset log in the checkpoint of
   record, which Spark writes before it runs the batch. It thus runs each of the active's batches
   beside it rather than after its commit, and at a clean hand-off (the old active finishes the
   batch it is running and commits it) it is already at that commit: the new active's first batch
   has its sink on, and the hand-off costs one batch, not a catch-up batch and then one. What a
   warm-up has processed is final once the active commits it; if the active dies first, the warm-up
   may be past the commit: rule 3 does not promote it in place then (the batch of record is
   copied), and a batch it was running when promoted is refused by rule 5. A standby exists for
   exactly that case (its active killed), so it keeps to the commit. A copy
   has caught up when it has processed exactly up to its limit (`caught_up`). (Only the batch after
   the batch of record and the ones after it count: an active plans a batch only once the one
   before it committed, and a zombie's first refused commit stops its query, so a zombie's
   directory is never followed further than the one batch it could not commit.)
5. **The sink is switched on exactly at the commit.** A promoted copy may be behind the commit it
   takes over from: it keeps its limit at that commit, and only batches that start at or after it
   produce output (`sink_on`); every record before it already produced its output at the old
   active. Batch ids continue from the copied version, so after a promotion they can repeat ids the
   old active used after the copy was taken: output is keyed by the batch's offset range
   (`batch_key`), which cannot repeat for different records of one task. A batch that starts
   before the commit and ends past it (`overruns`: a warm-up's batch planned up to its active's plan,
   running when it was promoted, past a commit that never came because that active died) read
   records that nobody output: it must not commit, and the task starts again from the batch of
   record.
6. **Offsets are compared key by key.** A task's part of a source partition split on the producer side
   is read as *lanes*, one per open piece (`regroup.protocol.microbatch.lanes_of`), each with an
   offset of its own and committed on its own; the coordinator keeps them as fragments and may fold
   equal neighbours into one (`regroup.protocol.keyrange` rule 5). So the rules above compare two
   offset maps wherever their shards' keys overlap (`_pairs`): a copy is ahead when a lane of it is
   past any fragment over its keys, caught up when every fragment's keys are at exactly its offset.
   For whole partitions (shards equal or disjoint) this is the comparison by shard it always was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

from regroup.protocol.shard import Shard

__all__ = [
    "CHECKPOINT_METADATA_PREFIX",
    "CheckpointRecord",
    "LocalCopy",
    "StartFrom",
    "StartPlan",
    "batch_key",
    "caught_up",
    "checkpoint_directory",
    "directory_owner",
    "format_record",
    "lane_start",
    "latest_record",
    "limit_of",
    "overruns",
    "parse_record",
    "plan_start",
    "position_known",
    "reached",
    "sink_on",
    "state_file_version",
    "warmup_limit",
]

#: Prefix of the offset-commit metadata a Spark task query writes (versioned: a reader refuses others).
CHECKPOINT_METADATA_PREFIX = "regroup-spark-checkpoint:1:"

Offsets = Mapping[Shard, int]


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """The checkpoint of record of a task (rule 1): ``directory`` (relative to the state root) and
    the last batch whose end offsets were committed from it."""

    directory: str
    batch: int

    def __post_init__(self) -> None:
        if not self.directory or self.directory.startswith("/") or ".." in self.directory.split("/"):
            raise ValueError(f"a checkpoint of record is a path in the state root, got {self.directory!r}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 0:
            raise ValueError(f"a checkpoint of record names a batch id >= 0, got {self.batch!r}")


def format_record(record: CheckpointRecord) -> str:
    return CHECKPOINT_METADATA_PREFIX + json.dumps({"dir": record.directory, "batch": record.batch},
                                                   separators=(",", ":"), sort_keys=True)


def parse_record(metadata: str) -> CheckpointRecord | None:
    """The record in a commit's metadata; None when the commit names none (an operator's reset, a
    commit by another kind of member). Metadata that claims to be a record but is malformed raises
    ValueError: silently starting from empty state would lose it."""
    if not metadata.startswith(CHECKPOINT_METADATA_PREFIX):
        return None
    try:
        raw = json.loads(metadata[len(CHECKPOINT_METADATA_PREFIX):])
        directory = raw["dir"]
        if not isinstance(directory, str):
            raise TypeError(f"the directory must be a string, got {directory!r}")
        return CheckpointRecord(directory, raw["batch"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"malformed checkpoint record in the commit metadata {metadata!r}: {e}") from None


def latest_record(metadata: list[str]) -> CheckpointRecord | None:
    """The record of a task from the metadata of its source partitions' commits: an active commits
    all of them in one request, so they agree; the highest batch covers a commit that reached only
    some of them."""
    found = [r for r in map(parse_record, metadata) if r is not None]
    if not found:
        return None
    return max(found, key=lambda r: (r.batch, r.directory))


@dataclass(frozen=True, slots=True)
class LocalCopy:
    """A copy of the task's checkpoint on this member: its directory and the end offsets of the
    last batch it completed (empty before its first batch: then it is where it started)."""

    directory: str
    ends: Offsets
    running: bool


class StartFrom(Enum):
    PROMOTE = "promoted"  # a running copy here takes over in place (rule 3, first case)
    RESUME = "resumed"   # the checkpoint of record is ours: run it in place
    COPY = "copied"      # copy the batch of record into a new directory of ours
    FRESH = "fresh"      # no checkpoint: empty state at the committed offsets (or the log's start)


@dataclass(frozen=True, slots=True)
class StartPlan:
    how: StartFrom
    #: The directory to run (PROMOTE, RESUME) or to copy from (COPY); None for FRESH.
    directory: str | None = None
    #: COPY: the batch of record to copy.
    batch: int | None = None
    #: FRESH: where each source partition begins (absent: the log's start).
    begin: Offsets | None = None


def plan_start(*, committed: Offsets, record: CheckpointRecord | None, process_id: str,
               local: LocalCopy | None, active: bool = True) -> StartPlan:
    """Rule 3, for an active (``active``) or a copy. ``local`` is the copy already running or
    parked on this process, if any."""
    if local is not None and local.running and not (active and _ahead(local.ends, committed)):
        return StartPlan(StartFrom.PROMOTE, local.directory)
    if record is not None and directory_owner(record.directory) == process_id:
        return StartPlan(StartFrom.RESUME, record.directory)
    if record is not None:
        return StartPlan(StartFrom.COPY, record.directory, record.batch)
    return StartPlan(StartFrom.FRESH, begin=dict(committed))


def checkpoint_directory(task: str, process_id: str, generation: int) -> str:
    """Where process ``process_id`` keeps its ``generation``-th copy of ``task`` (under the root)."""
    return f"tasks/{task}/{process_id}.{generation}"


def directory_owner(directory: str) -> str:
    """The process a checkpoint directory belongs to (see `checkpoint_directory`)."""
    return directory.rsplit("/", 1)[-1].split(".", 1)[0]


def _overlap(a: Shard, b: Shard) -> bool:
    return a.partition == b.partition and a.topic == b.topic and a.lo < b.hi and b.lo < a.hi


def _pairs(a: Offsets, b: Offsets) -> list[tuple[int, int]]:
    """Rule 6: ``(a's offset, b's offset)`` wherever their shards' keys overlap; a shard of ``b`` whose
    keys ``a`` misses in part (or whole) is paired with 0 there."""
    out: list[tuple[int, int]] = []
    for t, o in b.items():
        hit = [s for s in a if _overlap(s, t)]
        out.extend((a[s], o) for s in hit)
        if sum(min(s.hi, t.hi) - max(s.lo, t.lo) for s in hit) < t.hi - t.lo:
            out.append((0, o))
    return out


def _ahead(ends: Offsets, committed: Offsets) -> bool:
    return any(e > o for o, e in _pairs(committed, ends))


def caught_up(ends: Offsets, committed: Offsets) -> bool:
    """Rule 4: a copy has processed exactly up to the committed offsets (nothing committed: yes),
    key by key (rule 6)."""
    return all(e == o for e, o in _pairs(ends, committed))


def warmup_limit(committed: Offsets, planned: Offsets | None) -> dict[Shard, int]:
    """Rule 4: how far a warm-up may read — the ends of the active's newest planned batch after
    the batch of record, when that batch ends at or past the commit key by key (and so covers
    every committed key); otherwise (nothing planned, or a stale read) the committed offsets."""
    if planned and reached(planned, committed):
        return dict(planned)
    return dict(committed)


def limit_of(limit: Offsets, shard: Shard, default: int) -> int:
    """How far a copy may read ``shard`` (a lane) under ``limit``: the lowest offset of the limit's
    shards over its keys (rule 6), ``default`` when none is."""
    return min((o for s, o in limit.items() if _overlap(s, shard)), default=default)


def reached(ends: Offsets, sink_from: Offsets) -> bool:
    """Whether ``ends`` are at or past ``sink_from`` key by key (rule 6): a batch starting there is
    past the commit a promoted copy took over from (`sink_on`), a batch ending there commits."""
    return all(e >= o for e, o in _pairs(ends, sink_from))


def position_known(batches_run: int, ends: Offsets, limit: Offsets | None) -> bool:
    """Rule 4's report: may a copy's position be reported yet? Spark loads a query's state store in
    its first batch, so a copy whose query has run none has restored nothing: reported at the batch
    it copied — often within the acceptable recovery lag — it would be promoted at once and pay the
    whole restore inside the hand-off. It is known once a batch has run, or when there is nothing
    to read (the copy is at the commit: then no record waits on the restore)."""
    return batches_run > 0 or (limit is not None and caught_up(ends, limit))


def sink_on(start: Offsets, sink_from: Offsets | None) -> bool:
    """Rule 5: whether a batch starting at ``start`` produces output (``sink_from`` None: a copy)."""
    if sink_from is None:
        return False
    return reached(start, sink_from)


def overruns(start: Offsets, end: Offsets, sink_from: Offsets | None) -> bool:
    """Rule 5: whether an active's batch from ``start`` to ``end`` crossed the commit it took over
    from (``sink_from``) with its sink off — it holds records past the commit that produced no
    output. Never for a copy (``sink_from`` None) or a batch with its sink on."""
    if sink_from is None or sink_on(start, sink_from):
        return False
    return _ahead(end, sink_from)


def batch_key(task: str, start: Offsets, end: Offsets) -> str:
    """The batch's idempotency key (rule 5): the task and the offset range it covers, for example
    ``count_3:orders/3@120-180``. Two batches of one task with the same key read the same records.
    The lanes of a split partition (rule 6) add their keys: ``orders/3[lo-hi)@120-180``; a lane new
    in this batch begins where the start's shard over its keys was."""
    # A lane cut since ``start`` is named by its parts (in ``end``), not beside them.
    shards = sorted(set(end) | {s for s in start if not any(_overlap(s, e) for e in end)})
    laned = {(s.topic, s.partition) for s, t in pairwise(shards)
             if (s.topic, s.partition) == (t.topic, t.partition)}
    return task + ":" + ",".join(
        f"{s.topic}/{s.partition}{f'[{s.lo}-{s.hi})' if (s.topic, s.partition) in laned else ''}"
        f"@{lane_start(start, s)}-{end.get(s, 0)}" for s in shards)


def lane_start(start: Offsets, shard: Shard) -> int:
    """Where ``shard`` begins in a batch after ``start`` (the previous batch's ends): its own offset,
    or — a lane cut at a split since (rule 6) — the offset of the shard of ``start`` holding its
    keys, else 0."""
    if shard in start:
        return start[shard]
    return next((o for s, o in start.items()
                 if _overlap(s, shard) and s.lo <= shard.lo and shard.hi <= s.hi), 0)


_VERSIONED = re.compile(r"^\.?(\d+)\.(changelog|zip|delta|snapshot)(\.crc)?$")


def state_file_version(name: str) -> int | None:
    """The state version a state-store file holds (``12.changelog``, ``12.zip``, ``12.delta``,
    ``12.snapshot`` and their ``.crc``), or None for files that are not per version (schemas, SST
    files shared by versions). A copy of batch ``b`` keeps versions up to ``b + 1`` (Spark's state
    version of a batch is its id plus one)."""
    m = _VERSIONED.match(name)
    return int(m.group(1)) if m else None
