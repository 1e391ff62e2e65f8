"""Key ranges: parallelism beyond the partition count, and progress kept per range.

A group may cut every partition of a topic into ``parallelism`` key ranges (a group setting per
topic; 1, the default, is the whole partition). Each range is a `Shard` of its own: assignors hand
ranges out like partitions, a member reads the partition once and keeps the records of the ranges
it owns, and commits progress per range. The rules:

1. **Which range a record belongs to.** Its key's 64-bit xxHash (XXH64, seed 42), top 32 bits: a
   point of the key space ``[0, KEY_SPACE)``. A keyless record has no order to keep, so it is spread
   by its offset instead (the hash of the offset as 8 big-endian bytes). XXH64 because it is fast in
   Python (a C extension, ~0.1 µs a key), it is well distributed, and it is what Spark's built-in
   ``xxhash64`` computes, so executors can filter with a native expression. Its top bits are
   independent of Kafka's partitioner (murmur2 modulo the partition count), so the keys of one
   partition spread evenly over its ranges.
2. **Ranges of a parallelism.** ``parallelism`` equal, half-open ranges; range ``i`` is
   ``[i·KEY_SPACE // n, (i+1)·KEY_SPACE // n)``. They tile the key space, so every record has exactly
   one range.
3. **Progress is a map over the key space.** A partition's committed offsets are *fragments*:
   disjoint key ranges, each with the offset below which its records are done. A group that never
   used ranges has one fragment per partition, the whole partition, exactly as before. A commit of
   range ``R`` at ``x`` raises every fragment inside ``R`` to at least ``x`` (`commit_fragments`):
   never lowers one, because a fragment above ``x`` is progress a former owner made that this
   range's owner has not reached yet (it skips those records, rule 4).
4. **Where a range resumes, and what it skips** (`resume`). A newly assigned range starts at the
   *lowest* offset of the fragments it overlaps and skips, until it passes them, the records of
   fragments whose offset is higher: each record's key tells which fragment it belongs to. So a
   range split in two resumes both halves where the whole stopped, and ranges merged into one
   resume at the laggard and skip what the others already did: no loss, no duplicate, whatever
   the old and new parallelism. A part of the range with no fragment begins where the reset policy
   says (the caller's ``default``), and is skipped below it like any fragment.
5. **Fragments coalesce** within one commit: the pieces of the committed range that end up with
   its value become one fragment, so a merged range's fragments fold back into one as soon as its
   owner passes them all. Fragments of different commits stay apart (each keeps who committed it),
   so in a steady state each range has exactly its own fragment and a commit writes one record.

`kept` applies rules 1 and 4 to a column of records at once (the PySpark source's executors filter
Arrow batches with it); it gives exactly what `key_hash`, the range and `Resume.skips` give record by
record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise, repeat
from typing import TYPE_CHECKING, cast

import xxhash

from regroup.protocol.messages import CommittedOffset
from regroup.protocol.shard import KEY_SPACE, Shard

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "HASH_SEED",
    "KEY_SPACE",
    "MAX_PARALLELISM",
    "Resume",
    "clipped",
    "commit_fragments",
    "kept",
    "kept_points",
    "key_hash",
    "low_watermarks",
    "points",
    "range_of",
    "range_shards",
    "ranges",
    "resume",
]

#: The seed of XXH64 (Spark's ``xxhash64`` uses 42 too).
HASH_SEED = 42
#: The most ranges a partition may be cut into (a group setting beyond it is refused).
MAX_PARALLELISM = 1024

_hash = xxhash.xxh64_intdigest


def key_hash(key: bytes | None, offset: int) -> int:
    """The point of the key space a record falls on (rule 1)."""
    if key is None:
        return _hash(offset.to_bytes(8, "big", signed=True), HASH_SEED) >> 32
    return _hash(key, HASH_SEED) >> 32


def kept(
    keys: Sequence[bytes | None],
    offsets: NDArray[np.int64],
    lo: int,
    hi: int,
    skip: Sequence[tuple[int, int, int]] = (),
) -> NDArray[np.bool_]:
    """Which records of a column a range keeps: True where the record's point (`key_hash`) lies in
    ``[lo, hi)`` and the ``skip`` pieces (disjoint, as `Resume`'s are) do not drop it
    (`Resume.skips`). ``keys[i]`` and ``offsets[i]`` are record i's.

    Vectorised for the PySpark source's executors: hashing is one C call per key through ``map``
    (no Python frame per record), and the comparisons are numpy's. numpy is imported here, not at
    the top, so that the coordinator and the CLI, which import this module, do not pay for it.
    """
    return kept_points(points(keys, offsets), offsets, lo, hi, skip)


def points(keys: Sequence[bytes | None], offsets: NDArray[np.int64]) -> NDArray[np.uint64]:
    """Each record's point (rule 1) for a column, vectorised (see `kept`): hashed once, for reads
    that route one column to several ranges (`kept_points` per range)."""
    import numpy as np

    n = len(keys)
    try:  # rule 1 for keyed records, the common case: the top 32 bits of XXH64(key, 42)
        keyed = cast("Sequence[bytes]", keys)  # a None in it raises TypeError: the other path
        return np.fromiter(map(_hash, keyed, repeat(HASH_SEED)), dtype=np.uint64, count=n) >> np.uint64(32)
    except TypeError:  # a keyless record (None) hashes on its offset: the rule record by record
        return np.fromiter(map(key_hash, keys, offsets.tolist()), dtype=np.uint64, count=n)


def kept_points(
    points: NDArray[np.uint64],
    offsets: NDArray[np.int64],
    lo: int,
    hi: int,
    skip: Sequence[tuple[int, int, int]] = (),
) -> NDArray[np.bool_]:
    """`kept` on points already computed (`points`)."""
    import numpy as np

    mask: NDArray[np.bool_] = (points >= lo) & (points < hi)
    if not skip:
        return mask
    pieces = sorted(skip)
    if any(a[1] > b[0] for a, b in pairwise(pieces)):
        raise ValueError(f"skip pieces overlap: {pieces}")
    # The piece holding each point, if any: the last piece beginning at or below it (they are
    # disjoint), if the point is below that piece's end too.
    starts = np.array([p[0] for p in pieces], dtype=np.uint64)
    ends = np.array([p[1] for p in pieces], dtype=np.uint64)
    done = np.array([p[2] for p in pieces], dtype=np.int64)
    at = np.searchsorted(starts, points, side="right").astype(np.int64) - 1
    held = at >= 0
    at[~held] = 0
    dropped = held & (points < ends[at]) & (offsets < done[at])
    return mask & ~dropped


def ranges(parallelism: int) -> tuple[tuple[int, int], ...]:
    """The ``[lo, hi)`` ranges of a parallelism, in key order (rule 2)."""
    if not 1 <= parallelism <= MAX_PARALLELISM:
        raise ValueError(f"parallelism must be 1..{MAX_PARALLELISM}, got {parallelism}")
    bounds = [i * KEY_SPACE // parallelism for i in range(parallelism + 1)]
    return tuple(pairwise(bounds))


def range_shards(topic: str, partition: int, parallelism: int) -> tuple[Shard, ...]:
    """The shards of one partition at a parallelism (the whole partition at 1)."""
    if parallelism == 1:
        return (Shard(topic, partition),)
    return tuple(Shard(topic, partition, lo, hi) for lo, hi in ranges(parallelism))


def range_of(shards: Iterable[Shard], point: int) -> Shard | None:
    """The shard among ``shards`` (of one partition) whose range holds ``point``."""
    for s in shards:
        if s.lo <= point < s.hi:
            return s
    return None


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a newly assigned range begins (``start``) and the records it must skip on the way:
    ``skip`` holds ``(lo, hi, offset)`` pieces of its range whose records below ``offset`` are done
    already (rule 4). Empty ``skip``: nothing to skip, the common case."""

    start: int
    skip: tuple[tuple[int, int, int], ...] = ()

    def skips(self, point: int, offset: int) -> bool:
        """True when the record at ``offset`` with key hash ``point`` was done by a former owner."""
        for lo, hi, done in self.skip:
            if lo <= point < hi:
                return offset < done
        return False

    def passed(self, position: int) -> Resume:
        """The same with the pieces the range's position has passed dropped."""
        left = tuple(p for p in self.skip if p[2] > position)
        return self if len(left) == len(self.skip) else Resume(self.start, left)


def clipped(fragments: Mapping[Shard, int], shard: Shard, default: int) -> list[tuple[int, int, int]]:
    """The pieces of ``shard``'s range, in key order, each with the offset its records are done
    below: the fragments' offsets where they overlap it, ``default`` in the gaps."""
    pieces: list[tuple[int, int, int]] = []
    at = shard.lo
    for f in sorted(fragments, key=lambda f: f.lo):
        lo, hi = max(f.lo, shard.lo), min(f.hi, shard.hi)
        if lo >= hi:
            continue
        if at < lo:
            pieces.append((at, lo, default))
        pieces.append((lo, hi, fragments[f]))
        at = hi
    if at < shard.hi:
        pieces.append((at, shard.hi, default))
    return pieces


def low_watermarks(offsets: Iterable[tuple[Shard, int]]) -> dict[Shard, int]:
    """Each partition's offset as a whole (keyed by its whole-partition shard): the lowest of its
    ranges' offsets, where the partition would have to resume in one piece (rule 4) — what a
    partition's lag, a consumer's view by partition and an export to Kafka (one offset per
    partition) use."""
    out: dict[Shard, int] = {}
    for s, o in offsets:
        whole = Shard(s.topic, s.partition)
        out[whole] = min(o, out.get(whole, o))
    return out


def resume(fragments: Mapping[Shard, int], shard: Shard, default: int) -> Resume:
    """Where ``shard`` begins and what it skips (rule 4), from the committed ``fragments`` of its
    partition (any of them; those not overlapping it are ignored) and the reset policy's ``default``
    offset for a part of it with no fragment."""
    pieces = clipped(fragments, shard, default)
    start = min(o for _, _, o in pieces)
    return Resume(start, tuple(p for p in pieces if p[2] > start))


def commit_fragments(
    existing: Mapping[Shard, CommittedOffset], shard: Shard, committed: CommittedOffset,
) -> tuple[list[Shard], dict[Shard, CommittedOffset]]:
    """A commit of ``shard`` (rule 3): the fragments of its partition to delete and to write.

    ``existing`` are the partition's committed fragments (only those overlapping ``shard`` matter).
    Inside ``shard`` every fragment rises to at least the committed offset (a higher one keeps its
    own value); outside it, the parts of fragments it cut are kept as they were; then neighbours
    with equal values coalesce (rule 5).
    """
    hit = {f: c for f, c in existing.items() if f.lo < shard.hi and shard.lo < f.hi}
    if not hit:
        return [], {shard: committed}
    pieces: list[tuple[int, int, CommittedOffset]] = []
    for f, c in hit.items():  # what of the old fragments lies outside the committed range stays
        if f.lo < shard.lo:
            pieces.append((f.lo, shard.lo, c))
        if shard.hi < f.hi:
            pieces.append((shard.hi, f.hi, c))
    at = shard.lo
    for f in sorted(hit, key=lambda f: f.lo):
        lo, hi = max(f.lo, shard.lo), min(f.hi, shard.hi)
        if at < lo:
            pieces.append((at, lo, committed))
        c = hit[f]
        pieces.append((lo, hi, c if c.offset > committed.offset else committed))
        at = hi
    if at < shard.hi:
        pieces.append((at, shard.hi, committed))
    pieces.sort(key=lambda p: p[0])
    merged: list[tuple[int, int, CommittedOffset]] = []
    for lo, hi, c in pieces:
        if merged and merged[-1][1] == lo and merged[-1][2] == c:
            merged[-1] = (merged[-1][0], hi, c)
        else:
            merged.append((lo, hi, c))
    written = {Shard(shard.topic, shard.partition, lo, hi): c for lo, hi, c in merged}
    deleted = [f for f in hit if f not in written]
    changed = {f: c for f, c in written.items() if hit.get(f) != c}
    return deleted, changed
