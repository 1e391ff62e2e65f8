"""The unit of assignment.

A `Shard` is what the coordinator hands to a member: a whole partition of a topic, or — when the
group cuts the topic's partitions into key ranges (`regroup.protocol.keyrange`, a ``parallelism``
per topic) — one key range of a partition: the records whose key hash falls in ``[lo, hi)`` of the
fixed key space ``[0, KEY_SPACE)``. A whole partition is the range ``[0, KEY_SPACE)``, which is
what the defaults give, so ``Shard(topic, partition)`` means the same as it always did.

It is a small immutable value (a named tuple, so hashing and comparison run in C, which the
assignors rely on for speed). Every part of the core speaks in shards and never in loose
``(topic, partition)`` tuples. Two shards of one partition may overlap (a range and the whole
partition, or ranges of two parallelisms while a group changes its parallelism): the rules that
must see that use `overlaps`, never equality.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, cast

#: The key space of every partition: a record belongs to the range holding its key hash.
KEY_SPACE = 1 << 32


class Shard(NamedTuple):
    """One assignable piece of a topic: ``topic``, ``partition`` (0-based) and the key range
    ``[lo, hi)`` of the partition's key space (all of it by default: the whole partition)."""

    topic: str
    partition: int
    lo: int = 0
    hi: int = KEY_SPACE

    @property
    def whole(self) -> bool:
        """True for a whole partition (the range covering the entire key space)."""
        return self.lo == 0 and self.hi == KEY_SPACE

    @property
    def partition_key(self) -> tuple[str, int]:
        """``(topic, partition)``: what shards of one partition share."""
        return (self.topic, self.partition)

    def __str__(self) -> str:
        # ``topic:partition``, the form the commands take too: a topic of the log never holds a
        # colon (Kafka's rules), and the partition is the number after the last one whatever the
        # name — unlike ``topic-3``, which ``my-topic-3`` or ``orders--1`` (partition -1) make
        # ambiguous to a reader.
        if self.lo == 0 and self.hi == KEY_SPACE:
            return f"{self.topic}:{self.partition}"
        return f"{self.topic}:{self.partition}[{self.lo:08x},{self.hi:08x})"


def overlaps(a: Shard, b: Shard) -> bool:
    """True when ``a`` and ``b`` share records: the same partition and intersecting key ranges."""
    return a.partition == b.partition and a.topic == b.topic and a.lo < b.hi and b.lo < a.hi


def within(part: Shard, shard: Shard) -> bool:
    """True when every key of ``part`` is ``shard``'s, in the same partition."""
    return part.partition == shard.partition and part.topic == shard.topic and shard.lo <= part.lo \
        and part.hi <= shard.hi


def overlap_any(a: frozenset[Shard], b: frozenset[Shard]) -> bool:
    """True when some shard of ``a`` overlaps some shard of ``b`` (set intersection when every shard
    is a whole partition, so the common case costs what ``isdisjoint`` costs)."""
    if not a.isdisjoint(b):
        return True
    ranged = [s for s in a if not s.whole] + [s for s in b if not s.whole]
    if not ranged:
        return False
    by_partition: dict[tuple[str, int], list[Shard]] = {}
    for s in b:
        by_partition.setdefault((s.topic, s.partition), []).append(s)
    return any(overlaps(s, o) for s in a for o in by_partition.get((s.topic, s.partition), ()))


#: A member's set of shards. Frozen so that unchanged assignments can be shared, not copied. The
#: assignors may hand out a `ShardRun` instead: the same set, kept as its sorted run of shards.
ShardSet = frozenset[Shard]

EMPTY: ShardSet = frozenset()

if TYPE_CHECKING:
    # To the type checker a run *is* an immutable set of shards, which is the contract it keeps.
    _RunBase = frozenset[Shard]
else:
    _RunBase = tuple


class ShardRun(_RunBase):
    """An immutable set of shards kept as the sorted run of them it was dealt as.

    Why it exists: an assignor that deals every member a run of consecutive shards (the uniform
    assignor's fresh deal; a member's share after it gives up its last shard) would otherwise build
    one hash table per member, which is most of the cost of assigning a large group (5,000 members:
    ~3.5 ms of `frozenset`s against ~0.4 ms of runs). A run is a tuple made in C from the run itself.

    It behaves as a ``frozenset[Shard]`` everywhere the core uses one: ``len``, iteration (in shard
    order), membership, equality and hash (equal to the equal ``frozenset``), ``<=``/``<``/``>=``/
    ``>``, ``& | - ^`` on either side and the named methods; set algebra answers with a
    ``frozenset`` (or the run itself where that is the answer: ``run - EMPTY``). Of a tuple it
    keeps only positions (``run[i]``, the i-th shard in order, which membership bisects); ``+``,
    ``*`` and ``count`` are refused, as a set refuses them.

    Made as a tuple is, ``ShardRun(shards)`` (in C, no check: the quickest way to make 5,000), with
    this invariant the maker's duty: the shards are distinct and sorted, so two runs are equal
    exactly when their tuples are, and the set is never larger than the tuple.
    """

    __slots__ = ()

    def _set(self) -> frozenset[Shard]:
        return frozenset[Shard](_iter_run(self))

    def __contains__(self, shard: object) -> bool:
        # A linear scan in C for the short runs assignors usually deal, a bisection of the sorted
        # run otherwise: never a table built per question (a heartbeat asks once per shard).
        if len(self) <= 16:
            return _tuple_contains(self, shard)
        if type(shard) is not Shard:
            if not isinstance(shard, tuple) or len(shard) != 4:
                return False
        try:
            at = bisect_left(cast("tuple[Shard, ...]", self), shard)
        except TypeError:  # not comparable with shards: not one of them
            return False
        return at < len(self) and _tuple_getitem(self, at) == shard

    def __eq__(self, other: object) -> bool:
        if type(other) is ShardRun:
            return _tuple_eq(self, other)
        if isinstance(other, (frozenset, set)):
            return len(self) == len(other) and self._set() == other
        if isinstance(other, tuple):
            return False  # as a frozenset is not equal to a tuple (tuple's own == would say it is)
        if isinstance(other, AbstractSet):  # a request's `ListedShards`, a dict's keys, ...
            return len(self) == len(other) and all(map(other.__contains__, _iter_run(self)))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self._set())

    def __le__(self, other: Any) -> bool:
        return self._set() <= _as_set(other)

    def __lt__(self, other: Any) -> bool:
        return self._set() < _as_set(other)

    def __ge__(self, other: Any) -> bool:
        return self._set() >= _as_set(other)

    def __gt__(self, other: Any) -> bool:
        return self._set() > _as_set(other)

    # With an empty other side (a member that held nothing: reconciliation's first step) the answer
    # is known without a table: nothing, or the run itself (immutable, so it may stand for itself).
    # A mutable set on the left gets a set back, as it would from a frozenset; but ``s |= run``
    # rebinds ``s`` to that new set instead of changing it in place (a run cannot reach into it).
    def __and__(self, other: Any) -> frozenset[Shard]:
        o = _as_set(other)
        return self._set() & o if o else EMPTY

    def __rand__(self, other: Any) -> frozenset[Shard] | set[Shard]:
        o = _as_set(other)
        if isinstance(o, set):
            return o & self._set()
        return self._set() & o if o else EMPTY

    def __or__(self, other: Any) -> frozenset[Shard]:
        o = _as_set(other)
        return self._set() | o if o else self

    def __ror__(self, other: Any) -> frozenset[Shard] | set[Shard]:
        o = _as_set(other)
        if isinstance(o, set):
            return o | self._set()
        return self._set() | o if o else self

    def __sub__(self, other: Any) -> frozenset[Shard]:
        o = _as_set(other)
        return self._set() - o if o else self

    def __rsub__(self, other: Any) -> frozenset[Shard] | set[Shard]:
        o = _as_set(other)
        if isinstance(o, set):
            return o - self._set()
        return o - self._set() if o else EMPTY

    def __xor__(self, other: Any) -> frozenset[Shard]:
        return self._set() ^ _as_set(other)

    def __rxor__(self, other: Any) -> frozenset[Shard] | set[Shard]:
        o = _as_set(other)
        if isinstance(o, set):
            return o ^ self._set()
        return self._set() ^ o

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        if isinstance(other, (frozenset, set)):
            return other.isdisjoint(self)  # walks the run against the other's table: none built
        return self._set().isdisjoint(other)

    def issubset(self, other: Iterable[Any]) -> bool:
        return self._set().issubset(other)

    def issuperset(self, other: Iterable[Any]) -> bool:
        return self._set().issuperset(other)

    def union(self, *others: Iterable[Any]) -> frozenset[Shard]:
        return self._set().union(*others)

    def intersection(self, *others: Iterable[Any]) -> frozenset[Shard]:
        return self._set().intersection(*others)

    def difference(self, *others: Iterable[Any]) -> frozenset[Shard]:
        return self._set().difference(*others)

    def symmetric_difference(self, other: Iterable[Any]) -> frozenset[Shard]:
        return self._set().symmetric_difference(other)

    def copy(self) -> frozenset[Shard]:
        return self._set()

    def __repr__(self) -> str:
        return f"ShardRun({format_shards(self)})"

    # Not a sequence to combine: a set has no concatenation, no repetition, no counts.
    def __add__(self, other: object) -> Any:
        raise TypeError("a ShardRun is a set of shards: combine sets with |")

    def __mul__(self, other: object) -> Any:
        raise TypeError("a ShardRun is a set of shards: it cannot be repeated")

    __rmul__ = __mul__

    def __radd__(self, other: object) -> Any:
        raise TypeError("a ShardRun is a set of shards: combine sets with |")

    def count(self, *args: object) -> int:
        raise TypeError("a ShardRun is a set of shards: use `in`")


# Every other set type (`collections.abc.Set`'s mixins, a request's `ListedShards`) takes a run
# for the set it is.
AbstractSet.register(ShardRun)

# The tuple's own C implementations, reached past the set-shaped overrides above.
_tuple_contains = cast("Callable[[object, object], bool]", tuple.__contains__)
_tuple_eq = cast("Callable[[object, object], bool]", tuple.__eq__)
_tuple_getitem = cast(Any, tuple.__getitem__)
_iter_run = cast(Any, tuple.__iter__)


def _as_set(other: object) -> frozenset[Any] | set[Any]:
    # The other side of a set operation, as the set it stands for (a run, or another set type such
    # as a request's `ListedShards`, is turned into its frozenset).
    if type(other) is ShardRun:
        return other._set()
    if isinstance(other, (frozenset, set)):
        return other
    if isinstance(other, AbstractSet):
        return frozenset(other)
    raise TypeError(f"a set of shards cannot be combined with {type(other).__name__}; "
                    "use the named methods (union, difference, ...) for other iterables")


# A run's positions are the tuple's own (`ShardRun` keeps tuple indexing): read in C. (To the type
# checker a run is a frozenset, which has no positions.)
_last = cast("Callable[[ShardRun], Shard]", itemgetter(-1))
_all_but_last = cast("Callable[[ShardRun], tuple[Shard, ...]]", itemgetter(slice(0, -1)))


def run_end(run: ShardRun) -> Shard:
    """The last (largest) shard of a non-empty run, without a pass over it."""
    return _last(run)


def run_without_end(run: ShardRun) -> ShardSet:
    """The run without its last shard (still a run; ``EMPTY`` when that was the only one)."""
    rest = _all_but_last(run)
    return ShardRun(rest) if rest else EMPTY


def run_ends(runs: list[ShardRun]) -> list[Shard]:
    """`run_end` of each of ``runs`` (none empty), in one pass in C."""
    return list(map(_last, runs))


def runs_without_ends(runs: list[ShardRun]) -> Iterator[ShardSet]:
    """`run_without_end` of each of ``runs`` (each at least two shards long: each stays a run)."""
    return map(ShardRun, map(_all_but_last, runs))


def shards_of(topic: str, partitions: int) -> tuple[Shard, ...]:
    """All shards of a topic with ``partitions`` partitions, in partition order."""
    return tuple(Shard(topic, p) for p in range(partitions))


#: One entry of a topic's list in `group_by_topic`: a whole partition's number, or a key range of a
#: partition as ``[partition, lo, hi]``.
PartitionEntry = int | list[int]


def group_by_topic(shards: Iterable[Shard]) -> dict[str, list[PartitionEntry]]:
    """``{topic: sorted entries}``: the compact form used in records. A whole partition is its number
    (so a group without key ranges encodes as it always did), a key range ``[partition, lo, hi]``."""
    out: dict[str, list[Shard]] = {}
    for s in shards:
        out.setdefault(s.topic, []).append(s)
    return {t: [s.partition if s.whole else [s.partition, s.lo, s.hi] for s in sorted(ss)]
            for t, ss in out.items()}


def from_topic_map(by_topic: Mapping[str, Iterable[PartitionEntry]]) -> ShardSet:
    """Inverse of `group_by_topic`."""
    return frozenset(Shard(t, e) if isinstance(e, int) else Shard(t, e[0], e[1], e[2])
                     for t, entries in by_topic.items() for e in entries)


def format_shards(shards: Iterable[Shard]) -> str:
    """Human-readable ``topic[0,1,2] other[4]`` form for messages and the CLI (a key range of a
    partition as ``4:[00000000,80000000)``)."""
    grouped: dict[str, list[Shard]] = {}
    for s in shards:
        grouped.setdefault(s.topic, []).append(s)
    if not grouped:
        return "(none)"

    def entry(s: Shard) -> str:
        return str(s.partition) if s.whole else f"{s.partition}:[{s.lo:08x},{s.hi:08x})"

    return " ".join(f"{t}[{','.join(map(entry, sorted(ss)))}]" for t, ss in sorted(grouped.items()))
