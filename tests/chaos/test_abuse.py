"""`regroup chaos abuse`, short: a real coordinator process, abusive clients sending the largest legal
heartbeats, a well-behaved member heartbeating and committing alongside. Outcomes only — latency
figures belong to the command's report (docs/benchmarks.md) — and that the large requests did take
the lane of large requests, as the coordinator counts them (its log at stop, its metrics)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import grpc
import pytest

from regroup.chaos.abuse import Settings, run_abuse
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.wire import SERVICE_NAME
from tests.coordinator.server_proc import start_server


def _lane_metrics(metrics_port: int) -> dict[str, float]:
    """``regroup_large_requests_total`` by result, from the coordinator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m["result"]: float(m["n"]) for m in
            re.finditer(r'^regroup_large_requests_total\{result="(?P<result>\w+)"\} (?P<n>\S+)$', text, re.M)}


def test_a_well_behaved_member_is_answered_while_clients_send_the_largest_legal_heartbeats(
        tmp_path: Path) -> None:
    report = run_abuse(Settings(abusers=2, seconds=4, members=1, heartbeat_interval_ms=500),
                       directory=str(tmp_path))

    hb, commits, abusive = report["heartbeats"], report["commits"], report["abusive"]
    assert hb["count"] >= 2 and hb["errors"] == 0, hb["error_samples"]
    assert commits["ok"] >= 1 and commits["errors"] == 0, commits["error_samples"]
    # The abuse was real: largest legal requests, answered by the coordinator (not lost).
    assert report["settings"]["owned"] == CoordinatorConfig().max_owned_shards
    assert abusive["request_bytes"] > 2_000_000
    assert abusive["served"] >= 1 and abusive["failed"] == 0, abusive
    assert report["coordinator_exited_cleanly"]
    # Through the lane: every abusive heartbeat answered was read there (the joins are small), and
    # each one the lane refused reached its client as RESOURCE_EXHAUSTED.
    lane = re.search(r"lane of large requests \(over \d+ bytes\): (\d+) read, (\d+) refused",
                     (tmp_path / "data.log").read_text())
    assert lane is not None, "the coordinator did not report its lane of large requests at stop"
    read, refused = int(lane[1]), int(lane[2])
    assert read >= abusive["served"] >= 1, (read, abusive)
    assert refused <= abusive["codes"].get("RESOURCE_EXHAUSTED", 0), (refused, abusive)


def test_large_requests_take_the_lane_and_are_answered_as_small_ones(tmp_path: Path) -> None:
    """Over ``large_request_bytes``: a heartbeat on a stream, a unary one, a malformed body."""
    server = start_server(tmp_path / "data", "--log", "static:orders=2", "--metrics-port", "0")
    assert server.metrics_port is not None
    try:
        owned = frozenset(Shard("gone", p) for p in range(100_000))  # about 300 KB encoded
        with CoordinatorClient(server.address, heartbeat_stream=True) as streaming, \
                CoordinatorClient(server.address, heartbeat_stream=False) as unary:
            for name, client in (("s", streaming), ("u", unary)):
                joined = client.heartbeat(HeartbeatRequest("lane", name, 0, rebalance_timeout_ms=30_000,
                                                           subscribed_topics=("orders",), owned=frozenset()))
                assert joined.error is ErrorCode.NONE, joined.message
                big = client.heartbeat(HeartbeatRequest("lane", name, joined.member_epoch, owned=owned))
                assert big.error is ErrorCode.NONE and big.assignment is not None, big.message
                # Refused by the core's check on the lane, in the core's words.
                bad = client.heartbeat(HeartbeatRequest("lane", name, joined.member_epoch,
                                                        owned=owned | {Shard("gone", -1)}))
                assert bad.error is ErrorCode.INVALID_REQUEST and "negative partition: gone:-1" in bad.message
        channel = grpc.insecure_channel(server.address)
        call = channel.unary_unary(f"/{SERVICE_NAME}/Heartbeat", request_serializer=None,
                                   response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            call(b"\xff" * (CoordinatorConfig().large_request_bytes + 1), timeout=30)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed Heartbeat request" in (err.value.details() or "")
        channel.close()
        # Each of the five large bodies (two heartbeats of each client, the malformed one) was read
        # on the lane, none refused; the joins, small, never went there.
        assert _lane_metrics(server.metrics_port) == {"read": 5.0, "refused": 0.0}
    finally:
        assert server.terminate() == 0
