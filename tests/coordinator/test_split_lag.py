"""Lag of a partition split on the producer side, through a real coordinator process and the embedded
log: each lane a consumer commits is measured against its own piece's end (`regroup.protocol.lag`),
not against the partition's highest piece end."""

from __future__ import annotations

from pathlib import Path

from regroup.log import LogRecord, open_log
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import key_hash
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.shard import EMPTY, KEY_SPACE, Shard
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import start_server

HALF = KEY_SPACE // 2


def _keys(low: bool, n: int) -> list[bytes]:
    out: list[bytes] = []
    i = 0
    while len(out) < n:
        k = b"key-%d" % i
        if (key_hash(k, 0) < HALF) == low:
            out.append(k)
        i += 1
    return out


def test_each_lane_of_a_split_partition_lags_behind_its_own_piece(tmp_path: Path) -> None:
    log = open_log(str(tmp_path / "log"))
    assert isinstance(log, EmbeddedLog)
    log.create_topic("orders", 1)
    log.produce("orders", 0, [LogRecord(k, b"x", 0) for k in _keys(True, 5) + _keys(False, 5)])  # 0..9
    log.split_partition("orders", 0, 2)  # two pieces, each from offset 10
    log.produce("orders", 0, [LogRecord(k, b"x", 0) for k in _keys(True, 5)])  # left: 10..14
    log.produce("orders", 0, [LogRecord(k, b"x", 0) for k in _keys(False, 20)])  # right: 10..29
    log.close()
    server = start_server(tmp_path / "data", "--log", str(tmp_path / "log"), "--topic-refresh-s", "0.5")
    client = CoordinatorClient(server.address, timeout_s=5)
    try:
        joined = client.heartbeat(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=30_000,
                                                   subscribed_topics=("orders",), owned=EMPTY))
        assert joined.error is ErrorCode.NONE and joined.assignment == frozenset({Shard("orders", 0)})
        left, right = Shard("orders", 0, 0, HALF), Shard("orders", 0, HALF, KEY_SPACE)
        ack = client.commit_offsets(OffsetCommitRequest("g", "a", joined.member_epoch, {left: 12, right: 25}))
        assert ack.ok, ack.message
        status = {o.shard: o for o in client.describe_group("g").offsets}
        assert (status[left].log_end_offset, status[left].lag) == (15, 3)
        assert (status[right].log_end_offset, status[right].lag) == (30, 5)
    finally:
        client.close()
        server.terminate()
