"""`regroup bench failover`: how long the partitions of a member killed with kill -9 wait until
another member processes them — with the coordinator's failover grace (`regroup.protocol.failover`),
and without it (the session timeout).

Real processes: a coordinator process (`regroup.bench.procs`), ``members`` dynamic consumer processes
(`regroup.bench.rebalance_worker`, whose event lines this module reads), the embedded log in a
temporary directory, and a producer thread in this process writing to every partition.

Rules of this module:

1. One coordinator per mode: *grace* (``--failover-grace-ms GRACE``) and *off* (``0``: a killed
   member is found by its session timeout), both with the same session timeout and heartbeat
   interval. The members join, and the group must be stable with every partition owned.
2. A run kills the longest-running member with SIGKILL and takes the wall-clock time just before.
   For each partition the coordinator said it owned, the *failover* is the time from the kill until
   a surviving member hands out the first record of that partition (its ``first`` line). The
   *fence* is the time from the kill until the coordinator recorded the member's fence (the group
   epoch history). Then a replacement member starts and the next run waits for a stable, complete
   group again: every run starts from the same shape.
3. Figures: p50, p99 and max over every partition of every run of a mode (few samples: p99 is the
   largest but one or the largest), and the fence's p50. Every wait is for a condition, bounded by
   a timeout; the only fixed wait is a short steady period under load before each kill.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.bench.procs import start_coordinator
from regroup.bench.rebalance import _events, _pct, _stop_all, _wait_stable, _worker
from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog
from regroup.rpc.client import CoordinatorClient

TOPIC = "failover"
GROUP = "bench"  # the group `rebalance_worker` joins


@dataclass(frozen=True, slots=True)
class Settings:
    members: int = 3
    partitions: int = 6
    #: Kills with the grace on, and with it off (each of those lasts a session timeout).
    runs: int = 8
    baseline_runs: int = 2
    grace_ms: int = 2_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 2_000
    #: Records per second over all partitions.
    rate: int = 600
    #: Under load before each kill.
    steady_s: float = 1.0

    def __post_init__(self) -> None:
        if self.members < 2:
            raise ValueError("--members must be at least 2: someone has to take the partitions over")
        if self.partitions < self.members:
            raise ValueError("--partitions must be at least --members, or a member owns nothing to lose")
        if self.runs < 1 or self.baseline_runs < 0:
            raise ValueError("--runs must be at least 1 and --baseline-runs at least 0")
        if self.grace_ms <= 0:
            raise ValueError("--grace-ms must be positive (the baseline runs with the grace off)")
        if self.session_timeout_ms <= self.heartbeat_interval_ms:
            raise ValueError("the session timeout must be longer than the heartbeat interval")


@dataclass
class _Member:
    proc: subprocess.Popen[bytes]
    out: Path

    def member_id(self) -> str | None:
        if not self.out.exists():
            return None
        return next((rest for _, kind, rest in _events(self.out) if kind == "member"), None)

    def firsts(self, since: float) -> dict[int, float]:
        """When this member handed out the first record of each partition it got after ``since``."""
        got: dict[int, float] = {}
        for t, kind, rest in _events(self.out) if self.out.exists() else ():
            if kind == "first" and t >= since and int(rest) not in got:
                got[int(rest)] = t
        return got


class _Producer:
    """A steady trickle into every partition, so that a partition taken over has records to hand out."""

    def __init__(self, log: PartitionedLog, settings: Settings) -> None:
        self._log, self._settings = log, settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n, tick = self._settings.partitions, 0.05
        per = max(1, round(self._settings.rate * tick / n))
        while not self._stop.is_set():
            t0 = time.time()
            for p in range(n):
                self._log.produce(TOPIC, p, [LogRecord(None, b"x" * 64, int(t0 * 1000))] * per)
            self._stop.wait(max(0.0, tick - (time.time() - t0)))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _wait(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def _taken_over(members: list[_Member], lost: set[int], since: float) -> dict[int, float] | None:
    """When each of ``lost`` was first processed after ``since`` by one of ``members``, once all were."""
    seen: dict[int, float] = {}
    for m in members:
        for p, t in m.firsts(since).items():
            seen[p] = min(t, seen.get(p, t))
    return seen if lost <= set(seen) else None


def run_mode(root: Path, log_dir: Path, settings: Settings, grace_ms: int, runs: int) -> dict[str, Any]:
    """Rule 1 and 2 for one coordinator: ``runs`` kills; the samples and figures."""
    name = "grace" if grace_ms else "off"
    proc, address = start_coordinator(
        root / f"coord-{name}", "--log", str(log_dir), "--failover-grace-ms", str(grace_ms),
        "--session-timeout-ms", str(settings.session_timeout_ms),
        "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms))
    counter = 0

    def start() -> _Member:
        nonlocal counter
        out = root / f"{name}-{counter}.out"
        counter += 1
        return _Member(_worker(address, log_dir, TOPIC, out), out)

    members = [start() for _ in range(settings.members)]
    failovers: list[float] = []
    fences: list[float] = []
    client = CoordinatorClient(address)
    try:
        for _ in range(runs):
            _wait_stable(client, settings.members, settings.partitions, 120)
            ids = {_wait("a member's id", m.member_id, 60): m for m in members}
            time.sleep(settings.steady_s)  # under load for a while: the kill hits a working group
            owned = {m.member_id: m.assigned for m in client.describe_group(GROUP).description.members}
            victim_id, victim = next((mid, ids[mid]) for mid in ids if ids[mid] is members[0])
            lost = {s.partition for s in owned.get(victim_id, frozenset())}
            killed = time.time()
            victim.proc.kill()
            victim.proc.wait(timeout=10)
            members.remove(victim)

            seen = _wait("the killed member's partitions to be processed again",
                         functools.partial(_taken_over, list(members), lost, killed),
                         settings.session_timeout_ms / 1000 + 60)
            failovers += [(seen[p] - killed) * 1000 for p in sorted(lost)]
            fenced = [h.at_unix_ms for h in client.describe_group(GROUP).history
                      if victim_id in h.cause and "fenced" in h.cause]
            if fenced:
                fences.append(fenced[-1] - killed * 1000)
            members.append(start())
        _wait_stable(client, settings.members, settings.partitions, 120)
    finally:
        client.close()
        _stop_all([m.proc for m in members], proc)
    return {"mode": name, "failover_grace_ms": grace_ms, "runs": runs,
            "partitions_measured": len(failovers), "failover_ms_p50": round(_pct(failovers, 0.5)),
            "failover_ms_p99": round(_pct(failovers, 0.99)), "failover_ms_max": round(max(failovers)),
            "fence_ms_p50": round(_pct(fences, 0.5)) if fences else None,
            "samples_ms": [round(x) for x in failovers]}


def failover_bench(settings: Settings, directory: Path | None = None) -> dict[str, Any]:
    """Both modes (the baseline only with ``baseline_runs``), on one log, one after the other."""
    root = directory or Path(tempfile.mkdtemp(prefix="regroup-failover-"))
    log_dir = root / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, settings.partitions)
    producer = _Producer(log, settings)
    try:
        results = [run_mode(root, log_dir, settings, settings.grace_ms, settings.runs)]
        if settings.baseline_runs:
            results.append(run_mode(root, log_dir, settings, 0, settings.baseline_runs))
    finally:
        producer.close()
        log.close()
        if directory is None:
            shutil.rmtree(root, ignore_errors=True)
    return {"settings": asdict(settings), "modes": results}


def run_failover_bench(settings: Settings, *, json_output: bool = False, directory: str | None = None,
                       ) -> dict[str, Any]:
    """`regroup bench failover`: run, then print a table (or one JSON object)."""
    result = failover_bench(settings, Path(directory) if directory else None)
    if json_output:
        print(json.dumps(result))
        return result
    s = settings
    table = Table(title=f"kill -9 of one of {s.members} dynamic members ({s.partitions} partitions, "
                        f"{s.rate} records/s): time until each of its partitions is processed again")
    for col in ("failover grace", "runs", "partitions", "fenced after (p50)", "p50", "p99", "max"):
        table.add_column(col, justify="right")
    for m in result["modes"]:
        grace = f"{m['failover_grace_ms']} ms" if m["failover_grace_ms"] else "off"
        fence = f"{m['fence_ms_p50']} ms" if m["fence_ms_p50"] is not None else "-"
        table.add_row(grace, str(m["runs"]), str(m["partitions_measured"]), fence,
                      *(f"{m[k]} ms" for k in ("failover_ms_p50", "failover_ms_p99", "failover_ms_max")))
    console = Console()
    console.print(table)
    console.print(f"session timeout {s.session_timeout_ms} ms (what finds the member with the grace off), "
                  f"heartbeat interval {s.heartbeat_interval_ms} ms; one machine, every process on it: "
                  "figures depend on its load")
    return result
