"""Micro-batch planning for a streaming query that is a group member (the PySpark source's decisions).

Spark plans a micro-batch as a pair of offsets (start, end) that it writes to its checkpoint before
running the batch, and asks the source for the next end offset only once the previous batch has
finished. A regroup member's assignment changes in between, so the source must decide, at each batch
boundary, which shards a batch covers and where each of them begins. Those decisions live here, pure:

* :class:`BatchOffset` is what goes into Spark's checkpoint: for every shard in the batch the offset
  after its last record (``ends``), and for shards that *begin* in this batch the offset they begin at
  (``starts``: a newly assigned shard starts at the group's committed offset, not where an older batch
  of this query left it). A batch therefore replays from the checkpoint alone.
* :func:`plan_next` builds the next end offset from the finished one, the shards the member owns now,
  where newly owned shards begin, the log's end offsets and a record limit.
* :func:`batch_ranges` turns a planned (start, end) into the offset ranges to read, keeping only shards
  the member owns when the batch runs — a batch replayed after a restart never reads a shard that moved.
* :func:`finished_positions` says what may be committed once a batch has finished.
* :class:`Boundary` is what one query knows of the shards it owns — for each, where it begins in the
  next batch, the floor no replay reads below, and the offset known to be committed — as one frozen
  value: the source replaces it at each batch boundary, when Spark asks for the next offset, and
  reads it (never changes it) when Spark asks what a planned batch reads.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from regroup.protocol.driver import advanced
from regroup.protocol.shard import Shard

#: Version of the checkpointed offset format; a reader refuses offsets it does not understand.
OFFSET_FORMAT = 1


class OffsetFormatError(ValueError):
    """A checkpointed offset that this version cannot read (corrupt, or written by another source)."""


def shard_key(shard: Shard) -> str:
    """``topic:partition`` — the key of a shard in the checkpoint's JSON (topic names have no ':')."""
    return f"{shard.topic}:{shard.partition}"


def parse_shard_key(key: str) -> Shard:
    topic, sep, part = key.rpartition(":")
    if not sep or not topic or not part.isdigit():
        raise OffsetFormatError(f"checkpointed offset has a malformed shard key {key!r}"
                                " (want topic:partition)")
    return Shard(topic, int(part))


@dataclass(frozen=True, slots=True)
class BatchOffset:
    """One micro-batch's end offset as Spark checkpoints it.

    ``ends[s]`` is the offset after the batch's last record of shard ``s``; ``starts[s]``, present only
    for shards that begin in this batch, is where ``s`` begins (otherwise it continues from the
    previous batch's ``ends``). ``epoch`` is the member epoch when the batch was planned (for people
    reading checkpoints; fencing is the coordinator's job).
    """

    ends: Mapping[Shard, int] = field(default_factory=dict)
    starts: Mapping[Shard, int] = field(default_factory=dict)
    epoch: int = 0

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict with sorted keys, so that equal offsets serialise identically."""
        out: dict[str, object] = {
            "v": OFFSET_FORMAT,
            "epoch": self.epoch,
            "ends": {shard_key(s): self.ends[s] for s in sorted(self.ends)},
        }
        if self.starts:
            out["starts"] = {shard_key(s): self.starts[s] for s in sorted(self.starts)}
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
        return BatchOffset(ends, starts, epoch)


def _parse_positions(raw: object, what: str) -> dict[Shard, int]:
    if not isinstance(raw, Mapping):
        raise OffsetFormatError(f"checkpointed offset's {what!r} must be an object")
    out: dict[Shard, int] = {}
    for key, value in raw.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise OffsetFormatError(f"checkpointed offset's {what}[{key!r}] = {value!r} is not an offset")
        out[parse_shard_key(str(key))] = value
    return out


@dataclass(frozen=True, slots=True)
class ShardRange:
    """Records ``[start, end)`` of one shard: one Spark input partition."""

    shard: Shard
    start: int
    end: int

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
) -> BatchOffset:
    """The end offset of the next micro-batch, after the batch ending at ``finished``.

    ``owned`` are the shards the member may read now; ``beginnings`` gives where each newly owned
    shard begins (its committed offset) — it must cover every owned shard that ``finished`` does not
    carry, and for shards it does carry it wins when it is ahead (another owner went further while
    this query did not own the shard). ``unread`` are shards that ``finished`` carries but this query
    did not read (a replay after a restart skipped them, not owning them then): where ``finished``
    says they end means nothing, and a beginning always wins for them. ``log_ends`` caps every shard
    (a shard missing there has no new data). ``max_records`` (None: no limit) is spread over the
    shards with data, water-filling so that no shard's share is wasted. The result equals
    ``finished`` exactly when there is nothing to do, so that Spark runs no empty batch.
    """
    owned_set = set(owned)
    base: dict[Shard, int] = {}
    starts: dict[Shard, int] = {}
    for s in sorted(owned_set):
        prev = None if s in unread else finished.ends.get(s)
        begin = beginnings.get(s)
        if prev is None and begin is None:
            raise ValueError(f"plan_next: no position for newly owned shard {s}")
        if prev is None or (begin is not None and begin > prev):
            assert begin is not None
            starts[s] = begin
            base[s] = begin
        else:
            base[s] = prev
    avail = {s: max(0, log_ends.get(s, 0) - b) for s, b in base.items()}
    take = _spread(avail, max_records)
    ends = {s: base[s] + take[s] for s in base}
    if not starts and ends == dict(finished.ends):
        return finished
    return BatchOffset(ends, starts, epoch)


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
    floors: Mapping[Shard, int] | None = None,
) -> list[ShardRange]:
    """The non-empty ranges a batch (start, end) reads, for shards the member owns now.

    A shard begins at ``end.starts`` if the batch says so, else at ``start.ends``. ``floors`` (the
    group's committed offset of a shard this process took over) raises a beginning, so that a batch
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
        if floors is not None and s in floors:
            begin = max(begin, floors[s])
        if end.ends[s] > begin:
            out.append(ShardRange(s, begin, end.ends[s]))
    return out


def split_ranges(ranges: Iterable[ShardRange], max_records: int) -> list[ShardRange]:
    """Cut ranges into pieces of at most ``max_records`` so that a big shard keeps every core busy."""
    if max_records <= 0:
        raise ValueError(f"max_records must be > 0, got {max_records}")
    out: list[ShardRange] = []
    for r in ranges:
        at = r.start
        while at < r.end:
            nxt = min(r.end, at + max_records)
            out.append(ShardRange(r.shard, at, nxt))
            at = nxt
    return out


@dataclass(frozen=True, slots=True)
class Holding:
    """What a query knows of one shard it owns.

    ``begin``: where the shard begins in the next planned batch — set when the shard is taken, used
    (and cleared) by the next plan. ``floor``: the group's committed offset when this process took the
    shard (or where the reset policy began it): a batch replayed from the checkpoint never reads below
    it, because another owner processed and committed what lies below. ``committed``: the offset known
    to be committed (None: none known), so that a boundary commits only what moved.
    """

    floor: int
    committed: int | None
    begin: int | None


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
    """

    holdings: Mapping[Shard, Holding] = field(default_factory=dict)
    #: The end of a replayed batch and the shards it carried but skipped (rule 4), until the next plan.
    skipped: tuple[BatchOffset, frozenset[Shard]] | None = None

    @property
    def owned(self) -> frozenset[Shard]:
        return frozenset(self.holdings)

    def to_commit(self, finished: BatchOffset, shards: Collection[Shard] | None = None) -> dict[Shard, int]:
        """What to commit once the batch ending at ``finished`` is done: its ends for the owned
        shards (of ``shards``, when given) that moved past the committed offset."""
        mine = self.owned if shards is None else self.owned & frozenset(shards)
        return advanced(finished_positions(finished, mine), self.committed())

    def committed(self) -> dict[Shard, int]:
        return {s: h.committed for s, h in self.holdings.items() if h.committed is not None}

    def with_committed(self, offsets: Mapping[Shard, int]) -> Boundary:
        """After the coordinator accepted ``offsets`` (shards no longer owned are ignored)."""
        held = dict(self.holdings)
        for s, o in offsets.items():
            if s in held:
                held[s] = replace(held[s], committed=o)
        return Boundary(held, self.skipped)

    def taken(self, starts: Mapping[Shard, int], committed: Mapping[Shard, int]) -> Boundary:
        """After an Assign: each shard of ``starts`` begins there, its floor too; ``committed`` are
        the group's committed offsets the driver read for them."""
        held = dict(self.holdings)
        for s, at in starts.items():
            held[s] = Holding(floor=at, committed=committed.get(s), begin=at)
        return Boundary(held, self.skipped)

    def released(self, shards: Iterable[Shard]) -> Boundary:
        """After a Revoke (once committed) or a Lost (without committing)."""
        gone = frozenset(shards)
        return Boundary({s: h for s, h in self.holdings.items() if s not in gone}, self.skipped)

    def plan(
        self, finished: BatchOffset, log_ends: Mapping[Shard, int], max_records: int | None, epoch: int
    ) -> tuple[Boundary, BatchOffset]:
        """The next batch's end offset after ``finished`` (see `plan_next`), and the boundary once
        that plan carries every shard's beginning."""
        beginnings = {s: h.begin for s, h in self.holdings.items() if h.begin is not None}
        unread = self.skipped[1] if self.skipped is not None and self.skipped[0] == finished else frozenset()
        end = plan_next(finished, self.owned, beginnings, log_ends, max_records, epoch, unread)
        # Past this plan, the replayed batch is no longer the finished one: a skipped shard is either
        # taken back now (and began where the driver said) or absent from the planned batch.
        if not beginnings and self.skipped is None:
            return self, end
        return Boundary({s: replace(h, begin=None) for s, h in self.holdings.items()}), end

    def replayed(self, start: BatchOffset, end: BatchOffset) -> Boundary:
        """After a batch (start, end) was replayed from the checkpoint: remember the shards it
        carried but skipped because this query does not own them (rule 4)."""
        skipped = frozenset(end.ends) - self.owned
        return Boundary(self.holdings, (end, skipped)) if skipped else self

    def ranges(self, start: BatchOffset, end: BatchOffset) -> list[ShardRange]:
        """What the planned (or replayed) batch (start, end) reads (see `batch_ranges`)."""
        return batch_ranges(start, end, self.owned, {s: h.floor for s, h in self.holdings.items()})
