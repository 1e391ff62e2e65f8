"""Checks on a request's shape, before any state is looked at.

Each failure is INVALID_REQUEST with a message naming the field and the rule, so whoever wrote the
client can fix it without reading coordinator logs.

Lists of shards arrive grouped by topic and become sets (`ShardSet`), and a set cannot show what it
hid: a shard listed twice, or how long the list really was. So a shell decodes a request's shard list
with `shards_from_listing` (a streams shell its task lists with
`regroup.protocol.streams.fencing.tasks_from_listing`): the raw length is checked against the limit
before a single shard is built, and a shard listed twice is INVALID_REQUEST, naming it.

A listing's whole partitions stay partition numbers by topic (`ListedShards`, a set of shards that
builds a `Shard` only when iterated): the largest legal owned list (``max_owned_shards``, a million
partitions) took seconds to turn into a million `Shard` values, to check one by one, and to free —
most of it in single steps of C that no other thread can interrupt. As numbers it is checked by topic
(`check_shards`: names once per topic, the lowest partition) and read by membership, which is all a
heartbeat's step asks of it (`reconcile`: is any of a few shards still owned? is it the assignment?).
The duplicate check reads the numbers in slices (`LISTING_SLICE`), so a thread doing it yields.

Large requests (`CoordinatorConfig.large_request_bytes` encoded) wait for a lane of their own, and
`large_request_refusal` says when one more may not wait: a client (one connection) has
``max_large_requests_per_client`` waiting already, or ``max_large_requests_waiting`` wait in all. The
refusal names the limit; the request is legal, the client may send it again once its earlier one is
answered.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sized
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar, cast

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    HeartbeatRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetResetRequest,
)
from regroup.protocol.shard import KEY_SPACE, Shard, ShardSet

T = TypeVar("T")
N = TypeVar("N", bound=Hashable)

#: The largest offset a commit or reset may carry, 2^53 - 1: far beyond any real log (a partition
#: taking 10 million records a second reaches it in 28 years), the largest integer a JSON reader such
#: as the dashboard's holds exactly, and small enough that no commit can pin an offset at the int64
#: limit, where every later commit would be behind it.
MAX_OFFSET = 2**53 - 1


#: Partition numbers read into a set at once by `unique_from_listing` (a step of C no other thread
#: interrupts: about a millisecond).
LISTING_SLICE = 16_384


class ListedShards(AbstractSet[Shard]):
    """Whole partitions as a request listed them, kept as partition numbers by topic: a set of
    `Shard` values that answers membership, length and comparisons without building one (`reconcile`'s
    questions); iterating it, or an operation that returns a new set, builds them. Equal to (and
    hashed as) the frozenset of the same shards."""

    __slots__ = ("_by_topic", "_len", "_lowest")

    def __init__(self, by_topic: Mapping[str, AbstractSet[int]]) -> None:
        self._by_topic = {topic: numbers for topic, numbers in by_topic.items() if numbers}
        self._len = sum(len(numbers) for numbers in self._by_topic.values())
        self._lowest: tuple[str, int] | None = None

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._by_topic)

    def lowest(self) -> tuple[str, int] | None:
        """The topic and number of the lowest partition listed (None: empty); read once."""
        if self._lowest is None and self._len:
            self._lowest = min(((t, min(ns)) for t, ns in self._by_topic.items()), key=lambda x: x[1])
        return self._lowest

    def __contains__(self, shard: object) -> bool:
        if not isinstance(shard, tuple) or len(shard) != 4:
            return False
        topic, partition, lo, hi = shard
        if lo != 0 or hi != KEY_SPACE:
            return False
        try:
            return partition in self._by_topic.get(topic, ())
        except TypeError:  # an unhashable topic or partition: not one of ours
            return False

    def __iter__(self) -> Iterator[Shard]:
        for topic, numbers in self._by_topic.items():
            for number in numbers:
                yield Shard(topic, number)

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AbstractSet):
            return NotImplemented
        return len(other) == self._len and all(s in self for s in other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(frozenset(self))

    def isdisjoint(self, other: Iterable[object]) -> bool:
        if isinstance(other, AbstractSet) and len(other) > self._len:
            return not any(s in other for s in self)
        return not any(s in self for s in other)

    # frozenset's named methods, so that it stands wherever a `ShardSet` does.
    def issubset(self, other: Iterable[Shard]) -> bool:
        return self <= (other if isinstance(other, AbstractSet) else frozenset(other))

    def issuperset(self, other: Iterable[Shard]) -> bool:
        return all(s in self for s in other)

    def union(self, *others: Iterable[Shard]) -> frozenset[Shard]:
        return frozenset(self).union(*others)

    def intersection(self, *others: Iterable[Shard]) -> frozenset[Shard]:
        return frozenset(self).intersection(*others)

    def difference(self, *others: Iterable[Shard]) -> frozenset[Shard]:
        return frozenset(self).difference(*others)

    def symmetric_difference(self, other: Iterable[Shard]) -> frozenset[Shard]:
        return frozenset(self).symmetric_difference(other)

    def copy(self) -> ListedShards:
        return self

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> AbstractSet[Any]:
        return frozenset(it)  # what `&`, `|`, `-` return: a plain set of the shards

    def __repr__(self) -> str:
        return f"ListedShards({self._len} partitions of {len(self._by_topic)} topics)"


def invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message)


def check_id(field: str, value: object, cfg: CoordinatorConfig, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise invalid(f"{field} must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise invalid(f"{field} must not be empty")
    if len(value) > cfg.max_id_length:
        raise invalid(f"{field} is {len(value)} characters long; the limit is {cfg.max_id_length}")


def check_shards(field: str, shards: Iterable[object], cfg: CoordinatorConfig, limit: int) -> None:
    """Each shard well-formed, and at most ``limit`` of them — counted before anything is looked at."""
    if isinstance(shards, Sized) and len(shards) > limit:
        raise invalid(f"{field} lists {len(shards)} shards; the limit is {limit}")
    if isinstance(shards, ListedShards):
        _check_listed(field, shards, cfg)
        return
    for n, s in enumerate(shards, 1):
        if n > limit:
            raise invalid(f"{field} lists more than {limit} shards, the limit")
        if not isinstance(s, Shard) or not isinstance(s.topic, str) or not isinstance(s.partition, int):
            raise invalid(f"{field} must hold Shard(topic, partition) values, got {s!r}")
        if not s.topic or len(s.topic) > cfg.max_topic_name_length:
            raise invalid(f"{field} has a shard with an invalid topic name {s.topic!r}")
        if s.partition < 0:
            raise invalid(f"{field} has a negative partition: {s}")
        if not (isinstance(s.lo, int) and isinstance(s.hi, int) and 0 <= s.lo < s.hi <= KEY_SPACE):
            raise invalid(f"{field} has a shard of {s.topic}:{s.partition} with the key range "
                          f"[{s.lo!r}, {s.hi!r}); a key range is 0 <= lo < hi <= {KEY_SPACE}")


def _check_listed(field: str, shards: ListedShards, cfg: CoordinatorConfig) -> None:
    """`check_shards` of whole partitions listed by topic: each topic name once, the lowest number."""
    for topic in shards.topics:
        if not isinstance(topic, str) or not topic or len(topic) > cfg.max_topic_name_length:
            raise invalid(f"{field} has a shard with an invalid topic name {topic!r}")
    lowest = shards.lowest()
    if lowest is not None and lowest[1] < 0:
        raise invalid(f"{field} has a negative partition: {Shard(*lowest)}")


def check_name(field: str, value: object, limit: int, what: str) -> None:
    """``value``, a name a request carries in ``field`` (a subtopology id, a topic), is a non-blank
    string of at most ``limit`` characters; the message never repeats an oversized value."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{field} has a blank {what} {value!r}; give it a name")
    check_length(field, value, limit, what)


def check_length(field: str, value: str, limit: int, what: str) -> None:
    """``value`` has at most ``limit`` characters (the message does not repeat it)."""
    if len(value) > limit:
        raise invalid(f"{field} has a {what} of {len(value)} characters; the limit is {limit}")


def check_named_numbers(field: str, listing: Iterable[tuple[str, Iterable[int]]], limit: int, what: str,
                        unit: str) -> None:
    """Every name of a ``(name, numbers)`` listing (a streams member's tasks by subtopology) is a
    valid name of at most ``limit`` characters and no number is negative — what `check_shards` checks
    of a consumer's shards, here on the listing as sent, before anything is built."""
    for name, numbers in listing:
        check_name(field, name, limit, what)
        low = min(numbers, default=0)
        if low < 0:
            raise invalid(f"{field} has a negative {unit}: {unit} {low} of {what} {name!r}")


def shards_from_listing(field: str, listing: Iterable[tuple[str, Collection[int]]], limit: int) -> ShardSet:
    """The shards a request lists as ``(topic, partitions)`` groups (the wire's form), as a set.

    INVALID_REQUEST, before any shard is built, when the groups list more than ``limit`` partitions
    in all (counted as listed, duplicates included) or list one partition twice (the message names
    it). The shards' own shape (topic names, negative partitions) is `validate_heartbeat`'s check.
    The set is a `ListedShards` (partition numbers by topic; typed as the frozenset it equals).
    """
    return cast(ShardSet, ListedShards(_unique_groups(field, listing, limit, Shard, "partition")))


def unique_from_listing(field: str, listing: Iterable[tuple[N, Collection[int]]], limit: int,
                        make: Callable[[N, int], T], unit: str) -> frozenset[T]:
    """``make(name, number)`` for every number listed under every name, refusing a repeat or a list
    longer than ``limit`` (see `shards_from_listing`; the streams task lists use it too).

    The count only takes each group's length, so an oversized list costs nothing; duplicates are
    found on plain integers, and the values are built only once the listing passed both checks.
    """
    groups = _unique_groups(field, listing, limit, make, unit)
    return frozenset(make(name, number) for name, numbers in groups.items() for number in numbers)


def _unique_groups(field: str, listing: Iterable[tuple[N, Collection[int]]], limit: int,
                   make: Callable[[N, int], object], unit: str) -> dict[N, set[int]]:
    """The numbers of a listing by name, checked: at most ``limit`` in all, none twice."""
    groups: dict[N, set[int]] = {}
    n = 0
    for name, numbers in listing:
        n += len(numbers)
        if n > limit:
            raise invalid(f"{field} lists at least {n} {unit}s; the limit is {limit}")
        distinct = _distinct(numbers)
        earlier = groups.get(name)
        if len(distinct) != len(numbers) or (earlier is not None and not earlier.isdisjoint(distinct)):
            twice = make(name, _first_repeat(numbers, earlier or set()))
            raise invalid(f"{field} lists {unit} {twice} twice; list each {unit} once")
        if earlier is None:
            groups[name] = distinct
        else:
            earlier |= distinct
    return groups


def _distinct(numbers: Collection[int]) -> set[int]:
    """``set(numbers)``, read `LISTING_SLICE` numbers at a time."""
    out: set[int] = set()
    it = iter(numbers)
    for _ in range(0, len(numbers), LISTING_SLICE):
        out.update(itertools.islice(it, LISTING_SLICE))
    return out


def _first_repeat(numbers: Iterable[int], earlier: set[int]) -> int:
    seen = set(earlier)
    for number in numbers:
        if number in seen:
            return number
        seen.add(number)
    raise AssertionError("no number is repeated")  # pragma: no cover - the caller saw one


def validate_heartbeat(req: HeartbeatRequest, cfg: CoordinatorConfig) -> None:
    check_id("group_id", req.group_id, cfg)
    check_id("member_id", req.member_id, cfg)
    if not isinstance(req.member_epoch, int) or req.member_epoch < STATIC_LEAVE_EPOCH:
        raise invalid(f"member_epoch must be -2, -1, 0 or a positive epoch, got {req.member_epoch!r}")
    if req.instance_id is not None:
        check_id("instance_id", req.instance_id, cfg)
    if req.rack_id is not None:
        check_id("rack_id", req.rack_id, cfg, allow_empty=True)
    if req.rebalance_timeout_ms is not None and (
        not isinstance(req.rebalance_timeout_ms, int) or req.rebalance_timeout_ms <= 0
    ):
        raise invalid(f"rebalance_timeout_ms must be a positive integer, got {req.rebalance_timeout_ms!r}")
    if req.subscribed_topics is not None:
        if len(req.subscribed_topics) > cfg.max_subscribed_topics:
            raise invalid(f"subscribed_topics lists {len(req.subscribed_topics)} topics; the limit is "
                          f"{cfg.max_subscribed_topics} (use a regex subscription instead)")
        for t in req.subscribed_topics:
            if not isinstance(t, str) or not t or len(t) > cfg.max_topic_name_length:
                raise invalid(f"subscribed_topics has an invalid topic name {t!r}")
    if req.subscribed_regex is not None:
        if not isinstance(req.subscribed_regex, str):
            raise invalid("subscribed_regex must be a string")
        if len(req.subscribed_regex) > cfg.max_regex_length:
            raise invalid(f"subscribed_regex is {len(req.subscribed_regex)} characters long; the limit "
                          f"is {cfg.max_regex_length}")
    if req.assignor is not None:
        check_id("assignor", req.assignor, cfg)
    if req.client_assignors is not None:
        for name in req.client_assignors:
            check_id("client_assignors entry", name, cfg)
    if req.owned is not None:
        # A set: its length is the request's only if the shell refused repeats (`shards_from_listing`).
        check_shards("owned", req.owned, cfg, cfg.max_owned_shards)
    if req.member_epoch == JOIN_EPOCH:
        if req.owned is None or req.owned:
            raise invalid("a join (member_epoch 0) must report owned as an empty set: a joining member "
                          "owns nothing yet")
    if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
        raise invalid("member_epoch -2 (temporary leave) is only for static members: set instance_id, "
                      "or leave with -1")


def large_request_refusal(waiting_from_client: int, waiting: int, cfg: CoordinatorConfig) -> str | None:
    """Why one more large request (over ``large_request_bytes`` encoded) from a client may not wait for
    the lane of large requests, or None: it may. ``waiting_from_client``: that client's large requests
    waiting or being read already; ``waiting``: everyone's. One client's large requests thus never
    queue ahead of another's more than ``max_large_requests_per_client`` deep."""
    if waiting_from_client >= cfg.max_large_requests_per_client:
        return (f"this client already has {waiting_from_client} large request(s) (over "
                f"{cfg.large_request_bytes} bytes) waiting; the limit is {cfg.max_large_requests_per_client} "
                f"per client (max_large_requests_per_client): send the next once it is answered")
    if waiting >= cfg.max_large_requests_waiting:
        return (f"{waiting} large requests (over {cfg.large_request_bytes} bytes) are waiting already; "
                f"the limit is {cfg.max_large_requests_waiting} (max_large_requests_waiting): try again "
                f"shortly")
    return None


def validate_new_member(req: HeartbeatRequest) -> None:
    """What a member the group does not know yet must say about itself."""
    if req.rebalance_timeout_ms is None:
        raise invalid("a join (member_epoch 0) must carry rebalance_timeout_ms")
    if req.subscribed_topics is None and not req.subscribed_regex:
        raise invalid("a join (member_epoch 0) must carry subscribed_topics or subscribed_regex")


def validate_commit(req: OffsetCommitRequest, cfg: CoordinatorConfig) -> None:
    check_id("group_id", req.group_id, cfg)
    if req.member_id == "":
        raise invalid("member_id must not be empty: only members commit; an operator resets offsets "
                      "(ResetOffsets) instead")
    check_id("member_id", req.member_id, cfg)
    if not isinstance(req.member_epoch, int):
        raise invalid("member_epoch must be an integer")
    _check_offsets(req.offsets, req.metadata, cfg)


def validate_reset(req: OffsetResetRequest, cfg: CoordinatorConfig) -> None:
    check_id("group_id", req.group_id, cfg)
    limit = cfg.max_reset_offsets
    if isinstance(req.offsets, Sized) and len(req.offsets) > limit:
        raise invalid(f"an offset reset sets at most {limit} offsets (max_reset_offsets), this one "
                      f"{len(req.offsets)}; split it into several resets")
    _check_offsets(req.offsets, req.metadata, cfg, limit)


def validate_fetch(req: OffsetFetchRequest, cfg: CoordinatorConfig) -> None:
    check_id("group_id", req.group_id, cfg)
    check_id("member_id", req.member_id, cfg, allow_empty=True)
    if not isinstance(req.member_epoch, int) or isinstance(req.member_epoch, bool):
        raise invalid("member_epoch must be an integer")
    if req.shards is not None:
        check_shards("shards", req.shards, cfg, cfg.max_owned_shards)


def validate_group_shards(group_id: str, shards: Iterable[object] | None, cfg: CoordinatorConfig) -> None:
    """An operator's request about some (None: all) shards of a group."""
    check_id("group_id", group_id, cfg)
    if shards is not None:
        check_shards("shards", shards, cfg, cfg.max_owned_shards)


def validate_member_ids(group_id: str, member_id: str, cfg: CoordinatorConfig) -> None:
    check_id("group_id", group_id, cfg)
    check_id("member_id", member_id, cfg)


def _check_offsets(offsets: Mapping[Shard, int], metadata: str, cfg: CoordinatorConfig,
                   limit: int | None = None) -> None:
    if not offsets:
        raise invalid("an offset commit must carry at least one offset")
    check_shards("offsets", offsets.keys(), cfg, cfg.max_owned_shards if limit is None else limit)
    for shard, offset in offsets.items():
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise invalid(f"offset for {shard} must be a non-negative integer, got {offset!r}")
        if offset > MAX_OFFSET:
            raise invalid(f"offset {offset} for {shard} is beyond any log: an offset is at most "
                          f"{MAX_OFFSET} (2^53 - 1); commit the position of the next record to read")
    if not isinstance(metadata, str):
        raise invalid(f"offset metadata must be a string, got {type(metadata).__name__}")
    if len(metadata) > cfg.max_offset_metadata_length:
        raise invalid(f"offset metadata is {len(metadata)} characters; the limit is "
                      f"{cfg.max_offset_metadata_length}")
