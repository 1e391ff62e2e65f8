"""The range assignor: contiguous ranges, co-partitioning, static-first order, determinism."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.assignors import (
    Assignment,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    validate_assignment,
)
from regroup.protocol.shard import EMPTY, Shard, ShardRun, group_by_topic
from regroup.protocol.topics import TopicMetadata

PROPS = settings(max_examples=100, deadline=None)


def S(topic: str, *parts: int) -> set[Shard]:
    return {Shard(topic, p) for p in parts}


def spec_of(topics: Mapping[str, int], subs: Mapping[str, set[str]],
            static: Mapping[str, str] | None = None) -> GroupSpec:
    static = static or {}
    return GroupSpec({m: MemberSpec(m, frozenset(ts), instance_id=static.get(m))
                      for m, ts in subs.items()}, TopicMetadata(dict(topics)))


def run(spec: GroupSpec) -> Assignment:
    out = RangeAssignor().assign(spec)
    validate_assignment(spec, out)
    return out


def test_kafka_docstring_example() -> None:
    out = run(spec_of({"t1": 3, "t2": 3}, {"m0": {"t1", "t2"}, "m1": {"t1", "t2"}}))
    assert out == {"m0": S("t1", 0, 1) | S("t2", 0, 1), "m1": S("t1", 2) | S("t2", 2)}


def test_static_members_first_by_instance_id() -> None:
    subs = {m: {"t"} for m in ("a", "b", "c", "d")}
    # d and b are static (instance ids "i1" < "i2"); a and c are dynamic, ordered by member id.
    out = run(spec_of({"t": 8}, subs, static={"d": "i1", "b": "i2"}))
    assert out == {"d": S("t", 0, 1), "b": S("t", 2, 3), "a": S("t", 4, 5), "c": S("t", 6, 7)}


def test_static_member_keeps_its_range_under_a_new_member_id() -> None:
    before = run(spec_of({"t": 4}, {"x1": {"t"}, "y": {"t"}}, static={"x1": "inst"}))
    after = run(spec_of({"t": 4}, {"zz": {"t"}, "y": {"t"}}, static={"zz": "inst"}))
    assert after["zz"] == before["x1"] == S("t", 0, 1)


def test_more_members_than_partitions() -> None:
    out = run(spec_of({"t": 2}, {m: {"t"} for m in ("a", "b", "c")}))
    assert out == {"a": S("t", 0), "b": S("t", 1), "c": EMPTY}


def test_heterogeneous_per_topic_subscribers() -> None:
    subs = {"x": {"a", "b"}, "y": {"b", "c"}, "z": {"c", "ghost"}, "w": set()}
    out = run(spec_of({"a": 5, "b": 5, "c": 3}, subs))
    assert out == {"x": S("a", 0, 1, 2, 3, 4) | S("b", 0, 1, 2), "y": S("b", 3, 4) | S("c", 0, 1),
                   "z": S("c", 2), "w": EMPTY}


def test_unchanged_ranges_return_the_current_object() -> None:
    spec = spec_of({"a": 4, "b": 4}, {m: {"a", "b"} for m in ("m1", "m2", "m3")})
    out = run(spec)
    fed = GroupSpec({m: MemberSpec(m, s.topics, out[m]) for m, s in spec.members.items()},
                    spec.topics)
    again = run(fed)
    assert again == out and all(again[m] is out[m] for m in out)


# -- properties ------------------------------------------------------------------------------------

NAMES = ["a", "b", "c", "d"]


def test_ranges_in_shard_order_are_runs_and_answer_as_sets() -> None:
    """One topic, or at most one partition per member: each member's range is a `ShardRun` (no hash
    table per member), and it answers as the equal frozenset, long runs (bisected) included."""
    one_topic = run(spec_of({"t": 100}, {"m1": {"t"}, "m2": {"t"}}))
    assert all(type(v) is ShardRun for v in one_topic.values())
    assert one_topic["m1"] == S("t", *range(50)) and Shard("t", 49) in one_topic["m1"]
    assert Shard("t", 50) not in one_topic["m1"] and Shard("t", 50) in one_topic["m2"]
    co = run(spec_of({"a": 2, "b": 2}, {"m1": {"a", "b"}, "m2": {"a", "b"}, "m3": {"a", "b"}}))
    assert co["m1"] == S("a", 0) | S("b", 0) and type(co["m1"]) is ShardRun and co["m3"] == EMPTY
    # Two partitions each of two topics: partition-major, not in shard order: frozensets.
    wide = run(spec_of({"a": 4, "b": 4}, {"m1": {"a", "b"}, "m2": {"a", "b"}}))
    assert wide["m1"] == S("a", 0, 1) | S("b", 0, 1) and type(wide["m1"]) is frozenset


@st.composite
def specs(draw: st.DrawFn) -> GroupSpec:
    topics = {t: draw(st.integers(1, 9))
              for t in draw(st.lists(st.sampled_from(NAMES), min_size=1, unique=True))}
    ids = draw(st.lists(st.sampled_from([f"m{i}" for i in range(10)]), min_size=1, max_size=8,
                        unique=True))
    pick = st.lists(st.sampled_from([*NAMES, "ghost"]), max_size=4, unique=True).map(frozenset)
    same = draw(pick) if draw(st.booleans()) else None
    members = {}
    for m in ids:
        inst = draw(st.none() | st.sampled_from(["i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"]))
        members[m] = (same if same is not None else draw(pick), inst)
    # Instance ids are unique within a group.
    seen: set[str] = set()
    specs = {}
    for m, (sub, inst) in members.items():
        if inst in seen:
            inst = None
        if inst is not None:
            seen.add(inst)
        current = frozenset(draw(st.lists(st.sampled_from(
            [Shard(t, p) for t in NAMES for p in range(9)]), max_size=6)))
        specs[m] = MemberSpec(m, sub, current, inst)
    return GroupSpec(specs, TopicMetadata(topics))


def member_order(spec: GroupSpec) -> list[str]:
    static = sorted((s.instance_id, m) for m, s in spec.members.items() if s.instance_id is not None)
    dynamic = sorted(m for m, s in spec.members.items() if s.instance_id is None)
    return [m for _, m in static] + dynamic


@PROPS
@given(specs(), st.data())
def test_range_properties(spec: GroupSpec, data: st.DataObject) -> None:
    out = RangeAssignor().assign(spec)
    validate_assignment(spec, out)
    # A member's set may be a ShardRun only when its shards are in shard order (its invariant).
    for shards in out.values():
        if type(shards) is ShardRun:
            assert list(shards) == sorted(set(shards)), shards
    order = member_order(spec)
    for topic, count in spec.topics.items():
        subscribers = [m for m in order if topic in spec.members[m].topics]
        if not subscribers:
            continue
        q, extra = divmod(count, len(subscribers))
        start = 0
        for j, m in enumerate(subscribers):
            # Contiguous, in subscriber order, first `extra` members one longer.
            size = q + (j < extra)
            assert group_by_topic(out[m]).get(topic, []) == list(range(start, start + size))
            start += size
    # Co-partitioning: topics with equal partition counts and the same subscribers give each
    # member the same partition numbers.
    for t1 in spec.topics:
        for t2 in spec.topics:
            subs1 = {m for m, s in spec.members.items() if t1 in s.topics}
            subs2 = {m for m, s in spec.members.items() if t2 in s.topics}
            if spec.topics[t1] == spec.topics[t2] and subs1 == subs2:
                for m in subs1:
                    parts = group_by_topic(out[m])
                    assert parts.get(t1, []) == parts.get(t2, [])
    # Deterministic whatever the insertion order; feeding the output back changes nothing.
    order_drawn = data.draw(st.permutations(list(spec.members)))
    shuffled = GroupSpec({m: spec.members[m] for m in order_drawn}, TopicMetadata(dict(spec.topics)))
    assert RangeAssignor().assign(shuffled) == out
    fed = GroupSpec({m: MemberSpec(m, s.topics, out[m], s.instance_id)
                     for m, s in spec.members.items()}, spec.topics)
    again = RangeAssignor().assign(fed)
    assert again == out and all(again[m] is out[m] for m in out if out[m])
