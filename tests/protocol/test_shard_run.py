"""`ShardRun`: a sorted run of distinct shards that must behave as the ``frozenset`` it stands for,
whichever side of an operation it is on, so that no part of the core can tell the two apart."""

from __future__ import annotations

import operator
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.protocol.shard import (
    EMPTY,
    Shard,
    ShardRun,
    group_by_topic,
    run_end,
    run_without_end,
)
from regroup.protocol.validation import ListedShards

_shards = st.builds(lambda topic, partition: Shard(topic, partition),
                   st.sampled_from(["a", "b", "orders"]), st.integers(0, 6))
_sets = st.frozensets(_shards, max_size=24)


def _listed(shards: frozenset[Shard]) -> ListedShards:
    """The same shards as a request lists them (whole partitions by topic)."""
    by_topic: dict[str, set[int]] = {}
    for s in shards:
        by_topic.setdefault(s.topic, set()).add(s.partition)
    return ListedShards(by_topic)


def _run(shards: frozenset[Shard]) -> ShardRun:
    run = ShardRun(tuple(sorted(shards)))
    assert type(run) is ShardRun
    return run


_BINARY = [operator.and_, operator.or_, operator.sub, operator.xor,
           operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne]


@given(_sets, _sets)
def test_a_run_answers_every_operation_as_its_frozenset_does(a: frozenset[Shard],
                                                              b: frozenset[Shard]) -> None:
    ra, rb = _run(a), _run(b)
    for op in _BINARY:
        want = op(a, b)
        # run op run, run op set, set op run, and with a mutable set on the other side
        for left, right in ((ra, rb), (ra, b), (a, rb), (ra, set(b)), (set(a), rb),
                            (ra, _listed(b)), (_listed(a), rb)):
            got = op(left, right)
            assert got == want, (op, left, right)
            if isinstance(want, frozenset) and isinstance(left, (ShardRun, frozenset, ListedShards)):
                assert isinstance(got, (frozenset, ShardRun))  # a run may stand for itself
    assert ra.isdisjoint(b) == a.isdisjoint(b) == a.isdisjoint(rb) == _listed(a).isdisjoint(rb)
    assert ra.isdisjoint(_listed(b)) == a.isdisjoint(b)
    assert ra.issubset(b) == a.issubset(b)
    assert ra.issuperset(rb) == a.issuperset(b)
    assert ra.union(b, [Shard("z", 0)]) == a.union(b, [Shard("z", 0)])
    assert ra.intersection(b) == a & b
    assert ra.difference(rb) == a - b
    assert ra.symmetric_difference(b) == a ^ b
    assert ra.copy() == a


@given(_sets)
def test_a_run_is_its_frozenset_as_a_value(a: frozenset[Shard]) -> None:
    ra = _run(a)
    assert len(ra) == len(a)
    assert bool(ra) == bool(a)
    assert list(ra) == sorted(a)  # iterates in shard order
    assert hash(ra) == hash(a)  # so either finds the other in a dict or set
    assert {a: 1}[ra] == 1
    assert frozenset(ra) == a
    for s in a:
        assert s in ra
    assert Shard("absent", 0) not in ra
    assert group_by_topic(ra) == group_by_topic(a)
    assert pickle.loads(pickle.dumps(ra)) == a
    assert type(pickle.loads(pickle.dumps(ra))) is ShardRun
    assert set().union(ra) == a


@given(st.frozensets(_shards, min_size=17), _shards)
def test_membership_in_a_long_run_bisects_it(a: frozenset[Shard], probe: Shard) -> None:
    run = _run(a)
    for s in a:
        assert s in run
        assert tuple(s) in run  # a plain tuple equal to a shard, as a frozenset finds it
    assert (probe in run) == (probe in a)
    assert "t" not in run
    assert ("t", 1, 2) not in run
    assert (1, 2, 3, 4) not in run
    assert None not in run


def test_the_end_of_a_run() -> None:
    run = ShardRun((Shard("a", 0), Shard("a", 1), Shard("b", 0)))
    assert run_end(run) == Shard("b", 0)
    rest = run_without_end(run)
    assert type(rest) is ShardRun
    assert rest == frozenset({Shard("a", 0), Shard("a", 1)})
    assert run_without_end(ShardRun((Shard("a", 0),))) is EMPTY


@pytest.mark.parametrize("misuse", [
    lambda r: r + r,
    lambda r: r * 2,
    lambda r: 2 * r,
    lambda r: r.count(Shard("a", 0)),
    lambda r: r | [Shard("a", 0)],
    lambda r: r <= (Shard("a", 0),),
])
def test_a_run_cannot_be_combined_as_a_tuple(misuse: object) -> None:
    run = ShardRun((Shard("a", 0), Shard("a", 1)))
    with pytest.raises(TypeError):
        misuse(run)  # type: ignore[operator]


def test_a_run_is_not_equal_to_the_tuple_it_is_made_of() -> None:
    shards = (Shard("a", 0), Shard("a", 1))
    run = ShardRun(shards)
    assert run != list(shards)
    assert run != shards and shards != run
    assert not (run == shards) and not (shards == run)  # noqa: SIM201 (== itself, not !=)
    assert run == frozenset(shards)
    assert repr(run) == "ShardRun(a[0,1])"


@given(_sets, _sets)
def test_a_mutable_set_on_the_left_gets_a_set_back(a: frozenset[Shard], b: frozenset[Shard]) -> None:
    rb = _run(b)
    for op in (operator.and_, operator.or_, operator.sub, operator.xor):
        got = op(set(a), rb)
        assert type(got) is set
        assert got == op(set(a), b)
    s = set(a)
    s |= rb  # rebinds s to a new set (a run cannot change it in place), with the right contents
    assert type(s) is set and s == a | b


@pytest.mark.parametrize("other", [None, [], (), 0, "", [Shard("a", 0)]])
def test_only_sets_combine_with_a_run_even_empty_ones(other: object) -> None:
    run = ShardRun((Shard("a", 0),))
    for op in (operator.and_, operator.or_, operator.sub, operator.xor):
        with pytest.raises(TypeError):
            op(run, other)
        with pytest.raises(TypeError):
            op(other, run)


def test_a_run_equals_any_set_of_its_shards() -> None:
    run = ShardRun((Shard("a", 0), Shard("a", 1)))
    assert run == {Shard("a", 0): 1, Shard("a", 1): 2}.keys()
    assert run != {Shard("a", 0): 1}.keys()
    with pytest.raises(TypeError):
        (Shard("a", 2),) + run  # noqa: RUF005 (the refusal is the point)
