"""The uniform assignor's pass over a group that only grew: the C pass and its Python twin give the
same answers, and the moves computed from it are those of the general path."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.assignors import MemberSpec, uniform_scan
from regroup.protocol.assignors.uniform import _rebalance
from regroup.protocol.assignors.uniform_scan import scan_grown, scan_grown_python
from regroup.protocol.shard import EMPTY, Shard, ShardRun, ShardSet

PROPS = settings(max_examples=300, deadline=None)
TOPICS = frozenset({"a", "b"})


def test_the_c_pass_is_built() -> None:
    """The install builds it (scripts/setup.sh); without it the assignor is right but slower, and
    the figures in docs/benchmarks.md would not hold."""
    assert uniform_scan.NATIVE, ("regroup/protocol/assignors/_uniform_scan.c was not built: run "
                                 "`pip install -e .` again with a C compiler (scripts/setup.sh does)")


@dataclass(frozen=True)
class DictMember:
    """A member spec that keeps its fields in a __dict__ (not slots): read through getattr."""

    member_id: str
    topics: frozenset[str]
    current: ShardSet = EMPTY


class PropertyMember(MemberSpec):
    """A MemberSpec whose ``current`` is a property (always nothing, whatever it was made with):
    must not be read from the base class's slot."""

    __slots__ = ()
    current = property(lambda self: EMPTY, lambda self, value: None)  # type: ignore[assignment]


def _shards(n: int) -> list[Shard]:
    return [Shard("a", p) for p in range(n)]


@st.composite
def grown_cases(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, ShardSet], int]:
    """A remembered result and a group drawn around it: mostly grown, sometimes not quite."""
    names = draw(st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8,
                          unique=True))
    pool = _shards(draw(st.integers(len(names), 3 * len(names) + 2)))
    cuts = sorted(draw(st.lists(st.integers(0, len(pool)), min_size=len(names) - 1,
                                max_size=len(names) - 1)))
    bounds = [0, *cuts, len(pool)]
    make = draw(st.sampled_from([ShardRun, frozenset]))
    targets: dict[str, ShardSet] = {
        m: make(pool[lo:hi]) if hi > lo else EMPTY  # type: ignore[operator]
        for m, lo, hi in zip(names, bounds, bounds[1:], strict=False)}
    members: dict[str, Any] = {}
    for m in draw(st.permutations(names)):
        fate = draw(st.sampled_from(["keeps"] * 6 + ["copy", "other", "leaves", "resubscribes",
                                                      "topics-copy", "dict-member", "property"]))
        t = targets[m]
        if fate == "leaves":
            continue
        current = {"copy": frozenset(set(t)), "other": frozenset(pool[:1])}.get(fate, t)
        topics = {"resubscribes": frozenset({"a"}), "topics-copy": frozenset(set(TOPICS))}.get(fate, TOPICS)
        kind = {"dict-member": DictMember, "property": PropertyMember}.get(fate, MemberSpec)
        members[m] = kind(m, topics, current)
    for j in draw(st.lists(st.sampled_from(["j1", "j2", "zz"]), unique=True)):
        fate = draw(st.sampled_from(["empty", "empty-copy", "holds"]))
        current = {"empty": EMPTY, "empty-copy": frozenset(), "holds": frozenset(pool[-1:])}[fate]
        members[j] = MemberSpec(j, TOPICS, current)
    quota = draw(st.integers(0, 4))
    return members, targets, quota


@PROPS
@given(grown_cases())
def test_the_c_pass_answers_as_its_python_twin(case: tuple[dict[str, Any], dict[str, ShardSet], int]) -> None:
    members, targets, quota = case
    want = scan_grown_python(members, targets, TOPICS, EMPTY, quota)
    got = scan_grown(members, targets, TOPICS, EMPTY, quota)
    assert got == want
    if want is not None:
        final = got[0]
        assert list(final) == list(members)  # the group's order
        assert all(final[m] is s.current for m, s in members.items())  # the objects themselves
        assert [type(x) for x in got[1:]] == [list, list, list, int]


def test_a_grown_group_is_recognised_and_anything_else_is_not() -> None:
    pool = _shards(7)
    targets: dict[str, ShardSet] = {"m1": ShardRun(pool[:4]), "m2": ShardRun(pool[4:])}
    grown = {m: MemberSpec(m, TOPICS, s) for m, s in targets.items()} | {"m3": MemberSpec("m3", TOPICS)}
    for scan in (scan_grown, scan_grown_python):
        final, off_mids, off_sets, off_sizes, total = scan(grown, targets, TOPICS, EMPTY, 2)
        assert final == {"m1": targets["m1"], "m2": targets["m2"], "m3": EMPTY}
        assert (off_mids, off_sizes, total) == (["m1", "m2", "m3"], [4, 3, 0], 7)
        assert off_sets[0] is targets["m1"]
        # A member of the result left; one holds something else; not a dict: not grown.
        assert scan({"m1": grown["m1"], "m3": grown["m3"]}, targets, TOPICS, EMPTY, 2) is None
        other = grown | {"m2": MemberSpec("m2", TOPICS, frozenset(pool[3:]))}
        assert scan(other, targets, TOPICS, EMPTY, 2) is None
        assert scan(MappingProxyType(grown), targets, TOPICS, EMPTY, 2) is None


def test_errors_of_a_member_propagate() -> None:
    targets: dict[str, ShardSet] = {"m1": EMPTY}
    for scan in (scan_grown, scan_grown_python):
        with pytest.raises(AttributeError):
            scan({"m1": object()}, targets, TOPICS, EMPTY, 0)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="5 arguments"):
        scan_grown({}, {}, TOPICS, EMPTY)  # type: ignore[call-arg]


@st.composite
def rebalance_cases(draw: st.DrawFn) -> tuple[list[str], list[ShardSet], list[Shard], int]:
    """Members' kept sets (disjoint) and a pool of the shards nobody keeps."""
    n = draw(st.integers(1, 8))
    mids = draw(st.permutations([f"m{i}" for i in range(n)]))
    total = draw(st.integers(0, 30))
    shards = _shards(total)
    owner = draw(st.lists(st.integers(-1, n - 1), min_size=total, max_size=total))
    kept: list[ShardSet] = [ShardRun([s for s, o in zip(shards, owner, strict=True) if o == i])
                            if draw(st.booleans()) else
                            frozenset(s for s, o in zip(shards, owner, strict=True) if o == i)
                            for i in range(n)]
    kept = [k if k else EMPTY for k in kept]
    pool = [s for s, o in zip(shards, owner, strict=True) if o == -1]
    return list(mids), kept, pool, total


@PROPS
@given(rebalance_cases())
def test_moves_from_the_members_off_quota_are_those_from_everyone(
        case: tuple[list[str], list[ShardSet], list[Shard], int]) -> None:
    """`_rebalance` given only the members off quota (and the others on demand) changes exactly
    what it changes given every member."""
    mids, kept, pool, total = case
    q = total // len(mids)
    off = [i for i, k in enumerate(kept) if len(k) != q]
    at_quota_calls = []

    def at_quota() -> tuple[list[str], list[ShardSet]]:
        at_quota_calls.append(1)
        level = [i for i, k in enumerate(kept) if len(k) == q]
        return [mids[i] for i in level], [kept[i] for i in level]

    everyone = _rebalance(mids, kept, list(pool), total)
    sparse = _rebalance([mids[i] for i in off], [kept[i] for i in off], list(pool), total,
                        [len(kept[i]) for i in off], len(mids), at_quota)
    assert sparse == everyone
    assert len(at_quota_calls) <= 1


def test_a_member_type_changed_after_its_slots_were_learned_is_read_again() -> None:
    """The C pass reads `topics` and `current` from a slotted type's slots once it has seen the
    type; a type given a `current` property since then is read through the property."""

    class Late(MemberSpec):
        __slots__ = ()

    pool = _shards(4)
    targets: dict[str, ShardSet] = {"m1": ShardRun(pool[:2]), "m2": ShardRun(pool[2:])}
    members = {m: Late(m, TOPICS, s) for m, s in targets.items()}
    assert scan_grown(members, targets, TOPICS, EMPTY, 2) is not None  # learned, grown
    Late.current = property(lambda self: EMPTY, lambda self, value: None)  # type: ignore[assignment]
    assert scan_grown(members, targets, TOPICS, EMPTY, 2) is None  # everyone now holds nothing
    assert scan_grown_python(members, targets, TOPICS, EMPTY, 2) is None
