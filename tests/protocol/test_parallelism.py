"""Key ranges in the coordinator: a group's parallelism per topic, ranges handed out by the
assignors, overlapping shards never held by two members, per-range commits and fetches, records
that replay (and encode) to the same state."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from regroup.coordinator import codec
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import range_shards
from regroup.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from regroup.protocol.shard import EMPTY, Shard, ShardSet, overlaps
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.topology import Topology
from regroup.protocol.topics import TopicMetadata
from tests.protocol.harness import Harness


class Members:
    """Well-behaved members: each heartbeat reports what it was given, so revocations complete at once."""

    def __init__(self, h: Harness, names: list[str], topics: tuple[str, ...] = ("t",)) -> None:
        self.h, self.epoch, self.owned = h, {}, {}
        for m in names:
            self.join(m, topics)

    def join(self, m: str, topics: tuple[str, ...] = ("t",)) -> None:
        r = self.h.ok(self.h.join(m, topics))
        self.epoch[m], self.owned[m] = r.member_epoch, r.assignment or EMPTY
        check_no_overlap(self.h)

    def beat(self, m: str) -> None:
        r = self.h.ok(self.h.hb(m, self.epoch[m], owned=self.owned[m]))
        self.epoch[m] = r.member_epoch
        if r.assignment is not None:
            self.owned[m] = r.assignment
        check_no_overlap(self.h)

    def settle(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            for m in sorted(self.owned):
                self.beat(m)
        assert self.h.group().state.value == "stable"


def check_no_overlap(h: Harness) -> None:
    """No two members hold shards that share records (assigned or still revoking)."""
    held = [(mid, s) for mid, c in h.group().current.items() for s in c.assigned | c.pending_revocation]
    for i, (m1, s1) in enumerate(held):
        for m2, s2 in held[i + 1:]:
            assert m1 == m2 or not overlaps(s1, s2), f"{m1} holds {s1} while {m2} holds {s2}"


def everything(ms: Members) -> ShardSet:
    return frozenset().union(*ms.owned.values())


def test_a_live_group_moves_to_key_ranges_and_back_without_two_holders() -> None:
    h = Harness(topics={"t": 2})
    ms = Members(h, ["a", "b", "c"])
    ms.settle()
    assert everything(ms) == {Shard("t", 0), Shard("t", 1)}
    out = h.keep(h.coord.set_parallelism("g", "t", 3, h.now))
    assert out.response.error is ErrorCode.NONE and out.wake  # the members it changed are nudged
    ms.settle()
    want = set(range_shards("t", 0, 3) + range_shards("t", 1, 3))
    assert everything(ms) == want and sorted(len(s) for s in ms.owned.values()) == [2, 2, 2]
    assert h.group().parallelism == {"t": 3}
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))  # ranges of another parallelism overlap the old
    ms.settle()
    assert everything(ms) == set(range_shards("t", 0, 2) + range_shards("t", 1, 2))
    h.keep(h.coord.set_parallelism("g", "t", 1, h.now))
    ms.settle()
    assert everything(ms) == {Shard("t", 0), Shard("t", 1)} and h.group().parallelism == {}
    restored = Coordinator.recover(h.log, h.now, topics=TopicMetadata({"t": 2}))
    assert restored.groups["g"] == h.group()


def test_parallelism_beyond_the_partition_count_spreads_one_partition() -> None:
    h = Harness(topics={"t": 1})
    h.keep(h.coord.set_parallelism("g", "t", 4, h.now))  # before anyone joins: the group is created
    ms = Members(h, ["a", "b", "c", "d"])
    ms.settle()
    assert sorted(map(len, ms.owned.values())) == [1, 1, 1, 1]
    assert everything(ms) == set(range_shards("t", 0, 4))


def test_a_range_waits_for_the_overlapping_whole_partition() -> None:
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a", "b"])
    ms.settle()
    holder = next(m for m, s in ms.owned.items() if s)
    other = "b" if holder == "a" else "a"
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    ms.beat(other)  # target: one range each; the whole partition is still the holder's
    assert h.group().current[other].status.value == "unreleased" and ms.owned[other] == EMPTY
    ms.beat(holder)  # told to revoke the whole partition
    ms.beat(holder)  # released it: takes its range
    ms.beat(other)
    assert len(ms.owned[other]) == 1 and len(ms.owned[holder]) == 1


def commit(h: Harness, m: str, epoch: int, offsets: dict[Shard, int]) -> ErrorCode:
    out = h.keep(h.coord.commit_offsets(OffsetCommitRequest("g", m, epoch, offsets, "meta"), h.now))
    return out.response.error


def test_per_range_commits_fetch_as_fragments_and_replay() -> None:
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    assert commit(h, "a", ms.epoch["a"], {Shard("t", 0): 100}) is ErrorCode.NONE
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    ms.join("b")
    ms.settle()
    lo, hi = range_shards("t", 0, 2)
    owner = {next(iter(s)): m for m, s in ms.owned.items()}
    # each half resumes where the whole stopped: a fetch answers the whole partition's fragment
    fetched = h.coord.fetch_offsets(OffsetFetchRequest("g", owner[lo], ms.epoch[owner[lo]], (lo,)))
    assert {s: c.offset for s, c in fetched.offsets.items()} == {Shard("t", 0): 100}
    assert commit(h, owner[lo], ms.epoch[owner[lo]], {lo: 150}) is ErrorCode.NONE
    assert commit(h, owner[hi], ms.epoch[owner[hi]], {hi: 120}) is ErrorCode.NONE
    assert {s: c.offset for s, c in h.group().offsets.items()} == {lo: 150, hi: 120}
    # a range cannot commit below where it began, nor what it does not own
    assert commit(h, owner[lo], ms.epoch[owner[lo]], {lo: 90}) is ErrorCode.OFFSET_OUT_OF_ORDER
    assert commit(h, owner[lo], ms.epoch[owner[lo]], {hi: 200}) is ErrorCode.NOT_OWNED
    # back to whole partitions: the whole resumes at 120 and skips what the lower half did
    h.keep(h.coord.set_parallelism("g", "t", 1, h.now))
    ms.settle()
    whole_owner = next(m for m, s in ms.owned.items() if s)
    fetched = h.coord.fetch_offsets(OffsetFetchRequest("g", whole_owner, ms.epoch[whole_owner],
                                                       (Shard("t", 0),)))
    assert {s: c.offset for s, c in fetched.offsets.items()} == {lo: 150, hi: 120}
    assert commit(h, whole_owner, ms.epoch[whole_owner], {Shard("t", 0): 130}) is ErrorCode.NONE
    assert {s: c.offset for s, c in h.group().offsets.items()} == {lo: 150, hi: 130}
    assert commit(h, whole_owner, ms.epoch[whole_owner], {Shard("t", 0): 160}) is ErrorCode.NONE
    assert {s: c.offset for s, c in h.group().offsets.items()} == {Shard("t", 0): 160}
    # every record encodes and decodes to itself, and the log and the snapshot replay to this state
    assert [codec.decode(codec.encode(r)) for r in h.log] == h.log
    topics = TopicMetadata({"t": 1})
    assert Coordinator.recover(h.log, h.now, topics=topics).groups["g"] == h.group()
    assert Coordinator.recover(h.coord.snapshot(), h.now, topics=topics).groups["g"] == h.group()


@pytest.mark.parametrize("n", [0, -3, 1025])
def test_a_parallelism_out_of_bounds_is_refused(n: int) -> None:
    h = Harness()
    ack = h.coord.set_parallelism("g", "t", n, h.now).response
    assert ack.error is ErrorCode.INVALID_REQUEST and "parallelism must be 1..1024" in ack.message
    assert "g" not in h.coord.groups


def test_setting_the_same_parallelism_changes_nothing() -> None:
    h = Harness()
    Members(h, ["a"]).settle()
    assert h.coord.set_parallelism("g", "t", 2, h.now).records
    epoch = h.group().epoch
    assert not h.coord.set_parallelism("g", "t", 2, h.now).records
    assert h.group().epoch == epoch


def test_streams_groups_have_no_key_ranges_yet() -> None:
    h = Harness()
    joined = h.coord.streams_heartbeat(StreamsHeartbeatRequest(
        "sg", "m", 0, process_id="p", rebalance_timeout_ms=1000, topology=Topology.of({"s": ["t"]})), h.now)
    assert joined.response.error is ErrorCode.NONE
    ack = h.coord.set_parallelism("sg", "t", 2, h.now).response
    assert ack.error is ErrorCode.INVALID_REQUEST and "streams group" in ack.message


def test_a_heartbeat_with_a_malformed_key_range_is_refused() -> None:
    h = Harness()
    r = h.send(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000, subscribed_topics=("t",),
                                owned=frozenset({Shard("t", 0, 5, 5)})))
    assert r.error is ErrorCode.INVALID_REQUEST and "key range" in r.message


# ------------------------------------------------------------------- random histories of a live group

class LiveGroup(RuleBasedStateMachine):
    """Members join, leave, heartbeat, release late and commit while an operator changes the
    parallelism: two members never hold overlapping shards, and the records always replay."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(topics={"t": 2, "u": 1})
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, ShardSet] = {}  # what each member reports (a slow one releases late)
        self.given: dict[str, ShardSet] = {}  # what the coordinator last gave it
        self.n = 0

    def _answer(self, m: str, r: HeartbeatResponse, slow: bool) -> None:
        if r.error is not ErrorCode.NONE:
            self.epoch.pop(m, None), self.owned.pop(m, None), self.given.pop(m, None)
            return
        self.epoch[m] = r.member_epoch
        if r.assignment is not None:
            self.given[m] = r.assignment
            # a fast member gives up what it lost at once; a slow one keeps reporting it for now
            self.owned[m] = r.assignment if not slow else self.owned.get(m, EMPTY) | r.assignment

    @rule(topics=st.sampled_from([("t",), ("u",), ("t", "u")]))
    def join(self, topics: tuple[str, ...]) -> None:
        if len(self.epoch) >= 5:
            return
        m = f"m{self.n}"
        self.n += 1
        self._answer(m, self.h.join(m, topics), slow=False)

    @rule(pick=st.integers(0, 9), slow=st.booleans())
    def heartbeat(self, pick: int, slow: bool) -> None:
        if not self.epoch:
            return
        m = sorted(self.epoch)[pick % len(self.epoch)]
        self._answer(m, self.h.hb(m, self.epoch[m], owned=self.owned[m]), slow)

    @rule(pick=st.integers(0, 9))
    def release(self, pick: int) -> None:
        if self.epoch:
            m = sorted(self.epoch)[pick % len(self.epoch)]
            self.owned[m] = self.given.get(m, EMPTY)

    @rule(pick=st.integers(0, 9))
    def leave(self, pick: int) -> None:
        if self.epoch:
            m = sorted(self.epoch)[pick % len(self.epoch)]
            self.h.hb(m, -1)
            self.epoch.pop(m), self.owned.pop(m), self.given.pop(m, None)

    @rule(topic=st.sampled_from(["t", "u"]), n=st.sampled_from([1, 2, 3, 4]))
    def set_parallelism(self, topic: str, n: int) -> None:
        out = self.h.keep(self.h.coord.set_parallelism("g", topic, n, self.h.now))
        assert out.response.error is ErrorCode.NONE

    @rule(pick=st.integers(0, 9), at=st.integers(0, 50))
    def commit(self, pick: int, at: int) -> None:
        if self.epoch:
            m = sorted(self.epoch)[pick % len(self.epoch)]
            given = self.given.get(m, EMPTY)
            if given:
                commit(self.h, m, self.epoch[m], {s: at + s.lo // 2**28 for s in given})

    @invariant()
    def never_two_holders(self) -> None:
        if "g" in self.h.coord.groups:
            check_no_overlap(self.h)

    def teardown(self) -> None:
        if "g" not in self.h.coord.groups:
            return
        for _ in range(12):  # everyone releases and heartbeats: the group settles on the current ranges
            for m in sorted(self.epoch):
                self.owned[m] = self.given.get(m, EMPTY)
                self._answer(m, self.h.hb(m, self.epoch[m], owned=self.owned[m]), slow=False)
        g = self.h.group()
        if self.epoch:
            assert g.state.value == "stable"
            held = set().union(*(c.assigned for c in g.current.values()))
            want = {s for t in g.subscribed_topics for p in range(g.subscribed_topics[t])
                    for s in range_shards(t, p, g.parallelism.get(t, 1))}
            assert held == want
        topics = TopicMetadata({"t": 2, "u": 1})
        assert Coordinator.recover(self.h.log, self.h.now, topics=topics).groups["g"] == g
        assert [codec.decode(codec.encode(r)) for r in self.h.log] == self.h.log


LiveGroup.TestCase.settings = settings(max_examples=150, stateful_step_count=40)
test_live_group_with_changing_parallelism = LiveGroup.TestCase


def test_a_streams_group_refuses_key_ranges_and_adopts_fragments_as_whole_partitions() -> None:
    """Found by `regroup chaos fuzz`: an operator's key-range offsets on an empty consumer group were
    handed to the streams group that took the id over, whose records keep whole partitions only —
    a restart replayed to different offsets."""
    from regroup.protocol.messages import OffsetResetRequest
    h = Harness(topics={"t": 1})
    lo, hi = range_shards("t", 0, 2)
    assert h.keep(h.coord.reset_offsets(OffsetResetRequest("sg", {lo: 7, hi: 9}), h.now)).response.error \
        is ErrorCode.NONE
    joined = h.keep(h.coord.streams_heartbeat(StreamsHeartbeatRequest(
        "sg", "m", 0, process_id="p", rebalance_timeout_ms=1000, topology=Topology.of({"s": ["t"]})), h.now))
    assert joined.response.error is ErrorCode.NONE
    fetched = h.coord.fetch_offsets(OffsetFetchRequest("sg"))
    assert {s: c.offset for s, c in fetched.offsets.items()} == {Shard("t", 0): 7}  # the lowest fragment
    refused = h.coord.reset_offsets(OffsetResetRequest("sg", {lo: 3}), h.now).response
    assert refused.error is ErrorCode.INVALID_REQUEST and "streams group" in refused.message
    restored = Coordinator.recover(h.log, h.now, topics=TopicMetadata({"t": 1}))
    assert dict(restored.fetch_offsets(OffsetFetchRequest("sg")).offsets) == dict(fetched.offsets)


def test_a_member_may_commit_parts_of_a_shard_it_owns() -> None:
    """A consumer reading a partition split on the producer side commits one lane per piece of the
    log: parts of its shard, kept as fragments; a range that reaches beyond what it owns is refused."""
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    whole = Shard("t", 0)
    half = 1 << 31
    low, high = Shard("t", 0, 0, half), Shard("t", 0, half, 1 << 32)
    assert commit(h, "a", ms.epoch["a"], {whole: 100}) is ErrorCode.NONE
    assert commit(h, "a", ms.epoch["a"], {low: 180, high: 140}) is ErrorCode.NONE
    assert {s: c.offset for s, c in h.group().offsets.items()} == {low: 180, high: 140}
    # a part still only moves forward
    assert commit(h, "a", ms.epoch["a"], {high: 120}) is ErrorCode.OFFSET_OUT_OF_ORDER
    # the group at parallelism 2: a member owning one half cannot commit a part of the other
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    ms.join("b")
    ms.settle()
    owner = {next(iter(s)): m for m, s in ms.owned.items()}
    lo = range_shards("t", 0, 2)[0]
    assert commit(h, owner[lo], ms.epoch[owner[lo]], {Shard("t", 0, half - 10, half + 10): 200}) \
        is ErrorCode.NOT_OWNED
    assert commit(h, owner[lo], ms.epoch[owner[lo]], {Shard("t", 0, 0, 1 << 30): 200}) is ErrorCode.NONE
    restored = Coordinator.recover(h.log, h.now, topics=TopicMetadata({"t": 1}))
    assert restored.groups["g"] == h.group()


def test_a_part_of_a_shard_may_commit_below_its_own_fragments() -> None:
    """KI-3 of docs/simulation.md: a shard taken over begins at its lowest fragment and skips what a
    former owner did; read as lanes (a partition split on the producer side), a lane whose own
    fragments are all higher commits where it is — accepted, lowering nothing."""
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    half = 1 << 31
    low, high = Shard("t", 0, 0, half), Shard("t", 0, half, 1 << 32)
    assert commit(h, "a", ms.epoch["a"], {low: 100, high: 200}) is ErrorCode.NONE  # a former owner's lanes
    # the whole partition's owner began at 100 (skipping the upper half below 200); its lanes commit
    assert commit(h, "a", ms.epoch["a"], {low: 150, high: 100}) is ErrorCode.NONE
    assert {s: c.offset for s, c in h.group().offsets.items()} == {low: 150, high: 200}
    # still refused: a part below every fragment of the whole shard it belongs to
    assert commit(h, "a", ms.epoch["a"], {low: 90}) is ErrorCode.OFFSET_OUT_OF_ORDER
