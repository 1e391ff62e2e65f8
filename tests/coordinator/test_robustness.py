"""Nothing a client sends can crash the coordinator or corrupt a group; core failures stop the service.

The fuzz test sends arbitrary protobuf requests through the same path as the server (wire decoding,
then the core) and checks that every call answers, and that replaying the records rebuilds exactly
the live state (the records are a faithful log of what changed).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.store import DurableStore
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.records import Record
from regroup.protocol.topics import TopicMetadata
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import wire
from regroup.rpc.errors import WireError

# Mostly well-formed values (so that groups really form), with malformed ones mixed in.
groups = st.sampled_from(["g", "g", "h", ""])
members = st.sampled_from(["a", "b", "c", "a", "b", "c", "", "x" * 300])
topics = st.sampled_from(["t", "u", "t", "u", "nope", "", "t" * 300])
epochs = st.integers(-3, 6)
shard_sets = st.lists(st.builds(pb.TopicPartitions, topic=topics,
                                partitions=st.lists(st.integers(-1, 5), max_size=4)), max_size=3)


@st.composite
def heartbeats(draw: st.DrawFn) -> pb.HeartbeatRequest:
    joining = draw(st.booleans())
    epoch = 0 if joining else draw(epochs)
    msg = pb.HeartbeatRequest(group_id=draw(groups), member_id=draw(members), member_epoch=epoch)
    if draw(st.integers(0, 4)) == 0:
        msg.instance_id = draw(st.sampled_from(["i1", "i2", ""]))
    if joining or draw(st.integers(0, 4)) == 0:
        msg.rebalance_timeout_ms = draw(st.sampled_from([60_000, 5_000, 0, -5]))
    if joining or draw(st.integers(0, 4)) == 0:
        msg.subscribed_topics.SetInParent()
        choices = [["t"], ["t", "u"], ["u"], [], ["nope", ""]]
        msg.subscribed_topics.values.extend(draw(st.sampled_from(choices)))
    if draw(st.integers(0, 4)) == 0:
        msg.subscribed_regex = draw(st.sampled_from(["t.*", "", "(a)\\1", "[", "u|t"]))
    if draw(st.integers(0, 5)) == 0:
        msg.assignor = draw(st.sampled_from(["uniform", "range", "mine", ""]))
    if draw(st.integers(0, 5)) == 0:
        msg.client_assignors.SetInParent()
        msg.client_assignors.values.extend(draw(st.lists(st.sampled_from(["mine", ""]), max_size=2)))
    if joining:
        msg.owned.SetInParent()
        if draw(st.integers(0, 5)) == 0:
            msg.owned.topics.extend(draw(shard_sets))
    elif draw(st.booleans()):
        msg.owned.SetInParent()
        msg.owned.topics.extend(draw(shard_sets))
    return msg


def commits(admin: bool) -> st.SearchStrategy[Any]:
    offsets = st.lists(st.builds(pb.TopicOffsets, topic=topics, partitions=st.lists(
        st.builds(pb.PartitionOffset, partition=st.integers(-1, 9), offset=st.integers(-2, 100)),
        max_size=3)),
        max_size=2)
    if admin:
        return st.builds(pb.ResetOffsetsRequest, group_id=groups, topics=offsets)
    return st.builds(pb.OffsetCommitRequest, group_id=groups, member_id=members, member_epoch=epochs,
                     topics=offsets, metadata=st.sampled_from(["", "m" * 5000]))


ops = st.one_of(
    heartbeats(), heartbeats(), heartbeats(), commits(False), commits(True),
    st.builds(pb.DeleteOffsetsRequest, group_id=groups),
    st.builds(pb.DeleteGroupRequest, group_id=groups),
    st.builds(pb.InstallAssignmentRequest, group_id=groups, member_id=members, member_epoch=epochs,
              group_epoch=epochs),
    # A faithful member: its current epoch, owning what it was assigned (drives reconciliation).
    st.tuples(st.just("follow"), st.sampled_from(["g", "h"]), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("follow"), st.sampled_from(["g", "h"]), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("commit"), st.sampled_from(["g", "h"]), st.sampled_from(["a", "b", "c"])),
    st.integers(1, 200_000),  # time passes: timers fire
    st.sampled_from([{"t": 3, "u": 2}, {"t": 5}, {}]),  # topic metadata changes
)


def apply(coord: Coordinator, op: Any, now: int) -> tuple[Record, ...]:
    if isinstance(op, int):
        return coord.expire(now).records
    if isinstance(op, dict):
        return coord.update_topics(TopicMetadata(op), now).records
    if isinstance(op, tuple):
        kind, gid, mid = op
        group = coord.groups.get(gid)
        cur = group.current.get(mid) if group is not None else None
        if cur is None:
            return ()
        if kind == "commit":
            offsets = dict.fromkeys(cur.assigned | cur.pending_revocation, now)
            if not offsets:
                return ()
            return coord.commit_offsets(OffsetCommitRequest(gid, mid, cur.epoch, offsets), now).records
        return coord.heartbeat(HeartbeatRequest(gid, mid, cur.epoch, owned=cur.assigned), now).records
    try:
        if isinstance(op, pb.HeartbeatRequest):
            return coord.heartbeat(wire.heartbeat_request_from_pb(op), now).records
        if isinstance(op, pb.OffsetCommitRequest):
            return coord.commit_offsets(wire.commit_request_from_pb(op), now).records
        if isinstance(op, pb.ResetOffsetsRequest):
            return coord.reset_offsets(wire.reset_request_from_pb(op), now).records
    except WireError:
        return ()
    if isinstance(op, pb.DeleteOffsetsRequest):
        return coord.delete_offsets(op.group_id, None).records
    if isinstance(op, pb.DeleteGroupRequest):
        return coord.delete_group(op.group_id).records
    if isinstance(op, pb.InstallAssignmentRequest):
        return coord.install_assignment(op.group_id, op.member_id, op.member_epoch, op.group_epoch, {},
                                        now).records
    raise AssertionError(op)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=40))
def test_arbitrary_requests_never_crash_and_records_replay_exactly(sequence: list[Any]) -> None:
    config = CoordinatorConfig(session_timeout_ms=30_000, heartbeat_interval_ms=1_000)
    coord = Coordinator(config, topics=TopicMetadata({"t": 3, "u": 2}))
    log: list[Record] = []
    now = 0
    for op in sequence:
        if isinstance(op, int):
            now += op
        log.extend(apply(coord, op, now))
    replayed = Coordinator.recover(log, now, config, topics=coord.topics)
    assert replayed.groups == coord.groups


def test_a_core_failure_stops_the_service(tmp_path: Path) -> None:
    """If the core raises while changing state, memory may differ from disk: stop, don't limp on."""

    class Exploding(Coordinator):
        def expire(self, now: int) -> Any:
            raise RuntimeError("boom")

    async def main() -> None:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        service = CoordinatorService(Exploding(), store)
        service._on_timer()
        assert service.stopped.is_set() and "RuntimeError: boom" in service.fatal_reason
        await service.close()
        await store.close()

    asyncio.run(main())


def random_op(rng: random.Random) -> Any:
    """A seeded, well-mixed operation: mostly faithful members, some malformed requests."""
    r = rng.random()
    gid, mid = rng.choice(["g", "h"]), rng.choice(["a", "b", "c", "d"])
    if r < 0.35:
        return ("follow", gid, mid)
    if r < 0.45:
        return ("commit", gid, mid)
    if r < 0.60:
        msg = pb.HeartbeatRequest(group_id=gid, member_id=mid, member_epoch=0, rebalance_timeout_ms=60_000)
        msg.subscribed_topics.SetInParent()
        msg.subscribed_topics.values.extend(rng.choice([["t"], ["t", "u"], ["u"], ["nope"]]))
        if rng.random() < 0.2:
            msg.instance_id = rng.choice(["i1", "i2"])
        if rng.random() < 0.1:
            msg.subscribed_regex = rng.choice(["t.*", "u|t", ""])
        if rng.random() < 0.1:
            msg.assignor = rng.choice(["uniform", "range", "mine"])
        if rng.random() < 0.1:
            msg.client_assignors.SetInParent()
            msg.client_assignors.values.append("mine")
        msg.owned.SetInParent()
        return msg
    if r < 0.66:
        return pb.HeartbeatRequest(group_id=gid, member_id=mid, member_epoch=rng.choice([-1, -2]),
                                   instance_id=rng.choice(["i1", "i2"]))
    if r < 0.72:
        msg = pb.HeartbeatRequest(group_id=gid, member_id=mid, member_epoch=rng.randint(-3, 8))
        if rng.random() < 0.5:
            msg.owned.SetInParent()
            msg.owned.topics.add(topic=rng.choice(["t", "u", "x"]), partitions=[rng.randint(-1, 5)])
        return msg
    if r < 0.85:
        return rng.choice([100, 1_000, 5_000, 40_000, 70_000])
    if r < 0.90:
        return rng.choice([{"t": 3, "u": 2}, {"t": 5, "u": 2}, {"t": 5}, {"t": 3, "u": 2, "tx": 1}])
    if r < 0.95:
        reset = pb.ResetOffsetsRequest(group_id=gid, topics=[pb.TopicOffsets(
            topic="t", partitions=[pb.PartitionOffset(partition=0, offset=rng.randint(0, 9))])])
        return rng.choice([pb.DeleteOffsetsRequest(group_id=gid), pb.DeleteGroupRequest(group_id=gid), reset])
    return pb.InstallAssignmentRequest(group_id=gid, member_id=mid, member_epoch=rng.randint(0, 5),
                                       group_epoch=rng.randint(0, 5))


def run_random(seed: int, steps: int) -> tuple[Coordinator, int]:
    rng = random.Random(seed)
    config = CoordinatorConfig(session_timeout_ms=45_000, heartbeat_interval_ms=1_000)
    coord = Coordinator(config, topics=TopicMetadata({"t": 3, "u": 2}))
    log: list[Record] = []
    now = 0
    for _ in range(steps):
        op = random_op(rng)
        if isinstance(op, int):
            now += op
        log.extend(apply(coord, op, now))
        assert Coordinator.recover(log, now, config, topics=coord.topics).groups == coord.groups, (seed, op)
    return coord, len(log)


def test_seeded_random_sessions_never_crash_and_replay_exactly() -> None:
    formed = 0
    for seed in range(30):
        coord, _ = run_random(seed, 150)
        formed += sum(1 for g in coord.groups.values() if len(g.members) >= 2)
    assert formed >= 10  # the sessions really exercise multi-member groups
