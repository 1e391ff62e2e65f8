"""Streams groups through a real coordinator process: heartbeats over gRPC, commits by the active,
describe, the group-id namespace, and recovery of everything after kill -9."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest, OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable, RequestRejected
from tests.coordinator.server_proc import start_server

T = TypeVar("T")
TOPOLOGY = Topology.of({"count": ["orders"]})
ALL = frozenset(TaskId("count", p) for p in range(4))


def eventually(call: Callable[[], T], timeout: float = 20) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except CoordinatorUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def join(c: CoordinatorClient, mid: str, pid: str) -> StreamsHeartbeatResponse:
    return c.streams_heartbeat(StreamsHeartbeatRequest("counts", mid, 0, process_id=pid,
                                                       rebalance_timeout_ms=5000, topology=TOPOLOGY))


def test_streams_group_over_grpc_survives_kill_9(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:orders=4", "--standby-replicas", "1")
    c = CoordinatorClient(s.address, timeout_s=5)
    try:
        a = join(c, "a", "P1")
        assert a.error is ErrorCode.NONE and a.assignment is not None and a.assignment.active == ALL
        b = join(c, "b", "P2")
        assert b.error is ErrorCode.NONE and b.assignment is not None
        assert not b.assignment.active  # nothing moves to a process that has no copy yet

        # Only the active commits; the offsets come back with their metadata.
        shards = {Shard("orders", p): 10 + p for p in range(4)}
        ack = c.commit_offsets(OffsetCommitRequest("counts", "a", a.member_epoch, shards, "changelog"))
        assert ack.ok, ack.message
        refused = c.commit_offsets(OffsetCommitRequest("counts", "b", b.member_epoch,
                                                       {Shard("orders", 0): 1}))
        assert refused.error is ErrorCode.NOT_OWNED

        # One namespace: a consumer cannot join a streams group, and says why.
        consumer = c.heartbeat(HeartbeatRequest("counts", "c", 0, rebalance_timeout_ms=5000,
                                                subscribed_topics=("orders",), owned=frozenset()))
        assert consumer.error is ErrorCode.INVALID_REQUEST and "streams group" in consumer.message
        with pytest.raises(RequestRejected, match="streams group"):
            c.describe_group("counts")

        before = c.describe_streams_group("counts")
        assert {m.member_id for m in before.members} == {"a", "b"}
        assert before.members[1].target.standby or before.members[1].target.warmup

        s.kill9()
        s = s.restart()
        after = eventually(lambda: c.describe_streams_group("counts"))
        assert (after.epoch, after.target_epoch) == (before.epoch, before.target_epoch)
        assert [(m.member_id, m.assigned, m.target) for m in after.members] == \
            [(m.member_id, m.assigned, m.target) for m in before.members]
        fetched = c.fetch_offsets(OffsetFetchRequest("counts", "", -1, None))
        assert {sh: o.offset for sh, o in fetched.offsets.items()} == shards
        # a's heartbeat after the restart finds the epoch b's join made, and keeps its tasks.
        beat = StreamsHeartbeatRequest("counts", "a", a.member_epoch, owned=a.assignment)
        again = c.streams_heartbeat(beat)
        assert again.error is ErrorCode.NONE and again.member_epoch == before.epoch
        assert again.assignment is None or again.assignment.active == ALL
    finally:
        c.close()
        assert s.terminate() == 0, s.log()


def test_groups_describe_shows_a_streams_group_by_role(tmp_path: Path) -> None:
    """`regroup groups describe` on a streams group (text and --json), through a real coordinator."""
    import json
    import subprocess
    import sys

    s = start_server(tmp_path / "data", "--log", "static:orders=4", "--standby-replicas", "1")
    c = CoordinatorClient(s.address, timeout_s=5)
    try:
        join(c, "a", "P1")
        join(c, "b", "P2")

        def describe(*extra: str) -> str:
            return subprocess.run([sys.executable, "-m", "regroup.cli", "groups", "describe", "counts",
                                   "--coordinator", s.address, *extra],
                                  capture_output=True, text=True, check=True, timeout=60).stdout

        doc = json.loads(describe("--json"))
        assert doc["kind"] == "streams" and doc["ready"] and doc["topology"] == {"count": ["orders"]}
        by_id = {m["member_id"]: m for m in doc["members"]}
        assert by_id["a"]["assigned"]["active"] == [f"count_{p}" for p in range(4)]
        assert by_id["b"]["process_id"] == "P2" and not by_id["b"]["assigned"]["active"]
        text = describe()
        assert "streams group" in text and "count <- orders" in text and "count[0,1,2,3]" in text
    finally:
        c.close()
        assert s.terminate() == 0, s.log()
