"""Streams tasks as key ranges (`topology` rule 4): a subtopology with parallelism K has K tasks per
partition, each one key range of every source topic's partition, cut as consumer-group key ranges
are; the tasks are assigned, committed, measured and replayed like any other, and K cannot change
while the group exists."""

from __future__ import annotations

import pytest

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.keyrange import ranges
from regroup.protocol.messages import (
    CommittedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetResetRequest,
)
from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.streams.messages import LEAVE_EPOCH, StreamsHeartbeatRequest
from regroup.protocol.streams.records import SourceParallelismRecord, TopologyRecord
from regroup.protocol.streams.state import StreamsGroup, held, replay
from regroup.protocol.streams.topology import (
    Subtopology,
    TaskId,
    Topology,
    TopologyReady,
    configure,
    parse_task_id,
    task_of_shard,
)
from regroup.protocol.topics import TopicMetadata
from tests.protocol.streams.fake_members import GROUP, REBALANCE_MS, TOPIC, Deployment, source

HOT = Topology.of({"s": [TOPIC]}, parallelism={"s": 4})


def _join(member: str, topology: Topology) -> StreamsHeartbeatRequest:
    return StreamsHeartbeatRequest(GROUP, member, 0, process_id=f"P-{member}",
                                   rebalance_timeout_ms=REBALANCE_MS, topology=topology)


def test_a_cut_subtopology_has_k_tasks_per_partition_each_one_key_range() -> None:
    topo = Topology.of({"join": ["clicks", "views"], "count": ["orders"]}, parallelism={"join": 2})
    got = configure(topo, TopicMetadata({"clicks": 2, "views": 2, "orders": 1}))
    assert isinstance(got, TopologyReady)
    assert got.tasks == (TaskId("count", 0),
                         TaskId("join", 0, 0, 2), TaskId("join", 0, 1, 2),
                         TaskId("join", 1, 0, 2), TaskId("join", 1, 1, 2))
    assert dict(got.tasks_per_subtopology) == {"count": 1, "join": 4}
    # Co-partitioned topics keep equal ranges together: one task reads range r of both.
    t = TaskId("join", 1, 1, 2)
    assert t.shard("clicks") == Shard("clicks", 1, *ranges(2)[1])
    assert t.shard("views") == Shard("views", 1, *ranges(2)[1])
    assert t.key_range == ranges(2)[1] == (KEY_SPACE // 2, KEY_SPACE)


def test_whole_partition_tasks_keep_their_names_numbers_and_shards() -> None:
    """K=1 is what the group always had: the same ids, names, changelog partitions and shards."""
    assert TaskId("s", 3) == TaskId("s", 3, 0, 1) and str(TaskId("s", 3)) == "s_3"
    assert TaskId("s", 3).changelog_partition == 3 and TaskId("s", 3).shard("in") == Shard("in", 3)
    assert str(TaskId("s", 3, 1, 4)) == "s_3.1of4"
    assert [TaskId("s", p, r, 4).changelog_partition for p in (0, 1) for r in range(4)] == list(range(8))
    assert sorted([TaskId("s", 1, 0, 2), TaskId("s", 0, 1, 2), TaskId("s", 0, 0, 2)]) == [
        TaskId("s", 0, 0, 2), TaskId("s", 0, 1, 2), TaskId("s", 1, 0, 2)]


def test_task_names_read_back() -> None:
    """Directories named after tasks (Spark checkpoints) are read back by their names."""
    for t in (TaskId("s", 3), TaskId("my_sub", 12, 3, 4), TaskId("a_0", 0, 0, 2)):
        assert parse_task_id(str(t)) == t
    assert [parse_task_id(n) for n in ("s", "s_x", "s_1.2of2", "s_1.0of1", "s_1.0of")] == [None] * 5


def test_a_shard_belongs_to_the_task_of_exactly_its_range() -> None:
    assert task_of_shard("s", 4, Shard("in", 2, *ranges(4)[3])) == TaskId("s", 2, 3, 4)
    assert task_of_shard("s", 4, Shard("in", 2)) is None  # a whole partition is no task of a cut
    assert task_of_shard("s", 4, Shard("in", 2, *ranges(2)[0])) is None  # another cut
    assert task_of_shard("s", 1, Shard("in", 2)) == TaskId("s", 2)
    assert task_of_shard("s", 1, Shard("in", 2, *ranges(2)[0])) is None


@pytest.mark.parametrize("k", [0, -1, 1025, True, "2"])
def test_a_parallelism_out_of_range_is_refused_naming_it(k: object) -> None:
    with pytest.raises(ProtocolError, match="subtopology 's' has parallelism") as e:
        Topology((Subtopology("s", frozenset({"in"}), k),))  # type: ignore[arg-type]
    assert e.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(ProtocolError, match="parallelism names subtopology 'x'"):
        Topology.of({"s": ["in"]}, parallelism={"x": 2})


def test_the_assignor_spreads_the_ranges_of_a_hot_partition_over_members() -> None:
    d = Deployment(partitions=1, topology=HOT)
    for mid in ("a", "b", "c", "d"):
        d.join(mid, f"P-{mid}")
    d.settle()
    owners = d.actives()  # asserts no task is active on two members
    assert set(owners) == {TaskId("s", 0, r, 4) for r in range(4)}
    assert sorted(owners.values()) == ["a", "b", "c", "d"]  # one range each
    d.leave("d")
    d.settle()
    assert set(d.actives()) == {TaskId("s", 0, r, 4) for r in range(4)}
    assert sorted(d.actives().values()).count("d") == 0


def test_range_tasks_keep_standbys_and_move_through_warm_ups() -> None:
    d = Deployment(partitions=1, topology=HOT,
                   config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=5))
    a = d.join("a", "P1")
    d.commit("a", 100)
    assert a.owned.active == {TaskId("s", 0, r, 4) for r in range(4)}
    d.join("b", "P2")
    d.settle(restore=False)
    # b has no copy: balance wants two ranges there, so they warm up first (a still runs all four).
    assert len(d.target("b").warmup) == 2 and len(d.actives()) == 4
    assert set(d.actives().values()) == {"a"}
    d.settle()  # b restores: the warm-ups catch up, are promoted, and a keeps standbys of them
    owners = d.actives()
    assert sorted(owners.values()) == ["a", "a", "b", "b"]
    assert d.target("a").standby == d.target("b").active


def test_an_active_commits_its_range_of_each_partition_and_lag_is_measured_on_it() -> None:
    d = Deployment(partitions=1, topology=HOT)
    a = d.join("a", "P1")
    t = TaskId("s", 0, 2, 4)
    ok = d.sg.commit_offsets(OffsetCommitRequest(GROUP, "a", a.epoch, {source(t): 40}), d.now)
    assert ok.response.error is ErrorCode.NONE
    assert d.group().offsets[Shard(TOPIC, 0, *ranges(4)[2])].offset == 40
    whole = d.sg.commit_offsets(OffsetCommitRequest(GROUP, "a", a.epoch, {Shard(TOPIC, 0): 40}), d.now)
    assert whole.response.error is ErrorCode.NOT_OWNED
    assert "cuts its partitions into 4 key range(s)" in whole.response.message
    other_cut = d.sg.commit_offsets(
        OffsetCommitRequest(GROUP, "a", a.epoch, {Shard(TOPIC, 0, *ranges(2)[0]): 40}), d.now)
    assert other_cut.response.error is ErrorCode.NOT_OWNED
    # A copy's lag is the committed offset of its range minus where the copy is.
    d.committed[GROUP][source(t)] = 40
    report = StreamsHeartbeatRequest(GROUP, "a", a.epoch, task_offsets={t: {source(t): 25}})
    resp = d.sg.heartbeat(report, d.now)
    assert resp.response.error is ErrorCode.NONE
    assert d.sg.describe_group(GROUP).members[0].lags[t] == 15


def test_a_member_declaring_another_parallelism_is_refused_and_changes_nothing() -> None:
    d = Deployment(partitions=1, topology=HOT)
    d.join("a", "P1")
    before = len(d.records)
    other = Topology.of({"s": [TOPIC]}, parallelism={"s": 2})
    resp = d.sg.heartbeat(_join("b", other), d.now)
    assert resp.response.error is ErrorCode.INVALID_REQUEST and not resp.records
    assert "source topic 'in' of streams group 'g' has parallelism 4" in resp.response.message
    assert "this member declares 2 for it (subtopology 's')" in resp.response.message
    whole = d.sg.heartbeat(_join("b", Topology.of({"s": [TOPIC]})), d.now)
    assert whole.response.error is ErrorCode.INVALID_REQUEST
    assert len(d.records) == before and d.group().topology == HOT


def test_set_parallelism_on_a_streams_group_points_to_the_topology() -> None:
    c = Coordinator(topics=TopicMetadata({TOPIC: 1}))
    c.streams_heartbeat(_join("a", HOT), 0)
    out = c.set_parallelism(GROUP, TOPIC, 2, 0)
    assert out.response.error is ErrorCode.INVALID_REQUEST
    assert "part of its topology" in out.response.message
    # Through the one door too: a task's range commits and fetches; another cut is refused there.
    epoch = c.streams.groups[GROUP].current["a"].epoch
    mine = TaskId("s", 0, 1, 4).shard(TOPIC)
    committed = c.commit_offsets(OffsetCommitRequest(GROUP, "a", epoch, {mine: 5}), 0)
    assert committed.response.error is ErrorCode.NONE
    assert c.fetch_offsets(OffsetFetchRequest(GROUP, "a", epoch, (mine,))).offsets[mine].offset == 5
    half = Shard(TOPIC, 0, *ranges(2)[0])
    refused = c.commit_offsets(OffsetCommitRequest(GROUP, "a", epoch, {half: 5}), 0).response
    assert refused.error is ErrorCode.INVALID_REQUEST and "are none of its tasks'" in refused.message


def test_range_tasks_replay_from_the_records_and_the_snapshot() -> None:
    d = Deployment(partitions=2, topology=HOT)
    a = d.join("a", "P1")
    d.join("b", "P2")
    d.settle()
    d.sg.commit_offsets(OffsetCommitRequest(GROUP, "a", a.epoch,
                                            {source(t): 9 for t in d.members["a"].owned.active}), d.now)
    live = d.group()
    for history in (list(d.records), d.sg.snapshot()):
        rebuilt = replay(history)[GROUP]  # type: ignore[arg-type]
        assert rebuilt.topology == HOT and rebuilt.current == live.current and rebuilt.target == live.target
    d.restart_coordinator()
    assert d.group().current == live.current
    assert MemberTasks() != live.current["a"].assigned


CUT_2 = Topology.of({"s": [TOPIC]}, parallelism={"s": 2})


def _overlapping_actives(group: StreamsGroup) -> list[tuple[str, str]]:
    """Pairs of tasks held active (assigned or pending revocation) by two members that read some of
    the same keys: what rule 6 never lets happen."""
    actives = [(t, mid) for mid, c in sorted(group.current.items()) for t in sorted(held(c).active)]
    return [(f"{t}@{m}", f"{u}@{n}") for i, (t, m) in enumerate(actives) for u, n in actives[i + 1:]
            if m != n and t.overlaps(u)]


def test_a_topology_without_the_subtopology_does_not_open_the_way_to_another_cut() -> None:
    """The review's bypass: a declares s at K=4 (and runs its four ranges), b's topology leaves s out
    (the latest topology wins), then c declares s at K=2 — its tasks would be other cuts of the keys a
    still runs. The topic's cut is remembered for the group's life: c is refused, naming the topic
    and both parallelisms, also after a restart from the records or from a snapshot (which no longer
    has s in its topology), and so is a rename of the subtopology at another cut."""
    c = Coordinator(topics=TopicMetadata({TOPIC: 1, "x": 1}))
    records = list(c.streams_heartbeat(_join("a", HOT), 0).records)
    assert len(c.streams.groups[GROUP].current["a"].assigned.active) == 4
    without = c.streams_heartbeat(_join("b", Topology.of({"other": ["x"]})), 1)
    assert without.response.error is ErrorCode.NONE
    assert c.streams.groups[GROUP].topology == Topology.of({"other": ["x"]})
    records += without.records
    restarted = {"live": c, "records": Coordinator.recover(records, 2, topics=c.topics),
                 "snapshot": Coordinator.recover(c.snapshot(), 2, topics=c.topics)}
    assert SourceParallelismRecord(GROUP, TOPIC, 4) in c.snapshot()
    for how, coord in restarted.items():
        assert coord.streams.groups[GROUP].cuts == {TOPIC: 4, "x": 1}, how
        for other in (CUT_2, Topology.of({"t": [TOPIC]}), Topology.of({"t": [TOPIC]}, parallelism={"t": 8})):
            out = coord.streams_heartbeat(_join("c", other), 3)
            assert out.response.error is ErrorCode.INVALID_REQUEST and not out.records, how
            assert "source topic 'in' of streams group 'g' has parallelism 4" in out.response.message
            sub = other.subtopologies[0]
            assert f"declares {sub.parallelism} for it (subtopology {sub.subtopology_id!r})" \
                in out.response.message, how
        assert coord.streams_heartbeat(_join("c", HOT), 3).response.error is ErrorCode.NONE, how
        assert not _overlapping_actives(coord.streams.groups[GROUP]), how


def test_no_active_is_granted_beside_an_active_of_another_cut_of_its_keys() -> None:
    """Defence in depth: records written before rule 6 was kept may hold a changed cut. Then b's
    range of the new cut is withheld until a has released every range of the old cut it overlaps,
    and b is woken when a does."""
    d = Deployment(partitions=1, topology=HOT)
    a = d.join("a", "P1")
    assert len(a.owned.active) == 4
    d.records.append(TopologyRecord(GROUP, CUT_2))  # old data: K went 4 -> 2 through the bypass
    d.restart_coordinator()
    d.topology = CUT_2
    d.join("b", "P2")
    for _ in range(10):
        for mid in ("b", "a"):
            d.heartbeat(mid)
            assert not _overlapping_actives(d.group()), _overlapping_actives(d.group())
    assert sorted(d.actives().values()) == ["a", "b"]
    assert set(d.actives()) == {TaskId("s", 0, 0, 2), TaskId("s", 0, 1, 2)}
    # b waited, and was woken by a's release of the old cut, not left to its next heartbeat.
    assert any(o.response.member_id == "a" and (GROUP, "b") in o.wake for o in d.outcomes)


def test_a_reset_of_a_whole_partition_sets_every_range_of_it() -> None:
    """The review's silent no-op: on a group cutting ``in`` into 4, an operator's reset of ``in:0``
    sets each of the four ranges (replacing what the tasks committed); a range named beside its whole
    partition is refused; a deletion of ``in:0`` deletes every range's offset."""
    c = Coordinator(topics=TopicMetadata({TOPIC: 1}))
    c.streams_heartbeat(_join("a", HOT), 0)
    epoch = c.streams.groups[GROUP].current["a"].epoch
    mine = TaskId("s", 0, 1, 4).shard(TOPIC)
    assert c.commit_offsets(OffsetCommitRequest(GROUP, "a", epoch, {mine: 5}), 0).response.ok
    c.streams_heartbeat(StreamsHeartbeatRequest(GROUP, "a", LEAVE_EPOCH), 1)
    reset = c.reset_offsets(OffsetResetRequest(GROUP, {Shard(TOPIC, 0): 2}), 2)
    assert reset.response.ok
    everything = c.fetch_offsets(OffsetFetchRequest(GROUP, "", -1, None)).offsets
    assert {s: o.offset for s, o in everything.items()} == {
        TaskId("s", 0, r, 4).shard(TOPIC): 2 for r in range(4)}
    both = c.reset_offsets(OffsetResetRequest(GROUP, {Shard(TOPIC, 0): 0, mine: 9}), 3).response
    assert both.error is ErrorCode.INVALID_REQUEST and "cuts into 4 key ranges" in both.message
    assert c.fetch_offsets(OffsetFetchRequest(GROUP, "", -1, None)).offsets == everything
    assert c.delete_offsets(GROUP, (Shard(TOPIC, 0),)).response.ok
    assert c.fetch_offsets(OffsetFetchRequest(GROUP, "", -1, None)).offsets == {}


def test_offsets_set_before_the_group_existed_seed_every_range() -> None:
    """An operator's offsets for a group id nobody used yet are kept per whole partition (an empty
    consumer group's); the streams group that takes the id over cuts ``in`` into 4, so each range
    task resumes there."""
    c = Coordinator(topics=TopicMetadata({TOPIC: 1}))
    assert c.reset_offsets(OffsetResetRequest(GROUP, {Shard(TOPIC, 0): 70}, "m"), 0).response.ok
    c.streams_heartbeat(_join("a", HOT), 1)
    epoch = c.streams.groups[GROUP].current["a"].epoch
    shards = tuple(TaskId("s", 0, r, 4).shard(TOPIC) for r in range(4))
    got = c.fetch_offsets(OffsetFetchRequest(GROUP, "a", epoch, shards)).offsets
    assert got == {s: CommittedOffset(70, "m", -1) for s in shards}
    assert Shard(TOPIC, 0) not in c.fetch_offsets(OffsetFetchRequest(GROUP, "", -1, None)).offsets
