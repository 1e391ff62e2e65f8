"""Key ranges in the simulator: which key each record carries, and which records a range processes.

`ProducedLog` models how far each partition has been produced, not records. With key ranges
(`regroup.protocol.keyrange`) that is not enough: a range's owner processes only the records whose
key hash falls in its range, and the invariants are about records and keys (none lost, none twice,
per-key order). So in a key-range run every record also has a key, decided here. The rules:

1. **Keys.** Each partition has `KEYS_PER_PARTITION` keys; key ``i`` of partition ``p`` of topic
   ``t`` is the bytes ``"{seed}/{t}/{p}/{i}"``, and its point of the key space is
   `keyrange.key_hash` of them — the very hash the consumers use, so a key falls in the range the
   core's rules say. The seed is part of the key so that different seeds put the keys on different
   sides of the range boundaries (with 32 keys and parallelism 8 some ranges hold no key at all:
   that case is exercised too).
2. **Which key a record carries.** Record ``o`` of a partition carries the ``o``-th draw of a
   `random.Random` seeded with ``"keys/{seed}/{t}/{p}"``, skewed (key ``i`` is drawn with weight
   ``1/(i+1)``, so a few hot keys have long runs to keep in order and cold ones are sparse). The draws
   are made in offset order, one per record, whatever the order of the questions asked, so a record's
   key depends on (seed, topic, partition, offset) only. Keyless records are not modelled: they have
   no order to keep, and a key of their own each would only dilute the per-key checks.
3. **What a range processes** (`scanned`): when a range's position moves from ``lo`` to ``hi``
   (the batches between two reports), it processes, for each key whose point lies in its range, every
   record of that key in ``[max(lo, done), hi)``, where ``done`` is the offset of the `Resume` skip
   piece holding the key's point (0 when none: nothing to skip). That is `Resume.skips` applied
   record by record, and the test suite checks it is. The range's position moves past every record
   of the partition it scanned, its own or not, as the real consumer's (regroup/client/ranges.py).
   The answer is a list of `Run`\\ s, one per key of the range, each meaning "every record of this key
   in ``[lo, hi)``": exact and cheap (a run costs the same whatever the number of records in it).

A whole partition is the range covering the whole key space, so in a key-range run whole partitions
report runs too (every key of the partition), and the checker sees one model throughout a change of
parallelism.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate
from typing import NamedTuple

from regroup.protocol.keyrange import Resume, key_hash
from regroup.protocol.shard import Shard

#: Keys per partition (rule 1).
KEYS_PER_PARTITION = 32

#: The parallelisms a key-range plan draws from: splits and merges, nested (1, 2, 4, 8) and not (3).
PARALLELISMS = (1, 2, 3, 4, 8)


class Run(NamedTuple):
    """Every record of key ``key`` with an offset in ``[lo, hi)`` (rule 3)."""

    key: int
    lo: int
    hi: int


class _Partition:
    """The keys of one partition's records, drawn lazily in offset order (rule 2)."""

    __slots__ = ("by_key", "cum_weights", "population", "rng", "size")

    def __init__(self, seed: int, topic: str, partition: int, keys: int) -> None:
        self.rng = random.Random(f"keys/{seed}/{topic}/{partition}")
        self.population = range(keys)
        self.cum_weights = list(accumulate(1.0 / (i + 1) for i in range(keys)))
        #: The offsets of each key's records, ascending (what the invariants bisect).
        self.by_key: list[list[int]] = [[] for _ in range(keys)]
        self.size = 0

    def extend(self, end: int) -> None:
        """Draw the keys of the records below ``end``."""
        if end <= self.size:
            return
        # `choices` makes one draw per record, so drawing in chunks gives the same keys as drawing
        # one by one: a record's key does not depend on how far the log had been drawn before.
        drawn = self.rng.choices(self.population, cum_weights=self.cum_weights, k=end - self.size)
        by_key = self.by_key
        for offset, key in enumerate(drawn, self.size):
            by_key[key].append(offset)
        self.size = end


class RecordKeys:
    """Which key each record of each partition carries, and where keys fall in the key space."""

    def __init__(self, seed: int, keys_per_partition: int = KEYS_PER_PARTITION) -> None:
        if not 1 <= keys_per_partition <= 1024:
            raise ValueError(f"keys_per_partition must be 1..1024, got {keys_per_partition}")
        self.seed = seed
        self.keys_per_partition = keys_per_partition
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._points: dict[tuple[str, int], tuple[int, ...]] = {}
        self._in_range: dict[Shard, tuple[int, ...]] = {}

    def points(self, topic: str, partition: int) -> tuple[int, ...]:
        """The point of the key space of each key of the partition (rule 1), by key index."""
        tp = (topic, partition)
        points = self._points.get(tp)
        if points is None:
            points = tuple(key_hash(f"{self.seed}/{topic}/{partition}/{i}".encode(), 0)
                           for i in range(self.keys_per_partition))
            self._points[tp] = points
        return points

    def keys_in(self, shard: Shard) -> tuple[int, ...]:
        """The keys of ``shard``'s partition whose point lies in its range, in key index order."""
        keys = self._in_range.get(shard)
        if keys is None:
            points = self.points(shard.topic, shard.partition)
            keys = tuple(k for k, p in enumerate(points) if shard.lo <= p < shard.hi)
            self._in_range[shard] = keys
        return keys

    def offsets(self, topic: str, partition: int, key: int, end: int) -> list[int]:
        """The offsets of ``key``'s records, ascending, drawn at least up to ``end`` (the list may go
        further: bisect it). The list is the model's own: do not change it."""
        part = self._partition(topic, partition)
        part.extend(end)
        return part.by_key[key]

    def count(self, topic: str, partition: int, key: int, lo: int, hi: int) -> int:
        """How many records of ``key`` have an offset in ``[lo, hi)``."""
        if hi <= lo:
            return 0
        offs = self.offsets(topic, partition, key, hi)
        return bisect_left(offs, hi) - bisect_left(offs, lo)

    def key_of(self, topic: str, partition: int, offset: int) -> int:
        """The key record ``offset`` carries (for tests and traces: linear in the keys)."""
        part = self._partition(topic, partition)
        part.extend(offset + 1)
        for k, offs in enumerate(part.by_key):
            i = bisect_left(offs, offset)
            if i < len(offs) and offs[i] == offset:
                return k
        raise AssertionError(f"record {offset} of {topic}:{partition} has no key")  # pragma: no cover

    def _partition(self, topic: str, partition: int) -> _Partition:
        tp = (topic, partition)
        part = self._partitions.get(tp)
        if part is None:
            part = self._partitions[tp] = _Partition(self.seed, topic, partition, self.keys_per_partition)
        return part


def first_offset(resume: Resume, point: int, lo: int) -> int:
    """Where a key at ``point`` begins in a scan from ``lo``: past the records the resume's skip piece
    holding ``point`` says a former owner did (`Resume.skips` is ``offset < done`` there)."""
    for plo, phi, done in resume.skip:
        if plo <= point < phi:
            return max(lo, done)
    return lo


def scanned(keys: RecordKeys, shard: Shard, resume: Resume, lo: int, hi: int) -> list[Run]:
    """The records ``shard`` processed when its position moved from ``lo`` to ``hi`` (rule 3): one
    run per key of its range that has anything left to do in the window, in key index order."""
    if hi <= lo:
        return []
    points = keys.points(shard.topic, shard.partition)
    out: list[Run] = []
    for k in keys.keys_in(shard):
        first = first_offset(resume, points[k], lo) if resume.skip else lo
        if first < hi:
            out.append(Run(k, first, hi))
    return out


def run_records(keys: RecordKeys, shard: Shard, runs: Sequence[Run]) -> int:
    """How many records ``runs`` of ``shard``'s partition hold."""
    return sum(keys.count(shard.topic, shard.partition, r.key, r.lo, r.hi) for r in runs)
