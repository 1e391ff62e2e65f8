"""Producer-side split and merge in the simulator: each partition's pieces, and the records in them.

A partition of the embedded log can be split into *pieces* on the producer side
(`regroup.log.embedded.layout`; ``regroup sim check --splits``). This module models a partition's
layout with the log's own pure `Layout` — the very rules the log keeps — and the records produced
into each piece, with the properties of `regroup.sim.keyranges` (records' keys drawn
deterministically, questions answered per key and by offsets, never record by record). The rules:

1. **One layout per partition, with its history.** A partition starts as piece 0 (every key, offsets
   from 0), created with the partition. A split at time ``T`` seals an open piece at its end ``e`` at
   ``T`` and opens children over equal slices of its keys, each from ``e`` (`Layout.split`); a merge
   seals adjacent open pieces at their ends and opens one piece from the highest of them
   (`Layout.merge`). Each piece keeps when it opened and when it was sealed, so "the open piece that
   held point ``x`` at time ``t``" can be asked of any past time (a poll boundary's fetch).
2. **Production follows the keys.** Each key's records arrive at the rate they always did: a piece
   grows at the partition's rate (20 records/s) times the share of its keys' weight (key ``i`` weighs
   ``1/(i+1)``, `keyranges` rule 2), so a split does not change how often a key is written, only
   where; a piece with no key of the partition's 32 gets no records. Piece ``q`` has
   ``start + floor(rate * (t - opened) / 1000)`` records at ``t`` until it is sealed. Several records
   share an offset number in different pieces.
3. **Which key a record carries.** The record at offset ``start + j`` of piece ``q`` carries the
   ``j``-th draw of a `random.Random` seeded with ``"keys/{seed}/{topic}/{partition}/{q}"`` over the
   piece's keys, with their weights (piece 0 uses ``"keys/{seed}/{topic}/{partition}"`` over every
   key: a partition never split has exactly the records of a key-range run). A record's key depends
   on (seed, topic, partition, piece, offset) only, whatever the order of the questions.
4. **Each key's offsets, across pieces.** The checker asks for a key's records as one ascending list of
   offsets (`RecordKeys.offsets`). Rule 2 of the layout (per key, pieces hold consecutive,
   non-overlapping offset intervals) makes the list of a key the concatenation of its pieces' records
   in the order the pieces opened. A layout change that broke that rule would put a key's new records
   below its old ones: they are inserted in order all the same (so that the checker's questions stay
   exact and a reader by position is seen to miss them), and the change reports them
   (`LayoutChange.behind`), which the system turns into a ``key-order`` violation.
"""

from __future__ import annotations

import random
from bisect import insort
from dataclasses import dataclass, field
from itertools import accumulate

from regroup.log.embedded.layout import Layout, Piece
from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.sim.keyranges import KEYS_PER_PARTITION, RecordKeys
from regroup.sim.workload import ProducedLog


class _Draws:
    """The keys of one piece's records, drawn lazily in offset order (rule 3)."""

    __slots__ = ("cap", "cum_weights", "population", "rng", "size", "start")

    def __init__(self, label: str, start: int, keys: tuple[int, ...]) -> None:
        self.rng = random.Random(label)
        self.start = start
        self.population = keys
        self.cum_weights = list(accumulate(1.0 / (i + 1) for i in keys))
        self.size = 0  # records drawn
        self.cap: int | None = None  # the end once sealed: nothing is drawn at or beyond it

    @property
    def drawn_to(self) -> int:
        return self.start + self.size

    def extend(self, end: int, by_key: list[list[int]], behind: list[tuple[int, int]]) -> None:
        """Draw the records below ``end`` (and below the cap) into ``by_key``; a record at or below its
        key's last offset is inserted in order and noted in ``behind`` as ``(key, offset)``."""
        if self.cap is not None:
            end = min(end, self.cap)
        n = end - self.drawn_to
        if n <= 0 or not self.population:
            return
        drawn = self.rng.choices(self.population, cum_weights=self.cum_weights, k=n)
        for offset, key in enumerate(drawn, self.drawn_to):
            offs = by_key[key]
            if offs and offs[-1] >= offset:  # only a layout breaking its rule 2 does this
                insort(offs, offset)
                behind.append((key, offset))
            else:
                offs.append(offset)
        self.size += n


@dataclass
class _Keys:
    """One partition's records: each key's offsets (rule 4), and each piece's draws."""

    by_key: list[list[int]]
    draws: dict[int, _Draws]
    #: The open piece holding each key (by key index).
    current: list[int]
    behind: list[tuple[int, int]] = field(default_factory=list)


class PieceKeys(RecordKeys):
    """`RecordKeys` for partitions split on the producer side (rules 3 and 4)."""

    def __init__(self, seed: int, keys_per_partition: int = KEYS_PER_PARTITION) -> None:
        super().__init__(seed, keys_per_partition)
        self._parts: dict[tuple[str, int], _Keys] = {}
        weights = [1.0 / (i + 1) for i in range(self.keys_per_partition)]
        self._weights = weights
        self._total = sum(weights)

    def _keys(self, topic: str, partition: int) -> _Keys:
        tp = (topic, partition)
        part = self._parts.get(tp)
        if part is None:
            keys = tuple(range(self.keys_per_partition))
            draws = {0: _Draws(f"keys/{self.seed}/{topic}/{partition}", 0, keys)}
            part = self._parts[tp] = _Keys([[] for _ in keys], draws, [0] * len(keys))
        return part

    def offsets(self, topic: str, partition: int, key: int, end: int) -> list[int]:
        part = self._keys(topic, partition)
        d = part.draws[part.current[key]]
        if end > d.drawn_to:
            d.extend(end, part.by_key, part.behind)
        return part.by_key[key]

    def key_of(self, topic: str, partition: int, offset: int) -> int:
        """The key of a record at ``offset`` (for tests; with several pieces, the first key with a
        record there)."""
        part = self._keys(topic, partition)
        for d in part.draws.values():
            d.extend(offset + 1, part.by_key, part.behind)
        for k, offs in enumerate(part.by_key):
            if offset in offs:
                return k
        raise AssertionError(f"no record at {offset} of {topic}:{partition}")  # pragma: no cover

    def piece_keys(self, topic: str, partition: int, piece: Piece) -> tuple[int, ...]:
        """The keys of the partition whose point lies in the piece's range, in index order."""
        return self.keys_in(Shard(topic, partition, piece.lo, piece.hi))

    def share(self, topic: str, partition: int, piece: Piece) -> float:
        """The share of the partition's records that the piece's keys carry (rule 2)."""
        if piece.lo == 0 and piece.hi == KEY_SPACE:
            return 1.0
        return sum(self._weights[k] for k in self.piece_keys(topic, partition, piece)) / self._total

    def changed(self, topic: str, partition: int, sealed: dict[int, int],
                opened: list[Piece]) -> list[tuple[int, int, int]]:
        """A layout change: the ``sealed`` pieces' records drawn to their ends (and nothing past
        them), the ``opened`` pieces' draws begun. Returns ``(key, last offset, piece start)`` for each
        key whose new piece begins at or below a record it already has (layout rule 2 broken)."""
        part = self._keys(topic, partition)
        for pid, end in sorted(sealed.items()):
            d = part.draws[pid]
            d.extend(end, part.by_key, part.behind)
            d.cap = end
            if d.drawn_to > end:  # drawn ahead of the production: those records never were
                for k in d.population:
                    offs = part.by_key[k]
                    while offs and offs[-1] >= end:
                        offs.pop()
                d.size = end - d.start
        broken: list[tuple[int, int, int]] = []
        for piece in opened:
            keys = self.piece_keys(topic, partition, piece)
            label = f"keys/{self.seed}/{topic}/{partition}/{piece.id}"
            part.draws[piece.id] = _Draws(label, piece.start, keys)
            for k in keys:
                part.current[k] = piece.id
                offs = part.by_key[k]
                if offs and offs[-1] >= piece.start:
                    broken.append((k, offs[-1], piece.start))
        return broken


@dataclass
class _Layout:
    """One partition's layout and each piece's times and rate (rules 1 and 2)."""

    layout: Layout
    opened: dict[int, int]
    sealed: dict[int, int]
    rate: dict[int, float]


@dataclass(frozen=True)
class LayoutChange:
    """What a split or a merge did: the pieces sealed (with their ends) and opened, and the keys whose
    new piece begins at or below a record they already have (``(key, last offset, start)``)."""

    topic: str
    partition: int
    sealed: tuple[Piece, ...]
    opened: tuple[Piece, ...]
    behind: tuple[tuple[int, int, int], ...] = ()

    def __str__(self) -> str:
        sealed = ", ".join(f"{p.id} at {p.end}" for p in self.sealed)
        opened = ", ".join(f"{p.id} [{p.lo:#x}, {p.hi:#x}) from {p.start}" for p in self.opened)
        return f"{self.topic}:{self.partition}: sealed {sealed}; opened {opened}"


class PieceLog(ProducedLog):
    """`ProducedLog` whose partitions may be split and merged on the producer side (rules 1 and 2)."""

    def __init__(self, keys: PieceKeys, rate_per_s: float = 20.0) -> None:
        super().__init__(rate_per_s)
        self.keys = keys
        self._layouts: dict[tuple[str, int], _Layout] = {}
        #: Splits and merges made, and lanes that members cut at a split (regroup/sim/lanes.py).
        self.splits = 0
        self.merges = 0
        self.cuts = 0

    # ---------------------------------------------------------------- questions
    def layout(self, topic: str, partition: int) -> Layout:
        part = self._layouts.get((topic, partition))
        return Layout() if part is None else part.layout

    def split_partitions(self) -> list[tuple[str, int]]:
        return sorted(self._layouts)

    def piece_at(self, topic: str, partition: int, point: int, t: int) -> tuple[int, int, int]:
        """The open piece that held ``point`` at ``t``: its keys ``(lo, hi)`` and its end at ``t``."""
        part = self._layouts.get((topic, partition))
        if part is None:
            return 0, KEY_SPACE, self.end_offset(Shard(topic, partition), t)
        for p in part.layout.pieces:
            if p.lo <= point < p.hi and part.opened[p.id] <= t and not part.sealed.get(p.id, t + 1) <= t:
                return p.lo, p.hi, self._end(part, p, t)
        raise AssertionError(f"no piece of {topic}:{partition} held {point:#x} at {t}")  # pragma: no cover

    def end_at(self, topic: str, partition: int, point: int, t: int) -> int:
        """Where a reader of ``point``'s piece got to in a fetch at ``t``: the end of its open piece
        (the sealed pieces of its keys are all below that piece's start)."""
        if (topic, partition) not in self._layouts:
            return self.end_offset(Shard(topic, partition), t)
        return self.piece_at(topic, partition, point, t)[2]

    def open_ranges(self, topic: str, partition: int) -> tuple[tuple[int, int], ...]:
        """The open pieces' key ranges now, in key order (what `PartitionedLog.key_pieces` says)."""
        part = self._layouts.get((topic, partition))
        if part is None:
            return ((0, KEY_SPACE),)
        return tuple((p.lo, p.hi) for p in part.layout.open_pieces())

    def piece_ends(self, topics: tuple[str, ...], t: int) -> dict[Shard, int]:
        """Every open piece at ``t`` of the given topics' partitions, as a key range, with its end at
        ``t`` (a partition never split: the whole partition)."""
        out: dict[Shard, int] = {}
        for s in self.shards(topics):
            part = self._layouts.get((s.topic, s.partition))
            if part is None:
                out[s] = self.end_offset(s, t)
                continue
            for p in part.layout.pieces:
                if part.opened[p.id] <= t and not part.sealed.get(p.id, t + 1) <= t:
                    whole = p.lo == 0 and p.hi == KEY_SPACE
                    out[s if whole else Shard(s.topic, s.partition, p.lo, p.hi)] = self._end(part, p, t)
        return out

    def _end(self, part: _Layout, p: Piece, t: int) -> int:
        sealed = part.sealed.get(p.id)
        if sealed is not None and t >= sealed:
            assert p.end is not None
            return p.end
        opened = part.opened[p.id]
        return p.start if t <= opened else p.start + int(part.rate[p.id] * (t - opened) / 1000)

    def _part(self, topic: str, partition: int) -> _Layout:
        tp = (topic, partition)
        part = self._layouts.get(tp)
        if part is None:
            created = self.created_at(Shard(topic, partition))
            part = self._layouts[tp] = _Layout(Layout(), {0: 0 if created is None else created}, {},
                                               {0: self.rate_per_s})
        return part

    # ---------------------------------------------------------------- changes
    def split(self, topic: str, partition: int, index: int, into: int, t: int) -> LayoutChange:
        """Split the ``index``-th open piece (modulo how many there are, in key order) into ``into``."""
        part = self._part(topic, partition)
        opened = part.layout.open_pieces()
        piece = opened[index % len(opened)]
        end = self._end(part, piece, t)
        return self._apply(topic, partition, part, part.layout.split(piece.id, into, end), t)

    def merge(self, topic: str, partition: int, index: int, every: bool, t: int) -> LayoutChange | None:
        """Merge every open piece (``every``), or the ``index``-th and the next (modulo); None when the
        partition has one open piece."""
        part = self._part(topic, partition)
        opened = part.layout.open_pieces()
        if len(opened) < 2:
            return None
        if every:
            chosen = list(opened)
        else:
            i = index % (len(opened) - 1)
            chosen = [opened[i], opened[i + 1]]
        ends = {p.id: self._end(part, p, t) for p in chosen}
        return self._apply(topic, partition, part, part.layout.merge(ends), t)

    def _apply(self, topic: str, partition: int, part: _Layout, layout: Layout, t: int) -> LayoutChange:
        before = {p.id: p for p in part.layout.pieces}
        sealed = tuple(p for p in layout.pieces if p.id in before and before[p.id].open and not p.open)
        opened = tuple(p for p in layout.pieces if p.id not in before)
        for p in sealed:
            part.sealed[p.id] = t
        for p in opened:
            part.opened[p.id] = t
            part.rate[p.id] = self.rate_per_s * self.keys.share(topic, partition, p)
        ends = {p.id: p.end for p in sealed if p.end is not None}
        behind = self.keys.changed(topic, partition, ends, list(opened))
        part.layout = layout
        return LayoutChange(topic, partition, sealed, opened, tuple(behind))
