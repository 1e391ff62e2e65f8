"""The uniform assignor: balance first, then stickiness (Kafka's default server-side assignor).

Members are first grouped by their *effective* subscription (subscribed topics that exist in the
metadata). Groups of members whose topic sets share no topic are independent sub-problems:

* a sub-problem with one subscription (the common, homogeneous case) gets an exactly balanced
  assignment (max − min ≤ 1) that keeps as much of every member's current shards as the balance
  allows; a member that keeps exactly its current shards gets its ``current`` object back;
* a sub-problem with overlapping, different subscriptions is solved like Kafka's heterogeneous
  builder: keep what is still subscribed, hand each unassigned shard to the least-loaded eligible
  member, then run bounded balancing passes that move shards from the most- to the least-loaded
  eligible members.

Determinism: nothing depends on set iteration order (which follows str hashing and so
PYTHONHASHSEED) or on the insertion order of ``spec.members``. Wherever order decides who gets
what, members are ordered by member id and shards by ``(topic, partition)``.

Speed: the hot loops run per member or per moved shard, never per shard in Python; per-shard work
(building sets, set algebra, slicing the cached shard tuples of `TopicMetadata`) runs in C. A member
dealt a run of consecutive shards gets it as a `ShardRun` (a sorted tuple that is a set to everyone
else), not as a hash table of its own: building 5,000 tables was most of a large group's assignment.
A group that is the assignor's last result plus joiners (the usual rebalance) takes a shorter path
to the same output: one pass over the members, in C, recognises it (`uniform_scan`), and the moves
are computed among the members off quota only.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, compress, filterfalse, islice, repeat
from operator import attrgetter
from typing import NamedTuple, cast

from regroup.protocol.assignors.base import Assignment, GroupSpec, MemberSpec
from regroup.protocol.assignors.uniform_scan import scan_grown
from regroup.protocol.shard import (
    EMPTY,
    Shard,
    ShardRun,
    ShardSet,
    run_end,
    run_ends,
    run_without_end,
    runs_without_ends,
)
from regroup.protocol.topics import TopicMetadata

__all__ = ["SubscriptionClass", "UniformAssignor", "subscription_classes"]

#: Kafka bounds its heterogeneous balancing the same way: each pass roughly halves the imbalance.
MAX_BALANCING_PASSES = 16

#: Certification memory (see `UniformAssignor`), least recently used key dropped first: at most
#: this many (topics, partition counts) keys, this many results per key (the latest, and the one it
#: was computed from, in case the same input is assigned again), and about this many shard slots
#: in all (~50 bytes each; mostly shared with the targets the coordinator holds anyway).
_CERTIFIED_KEYS = 64
_CERTIFIED_PER_KEY = 2
_CERTIFIED_SHARDS = 2_000_000

_topic_of = attrgetter("topic")
_topics_of = attrgetter("topics")
_current_of = attrgetter("current")


class SubscriptionClass(NamedTuple):
    """Members that subscribe to the same existing topics (``topics`` is never empty)."""

    topics: frozenset[str]
    member_ids: list[str]
    members: list[MemberSpec]


def subscription_classes(spec: GroupSpec) -> tuple[list[SubscriptionClass], list[str]]:
    """Group the members of ``spec`` by effective subscription.

    Returns the classes (in no particular order) and the ids of members whose effective
    subscription is empty. Topics missing from the metadata are dropped from subscriptions.

    Cost: members that share one ``topics`` object are grouped in C time, but equal subscriptions
    held in distinct objects cost O(topics) per member to hash and compare, so callers with large
    subscriptions should intern them (pass one frozenset object per distinct subscription).
    """
    ids = list(spec.members)
    specs = list(spec.members.values())
    topic_sets = list(map(_topics_of, specs))
    known = spec.topics.partitions.keys()
    if topic_sets and topic_sets.count(topic_sets[0]) == len(topic_sets):
        # One subscription (the common case): list.count tries identity first, so members that
        # share one topics object are counted in C without hashing.
        first = topic_sets[0]
        eff = first if first <= known else frozenset(t for t in first if t in known)
        if not eff:
            return [], ids
        return [SubscriptionClass(eff, ids, specs)], []
    # Hashing a frozenset is cached on the object and dict lookups try identity first, so a group
    # whose members share one topics object is grouped in C time.
    distinct = set(topic_sets)
    effective: dict[frozenset[str], frozenset[str]] = {}
    for ts in distinct:
        effective[ts] = ts if ts <= known else frozenset(t for t in ts if t in known)

    idle: list[str] = []
    if len(distinct) == 1:
        eff = effective[topic_sets[0]]
        if not eff:
            return [], ids
        return [SubscriptionClass(eff, ids, specs)], idle

    by_eff: dict[frozenset[str], SubscriptionClass] = {}
    for mid, m, ts in zip(ids, specs, topic_sets, strict=True):
        eff = effective[ts]
        if not eff:
            idle.append(mid)
            continue
        cls = by_eff.get(eff)
        if cls is None:
            cls = by_eff[eff] = SubscriptionClass(eff, [], [])
        cls.member_ids.append(mid)
        cls.members.append(m)
    return list(by_eff.values()), idle


def independent_components(classes: Sequence[SubscriptionClass]) -> list[list[SubscriptionClass]]:
    """Partition ``classes`` into groups connected by shared topics (each solvable on its own)."""
    if len(classes) <= 1:
        return [list(classes)]
    topic_sets = [c.topics for c in classes]
    if sum(map(len, topic_sets)) == len(frozenset().union(*topic_sets)):
        return [[c] for c in classes]  # pairwise disjoint: the usual "buckets" layout
    parent = list(range(len(classes)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_class: dict[str, int] = {}
    for ci, ts in enumerate(topic_sets):
        for t in ts:
            other = first_class.setdefault(t, ci)
            if other != ci:
                a, b = find(other), find(ci)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    comps: dict[int, list[SubscriptionClass]] = {}
    for ci, c in enumerate(classes):
        comps.setdefault(find(ci), []).append(c)
    return list(comps.values())


def sorted_topic_names(metadata: TopicMetadata, topics: frozenset[str]) -> list[str]:
    """``sorted(topics)`` for topics that all exist in ``metadata``.

    `TopicMetadata` keeps its partition counts in topic-name order, so when ``topics`` is every
    topic of the metadata that order is copied instead of sorting (1000 topics: ~3 µs, not ~80).
    """
    partitions = metadata.partitions
    if len(topics) == len(partitions):
        return list(partitions)
    return sorted(topics)


def topic_shards(metadata: TopicMetadata, topics: list[str]) -> list[tuple[Shard, ...]]:
    """``[metadata.shards(t) for t in topics]`` (see `TopicMetadata.shards_of_topics`)."""
    return metadata.shards_of_topics(topics)


class _CertKey:
    """What a remembered result covers: the subscribed topics, their shard counts in topic order
    and the topics' key-range cuts (``total``, the sum of the counts, follows from them).

    The cuts are part of it: 2 partitions cut in 2 ranges count 4 shards, as 4 whole partitions do,
    and a result of one must never vouch for sets of the other. A key hashes once: with 1000 topics
    hashing its counts costs microseconds, and the memory looks a key up on every assignment.
    """

    __slots__ = ("_hash", "_value", "total")

    def __init__(self, topics: frozenset[str], counts: tuple[int, ...],
                 cuts: tuple[tuple[str, int], ...]) -> None:
        self._value = (topics, counts, cuts)
        self._hash = hash(self._value)
        self.total = sum(counts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _CertKey) and self._value == other._value)


def _cert_key(metadata: TopicMetadata, topics: frozenset[str], sorted_topics: list[str]) -> _CertKey:
    """The memory's key of a group subscribing to ``topics`` (all in ``metadata``, sorted in
    ``sorted_topics``)."""
    if len(sorted_topics) == len(metadata.partitions):
        counts = tuple(metadata.units.values())  # the same order, see sorted_topic_names
    else:
        counts = tuple(map(metadata.units.__getitem__, sorted_topics))
    return _CertKey(topics, counts, tuple(metadata.parallelism.items()))  # cuts: usually none


class UniformAssignor:
    """Balanced, sticky assignment (see the module docstring for the rules).

    Homogeneous sub-problem, with ``q, extra = divmod(total, members)``:

    1. Each member's *kept* shards are its current shards that still exist and are subscribed,
       minus any shard already kept by a member with a smaller member id (duplicates in ``current``).
    2. ``extra`` members get quota ``q + 1`` and the rest ``q``. The extra slots go first to
       members that hold more than ``q`` (each such slot saves a move), by member id; slots left
       over go to members below ``q`` (they change anyway), then to members at ``q``, by member id.
    3. Members above quota give up their highest ``(topic, partition)`` shards; the pool of
       unassigned plus given-up shards, in order, is dealt out to members below quota by member id.

    So an unchanged input gives the identical output, and when a member joins a balanced group the
    only shards that move are those that balance forces off the other members.

    Certification: checking that the ``current`` sets are valid and disjoint costs time in
    proportion to the whole assignment. The assignor remembers its last few homogeneous results;
    when every non-empty ``current`` is (or equals) the set it produced for that member in one of
    them, under the same topics, partition counts and key-range cuts, the check and the search for
    unassigned shards are skipped, so a rebalance costs in proportion to the members and to what
    moves. The memory never changes an output, only how fast it is computed. It is bounded (see
    ``_CERTIFIED_*``) and, like the rest of the protocol core, not meant for concurrent threads.
    """

    name = "uniform"

    def __init__(self) -> None:
        # key -> recent results {member id: set}; each result's sets are pairwise disjoint and
        # cover the key's shards exactly. Dict order is the LRU order of the keys.
        self._certified: dict[_CertKey, list[dict[str, ShardSet]]] = {}
        self._certified_shards = 0  # sum over remembered results of the shards they cover
        # (metadata, topics, their key) of the last `_key_of`: the objects are held, not their ids.
        self._last_key: tuple[TopicMetadata, frozenset[str], _CertKey | None] | None = None

    def assign(self, spec: GroupSpec) -> Assignment:
        """Compute the target assignment of ``spec`` (an entry for every member)."""
        grown = self._assign_grown(spec)
        if grown is not None:
            return grown
        out: Assignment = {}
        classes, idle = subscription_classes(spec)
        for mid in idle:
            out[mid] = EMPTY
        for component in independent_components(classes):
            if len(component) == 1:
                cls = component[0]
                self._homogeneous(spec.topics, cls.topics, cls.member_ids,
                                  list(map(_current_of, cls.members)), out)
            elif component:
                _heterogeneous(spec.topics, component, out)
        return out

    # -- homogeneous ------------------------------------------------------------------------------

    def _assign_grown(self, spec: GroupSpec) -> Assignment | None:
        """The assignment of a group that is a remembered result plus joiners; None for any other.

        The usual rebalance (members join one by one, everyone else holds what it was given) in
        one pass over the members (`scan_grown`) and the moves balance needs, with the same output
        as the general path (the same rules, the same order of members).
        """
        members = spec.members
        if not self._certified or not members or type(members) is not dict:
            return None  # (nothing remembered: a first assignment)
        topics = next(iter(members.values())).topics
        last = next(reversed(members.values())).topics
        if last is not topics and last != topics:  # several subscriptions: not for this path
            return None
        key = self._key_of(spec.topics, topics)
        if key is None:
            return None
        results = self._certified.get(key)
        if not results:
            return None
        total = key.total
        quota = total // len(members)
        for pos in range(len(results) - 1, -1, -1):
            grown = scan_grown(members, results[pos], topics, EMPTY, quota)
            if grown is not None:
                break
        else:
            return None
        final, off_mids, off_sets, off_sizes, held = grown
        if held != total:  # a result covers its key's shards: only a corrupted memory lands here
            return None
        results.append(results.pop(pos))  # most recently used last

        def at_quota() -> tuple[list[str], list[ShardSet]]:
            level = [(mid, s) for mid, s in final.items() if len(s) == quota]
            return [mid for mid, _ in level], [s for _, s in level]

        # Members absent from the changes keep exactly their current set (the object itself).
        final.update(_rebalance(off_mids, off_sets, [], total, off_sizes, len(members), at_quota))
        self._remember(key, final)
        return dict(final)  # the caller's to keep or change; the memory keeps its own

    def _key_of(self, metadata: TopicMetadata, topics: frozenset[str],
                sorted_topics: list[str] | None = None) -> _CertKey | None:
        """The memory's key for a group subscribing to ``topics``; None if some topic is missing
        (or none is subscribed). The last answer is kept: a coordinator passes the same metadata
        object from one rebalance to the next, and the same subscription (an equal object, which
        costs a comparison instead of the key's sort and hash)."""
        last = self._last_key
        if last is not None and last[0] is metadata and (last[1] is topics or last[1] == topics):
            return last[2]
        if not topics or not topics <= metadata.partitions.keys():
            key = None
        else:
            if sorted_topics is None:
                sorted_topics = sorted_topic_names(metadata, topics)
            key = _cert_key(metadata, topics, sorted_topics)
        self._last_key = (metadata, topics, key)
        return key

    def _homogeneous(self, metadata: TopicMetadata, topics: frozenset[str], mids: list[str],
                     currents: list[ShardSet], out: Assignment) -> None:
        sorted_topics = sorted_topic_names(metadata, topics)
        key = self._key_of(metadata, topics, sorted_topics)  # often the one `_assign_grown` made
        assert key is not None, "a subscription class holds existing topics only"
        total = key.total

        final: dict[str, ShardSet]
        if not any(currents):
            every = len(sorted_topics) == len(metadata.partitions)
            shards = metadata.all_shards if every else chain.from_iterable(
                topic_shards(metadata, sorted_topics))
            final = _deal_fresh(mids, shards, total)
        else:
            sizes = list(map(len, currents))
            found = self._certify(key, mids, currents, total - sum(sizes))
            if found is not None:
                kept, pool = currents, found
            else:
                universe = list(chain.from_iterable(topic_shards(metadata, sorted_topics)))
                kept, pool = _kept_shards(mids, currents, universe, total)
            # Members absent from the changes keep exactly their kept set (often `current` itself).
            final = dict(zip(mids, kept, strict=True))
            final.update(_rebalance(mids, kept, pool, total, sizes if kept is currents else None))
        out.update(final)
        self._remember(key, final)

    def _certify(self, key: _CertKey, mids: list[str], currents: list[ShardSet],
                 unassigned: int) -> list[Shard] | None:
        """The unassigned shards, sorted, if a remembered result vouches for ``currents``.

        It does when every non-empty current set is (or equals) the set that result gave the same
        member: then the current sets are valid and pairwise disjoint, and the shards of that result
        that nobody uses any more are exactly the unassigned ones.
        """
        results = self._certified.get(key)
        if not results:
            return None
        used: list[str] | None = None
        for pos in range(len(results) - 1, -1, -1):
            targets = results[pos]
            # The usual case in one C pass: every member holds what the result gave it, a joiner
            # nothing (list equality tries identity first; a set merely equal to the result's
            # vouches as well as the result's own object).
            if list(map(targets.get, mids, repeat(EMPTY))) != currents:
                if used is None:
                    used = list(compress(mids, currents))
                    held = list(compress(currents, currents))
                # Members holding nothing are free to differ (their shards were freed).
                if list(map(targets.get, used)) != held:
                    continue
            results.append(results.pop(pos))  # most recently used last
            if unassigned == 0:
                return []
            in_use = set(compress(mids, currents))
            freed = [s for mid, s in targets.items() if s and mid not in in_use]
            return sorted(chain.from_iterable(freed))
        return None

    def _remember(self, key: _CertKey, targets: dict[str, ShardSet]) -> None:
        per_result = key.total
        results = self._certified.pop(key, None)
        if results is None:
            results = []
        results.append(targets)
        self._certified_shards += per_result
        if len(results) > _CERTIFIED_PER_KEY:
            self._certified_shards -= per_result * (len(results) - _CERTIFIED_PER_KEY)
            del results[:-_CERTIFIED_PER_KEY]
        self._certified[key] = results
        while len(self._certified) > 1 and (len(self._certified) > _CERTIFIED_KEYS
                                            or self._certified_shards > _CERTIFIED_SHARDS):
            oldest = next(iter(self._certified))
            self._certified_shards -= oldest.total * len(self._certified.pop(oldest))


def _kept_shards(mids: list[str], currents: list[ShardSet], universe: list[Shard],
                 total: int) -> tuple[list[ShardSet], list[Shard]]:
    """Validate ``currents`` against the topics' shards; returns (kept sets, unassigned sorted).

    A shard claimed by several members stays with the smallest member id.
    """
    held = set[Shard]().union(*currents)  # merges reuse the stored hashes: no rehashing
    if len(held) == sum(map(len, currents)):
        # Disjoint. If every held shard is among the topics' shards, keep all of it as is.
        if len(held) == total and held.issuperset(universe):  # the loop stays in C
            return currents, []
        missing = list(filterfalse(held.__contains__, universe))
        if len(held) + len(missing) == total:
            return currents, missing
    valid = frozenset(universe)
    kept = list(currents)
    taken: set[Shard] = set()
    for i in sorted(range(len(mids)), key=mids.__getitem__):
        cur = kept[i]
        if not cur:
            continue
        k = cur if cur <= valid else cur & valid
        if not taken.isdisjoint(k):
            k = k - taken
        taken.update(k)
        kept[i] = k
    if len(taken) == total:
        return kept, []
    return kept, list(filterfalse(taken.__contains__, universe))


def _deal_fresh(mids: list[str], pool: Iterable[Shard], total: int) -> dict[str, ShardSet]:
    """Nobody holds anything: consecutive runs of ``pool`` (``total`` shards) by member id, the
    first ones longer."""
    order = sorted(mids)
    q, extra = divmod(total, len(order))
    # All in C: zip over q (+1) references to one iterator yields consecutive runs as tuples
    # (reused by zip once ShardRun has copied them), without a list of the pool or slices.
    # islice stops before pulling from zip, so the longer runs take exactly their shards.
    # Each run becomes a `ShardRun` (the pool is in shard order): no hash table per member.
    it = iter(pool)
    longer = islice(zip(*[it] * (q + 1), strict=False), extra)
    runs: Iterable[ShardSet] = map(ShardRun, chain(longer, zip(*[it] * q, strict=False) if q else ()))
    final = dict(zip(order, runs, strict=False))  # shorter than `order` when q == 0
    if len(final) < len(order):
        final.update(dict.fromkeys(order[len(final):], EMPTY))
    return final


def _where(sizes: list[int], value: int, count: int) -> list[int]:
    """Indices of ``value`` in ``sizes`` (``count`` of them), scanning in C when they are few."""
    if count * 8 > len(sizes):
        return [i for i, s in enumerate(sizes) if s == value]
    found: list[int] = []
    i = -1
    for _ in range(count):
        i = sizes.index(value, i + 1)  # a C scan (small ints even compare by identity)
        found.append(i)
    return found


def _rebalance(mids: list[str], kept: list[ShardSet], pool: list[Shard], total: int,
               sizes: list[int] | None = None, members: int | None = None,
               at_quota: Callable[[], tuple[list[str], list[ShardSet]]] | None = None,
               ) -> dict[str, ShardSet]:
    """Quotas, revocations and hand-outs; returns only the members whose set changes.

    ``sizes``: the lengths of ``kept``, when the caller has them. A caller may pass only the
    members whose size is not the quota (``total // members``; ``members`` is then the whole
    group's count) with ``at_quota`` giving the others' ids and sets, asked only when spare slots
    must go to members at the quota.
    """
    n = len(mids) if members is None else members
    q, extra = divmod(total, n)
    if sizes is None:
        sizes = list(map(len, kept))
    over: list[int] = []
    under: list[int] = []
    values = set(sizes) if members is None else None  # None: only members off quota were passed
    if values is not None and len(values) <= 8:
        # Few distinct sizes (the usual case: q, q + 1 and a joiner's 0): counting and scanning in
        # C beats a Python pass over every member.
        for v in sorted(values):
            if v != q:
                (over if v > q else under).extend(_where(sizes, v, sizes.count(v)))
    else:  # many sizes, or only the members off quota were passed (usually a few)
        over = [i for i, s in enumerate(sizes) if s > q]
        under = [i for i, s in enumerate(sizes) if s < q]

    # The extra slots go to members above q first: each such slot saves one move.
    if len(over) > extra:
        if extra:  # without extra slots every member above q keeps q, whatever the order
            over.sort(key=mids.__getitem__)
        spare = 0
    else:
        spare = extra - len(over)
    changed: dict[str, ShardSet] = {}
    revoked: list[Shard] = []
    if q and over and list(map(sizes.__getitem__, over)).count(q + 1) == len(over):
        # The usual case (a member joined a balanced group): everyone above q holds q + 1, the
        # first `extra` of them keep it and the others give up their largest shard. Runs, which
        # know their largest shard, are done in one batch in C.
        giving = over[extra:]
        held = list(map(kept.__getitem__, giving))
        if list(map(type, held)).count(ShardRun) == len(held):
            runs = cast("list[ShardRun]", held)
            revoked = run_ends(runs)
            changed = dict(zip(map(mids.__getitem__, giving), runs_without_ends(runs), strict=True))
            over = []  # done
    for rank, i in enumerate(over):
        quota = q + 1 if rank < extra else q
        cur = kept[i]
        give = sizes[i] - quota
        if give <= 0:
            continue
        if give == 1:
            if type(cur) is ShardRun:  # a run knows its largest shard and stays a run without it
                top = run_end(cur)
                changed[mids[i]] = run_without_end(cur)
            else:
                top = max(cur)
                changed[mids[i]] = cur.difference((top,))
            revoked.append(top)
        else:
            ordered = sorted(cur)
            revoked.extend(ordered[quota:])
            changed[mids[i]] = ShardRun(ordered[:quota]) if quota else EMPTY
    if revoked:
        revoked.sort()
        if pool:
            pool = pool + revoked
            pool.sort()  # two sorted runs: a linear merge
        else:
            pool = revoked
    if not pool:
        return changed

    # Receivers by member id: everyone below q. Spare extra slots go to them first (they change
    # anyway), then to members at exactly q.
    under.sort(key=mids.__getitem__)
    receivers = [(i, q - sizes[i] + (rank < spare)) for rank, i in enumerate(under)]
    if spare > len(under):
        if at_quota is None:
            level = _where(sizes, q, sizes.count(q))
        else:  # the members at quota were left out of the lists: append them
            level_mids, level_sets = at_quota()
            level = list(range(len(mids), len(mids) + len(level_mids)))
            mids, kept = mids + level_mids, kept + level_sets
        level.sort(key=mids.__getitem__)
        receivers.extend((i, 1) for i in level[:spare - len(under)])
    pos = 0
    for i, need in receivers:
        end = pos + need
        cur = kept[i]
        # The pool is sorted and distinct, so a receiver that held nothing gets a run of it.
        changed[mids[i]] = cur.union(pool[pos:end]) if cur else ShardRun(pool[pos:end])
        pos = end
    assert pos == len(pool), "quotas must absorb the pool exactly"
    return changed


# -- heterogeneous --------------------------------------------------------------------------------


class _Group(NamedTuple):
    """Topics with the same set of subscriber classes: interchangeable for balancing."""

    topics: list[str]
    size: int
    subscribers: list[int]  # member indices, ascending


def _heterogeneous(metadata: TopicMetadata, component: list[SubscriptionClass],
                   out: Assignment) -> None:
    """Overlapping subscriptions: sticky keep, least-loaded fill, bounded balancing passes."""
    component = sorted(component, key=lambda c: sorted(c.topics))
    entries = sorted(
        ((mid, ci, m.current) for ci, c in enumerate(component)
         for mid, m in zip(c.member_ids, c.members, strict=True)),
        key=lambda e: e[0],
    )
    mids = [e[0] for e in entries]
    member_class = [e[1] for e in entries]
    n = len(mids)

    # Group topics by which classes subscribe to them.
    classes_of_topic: dict[str, list[int]] = {}
    for ci, c in enumerate(component):
        for t in c.topics:
            classes_of_topic.setdefault(t, []).append(ci)
    topics_by_key: dict[tuple[int, ...], list[str]] = {}
    for t in sorted(classes_of_topic):
        topics_by_key.setdefault(tuple(classes_of_topic[t]), []).append(t)
    groups: list[_Group] = []
    group_of_topic: dict[str, int] = {}
    for key, ts in topics_by_key.items():
        key_set = set(key)
        subs = [i for i in range(n) if member_class[i] in key_set]
        for t in ts:
            group_of_topic[t] = len(groups)
        groups.append(_Group(ts, sum(metadata.units[t] for t in ts), subs))
    # Kafka's topic order: most shards per subscriber first, then fewer subscribers, then name.
    order = sorted(range(len(groups)), key=lambda g: (-groups[g].size / len(groups[g].subscribers),
                                                      len(groups[g].subscribers), groups[g].topics[0]))

    # 1. Keep what is still valid and subscribed; the smallest member id wins a duplicate.
    valid_by_class: dict[int, frozenset[Shard]] = {}
    taken: set[Shard] = set()
    held: list[dict[int, list[Shard]]] = [{} for _ in range(n)]
    load = [0] * n
    kept_whole = [False] * n  # True when the member's held shards are exactly its current set
    for i, (_, ci, cur) in enumerate(entries):
        if not cur:
            kept_whole[i] = True
            continue
        valid = valid_by_class.get(ci)
        if valid is None:
            valid = valid_by_class[ci] = frozenset(
                chain.from_iterable(map(metadata.shards, component[ci].topics)))
        k = cur if cur <= valid else cur & valid
        if not taken.isdisjoint(k):
            k = k - taken
        taken.update(k)
        kept_whole[i] = k is cur
        mine = held[i]
        ordered = sorted(k)
        start = 0
        while start < len(ordered):  # one step per topic run, found by bisection in C
            topic = ordered[start].topic
            end = bisect_right(ordered, topic, lo=start, key=_topic_of)
            lst = mine.get(group_of_topic[topic])
            if lst is None:
                mine[group_of_topic[topic]] = ordered[start:end]
            else:
                lst.extend(ordered[start:end])
            start = end
        load[i] = len(k)
    touched = [not w for w in kept_whole]

    # 2. Deal each group's unassigned shards to its least-loaded subscribers (water filling).
    for g in order:
        grp = groups[g]
        shards = chain.from_iterable(map(metadata.shards, grp.topics))
        pool = list(filterfalse(taken.__contains__, shards)) if taken else list(shards)
        if pool:
            _water_fill(grp.subscribers, load, pool, g, held, touched)

    # 3. Bounded balancing passes over the groups until a whole pass moves nothing.
    for _ in range(MAX_BALANCING_PASSES):
        moved = 0
        for g in order:
            if len(groups[g].subscribers) > 1:
                moved += _balance_group(groups[g].subscribers, load, g, held, touched)
        if not moved:
            break

    for i, mid in enumerate(mids):
        if not touched[i]:
            out[mid] = entries[i][2]
        else:
            out[mid] = frozenset(chain.from_iterable(held[i].values())) if load[i] else EMPTY


def _water_fill(subscribers: list[int], load: list[int], pool: list[Shard], g: int,
                held: list[dict[int, list[Shard]]], touched: list[bool]) -> None:
    """Give ``pool`` to the least-loaded ``subscribers``, raising the lowest level first."""
    ranked = sorted(subscribers, key=load.__getitem__)  # stable: ties stay by member index
    k = len(ranked)
    remaining = len(pool)
    level = load[ranked[0]]
    width = 0  # ranked[:width] all sit at `level` once filled
    while True:
        while width < k and load[ranked[width]] <= level:
            width += 1
        if width < k and width * (load[ranked[width]] - level) <= remaining:
            remaining -= width * (load[ranked[width]] - level)
            level = load[ranked[width]]
            continue
        step, remaining = divmod(remaining, width)
        level += step
        break
    pos = 0
    for rank, i in enumerate(ranked[:width]):
        need = level - load[i] + (rank < remaining)
        if need <= 0:
            continue
        _give(held, i, g, pool[pos:pos + need])
        load[i] += need
        touched[i] = True
        pos += need


def _give(held: list[dict[int, list[Shard]]], i: int, g: int, shards: Iterable[Shard]) -> None:
    lst = held[i].get(g)
    if lst is None:
        held[i][g] = list(shards)
    else:
        lst.extend(shards)


def _balance_group(subscribers: list[int], load: list[int], g: int,
                   held: list[dict[int, list[Shard]]], touched: list[bool]) -> int:
    """Move shards of group ``g`` from its most- to its least-loaded subscribers; returns moves."""
    donors = [(-load[i], i) for i in subscribers if held[i].get(g)]
    if not donors:
        return 0
    takers = [(load[i], i) for i in subscribers]
    heapq.heapify(donors)
    heapq.heapify(takers)
    moves = 0
    while donors and takers:
        neg, d = donors[0]
        if -neg != load[d] or not held[d].get(g):
            heapq.heappop(donors)  # stale entry
            continue
        low, r = takers[0]
        if low != load[r]:
            heapq.heappop(takers)
            continue
        if load[d] - low <= 1:
            break
        shard = held[d][g].pop()
        _give(held, r, g, (shard,))
        load[d] -= 1
        load[r] += 1
        touched[d] = touched[r] = True
        moves += 1
        heapq.heapreplace(donors, (-load[d], d))
        heapq.heapreplace(takers, (load[r], r))
        if held[r][g]:
            heapq.heappush(donors, (-load[r], r))
        heapq.heappush(takers, (load[d], d))
    return moves
