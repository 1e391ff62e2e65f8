"""Offsets committed before the group cut their topic (`state._cut`): a whole partition reset while no
topology read the topic, or a whole-partition task's lanes, are cut along the new tasks' ranges when
the topology that first cuts the topic is accepted — live, after replay and after a snapshot — so
that every task resumes from them and none is refused a commit by a fragment of another's keys."""

from __future__ import annotations

import random

import pytest

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import ranges
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest, OffsetResetRequest
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.protocol.streams.messages import LEAVE_EPOCH, StreamsHeartbeatRequest
from regroup.protocol.streams.records import StreamsEpochRecord, StreamsOffsetRecord, TopologyRecord
from regroup.protocol.streams.state import StreamsGroup, replay
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.protocol.topics import TopicMetadata

OTHER = Topology.of({"o": ["x"]})
CUT = Topology.of({"s": ["in"]}, parallelism={"s": 4})


def _hb(c: Coordinator, member: str, topology: Topology | None, now: int, epoch: int = 0) -> None:
    out = c.streams_heartbeat(StreamsHeartbeatRequest("g", member, epoch, process_id="P-" + member,
                                                      rebalance_timeout_ms=1000, topology=topology), now)
    assert out.response.error is ErrorCode.NONE, out.response


def _reset_before_cut() -> tuple[Coordinator, list[AnyRecord]]:
    """A group reading only ``x``; an operator resets ``in:0`` to 50; a topology cutting ``in`` into 4."""
    c = Coordinator(topics=TopicMetadata({"in": 1, "x": 1}))
    records: list[AnyRecord] = []
    for step in (
        lambda: c.streams_heartbeat(StreamsHeartbeatRequest("g", "a", 0, process_id="P-a",
                                                            rebalance_timeout_ms=1000, topology=OTHER), 0),
        lambda: c.streams_heartbeat(StreamsHeartbeatRequest("g", "a", LEAVE_EPOCH), 1),
        lambda: c.reset_offsets(OffsetResetRequest("g", {Shard("in", 0): 50}), 2),
        lambda: c.streams_heartbeat(StreamsHeartbeatRequest("g", "b", 0, process_id="P-b",
                                                            rebalance_timeout_ms=1000, topology=CUT), 3),
    ):
        out = step()
        assert out.response.error is ErrorCode.NONE, out.response
        records += out.records
    return c, records


def _range_offsets(g: StreamsGroup) -> dict[tuple[int, int], int]:
    return {(s.lo, s.hi): o.offset for s, o in g.offsets.items()}


def _commits_of_every_task(c: Coordinator) -> None:
    g = c.streams.groups["g"]
    epoch = g.current["b"].epoch
    for r in range(4):
        own = TaskId("s", 0, r, 4).shard("in")
        got = c.fetch_offsets(OffsetFetchRequest("g", "b", epoch, (own,))).offsets
        assert {s: o.offset for s, o in got.items()} == {own: 50}  # every task resumes from the reset
    t0, t1 = TaskId("s", 0, 0, 4).shard("in"), TaskId("s", 0, 1, 4).shard("in")
    ack = c.commit_offsets(OffsetCommitRequest("g", "b", epoch, {t0: 60}), 4).response
    assert ack.error is ErrorCode.NONE, ack
    ack = c.commit_offsets(OffsetCommitRequest("g", "b", epoch, {t1: 10}), 4).response
    assert ack.error is ErrorCode.OFFSET_OUT_OF_ORDER  # below its own floor: still refused
    ack = c.commit_offsets(OffsetCommitRequest("g", "b", epoch, {t1: 55}), 4).response
    assert ack.error is ErrorCode.NONE, ack  # not held back by task 0's 60
    assert _range_offsets(g) == dict(zip(ranges(4), (60, 55, 50, 50), strict=True))


def test_a_whole_partition_reset_becomes_the_ranges_of_the_topology_that_first_cuts_the_topic() -> None:
    c, _ = _reset_before_cut()
    g = c.streams.groups["g"]
    assert g.offsets == {Shard("in", 0, lo, hi): g.offsets[Shard("in", 0, lo, hi)] for lo, hi in ranges(4)}
    assert {o.offset for o in g.offsets.values()} == {50}
    _hb(c, "b", None, 4, g.current["b"].epoch)  # takes its tasks
    _commits_of_every_task(c)


def test_the_cut_is_the_same_after_replay_and_after_a_snapshot() -> None:
    c, records = _reset_before_cut()
    live = c.streams.groups["g"]
    again = Coordinator.recover(records, 3, topics=c.topics).streams.groups["g"]
    snap = Coordinator.recover(c.snapshot(), 3, topics=c.topics).streams.groups["g"]
    for g in (again, snap):
        assert g.offsets == live.offsets and g.offset_parts == live.offset_parts and g.cuts == live.cuts
    c2 = Coordinator.recover(records, 3, topics=c.topics)
    _hb(c2, "b", None, 4, c2.streams.groups["g"].current["b"].epoch)
    _commits_of_every_task(c2)


def test_records_hold_no_conversion_so_old_data_replays_cut_too() -> None:
    """The pieces are derived by `apply`, not written: data written before the rule (a whole offset
    then the cutting topology) is the same records, and replays to the cut state."""
    c, records = _reset_before_cut()
    assert [r.shard for r in records if isinstance(r, StreamsOffsetRecord)] == [Shard("in", 0)]
    g = Coordinator.recover(records, 3, topics=c.topics).streams.groups["g"]
    assert _range_offsets(g) == dict.fromkeys(ranges(4), 50)


def test_lanes_of_a_whole_partition_task_are_cut_at_the_range_bounds() -> None:
    half, third = KEY_SPACE // 2, KEY_SPACE // 3
    g = replay([
        StreamsEpochRecord("g", 1),
        TopologyRecord("g", Topology.of({"s": ["in"]})),
        StreamsOffsetRecord("g", Shard("in", 0, 0, half), 70, "m", 3),  # two lanes' fragments
        StreamsOffsetRecord("g", Shard("in", 0, half, KEY_SPACE), 60, "m", 3),
        StreamsOffsetRecord("g", Shard("in", 1), 5),
        TopologyRecord("g", Topology.of({"s": ["in"]}, parallelism={"s": 3})),
    ])["g"]
    by_partition = {p: {(s.lo, s.hi): o.offset for s, o in g.offsets.items() if s.partition == p}
                    for p in (0, 1)}
    # Each key keeps its position; the fragment holding range 1's middle stays two pieces inside it.
    assert by_partition[0] == {(0, third): 70, (third, half): 70, (half, 2 * third): 60,
                               (2 * third, KEY_SPACE): 60}
    assert by_partition[1] == {(lo, hi): 5 for lo, hi in ranges(3)}
    assert g.offset_parts[("in", 0)] == {Shard("in", 0, lo, hi) for lo, hi in by_partition[0]}
    assert all(o.metadata == "m" and o.commit_epoch == 3 for s, o in g.offsets.items() if s.partition == 0)


TOPOS = [
    Topology.of({"s": ["a"]}, parallelism={"s": 4}),
    Topology.of({"o": ["b"]}),
    Topology.of({"t": ["a"]}, parallelism={"t": 4}),
    Topology.of({"u": ["b", "c"]}, parallelism={"u": 2}),
    Topology.of({"v": ["c"]}),
]


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_replay_and_snapshot_to_the_live_state(seed: int) -> None:
    rnd = random.Random(seed)
    c = Coordinator(topics=TopicMetadata({"a": 1, "b": 1, "c": 1}))
    records: list[AnyRecord] = []
    for now in range(1, 40):
        op = rnd.random()
        g = c.streams.groups.get("g")
        if op < 0.4:
            m = rnd.choice("xyz")
            join = StreamsHeartbeatRequest("g", m, 0, process_id="P" + m, rebalance_timeout_ms=1000,
                                           topology=rnd.choice(TOPOS))
            records += c.streams_heartbeat(join, now).records
        elif op < 0.6 and g is not None:
            for m in sorted(g.members):
                records += c.streams_heartbeat(StreamsHeartbeatRequest("g", m, LEAVE_EPOCH), now).records
        elif op < 0.85 and g is not None and not g.members:
            shard = Shard(rnd.choice("abc"), 0)
            records += c.reset_offsets(OffsetResetRequest("g", {shard: rnd.randint(0, 9)}), now).records
        g = c.streams.groups.get("g")
        if g is None:
            continue
        for other in (Coordinator.recover(records, now, topics=c.topics),
                      Coordinator.recover(c.snapshot(), now, topics=c.topics)):
            r = other.streams.groups["g"]
            assert (r.cuts, r.offsets, r.offset_parts) == (g.cuts, g.offsets, g.offset_parts)
        for topic, k in g.cuts.items():  # no committed fragment crosses a range of its topic's cut
            bounds = {lo for lo, _ in ranges(k)}
            assert not any(s.lo < b < s.hi for s in g.offsets if s.topic == topic for b in bounds)
