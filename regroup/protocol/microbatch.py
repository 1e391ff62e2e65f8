"""Micro-batch planning for a streaming query that is a group member (the PySpark source's decisions).

Spark plans a micro-batch as a pair of offsets (start, end) that it writes to its checkpoint before
running the batch, and asks the source for the next end offset only once the previous batch has
finished. A regroup member's assignment changes in between, so the source must decide, at each batch
boundary, which shards a batch covers and where each of them begins. Those decisions live here, pure:

* :class:`BatchOffset` is what goes into Spark's checkpoint: for every shard in the batch the offset
  after its last record (``ends``), for shards that *begin* in this batch the offset they begin at
  (``starts``: a newly assigned shard starts at the group's committed offset, not where an older batch
  of this query left it), and for key ranges taken over after a merge the records a former owner
  already did (``skips``). A batch therefore replays from the checkpoint alone.
* :func:`plan_next` builds the next end offset from the finished one, the shards the member owns now,
  where newly owned shards begin, the log's end offsets and a record limit.
* :func:`batch_ranges` turns a planned (start, end) into the offset ranges to read, keeping only shards
  the member owns when the batch runs — a batch replayed after a restart never reads a shard that moved.
* :func:`finished_positions` says what may be committed once a batch has finished.
* :class:`Boundary` is what one query knows of the shards it owns — for each, where it begins in the
  next batch, the floor no replay reads below, and the offset known to be committed — as one frozen
  value: the source replaces it at each batch boundary, when Spark asks for the next offset, and
  reads it (never changes it) when Spark asks what a planned batch reads.

Key ranges (`regroup.protocol.keyrange`). A shard may be a key range of a partition. Its positions are
the partition's offsets, like a whole partition's: a batch reads the partition's records
``[start, end)`` and keeps those whose key hash falls in the range, so a range's end after a batch is
where it read the partition up to, and that is what is committed. A range (or a whole partition whose
progress is kept in fragments) taken over after a merge begins at the laggard fragment and must skip,
until it passes them, the records its faster former owners did (`keyrange.Resume`): those *skip
pieces* ``(lo, hi, offset)`` — records with key hash in ``[lo, hi)`` below ``offset`` are done — ride
in each planned batch (`BatchOffset.skips`, `ShardRange.skip`) until the range's position passes
them. Pieces are kept sorted and disjoint (`merge_skips`), as `Resume`'s are.

Split partitions (`regroup.log.embedded.layout`). A partition split on the producer side has several
open *pieces*, each over a slice of its keys with offsets of its own; a key's offsets still only grow
across pieces, so a position means the same in whichever piece it falls. A shard whose keys lie in
several open pieces is read as *lanes* — the shard cut at the pieces' boundaries (`lanes_of`), one per
piece — and each lane is a shard of the batch like any other: a key range with its own position, end
and checkpoint key, committed on its own (the coordinator accepts commits of ranges inside an owned
shard). A lane's data ends where its piece ends (`lane_ends`). At each boundary, lanes that a split
made span pieces are cut, each part beginning where the lane's next batch would, and adjacent lanes of
one shard that share a piece (after a merge) and would begin at the same offset are joined again
(`Boundary.relaned`). Lanes are range keys of the existing form: the checkpoint format is unchanged.

Checkpoint keys (`shard_key`): ``topic:partition`` for a whole partition — what every checkpoint
written before key ranges holds, read the same — and ``topic:partition:lo-hi`` (decimal) for a range.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import NamedTuple

from regroup.protocol.driver import advanced
from regroup.protocol.keyrange import Resume, resume
from regroup.protocol.shard import KEY_SPACE, Shard

#: Version of the checkpointed offset format; a reader refuses offsets it does not understand. Key
#: ranges did not change it: a checkpoint without ranges is written exactly as before, and one with
#: ranges only adds keys of a new form and an optional ``skips`` map (a reader that predates ranges
#: refuses the new keys as malformed rather than misreading them).
OFFSET_FORMAT = 1

#: Skip pieces ``(lo, hi, offset)``: the records with key hash in ``[lo, hi)`` below ``offset`` are
#: done (see `keyrange.Resume`). Sorted and disjoint.
Skip = tuple[tuple[int, int, int], ...]

#: The open pieces of a partition, ``(lo, hi)`` in key order (`PartitionedLog.key_pieces`).
Pieces = Sequence[tuple[int, int]]
#: The open pieces of a partition with where each ends (its next offset): ``{(lo, hi): end}``
#: (`EmbeddedLog.piece_ends`); a partition never split is one piece over every key.
PieceEnds = Mapping[tuple[int, int], int]
#: The pieces of a partition never split: one, every key.
WHOLE: tuple[tuple[int, int], ...] = ((0, KEY_SPACE),)

_DIGITS = re.compile(r"[0-9]+")
_RANGE = re.compile(r"(0|[1-9][0-9]*)-([1-9][0-9]*)")


class OffsetFormatError(ValueError):
    """A checkpointed offset that this version cannot read (corrupt, or written by another source)."""


def shard_key(shard: Shard) -> str:
    """The key of a shard in the checkpoint's JSON: ``topic:partition`` for a whole partition (as
    before key ranges), ``topic:partition:lo-hi`` (decimal) for a key range."""
    if shard.whole:
        return f"{shard.topic}:{shard.partition}"
    return f"{shard.topic}:{shard.partition}:{shard.lo}-{shard.hi}"


def parse_shard_key(key: str) -> Shard:
    """Inverse of `shard_key`. The last ``:``-separated part tells the form (a partition number, or
    ``lo-hi``), so a topic name with colons in it reads back too."""
    head, sep, last = key.rpartition(":")
    if sep and head and _DIGITS.fullmatch(last):
        return Shard(head, int(last))
    bounds = _RANGE.fullmatch(last) if sep else None
    topic, sep, part = head.rpartition(":")
    if bounds is None or not sep or not topic or not _DIGITS.fullmatch(part):
        raise OffsetFormatError(f"checkpointed offset has a malformed shard key {key!r}"
                                " (want topic:partition or topic:partition:lo-hi)")
    lo, hi = int(bounds[1]), int(bounds[2])
    if not lo < hi <= KEY_SPACE:
        raise OffsetFormatError(f"checkpointed offset has shard key {key!r} with an empty or out-of-space"
                                f" key range (want 0 <= lo < hi <= {KEY_SPACE})")
    if lo == 0 and hi == KEY_SPACE:  # one key per shard: a whole partition is topic:partition
        raise OffsetFormatError(f"checkpointed offset has shard key {key!r} for a whole partition"
                                f" (want {topic}:{part})")
    return Shard(topic, int(part), lo, hi)


def merge_skips(*groups: Iterable[tuple[int, int, int]]) -> Skip:
    """The skip pieces of several sources as one sorted, disjoint tuple: where pieces overlap, the
    highest offset (everything each source says is done, is done); neighbours with equal offsets
    coalesce. Each group is expected disjoint (as a `Resume`'s pieces are), which keeps this linear in
    the number of pieces times groups."""
    pieces = [p for g in groups for p in g]
    if not pieces:
        return ()
    bounds = sorted({b for lo, hi, _ in pieces for b in (lo, hi)})
    index = {b: i for i, b in enumerate(bounds)}
    done = [0] * (len(bounds) - 1)
    for lo, hi, offset in pieces:
        for i in range(index[lo], index[hi]):
            done[i] = max(done[i], offset)
    out: list[tuple[int, int, int]] = []
    for (lo, hi), offset in zip(pairwise(bounds), done, strict=True):
        if offset == 0:
            continue  # nothing is below offset 0: not a piece (also the gaps between pieces)
        if out and out[-1][1] == lo and out[-1][2] == offset:
            out[-1] = (out[-1][0], hi, offset)
        else:
            out.append((lo, hi, offset))
    return tuple(out)


def pending(skip: Skip, position: int) -> Skip:
    """The pieces that still drop records at or after ``position`` (`Resume.passed`)."""
    return tuple(p for p in skip if p[2] > position)


def lanes_of(shard: Shard, pieces: Pieces) -> tuple[Shard, ...]:
    """``shard`` cut at the boundaries of the open ``pieces`` inside it, one lane per piece it has keys
    in, in key order; ``(shard,)`` itself when its keys lie in one piece."""
    parts = [(max(lo, shard.lo), min(hi, shard.hi)) for lo, hi in pieces if lo < shard.hi and shard.lo < hi]
    if len(parts) <= 1:
        return (shard,)
    return tuple(Shard(shard.topic, shard.partition, lo, hi) for lo, hi in parts)


def clip(resume: Resume, lo: int, hi: int) -> Resume:
    """What ``resume`` says of the keys ``[lo, hi)``: its skip pieces cut to them, and its start
    raised to the lowest offset any of those keys begins at when skip pieces cover them all (every
    record below it is skipped anyway: a lane does not read what it would drop, and never commits
    below where its own keys resume)."""
    pieces = tuple((max(a, lo), min(b, hi), o) for a, b, o in resume.skip if a < hi and lo < b)
    start = resume.start
    if pieces and sum(b - a for a, b, _ in pieces) == hi - lo:
        start = max(start, min(o for _, _, o in pieces))
    return Resume(start, pending(pieces, start))


def lane_begin(resume: Resume, lane: Shard, at: int | None = None) -> tuple[int, Resume]:
    """Where a new lane of a shard begins, and what it still skips there: at ``at`` (where the lane it
    was cut from had got to; None at assignment: where ``resume`` begins), or further where
    ``resume`` says the lane's own keys begin (`clip`). The one rule for the consumer, the PySpark
    source and the simulator: a lane never begins below its own keys, so its commits never fall
    below the owned shard's floor (`regroup.protocol.offsets`, rule 2)."""
    own = clip(resume, lane.lo, lane.hi)
    start = own.start if at is None else max(at, own.start)
    return start, own.passed(start)


def relaned(
    shard: Shard, lanes: Mapping[Shard, tuple[int, Resume]], pieces: Pieces
) -> dict[Shard, tuple[int, Resume]]:
    """The lanes of ``shard`` for its partition's open ``pieces`` now, from the lanes it is read as
    (each at its position, with what it still skips there): ``lanes`` itself when they match the
    pieces; else every key's progress (its lane's position, or a skip piece's offset above it) taken
    as committed fragments, the shard's `keyrange.resume` of them, and each new lane's `lane_begin`.
    A split cuts a lane, each part beginning where it was (or where its own keys resume); a merge
    joins lanes into one at the slowest, skipping what the faster ones did — the rules a new owner
    of the shard would follow, so a process that reads lanes between batches (the streams member)
    needs no rule of its own. The lanes must tile ``shard``."""
    wanted = lanes_of(shard, pieces)
    if set(wanted) == set(lanes):
        return dict(lanes)
    done: dict[Shard, int] = {}
    for lane, (at, r) in lanes.items():
        skip = [(max(a, lane.lo), min(b, lane.hi), o) for a, b, o in r.skip if a < lane.hi and lane.lo < b]
        cuts = sorted({lane.lo, lane.hi, *(b for a, z, _ in skip for b in (a, z))})
        for lo, hi in pairwise(cuts):
            held = [o for a, b, o in skip if a <= lo and hi <= b]
            done[Shard(shard.topic, shard.partition, lo, hi)] = max([at, *held])
    whole = resume(done, shard, 0)
    out: dict[Shard, tuple[int, Resume]] = {}
    for lane in wanted:
        out[lane] = lane_begin(whole, lane)
    return out


def lane_ends(lanes: Iterable[Shard], pieces: Mapping[tuple[str, int], PieceEnds]) -> dict[Shard, int]:
    """Where each lane's data ends: the end of the open piece holding its keys (of the lowest end, should
    one span several: it is cut at the next boundary). A lane of a partition missing from ``pieces`` is
    left out: it has no new data."""
    out: dict[Shard, int] = {}
    for s in lanes:
        ends = pieces.get(s.partition_key)
        if ends is None:
            continue
        held = [end for (lo, hi), end in ends.items() if lo < s.hi and s.lo < hi]
        if held:
            out[s] = min(held)
    return out


def _where(prev: int | None, begin: int | None, carried: Skip, known: Skip) -> tuple[int, Skip, bool]:
    """Where a shard's next batch begins, the skip pieces that still drop records there, and whether it
    begins anew: at ``begin`` (where it was taken) when the finished batch does not carry it
    (``prev`` None) or it is further on; else where the finished batch ended it (`plan_next`)."""
    if prev is None or (begin is not None and begin > prev):
        assert begin is not None
        return begin, pending(merge_skips(known), begin), True
    return prev, pending(merge_skips(carried, known), prev), False


@dataclass(frozen=True, slots=True)
class BatchOffset:
    """One micro-batch's end offset as Spark checkpoints it.

    ``ends[s]`` is the offset after the batch's last record of shard ``s``; ``starts[s]``, present only
    for shards that begin in this batch, is where ``s`` begins (otherwise it continues from the
    previous batch's ``ends``). ``epoch`` is the member epoch when the batch was planned (for people
    reading checkpoints; fencing is the coordinator's job). ``skips[s]``, present only for shards
    that have some, are the skip pieces of ``s`` that may drop records of this batch (see the module
    docstring): in the JSON only when some shard has any, so a checkpoint without ranges reads and
    writes exactly as before.
    """

    ends: Mapping[Shard, int] = field(default_factory=dict)
    starts: Mapping[Shard, int] = field(default_factory=dict)
    epoch: int = 0
    skips: Mapping[Shard, Skip] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict with sorted keys, so that equal offsets serialise identically."""
        out: dict[str, object] = {
            "v": OFFSET_FORMAT,
            "epoch": self.epoch,
            "ends": {shard_key(s): self.ends[s] for s in sorted(self.ends)},
        }
        if self.starts:
            out["starts"] = {shard_key(s): self.starts[s] for s in sorted(self.starts)}
        skips = {s: p for s, p in self.skips.items() if p}
        if skips:
            out["skips"] = {shard_key(s): [list(p) for p in skips[s]] for s in sorted(skips)}
        return out

    @staticmethod
    def from_json(obj: object) -> BatchOffset:
        if not isinstance(obj, Mapping):
            raise OffsetFormatError(f"checkpointed offset must be a JSON object, got {type(obj).__name__}")
        if obj.get("v") != OFFSET_FORMAT:
            raise OffsetFormatError(
                f"checkpointed offset has format {obj.get('v')!r}; this regroup reads format {OFFSET_FORMAT}"
                " (was the checkpoint written by another source?)")
        epoch = obj.get("epoch", 0)
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise OffsetFormatError(f"checkpointed offset has a non-integer epoch {epoch!r}")
        ends = _parse_positions(obj.get("ends", {}), "ends")
        starts = _parse_positions(obj.get("starts", {}), "starts")
        for s, at in starts.items():
            if s not in ends:
                raise OffsetFormatError(f"checkpointed offset starts {s} but has no end for it")
            if at > ends[s]:
                raise OffsetFormatError(f"checkpointed offset starts {s} at {at}, after its end {ends[s]}")
        skips = _parse_skips(obj.get("skips", {}))
        for s in skips:
            if s not in ends:
                raise OffsetFormatError(f"checkpointed offset skips records of {s} but has no end for it")
        return BatchOffset(ends, starts, epoch, skips)


def _parse_positions(raw: object, what: str) -> dict[Shard, int]:
    if not isinstance(raw, Mapping):
        raise OffsetFormatError(f"checkpointed offset's {what!r} must be an object")
    out: dict[Shard, int] = {}
    for key, value in raw.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise OffsetFormatError(f"checkpointed offset's {what}[{key!r}] = {value!r} is not an offset")
        out[parse_shard_key(str(key))] = value
    return out


def _parse_skips(raw: object) -> dict[Shard, Skip]:
    if not isinstance(raw, Mapping):
        raise OffsetFormatError("checkpointed offset's 'skips' must be an object")
    out: dict[Shard, Skip] = {}
    for key, pieces in raw.items():
        s = parse_shard_key(str(key))
        if not isinstance(pieces, list) or not pieces:
            raise OffsetFormatError(f"checkpointed offset's skips[{key!r}] must be a non-empty list")
        parsed: list[tuple[int, int, int]] = []
        for p in pieces:
            if not (isinstance(p, list) and len(p) == 3
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in p)):
                raise OffsetFormatError(f"checkpointed offset's skips[{key!r}] has a malformed piece {p!r}"
                                        " (want [lo, hi, offset])")
            lo, hi, offset = p
            if not (s.lo <= lo < hi <= s.hi and offset > 0):
                raise OffsetFormatError(f"checkpointed offset's skips[{key!r}] has a piece {p!r} outside"
                                        f" its key range [{s.lo}, {s.hi}) or without records")
            parsed.append((lo, hi, offset))
        if any(a[1] > b[0] for a, b in pairwise(parsed)):
            raise OffsetFormatError(f"checkpointed offset's skips[{key!r}] are not sorted and disjoint")
        out[s] = tuple(parsed)
    return out


@dataclass(frozen=True, slots=True)
class ShardRange:
    """Records ``[start, end)`` of one shard: one Spark input partition. For a key range, the
    partition's records ``[start, end)`` whose key hash is in the range; ``skip`` (sorted, disjoint
    pieces) drops those a former owner already did. ``count`` is what is read, not what is kept."""

    shard: Shard
    start: int
    end: int
    skip: Skip = ()

    @property
    def count(self) -> int:
        return self.end - self.start


def finished_positions(finished: BatchOffset, owned: Iterable[Shard]) -> dict[Shard, int]:
    """What to commit once the batch ending at ``finished`` is done: its ends for shards still owned
    (or being revoked — the caller passes those too). Shards that moved are not ours to commit."""
    mine = set(owned)
    return {s: o for s, o in finished.ends.items() if s in mine}


def plan_next(
    finished: BatchOffset,
    owned: Iterable[Shard],
    beginnings: Mapping[Shard, int],
    log_ends: Mapping[Shard, int],
    max_records: int | None,
    epoch: int,
    unread: Collection[Shard] = frozenset(),
    skips: Mapping[Shard, Skip] | None = None,
) -> BatchOffset:
    """The end offset of the next micro-batch, after the batch ending at ``finished``.

    ``owned`` are the shards the member may read now; ``beginnings`` gives where each newly owned
    shard begins (its committed offset) — it must cover every owned shard that ``finished`` does not
    carry, and for shards it does carry it wins when it is ahead (another owner went further while
    this query did not own the shard). ``unread`` are shards that ``finished`` carries but this query
    did not read (a replay after a restart skipped them, not owning them then): where ``finished``
    says they end means nothing, and a beginning always wins for them. ``log_ends`` caps every shard
    (a shard missing there has no new data). ``max_records`` (None: no limit) is spread over the
    shards with data, water-filling so that no shard's share is wasted; a key range counts the
    partition's records it reads, not those it keeps. ``skips`` are skip pieces known for owned
    shards (from their `Resume`): the batch carries them, and a shard that continues also carries
    ``finished``'s, each only while it drops records at or after where the shard begins. The result
    equals ``finished`` exactly when there is nothing to read, so that Spark runs no empty batch.
    """
    owned_set = set(owned)
    known = skips or {}
    base: dict[Shard, int] = {}
    starts: dict[Shard, int] = {}
    carried: dict[Shard, Skip] = {}
    for s in sorted(owned_set):
        prev = None if s in unread else finished.ends.get(s)
        begin = beginnings.get(s)
        if prev is None and begin is None:
            raise ValueError(f"plan_next: no position for newly owned shard {s}")
        base[s], skip, anew = _where(prev, begin, finished.skips.get(s, ()), known.get(s, ()))
        if anew:
            starts[s] = base[s]
        if skip:
            carried[s] = skip
    avail = {s: max(0, log_ends.get(s, 0) - b) for s, b in base.items()}
    take = _spread(avail, max_records)
    ends = {s: base[s] + take[s] for s in base}
    # Nothing to read: the same offset, so Spark runs no batch. Skips alone do not make a batch (they
    # only drop records), and those still pending are planned again with the next records.
    if not starts and ends == dict(finished.ends):
        return finished
    return BatchOffset(ends, starts, epoch, carried)


def _spread(avail: Mapping[Shard, int], limit: int | None) -> dict[Shard, int]:
    """Give each shard up to its available records, at most ``limit`` in total, fairly."""
    if limit is None or sum(avail.values()) <= limit:
        return dict(avail)
    if limit < 0:
        raise ValueError(f"max_records must be >= 0, got {limit}")
    take = dict.fromkeys(avail, 0)
    left = limit
    hungry = sorted(s for s, n in avail.items() if n > 0)
    while left > 0 and hungry:
        share = max(1, left // len(hungry))
        still: list[Shard] = []
        for s in hungry:
            give = min(share, avail[s] - take[s], left)
            take[s] += give
            left -= give
            if take[s] < avail[s]:
                still.append(s)
            if left == 0:
                break
        hungry = still
    return take


def batch_ranges(
    start: BatchOffset,
    end: BatchOffset,
    owned: Iterable[Shard],
    floors: Mapping[Shard, int | Resume] | None = None,
) -> list[ShardRange]:
    """The non-empty ranges a batch (start, end) reads, for shards the member owns now.

    A shard begins at ``end.starts`` if the batch says so, else at ``start.ends``, and skips
    ``end.skips``. ``floors`` (where a shard this process took over began: the group's committed
    offset, or a `Resume` for a key range) raises a beginning, and adds its skip pieces, so that a batch
    replayed after a restart does not re-read what another owner already processed and committed.
    """
    mine = set(owned)
    out: list[ShardRange] = []
    for s in sorted(end.ends):
        if s not in mine:
            continue
        begin = end.starts.get(s, start.ends.get(s))
        if begin is None:
            raise OffsetFormatError(f"the batch ends {s} at {end.ends[s]} but says nowhere where it begins")
        skip = end.skips.get(s, ())
        floor = floors.get(s) if floors is not None else None
        if isinstance(floor, Resume):
            begin = max(begin, floor.start)
            skip = merge_skips(skip, floor.skip)
        elif floor is not None:
            begin = max(begin, floor)
        if end.ends[s] > begin:
            out.append(ShardRange(s, begin, end.ends[s], pending(skip, begin)))
    return out


def split_ranges(ranges: Iterable[ShardRange], max_records: int) -> list[ShardRange]:
    """Cut ranges into pieces of at most ``max_records`` so that a big shard keeps every core busy
    (each piece with the skip pieces that still drop records in it)."""
    if max_records <= 0:
        raise ValueError(f"max_records must be > 0, got {max_records}")
    out: list[ShardRange] = []
    for r in ranges:
        at = r.start
        while at < r.end:
            nxt = min(r.end, at + max_records)
            out.append(ShardRange(r.shard, at, nxt, pending(r.skip, at)))
            at = nxt
    return out


def grouped_ranges(
    ranges: Iterable[ShardRange], max_records: int, pieces: Mapping[tuple[str, int], Pieces] | None = None,
) -> list[tuple[ShardRange, ...]]:
    """The reads of a batch: the ranges of one partition together, so that its records are read once
    for every key range of it the query owns (each read routes a record to the range holding its key;
    the ranges of one partition hold disjoint keys), cut into slices of at most ``max_records``
    offsets — each slice the ranges clipped to it, with the skip pieces that still drop records
    there. A partition with one range gives what `split_ranges` gives, one range per read.

    Only a partition in one piece is read so: ``pieces`` gives the open pieces of the partitions split
    on the producer side (a partition it leaves out is one piece, `WHOLE`). The ranges of a split
    partition — lanes of different pieces, each with offsets of its own — are read by key, one at a
    time, whichever way they are grouped; so each stays a read of its own (`split_ranges`), and the
    lanes are read side by side as before."""
    if max_records <= 0:
        raise ValueError(f"max_records must be > 0, got {max_records}")
    by_partition: dict[tuple[str, int], list[ShardRange]] = {}
    for r in ranges:
        by_partition.setdefault(r.shard.partition_key, []).append(r)
    out: list[tuple[ShardRange, ...]] = []
    for key, rs in sorted(by_partition.items()):
        if len(rs) == 1 or len((pieces or {}).get(key, WHOLE)) > 1:
            out.extend((r,) for r in split_ranges(rs, max_records))
            continue
        rs.sort(key=lambda r: r.shard)
        at, end = min(r.start for r in rs), max(r.end for r in rs)
        while at < end:
            nxt = min(end, at + max_records)
            part = tuple(ShardRange(r.shard, a, b, pending(r.skip, a))
                         for r in rs for a, b in [(max(r.start, at), min(r.end, nxt))] if a < b)
            if part:
                out.append(part)
            at = nxt
    return out


@dataclass(frozen=True, slots=True)
class Holding:
    """What a query knows of one shard it owns.

    ``begin``: where the shard begins in the next planned batch — set when the shard is taken, used
    (and cleared) by the next plan. ``floor``: the group's committed offset when this process took the
    shard (or where the reset policy began it): a batch replayed from the checkpoint never reads below
    it, because another owner processed and committed what lies below. ``committed``: the offset known
    to be committed (None: none known), so that a boundary commits only what moved. ``skip``: the
    skip pieces of the shard's `Resume` when taken (records former owners did, above the floor):
    part of the floor — every batch skips them while they drop anything (`plan`, `ranges`).
    """

    floor: int
    committed: int | None
    begin: int | None
    skip: Skip = ()

    @property
    def resume(self) -> Resume:
        return Resume(self.floor, self.skip)


@dataclass(frozen=True, slots=True)
class Boundary:
    """The shards a query owns and what it knows of each, between two batch boundaries.

    Rules it keeps:

    1. A shard is read only while owned: a replayed batch skips shards that moved (`ranges`).
    2. A replay never reads below a shard's floor (`ranges`).
    3. A finished batch is committed before any of its shards is released (`to_commit` for the
       revoked shards, then `released`), and only offsets past the committed one are sent.
    4. A newly taken shard begins where the driver said (its committed offset, or per the reset
       policy); a shard taken back begins there only if that is further on than where this query's
       finished batch left it (`plan`) — unless that batch was replayed without it (rule 1): then it
       left it nowhere, and the shard begins where the driver said (`replayed`).
    5. A key range (or a whole partition kept in fragments) taken with skip pieces — records former
       owners did — skips them in every batch, planned or replayed, until its position passes them;
       each planned batch carries those it still needs, so that a replay from the checkpoint alone
       skips them too (`plan`, `ranges`).
    6. A shard of a partition split on the producer side is read as lanes, one per open piece its keys
       lie in (`lanes`, `taken`): each lane begins where the shard's `Resume` says for its keys
       (`clip`). Batches read, carry and commit lanes — so the shard's hand-off commits every lane —
       and each lane's data ends where its piece does. At each boundary, before planning, a lane a
       split made span several pieces is cut, each part beginning where the lane's next batch would,
       with the skip pieces it still needs there; adjacent lanes of one shard in one piece that would
       begin at the same offset are joined (`relaned`). A new lane begins in the batch that first
       carries it (``starts``), so the checkpoint alone says where, as for a newly taken shard.
    """

    holdings: Mapping[Shard, Holding] = field(default_factory=dict)
    #: The end of a replayed batch and the shards it carried but skipped (rule 4), until the next plan.
    skipped: tuple[BatchOffset, frozenset[Shard]] | None = None
    #: Each shard the query was assigned and the lanes it is read as (rule 6): itself, unless its
    #: partition is split on the producer side. A holding that no entry names is its own lane.
    lanes: Mapping[Shard, tuple[Shard, ...]] = field(default_factory=dict)

    @property
    def owned(self) -> frozenset[Shard]:
        """What batches read: the lanes of the assigned shards (the shards themselves, unless split)."""
        return frozenset(self.holdings)

    @property
    def assigned(self) -> frozenset[Shard]:
        """The shards the coordinator assigned (what a Revoke or a Lost names)."""
        return frozenset(self._lanes())

    def _lanes(self) -> dict[Shard, tuple[Shard, ...]]:
        out = {s: ls for s, ls in self.lanes.items() if ls}
        laned = {lane for ls in out.values() for lane in ls}
        out.update((s, (s,)) for s in self.holdings if s not in laned)
        return out

    def _with_lanes(self, shards: Iterable[Shard]) -> set[Shard]:
        lanes = self._lanes()
        out: set[Shard] = set()
        for s in shards:
            out.add(s)
            out.update(lanes.get(s, ()))
        return out

    def to_commit(self, finished: BatchOffset, shards: Collection[Shard] | None = None) -> dict[Shard, int]:
        """What to commit once the batch ending at ``finished`` is done: its ends for the owned
        lanes (those of ``shards``, when given) that moved past the committed offset."""
        mine = self.owned if shards is None else self.owned & self._with_lanes(shards)
        return advanced(finished_positions(finished, mine), self.committed())

    def committed(self) -> dict[Shard, int]:
        return {s: h.committed for s, h in self.holdings.items() if h.committed is not None}

    def with_committed(self, offsets: Mapping[Shard, int]) -> Boundary:
        """After the coordinator accepted ``offsets`` (shards no longer owned are ignored)."""
        held = dict(self.holdings)
        for s, o in offsets.items():
            if s in held:
                held[s] = replace(held[s], committed=o)
        return Boundary(held, self.skipped, self.lanes)

    def taken(
        self,
        starts: Mapping[Shard, int | Resume],
        committed: Mapping[Shard, int],
        pieces: Mapping[tuple[str, int], Pieces] | None = None,
    ) -> Boundary:
        """After an Assign: each shard of ``starts`` begins there, its floor too (a `Resume`: where
        it begins and what it skips); ``committed`` are the group's committed offsets the driver read
        for them (for a key range: its own fragment's, if it has one). ``pieces`` are the open pieces
        of their partitions (absent: one piece): a shard over several is read as one lane per piece,
        each beginning where the `Resume` says for its keys (rule 6)."""
        held = dict(self.holdings)
        lanes = self._lanes()
        for s, at in starts.items():
            r = at if isinstance(at, Resume) else Resume(at)
            for old in lanes.pop(s, ()):
                held.pop(old, None)
            cut = lanes_of(s, pieces.get(s.partition_key, WHOLE)) if pieces else (s,)
            for lane in cut:
                # A commit of the shard raised every fragment of its keys to at least that: known for
                # each lane too.
                start, lr = (r.start, r) if lane == s else lane_begin(r, lane)
                held[lane] = Holding(floor=start, committed=committed.get(s), begin=start, skip=lr.skip)
            lanes[s] = cut
        return Boundary(held, self.skipped, lanes)

    def released(self, shards: Iterable[Shard]) -> Boundary:
        """After a Revoke (once committed) or a Lost (without committing): the assigned ``shards``
        with their lanes (a lane named alone goes alone)."""
        gone = frozenset(shards)
        drop = set(gone)
        lanes: dict[Shard, tuple[Shard, ...]] = {}
        for s, ls in self._lanes().items():
            if s in gone:
                drop.update(ls)
            elif left := tuple(lane for lane in ls if lane not in gone):
                lanes[s] = left
        return Boundary({s: h for s, h in self.holdings.items() if s not in drop}, self.skipped, lanes)

    def relaned(self, finished: BatchOffset, pieces: Mapping[tuple[str, int], Pieces]) -> Boundary:
        """Rule 6 at a boundary, before the plan after ``finished``: the lanes of the partitions in
        ``pieces`` (their open pieces now) cut where a split made them span pieces, and joined where
        adjacent lanes of one shard share a piece and would begin at the same offset. A new lane
        begins where the next batch of the lanes it came from would (``begin``, which the next plan
        puts in ``starts``), skipping what they would; its floor is that too (this process has read
        every record below it), and its committed offset the lowest known of theirs."""
        unread = self._unread(finished)
        held = dict(self.holdings)
        lanes = self._lanes()
        for owner, ls in list(lanes.items()):
            opened = pieces.get(owner.partition_key)
            if opened is None or (len(opened) == 1 and len(ls) == 1):
                continue  # not split (or merged whole, its lanes joined): nothing to cut or join
            opened = sorted(opened)
            cut: list[_Lane] = []
            for lane in sorted(ls):
                h = held[lane]
                at = self._next(lane, h, finished, unread)
                parts = lanes_of(lane, opened)
                if at is None or len(parts) == 1:
                    cut.append(_Lane(lane, None if at is None else at[0], () if at is None else at[1], h))
                    continue
                for part in parts:
                    start, r = lane_begin(Resume(*at), part)
                    h_part = replace(h, floor=start, begin=start, skip=r.skip)
                    cut.append(_Lane(part, start, r.skip, h_part))
            joined: list[_Lane] = []
            for x in cut:
                last = joined[-1] if joined else None
                if (last is None or x.at is None or x.at != last.at or last.shard.hi != x.shard.lo
                        or _piece_index(last.shard, opened) != _piece_index(x.shard, opened)):
                    joined.append(x)
                    continue
                skip = pending(merge_skips(last.skip, x.skip), x.at)
                known = None if last.holding.committed is None or x.holding.committed is None else \
                    min(last.holding.committed, x.holding.committed)
                both = Shard(x.shard.topic, x.shard.partition, last.shard.lo, x.shard.hi)
                h_both = Holding(floor=x.at, committed=known, begin=x.at, skip=skip)
                joined[-1] = _Lane(both, x.at, skip, h_both)
            new = tuple(x.shard for x in joined)
            if new == tuple(sorted(ls)):
                continue
            for old in ls:
                del held[old]
            held.update((x.shard, x.holding) for x in joined)
            lanes[owner] = new
        if held == self.holdings:
            return self
        return Boundary(held, self.skipped, lanes)

    def _unread(self, finished: BatchOffset) -> frozenset[Shard]:
        return self.skipped[1] if self.skipped is not None and self.skipped[0] == finished else frozenset()

    @staticmethod
    def _next(
        s: Shard, h: Holding, finished: BatchOffset, unread: Collection[Shard]
    ) -> tuple[int, Skip] | None:
        """Where ``s``'s next batch begins and what it skips there (as `plan_next` decides); None if
        nothing says (a caller's bug, which the plan reports)."""
        prev = None if s in unread else finished.ends.get(s)
        if prev is None and h.begin is None:
            return None
        pos, skip, _ = _where(prev, h.begin, finished.skips.get(s, ()), h.skip)
        return pos, skip

    def plan(
        self, finished: BatchOffset, log_ends: Mapping[Shard, int], max_records: int | None, epoch: int
    ) -> tuple[Boundary, BatchOffset]:
        """The next batch's end offset after ``finished`` (see `plan_next`), and the boundary once
        that plan carries every shard's beginning."""
        beginnings = {s: h.begin for s, h in self.holdings.items() if h.begin is not None}
        unread = self._unread(finished)
        skips = {s: h.skip for s, h in self.holdings.items() if h.skip}
        end = plan_next(finished, self.owned, beginnings, log_ends, max_records, epoch, unread, skips)
        # Past this plan, the replayed batch is no longer the finished one: a skipped shard is either
        # taken back now (and began where the driver said) or absent from the planned batch.
        if not beginnings and self.skipped is None:
            return self, end
        return Boundary({s: replace(h, begin=None) for s, h in self.holdings.items()}, None, self.lanes), end

    def plan_pieces(
        self,
        finished: BatchOffset,
        pieces: Mapping[tuple[str, int], PieceEnds],
        max_records: int | None,
        epoch: int,
    ) -> tuple[Boundary, BatchOffset]:
        """`plan` with the log as its open pieces: ``pieces`` gives, for the partitions of the owned
        shards, each open piece and where it ends (an unsplit partition: one piece). The lanes are
        brought to those pieces first (`relaned`), and each lane's data ends where its piece does."""
        b = self.relaned(finished, {k: tuple(v) for k, v in pieces.items()})
        return b.plan(finished, lane_ends(b.owned, pieces), max_records, epoch)

    def replayed(self, start: BatchOffset, end: BatchOffset) -> Boundary:
        """After a batch (start, end) was replayed from the checkpoint: remember the shards it
        carried but skipped because this query does not own them (rule 4)."""
        skipped = frozenset(end.ends) - self.owned
        return Boundary(self.holdings, (end, skipped), self.lanes) if skipped else self

    def ranges(self, start: BatchOffset, end: BatchOffset) -> list[ShardRange]:
        """What the planned (or replayed) batch (start, end) reads (see `batch_ranges`)."""
        return batch_ranges(start, end, self.owned, {s: h.resume for s, h in self.holdings.items()})


class _Lane(NamedTuple):
    """A lane while `Boundary.relaned` works: where its next batch begins (None: nothing says), what
    it skips there, and its holding."""

    shard: Shard
    at: int | None
    skip: Skip
    holding: Holding


def _piece_index(lane: Shard, pieces: Pieces) -> int:
    """The index of the piece holding ``lane``'s first key."""
    for i, (lo, hi) in enumerate(pieces):
        if lo <= lane.lo < hi:
            return i
    return -1
