"""The uniform assignor: validity, balance, stickiness and determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.assignors import (
    Assignment,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
    default_registry,
    validate_assignment,
)
from regroup.protocol.assignors.uniform_scan import scan_grown_python
from regroup.protocol.shard import EMPTY, Shard, ShardSet
from regroup.protocol.topics import TopicMetadata

PROPS = settings(max_examples=100, deadline=None)


def S(topic: str, *parts: int) -> set[Shard]:
    return {Shard(topic, p) for p in parts}


def spec_of(topics: Mapping[str, int], subs: Mapping[str, set[str] | frozenset[str]],
            current: Mapping[str, ShardSet | set[Shard]] | None = None) -> GroupSpec:
    current = current or {}
    return GroupSpec(
        {m: MemberSpec(m, frozenset(ts), frozenset(current.get(m, EMPTY))) for m, ts in subs.items()},
        TopicMetadata(dict(topics)),
    )


def with_current(spec: GroupSpec, out: Assignment) -> GroupSpec:
    """``spec`` with every member's current set to its entry in ``out`` (the very objects)."""
    return GroupSpec({m: MemberSpec(m, s.topics, out.get(m, EMPTY), s.instance_id)
                      for m, s in spec.members.items()}, spec.topics)


def sizes(out: Assignment) -> dict[str, int]:
    return {m: len(s) for m, s in out.items()}


def run(spec: GroupSpec) -> Assignment:
    out = UniformAssignor().assign(spec)
    validate_assignment(spec, out)
    return out


# -- concrete cases ---------------------------------------------------------------------------------


def test_empty_group() -> None:
    assert UniformAssignor().assign(spec_of({"a": 3}, {})) == {}


def test_balanced_split_by_member_id() -> None:
    out = run(spec_of({"a": 5, "b": 5}, {m: {"a", "b"} for m in ("m3", "m1", "m2")}))
    # 10 shards, 3 members: the smallest member id gets the extra one; shards dealt in order.
    assert out == {"m1": S("a", 0, 1, 2, 3), "m2": S("a", 4) | S("b", 0, 1),
                   "m3": S("b", 2, 3, 4)}


def test_idle_members_and_unknown_topics() -> None:
    out = run(spec_of({"a": 2}, {"x": set(), "y": {"ghost"}, "z": {"a", "ghost"}}))
    assert out == {"x": EMPTY, "y": EMPTY, "z": S("a", 0, 1)}


def test_fewer_shards_than_members() -> None:
    out = run(spec_of({"a": 2}, {f"m{i}": {"a"} for i in range(5)}))
    assert sorted(sizes(out).values()) == [0, 0, 0, 1, 1]
    assert out["m0"] == S("a", 0) and out["m1"] == S("a", 1)


def test_unchanged_input_returns_the_same_objects() -> None:
    spec = spec_of({"a": 7, "b": 4}, {m: {"a", "b"} for m in "pqrs"})
    assignor = UniformAssignor()
    out = assignor.assign(spec)
    again = assignor.assign(with_current(spec, out))
    assert again == out
    assert all(again[m] is out[m] for m in out)
    # A fresh assignor (no memory of `out`) agrees, and still hands back the same objects.
    fresh = UniformAssignor().assign(with_current(spec, out))
    assert fresh == out and all(fresh[m] is out[m] for m in out)


def test_one_join_moves_only_what_balance_requires() -> None:
    subs = {m: {"a"} for m in ("m1", "m2", "m3")}
    before = run(spec_of({"a": 9}, subs))
    assert sizes(before) == {"m1": 3, "m2": 3, "m3": 3}
    spec = spec_of({"a": 9}, {**subs, "m4": {"a"}}, before)
    after = run(spec)
    # 9 shards over 4 members: 3,2,2,2. Two members give one shard each, m1 keeps its object.
    assert sorted(sizes(after).values()) == [2, 2, 2, 3]
    assert after["m1"] is spec.members["m1"].current
    assert all(after[m] <= before[m] for m in subs)
    assert len(after["m4"]) == 2


def test_leave_redistributes_only_the_leavers_shards() -> None:
    subs = {m: {"a", "b"} for m in ("m1", "m2", "m3", "m4")}
    before = run(spec_of({"a": 6, "b": 6}, subs))
    del subs["m2"]
    after = run(spec_of({"a": 6, "b": 6}, subs, before))
    assert sorted(sizes(after).values()) == [4, 4, 4]
    for m in subs:
        assert before[m] <= after[m]


def test_invalid_and_duplicate_current_shards_are_dropped() -> None:
    current = {
        "m1": S("a", 0, 1, 99) | S("gone", 0) | S("b", 0),  # 99 and "gone" do not exist
        "m2": S("a", 1, 2),  # a-1 is also claimed by m1, which has the smaller id
    }
    spec = spec_of({"a": 4, "b": 2}, {"m1": {"a"}, "m2": {"a"}}, current)  # b: not subscribed
    out = run(spec)
    assert out == {"m1": S("a", 0, 1), "m2": S("a", 2, 3)}


def test_subscription_change_revokes_unsubscribed_topic() -> None:
    before = run(spec_of({"a": 2, "b": 2}, {"m1": {"a", "b"}, "m2": {"a", "b"}}))
    after = run(spec_of({"a": 2, "b": 2}, {"m1": {"a"}, "m2": {"b"}}, before))
    assert after == {"m1": S("a", 0, 1), "m2": S("b", 0, 1)}


def test_heterogeneous_overlap() -> None:
    subs = {"x": {"a", "b"}, "y": {"b", "c"}, "z": {"c"}}
    out = run(spec_of({"a": 5, "b": 5, "c": 3}, subs))
    # x must take all of a (5); z can only take c (3): 5/5/3 is the best balance.
    assert sizes(out) == {"x": 5, "y": 5, "z": 3}


def test_heterogeneous_balances_shared_topic() -> None:
    # m1 alone on "solo" (1 partition); everyone shares "big" (11 partitions).
    subs = {"m1": {"solo", "big"}, "m2": {"big"}, "m3": {"big"}}
    out = run(spec_of({"solo": 1, "big": 11}, subs))
    assert sorted(sizes(out).values()) == [4, 4, 4]
    # Feeding the result back changes nothing.
    again = UniformAssignor().assign(with_current(spec_of({"solo": 1, "big": 11}, subs), out))
    assert again == out


def test_disjoint_buckets_are_balanced_independently() -> None:
    subs = {**{f"a{i}": {"t1", "t2"} for i in range(3)}, **{f"b{i}": {"t3"} for i in range(2)}}
    out = run(spec_of({"t1": 4, "t2": 4, "t3": 9}, subs))
    assert sorted(len(out[f"a{i}"]) for i in range(3)) == [2, 3, 3]
    assert sorted(len(out[f"b{i}"]) for i in range(2)) == [4, 5]


def test_memory_never_changes_the_output() -> None:
    spec = spec_of({"a": 10}, {m: {"a"} for m in "abc"})
    warm = UniformAssignor()
    out = warm.assign(spec)
    joined = GroupSpec({**with_current(spec, out).members, "d": MemberSpec("d", frozenset({"a"}))},
                       spec.topics)
    # Same contents but different objects: the memory cannot vouch for them, same result anyway.
    copied = GroupSpec({m: MemberSpec(m, s.topics, frozenset(set(s.current)))
                        for m, s in joined.members.items()}, spec.topics)
    assert warm.assign(joined) == UniformAssignor().assign(joined) == warm.assign(copied)
    # After the topic grows the memory is for other counts: still the same as a fresh assignor.
    grown = GroupSpec(joined.members, TopicMetadata({"a": 13}))
    assert warm.assign(grown) == UniformAssignor().assign(grown)
    validate_assignment(grown, warm.assign(grown))


def test_default_registry() -> None:
    reg = default_registry()
    assert reg.names == ["uniform", "range"]
    assert isinstance(reg.default, UniformAssignor)
    assert isinstance(reg.get("range"), RangeAssignor)


_HASHSEED_SCRIPT = """
import json
from regroup.protocol.assignors import GroupSpec, MemberSpec, UniformAssignor
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.shard import Shard
md = TopicMetadata({f"t{i}": 3 + i for i in range(6)})
subs = [frozenset(f"t{i}" for i in range(6)), frozenset({"t0", "t1", "t2"}), frozenset({"t2", "t3"})]
out = {}
for k, sub in enumerate(subs):
    members = {f"m{j}": MemberSpec(f"m{j}", sub if k == 0 else subs[j % 3]) for j in range(7)}
    first = UniformAssignor().assign(GroupSpec(members, md))
    members = {m: MemberSpec(m, s.topics, first[m]) for m, s in members.items()}
    members["new"] = MemberSpec("new", sub)
    members.pop("m3")
    second = UniformAssignor().assign(GroupSpec(members, md))
    out[k] = {m: sorted(map(tuple, v)) for m, v in sorted(second.items())}
print(json.dumps(out))
"""


def test_output_does_not_depend_on_the_hash_seed() -> None:
    outputs = set()
    for seed in ("1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _HASHSEED_SCRIPT], env=env, check=True,
                              capture_output=True, text=True, cwd=os.getcwd())
        outputs.add(done.stdout)
    assert len(outputs) == 1
    json.loads(outputs.pop())


# -- properties ------------------------------------------------------------------------------------

TOPIC_NAMES = ["a", "b", "c", "d"]


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, int]:
    names = draw(st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=4, unique=True))
    return {t: draw(st.integers(1, 9)) for t in names}


@st.composite
def currents(draw: st.DrawFn, topics: dict[str, int], ids: list[str]) -> dict[str, set[Shard]]:
    """Arbitrary current sets: may overlap, name deleted topics or partitions out of range."""
    universe = [Shard(t, p) for t in [*TOPIC_NAMES, "ghost"] for p in range(11)]
    if draw(st.booleans()):
        return {}
    return {m: set(draw(st.lists(st.sampled_from(universe), max_size=12))) for m in ids}


@st.composite
def homogeneous_specs(draw: st.DrawFn) -> GroupSpec:
    topics = draw(metadata())
    ids = draw(st.lists(st.sampled_from([f"m{i}" for i in range(12)]), min_size=1, max_size=9,
                        unique=True))
    sub = set(draw(st.lists(st.sampled_from([*topics, "ghost"]), min_size=1, unique=True)))
    return spec_of(topics, dict.fromkeys(ids, sub), draw(currents(topics, ids)))


@st.composite
def heterogeneous_specs(draw: st.DrawFn) -> GroupSpec:
    topics = draw(metadata())
    ids = draw(st.lists(st.sampled_from([f"m{i}" for i in range(12)]), min_size=1, max_size=9,
                        unique=True))
    pick = st.lists(st.sampled_from([*topics, "ghost"]), max_size=4, unique=True).map(set)
    subs = {m: draw(pick) for m in ids}
    return spec_of(topics, subs, draw(currents(topics, ids)))


def kept_sets(spec: GroupSpec) -> dict[str, set[Shard]]:
    """Per member: current shards still valid, a duplicate going to the smallest member id."""
    taken: set[Shard] = set()
    out: dict[str, set[Shard]] = {}
    for m in sorted(spec.members):
        s = spec.members[m]
        k = {x for x in s.current if x.topic in s.topics and spec.topics.contains(x)} - taken
        taken |= k
        out[m] = k
    return out


def shuffled(spec: GroupSpec, data: st.DataObject) -> GroupSpec:
    order = data.draw(st.permutations(list(spec.members)))
    return GroupSpec({m: spec.members[m] for m in order}, TopicMetadata(dict(spec.topics)))


@PROPS
@given(homogeneous_specs())
def test_homogeneous_valid_balanced_and_maximally_sticky(spec: GroupSpec) -> None:
    out = UniformAssignor().assign(spec)
    validate_assignment(spec, out)
    subscribed = [m for m, s in spec.members.items() if s.topics & spec.topics.keys()]
    if not subscribed:
        assert all(not v for v in out.values())
        return
    counts = [len(out[m]) for m in subscribed]
    assert max(counts) - min(counts) <= 1
    # Stickiness: members keep as many of their (valid) current shards as any balanced
    # assignment could let them keep.
    total = sum(counts)
    q, extra = divmod(total, len(subscribed))
    kept = {m: len(k) for m, k in kept_sets(spec).items()}
    best = sum(min(kept[m], q) for m in subscribed) + min(extra, sum(kept[m] > q for m in subscribed))
    retained = sum(len(out[m] & k) for m, k in kept_sets(spec).items())
    assert retained == best


@PROPS
@given(homogeneous_specs(), st.data())
def test_homogeneous_deterministic_and_stable(spec: GroupSpec, data: st.DataObject) -> None:
    warm = UniformAssignor()
    out = warm.assign(spec)
    assert UniformAssignor().assign(shuffled(spec, data)) == out
    assert warm.assign(spec) == out
    # Feeding the output back is a fixed point, and members get their very objects back.
    fed = with_current(spec, out)
    for assignor in (warm, UniformAssignor()):
        again = assignor.assign(fed)
        assert again == out
        assert all(again[m] is out[m] for m in out if out[m])


@PROPS
@given(homogeneous_specs(), st.sampled_from(["m00", "m5x", "zz"]), st.data())
def test_one_join_moves_the_minimum(spec: GroupSpec, joiner: str, data: st.DataObject) -> None:
    assignor = UniformAssignor()
    before = assignor.assign(spec)
    sub = next(iter(spec.members.values())).topics
    grown = GroupSpec({**with_current(spec, before).members, joiner: MemberSpec(joiner, sub)},
                      spec.topics)
    after = assignor.assign(grown)
    validate_assignment(grown, after)
    assert after == UniformAssignor().assign(shuffled(grown, data))
    n = len(grown.members)
    total = sum(len(v) for v in after.values())
    q, extra = divmod(total, n)
    # Only the joiner's share moves, and each old member gives up only what it must.
    moved = sum(len(before[m] - after[m]) for m in spec.members)
    held = [len(before[m]) for m in spec.members]
    must_give = sum(max(0, h - q) for h in held) - min(extra, sum(h > q for h in held))
    assert moved == must_give
    assert all(after[m] <= before[m] for m in spec.members)
    assert len(after[joiner]) in (q, q + 1)
    unchanged = [m for m in spec.members if after[m] == before[m]]
    assert all(after[m] is before[m] for m in unchanged)


@PROPS
@given(heterogeneous_specs(), st.data())
def test_heterogeneous_valid_deterministic_and_stable(spec: GroupSpec, data: st.DataObject) -> None:
    out = UniformAssignor().assign(spec)
    validate_assignment(spec, out)  # every shard goes to exactly one subscriber
    assert UniformAssignor().assign(shuffled(spec, data)) == out
    again = UniformAssignor().assign(with_current(spec, out))
    assert again == out
    # Members with the same effective subscription end up within one shard of each other.
    by_sub: dict[frozenset[str], list[int]] = {}
    for m, s in spec.members.items():
        by_sub.setdefault(frozenset(s.topics & spec.topics.keys()), []).append(len(out[m]))
    for sub, counts in by_sub.items():
        if sub:
            assert max(counts) - min(counts) <= 1, (sub, counts)
        else:
            assert counts == [0] * len(counts)


@st.composite
def rounds(draw: st.DrawFn) -> list[tuple[str, str, frozenset[str], int]]:
    """Changes between rebalances: (kind, member or topic, subscription, partitions)."""
    subs = st.lists(st.sampled_from([*TOPIC_NAMES, "ghost"]), min_size=1, max_size=3,
                    unique=True).map(frozenset)
    change = st.tuples(st.sampled_from(["join", "leave", "resubscribe", "grow", "delete", "same"]),
                       st.sampled_from([f"m{i}" for i in range(12)] + TOPIC_NAMES), subs,
                       st.integers(1, 12))
    return draw(st.lists(change, min_size=1, max_size=6))


@PROPS
@given(st.one_of(homogeneous_specs(), heterogeneous_specs()), rounds())
def test_remembered_results_never_change_outputs(spec: GroupSpec,
                                                 changes: list[tuple[str, str, frozenset[str], int]]
                                                 ) -> None:
    # One long-lived assignor (as on a coordinator) against a fresh one per round, over rounds
    # where each round's `current` is the previous output (the very objects).
    warm = UniformAssignor()
    members = dict(spec.members)
    topics = dict(spec.topics)
    for kind, name, sub, count in [("same", "", frozenset(), 0), *changes]:
        if kind == "join" and name not in members and name not in TOPIC_NAMES:
            members[name] = MemberSpec(name, sub)
        elif kind == "leave" and name in members and len(members) > 1:
            del members[name]
        elif kind == "resubscribe" and name in members:
            members[name] = MemberSpec(name, sub, members[name].current)
        elif kind == "grow" and name in TOPIC_NAMES:
            topics[name] = max(count, topics.get(name, 1))
        elif kind == "delete" and name in topics and len(topics) > 1:
            del topics[name]
        current = GroupSpec(members, TopicMetadata(topics))
        out = warm.assign(current)
        validate_assignment(current, out)
        assert out == UniformAssignor().assign(current)
        members = {m: MemberSpec(m, s.topics, out[m]) for m, s in members.items()}


@PROPS
@given(homogeneous_specs(), st.data())
def test_memory_agrees_with_a_fresh_assignor_whatever_happened_to_its_result(
        spec: GroupSpec, data: st.DataObject) -> None:
    """The certification memory vouches only for what it may: after its own result, members leave,
    lose their shards, hold copies of theirs (equal, other objects) or join; the warm assignor's
    answer is always a fresh one's, and valid."""
    warm, twin = UniformAssignor(), UniformAssignor()
    out = warm.assign(spec)
    assert twin.assign(spec) == out
    sub = next(iter(spec.members.values())).topics
    members: dict[str, MemberSpec] = {}
    for mid, m in spec.members.items():
        fate = data.draw(st.sampled_from(["keeps", "leaves", "loses", "copy"]), label=mid)
        if fate == "leaves":
            continue
        current = {"keeps": out[mid], "loses": EMPTY, "copy": frozenset(set(out[mid]))}[fate]
        members[mid] = MemberSpec(mid, m.topics, current)
    for joiner in data.draw(st.lists(st.sampled_from(["j1", "j2", "zz"]), unique=True), label="joiners"):
        members[joiner] = MemberSpec(joiner, sub)
    if not members:
        return
    after = GroupSpec(members, spec.topics)
    got = warm.assign(after)
    fresh = UniformAssignor().assign(after)
    assert got == fresh
    assert list(got) == list(fresh)  # the same order of members, whichever path computed it
    # A member that keeps exactly the shards it holds gets the very object back.
    assert all(got[m] is s.current for m, s in members.items() if got[m] and got[m] == s.current)
    validate_assignment(after, got)
    # The warm path for a group that only grew, with the C pass's Python twin: the same answer.
    with mock.patch("regroup.protocol.assignors.uniform.scan_grown", scan_grown_python):
        assert twin.assign(after) == got


def test_memory_of_cut_partitions_never_vouches_for_whole_ones() -> None:
    """2 partitions cut in 2 key ranges count 4 shards, as 4 whole partitions do: a result for one
    must not be taken for sets of the other (found by a review; the memory's key had no cuts)."""
    warm = UniformAssignor()
    cut = TopicMetadata({"t": 2}, {"t": 2})
    members = {m: MemberSpec(m, frozenset({"t"})) for m in ("x", "y")}
    out = warm.assign(GroupSpec(members, cut))
    whole = GroupSpec({m: MemberSpec(m, frozenset({"t"}), out[m]) for m in members},
                      TopicMetadata({"t": 4}))
    got = warm.assign(whole)
    validate_assignment(whole, got)
    assert got == UniformAssignor().assign(whole)


def test_memory_vouches_for_equal_copies_when_a_member_lost_its_shards() -> None:
    """Equal copies of the remembered sets, and one member emptied: still certified (no full
    check), and the emptied member's shards are dealt again."""
    warm = UniformAssignor()
    spec = spec_of({"a": 12}, {m: {"a"} for m in ("m1", "m2", "m3")})
    out = warm.assign(spec)
    copies = {m: MemberSpec(m, s.topics, frozenset(set(out[m])) if m != "m3" else EMPTY)
              for m, s in spec.members.items()}
    after = GroupSpec(copies, spec.topics)
    got = warm.assign(after)
    validate_assignment(after, got)
    assert got == UniformAssignor().assign(after)
    assert {m: len(v) for m, v in got.items()} == {"m1": 4, "m2": 4, "m3": 4}
