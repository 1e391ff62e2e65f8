"""Lanes of a streams task (`regroup.protocol.streams.offsets` rule 2): an active reading a source
partition split on the producer side commits its task's part as one lane per open piece; the
coordinator keeps them as fragments of the task's part, fetches them with it, measures lag on the
lowest, and refuses a commit below the task's floor or outside every task's range."""

from __future__ import annotations

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import ranges
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest, OffsetResetRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.protocol.topics import TopicMetadata
from tests.protocol.streams.fake_members import GROUP, REBALANCE_MS, TOPIC

HOT = Topology.of({"s": [TOPIC]}, parallelism={"s": 2})
TASK = TaskId("s", 0, 1, 2)


def _started(topology: Topology) -> tuple[Coordinator, int]:
    c = Coordinator(topics=TopicMetadata({TOPIC: 1}))
    c.streams_heartbeat(StreamsHeartbeatRequest(GROUP, "a", 0, process_id="P-a",
                                                rebalance_timeout_ms=REBALANCE_MS, topology=topology), 0)
    return c, c.streams.groups[GROUP].current["a"].epoch


def _commit(c: Coordinator, epoch: int, offsets: dict[Shard, int]) -> tuple[ErrorCode, str]:
    ack = c.commit_offsets(OffsetCommitRequest(GROUP, "a", epoch, offsets), 0).response
    return ack.error, ack.message


def _fetch(c: Coordinator, epoch: int, shard: Shard) -> dict[Shard, int]:
    got = c.fetch_offsets(OffsetFetchRequest(GROUP, "a", epoch, (shard,)))
    assert got.error is ErrorCode.NONE, got.message
    return {s: o.offset for s, o in got.offsets.items()}


def test_lanes_of_a_task_commit_as_fragments_and_fold_back_when_committed_whole() -> None:
    c, epoch = _started(HOT)
    own = TASK.shard(TOPIC)
    lo, hi = ranges(2)[1]
    mid = (lo + hi) // 2
    left, right = Shard(TOPIC, 0, lo, mid), Shard(TOPIC, 0, mid, hi)
    assert _commit(c, epoch, {own: 10})[0] is ErrorCode.NONE
    # Split: each lane on its own, from the task's commit.
    assert _commit(c, epoch, {left: 30, right: 20})[0] is ErrorCode.NONE
    assert _fetch(c, epoch, own) == {left: 30, right: 20}
    assert _fetch(c, epoch, TaskId("s", 0, 0, 2).shard(TOPIC)) == {}  # the other task has none
    # Below the task's floor (its lowest fragment) is behind; between the two is not.
    error, message = _commit(c, epoch, {left: 15})
    assert error is ErrorCode.OFFSET_OUT_OF_ORDER and "lowest 20" in message
    assert _commit(c, epoch, {right: 25})[0] is ErrorCode.NONE
    # A range over two tasks' keys is no task's lane.
    error, message = _commit(c, epoch, {Shard(TOPIC, 0, mid - (hi - lo), mid): 40})
    assert error is ErrorCode.INVALID_REQUEST and "are none of its tasks'" in message
    # Merged back: the task's part committed whole folds its lanes into one fragment.
    assert _commit(c, epoch, {own: 30})[0] is ErrorCode.NONE
    assert _fetch(c, epoch, own) == {own: 30}


def test_a_task_kept_in_lanes_lags_from_its_lowest_lane() -> None:
    c, epoch = _started(Topology.of({"s": [TOPIC]}))
    whole = TaskId("s", 0)
    lanes = [Shard(TOPIC, 0, lo, hi) for lo, hi in ranges(2)]
    assert _commit(c, epoch, {lanes[0]: 50, lanes[1]: 40})[0] is ErrorCode.NONE
    report = StreamsHeartbeatRequest(GROUP, "a", epoch, task_offsets={whole: {whole.shard(TOPIC): 25}})
    assert c.streams_heartbeat(report, 0).response.error is ErrorCode.NONE
    assert c.streams.describe_group(GROUP).members[0].lags[whole] == 15


def test_a_reset_of_a_task_replaces_its_lanes() -> None:
    c, epoch = _started(Topology.of({"s": [TOPIC]}))
    lanes = [Shard(TOPIC, 0, lo, hi) for lo, hi in ranges(2)]
    assert _commit(c, epoch, {lanes[0]: 50, lanes[1]: 40})[0] is ErrorCode.NONE
    c.streams_heartbeat(StreamsHeartbeatRequest(GROUP, "a", -1), 0)  # leave: resets need no members
    reset = c.reset_offsets(OffsetResetRequest(GROUP, {Shard(TOPIC, 0): 5}), 0).response
    assert reset.error is ErrorCode.NONE, reset.message
    got = c.fetch_offsets(OffsetFetchRequest(GROUP, "", -1, None))
    assert {s: o.offset for s, o in got.offsets.items()} == {Shard(TOPIC, 0): 5}
