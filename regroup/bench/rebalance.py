"""`regroup bench rebalance`: real consumer processes, a real coordinator, the embedded log.

Scenario "grow": 10 members consume a topic that grows by 900 partitions; we time from adding the
partitions until every partition is owned and the group is stable (Kafka's published figure: about
5 s with the new protocol, about 103 s with the classic one). The coordinator learns about new
partitions from its periodic metadata refresh (``--topic-refresh-s``); we report that delay apart.

Scenario "scale-out": 10 members, one more joins while a producer writes steadily. For each partition
that moves: the gap between the old owner's revocation and the new owner's assignment (p50/p99); and
the throughput of the members not involved in the move, before vs during the rebalance.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from regroup.bench.procs import start_coordinator
from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.rpc.client import CoordinatorClient


def _worker(coordinator: str, log_dir: Path, topic: str, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "regroup.bench.rebalance_worker", coordinator,
                             str(log_dir), topic, str(out)], stderr=subprocess.DEVNULL)


def _wait_stable(client: CoordinatorClient, members: int, partitions: int, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if "bench" in {g for g, _, _ in client.list_groups()}:
            d = client.describe_group("bench").description
            if d.state.value == "stable" and len(d.members) == members and \
                    sum(len(m.assigned) for m in d.members) == partitions:
                return time.time()
        time.sleep(0.05)
    raise TimeoutError(f"group not stable with {members} members and {partitions} partitions "
                       f"in {timeout} s")


def _events(path: Path) -> list[tuple[float, str, str]]:
    out = []
    for line in path.read_text().splitlines():
        t, kind, rest = [*line.split(" ", 2), ""][:3]
        out.append((float(t), kind, rest))
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def scenario_grow(tmp: Path, members: int = 10, start_partitions: int = 10, added: int = 900,
                  refresh_s: float = 1.0) -> dict[str, Any]:
    log_dir = tmp / "grow-log"
    log = open_log(str(log_dir))
    log.create_topic("grow", start_partitions)
    proc, addr = start_coordinator(tmp / "grow-coord", "--log", str(log_dir), "--topic-refresh-s",
                                   str(refresh_s))
    workers = [_worker(addr, log_dir, "grow", tmp / f"grow-{i}.out") for i in range(members)]
    try:
        with CoordinatorClient(addr) as client:
            _wait_stable(client, members, start_partitions, 60)
            t0 = time.time()
            log.add_partitions("grow", start_partitions + added)
            t_stable = _wait_stable(client, members, start_partitions + added, 300)
            history = client.describe_group("bench").history
        bumped = [h.at_unix_ms / 1000 for h in history if h.kind == "group" and h.at_unix_ms / 1000 >= t0]
        t_seen = min(bumped) if bumped else t0
        return {"members": members, "partitions_before": start_partitions, "partitions_added": added,
                "metadata_refresh_s": refresh_s, "seconds_to_stable": round(t_stable - t0, 3),
                "seconds_metadata_delay": round(t_seen - t0, 3),
                "seconds_rebalance_after_metadata": round(t_stable - t_seen, 3),
                "published_kafka_new_protocol_s": 5, "published_kafka_classic_s": 103}
    finally:
        _stop_all(workers, proc)
        log.close()


def scenario_scale_out(tmp: Path, members: int = 10, partitions: int = 40,
                       rate_per_s: int = 20_000) -> dict[str, Any]:
    log_dir = tmp / "so-log"
    log = open_log(str(log_dir))
    log.create_topic("so", partitions)
    proc, addr = start_coordinator(tmp / "so-coord", "--log", str(log_dir))
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            t = time.time()
            per = max(1, rate_per_s // 10 // partitions)
            for p in range(partitions):
                log.produce("so", p, [LogRecord(None, b"x" * 100, int(t * 1000))] * per)
            i += 1
            time.sleep(max(0.0, 0.1 - (time.time() - t)))

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    outs = [tmp / f"so-{i}.out" for i in range(members + 1)]
    workers = [_worker(addr, log_dir, "so", outs[i]) for i in range(members)]
    try:
        with CoordinatorClient(addr) as client:
            _wait_stable(client, members, partitions, 60)
            time.sleep(3)
            t_join = time.time()
            workers.append(_worker(addr, log_dir, "so", outs[members]))
            t_stable = _wait_stable(client, members + 1, partitions, 120)
            bumps = [h.at_unix_ms / 1000 for h in client.describe_group("bench").history
                     if h.kind == "group" and h.at_unix_ms / 1000 >= t_join]
            t_joined = min(bumps) if bumps else t_join
            time.sleep(2)
    finally:
        stop.set()
        producer.join()
        _stop_all(workers, proc)
        log.close()
    revoked: dict[int, float] = {}
    assigned: dict[int, float] = {}
    involved: set[int] = set()
    for i, path in enumerate(outs):
        for t, kind, rest in _events(path):
            if not t_join <= t <= t_stable + 0.5 or kind not in ("revoke", "assign") or not rest:
                continue
            involved.add(i)
            for p in map(int, rest.split(",")):
                (revoked if kind == "revoke" else assigned)[p] = t
    gaps_ms = [(assigned[p] - revoked[p]) * 1000 for p in revoked if p in assigned]
    window = max(t_stable - t_join, 0.5)

    def rate(i: int, lo: float, hi: float) -> float:
        n = sum(int(rest) for t, kind, rest in _events(outs[i]) if kind == "count" and lo <= t < hi)
        return n / (hi - lo)

    uninvolved = [i for i in range(members) if i not in involved]
    before = sum(rate(i, t_join - window - 1, t_join - 1) for i in uninvolved)
    during = sum(rate(i, t_join, t_join + window) for i in uninvolved)
    return {"members_before": members, "partitions": partitions, "produce_rate_per_s": rate_per_s,
            "seconds_process_start_to_join": round(t_joined - t_join, 3),
            "seconds_join_to_stable": round(t_stable - t_joined, 3), "moved_partitions": len(gaps_ms),
            "handoff_gap_ms_p50": round(_pct(gaps_ms, 0.5), 1),
            "handoff_gap_ms_p99": round(_pct(gaps_ms, 0.99), 1),
            "uninvolved_members": len(uninvolved),
            "uninvolved_records_per_s_before": round(before),
            "uninvolved_records_per_s_during": round(during)}


def _stop_all(workers: list[subprocess.Popen[bytes]], coordinator: subprocess.Popen[str]) -> None:
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(timeout=15)
        except subprocess.TimeoutExpired:
            w.kill()
    coordinator.send_signal(signal.SIGTERM)
    try:
        coordinator.wait(timeout=15)
    except subprocess.TimeoutExpired:
        coordinator.kill()


def run_rebalance_bench(scenario: str, json_output: bool, added: int = 900) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="regroup-bench-"))
    try:
        results: dict[str, Any] = {}
        if scenario in ("grow", "all"):
            results["grow"] = scenario_grow(tmp, added=added)
        if scenario in ("scale-out", "all"):
            results["scale_out"] = scenario_scale_out(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if json_output:
        print(json.dumps(results))
        return
    c = Console()
    if "grow" in results:
        g = results["grow"]
        c.print(f"[bold]grow[/bold]: {g['members']} members, +{g['partitions_added']} partitions → "
                f"stable in "
                f"{g['seconds_to_stable']} s ({g['seconds_metadata_delay']} s until the coordinator's "
                f"metadata refresh saw them, {g['seconds_rebalance_after_metadata']} s of rebalancing); "
                f"Kafka published: ≈5 s new protocol, ≈103 s classic")
    if "scale_out" in results:
        s = results["scale_out"]
        c.print(f"[bold]scale-out[/bold]: {s['members_before']} → {s['members_before'] + 1} members, "
                f"{s['moved_partitions']} partitions moved, stable {s['seconds_join_to_stable']} s after the "
                f"join "
                f"(the new process took {s['seconds_process_start_to_join']} s to start); hand-off gap "
                f"p50 {s['handoff_gap_ms_p50']} ms, p99 {s['handoff_gap_ms_p99']} ms; uninvolved members "
                f"({s['uninvolved_members']}): {s['uninvolved_records_per_s_before']:,} rec/s before vs "
                f"{s['uninvolved_records_per_s_during']:,} rec/s during")
