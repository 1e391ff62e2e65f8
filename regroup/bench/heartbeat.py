"""`regroup bench heartbeat`: the cost of one steady heartbeat through the protocol core.

A group of N members is built and brought to a stable state; then every member heartbeats in turn,
once with a delta request (nothing changed: the common case) and once with a full request (owned
shards listed). This measures the core alone — no network, no durable store — which is the floor
under the coordinator service's latency.
"""

from __future__ import annotations

import json
import time
from statistics import median

from rich.console import Console

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import EMPTY, ShardSet
from regroup.protocol.topics import TopicMetadata


def stable_group(
    members: int, partitions_per_member: int = 5,
) -> tuple[Coordinator, dict[str, tuple[int, ShardSet]]]:
    """A coordinator with one group of ``members`` members, all stable. Returns epochs and owned."""
    coord = Coordinator(topics=TopicMetadata({"t": members * partitions_per_member}))
    now = 0
    state: dict[str, tuple[int, ShardSet]] = {}
    for i in range(members):
        mid = f"m{i:06d}"
        join = HeartbeatRequest("g", mid, 0, rebalance_timeout_ms=60_000, subscribed_topics=("t",),
                                owned=EMPTY)
        r = coord.heartbeat(join, now).response
        state[mid] = (r.member_epoch, r.assignment or EMPTY)
    for _ in range(4):  # revoke, then assign: a couple of rounds converge everyone
        for mid, (epoch, owned) in state.items():
            r = coord.heartbeat(HeartbeatRequest("g", mid, epoch, owned=owned), now).response
            assert r.error is ErrorCode.NONE, r.message
            state[mid] = (r.member_epoch, r.assignment if r.assignment is not None else owned)
    assert coord.describe_group("g").state.value == "stable"
    return coord, state


def run_heartbeat_bench(members: int, json_output: bool) -> None:
    coord, state = stable_group(members)
    delta = [HeartbeatRequest("g", mid, e) for mid, (e, _) in state.items()]
    full = [HeartbeatRequest("g", mid, e, owned=o) for mid, (e, o) in state.items()]
    results = {}
    for name, reqs in (("delta", delta), ("full", full)):
        rounds = []
        for r in range(7):
            t0 = time.perf_counter()
            for req in reqs:
                coord.heartbeat(req, r)
            rounds.append((time.perf_counter() - t0) / len(reqs))
        results[name] = median(rounds) * 1e6
    out = {"members": members, "us_per_heartbeat_delta": round(results["delta"], 2),
           "us_per_heartbeat_full": round(results["full"], 2),
           "heartbeats_per_second_one_core": round(1e6 / results["delta"])}
    if json_output:
        print(json.dumps(out))
        return
    c = Console()
    c.print(f"Steady heartbeat, {members} stable members, protocol core only (median of 7 rounds):")
    c.print(f"  delta request (nothing changed): {out['us_per_heartbeat_delta']} µs")
    c.print(f"  full request (owned shards listed, 5 each): {out['us_per_heartbeat_full']} µs")
    c.print(f"  ≈ {out['heartbeats_per_second_one_core']:,} heartbeats/s on one core "
            f"(10,000 members every 5 s need 2,000/s)")
