"""How a consumer reads the key ranges it owns: each partition once, keeping only its keys.

A member that owns key ranges of a partition (`regroup.protocol.keyrange`) does not read the partition
once per range: it reads it once, from the lowest position among its ranges of it, and routes each
record by its key hash to the range that holds it — dropping records of other members' ranges,
records below a range's own position, and records a former owner already did (the range's
`Resume.skips`). Records of one partition come out in offset order, so every key keeps its order.

A range's position must also move past the records that are not its own, or its commits would never
advance and its partition's low watermark would stay behind. So each read ends with a `Scanned`
marker in the consumer's buffer: when the consumer hands it out — after every record read before it,
buffered in order — the ranges read together move to the end of what was read.

A whole partition whose progress is kept in fragments (the group went back to whole partitions)
reads the same way, as a range covering the whole key space.

A partition split on the producer side (`regroup.log.embedded.layout`) is read per open piece: an
owned shard whose keys lie in several pieces is read as several *lanes*, one per piece (`lanes_of`),
each beginning where the driver's `Resume` says for its own keys (`microbatch.clip`) and with its own
position, committed on its own (the coordinator accepts commits of parts of an owned shard). A lane
never spans two open pieces: a split while a shard is owned cuts its lanes at the new piece
boundaries, each part starting where the lane was — or further, where its own keys resume
(`microbatch.clip` of what the lane still skips), as at assignment: a part whose keys a former owner
all did beyond the lane's position would otherwise sit below the owned shard's commit floor once its
sibling lanes' commits raised the rest (regroup/protocol/offsets.py, rule 2), and every commit of the
shard would be refused until it read past them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from regroup.log.base import ConsumedRecord
from regroup.protocol.keyrange import Resume, key_hash, range_of
from regroup.protocol.shard import Shard


@dataclass(frozen=True, slots=True)
class Ranged:
    """A buffered record of a key range, with the range it belongs to."""

    shard: Shard
    record: ConsumedRecord


@dataclass(frozen=True, slots=True)
class Scanned:
    """The ranges in ``shards`` were read together up to ``end`` (exclusive)."""

    shards: frozenset[Shard]
    end: int


def piece_of(shard: Shard, pieces: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """The piece holding ``shard``'s first key (all of them, for a lane)."""
    for lo, hi in pieces:
        if lo <= shard.lo < hi:
            return lo, hi
    raise ValueError(f"no piece holds {shard}")  # pieces tile the key space


class KeyRanges:
    """The key ranges a consumer owns, by partition, and what each still skips."""

    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], list[Shard]] = {}
        self._skips: dict[Shard, Resume] = {}

    def add(self, shard: Shard, resume: Resume) -> None:
        """A newly assigned shard that reads through this class (see `reads`)."""
        self._by_partition.setdefault(shard.partition_key, []).append(shard)
        if resume.skip:
            self._skips[shard] = resume

    @staticmethod
    def reads(shard: Shard, resume: Resume) -> bool:
        """Whether ``shard`` is read here: a key range, or a whole partition with records to skip."""
        return not shard.whole or bool(resume.skip)

    def __contains__(self, shard: Shard) -> bool:
        return shard in self._by_partition.get(shard.partition_key, ())

    def remove(self, shards: Iterable[Shard]) -> None:
        for s in shards:
            owned = self._by_partition.get(s.partition_key)
            if owned is not None and s in owned:
                owned.remove(s)
                if not owned:
                    del self._by_partition[s.partition_key]
            self._skips.pop(s, None)

    def of_partition(self, shard: Shard) -> list[Shard]:
        """The ranges owned of ``shard``'s partition."""
        return self._by_partition.get(shard.partition_key, [])

    def route(self, owned: Collection[Shard], records: Iterable[ConsumedRecord],
              positions: Mapping[Shard, int]) -> list[Ranged]:
        """The records of one partition's read that belong to ``owned`` ranges and are still to do."""
        out: list[Ranged] = []
        for rec in records:
            point = key_hash(rec.key, rec.offset)
            s = range_of(owned, point)
            if s is None or rec.offset < positions[s]:
                continue  # another member's key, or below this range's position
            skip = self._skips.get(s)
            if skip is None or not skip.skips(point, rec.offset):
                out.append(Ranged(s, rec))
        return out

    def skips_of(self, shard: Shard) -> Resume | None:
        """What ``shard`` still skips (None: nothing)."""
        return self._skips.get(shard)

    def passed(self, shard: Shard, position: int) -> None:
        """``shard`` reached ``position``: forget the skip pieces it passed."""
        skip = self._skips.get(shard)
        if skip is not None:
            left = skip.passed(position)
            if not left.skip:
                del self._skips[shard]
            elif left is not skip:
                self._skips[shard] = left
