"""`regroup bench failover`: how long the partitions of a member killed with kill -9 wait until
another member processes them — with the coordinator's failover grace (`regroup.protocol.failover`),
and without it (the session timeout).

Real processes: a coordinator process (`regroup.bench.procs`), ``members`` dynamic members of one
kind, the embedded log in a temporary directory, and a producer thread in this process writing to
every partition. Two kinds of member:

- *consumer*: a `Consumer` process (`regroup.bench.rebalance_worker`; its ``first P`` lines say when
  it handed out the first record of a partition it was given);
- *spark*: a PySpark application running one Structured Streaming query on the ``regroup`` source
  (`regroup.chaos.soak_spark_member`: a driver process, its JVM and Spark's Python workers in one
  process group; each micro-batch is written as a ``b TIME BATCH`` line and one line per record).
  Its *kill -9* kills the whole process group — the driver with its JVM, what a crashed host or a
  killed container does — and a partition is processed again at the end of the first micro-batch
  of a survivor that holds one of its records. The coordinator names a query's member by its
  reader's pid (`regroup.spark.member.client_id`), a descendant of the application's driver
  process: that is how the bench knows which partitions the killed application held.

Rules of this module:

1. One coordinator per mode: *grace* (``--failover-grace-ms GRACE``) and *off* (``0``: a killed
   member is found by its session timeout), both with the same session timeout and heartbeat
   interval. The members join, and the group must be stable with every partition owned, and every
   member must have processed records since (two batches): a Spark application's first batches
   are slow, and a survivor still in them would measure its start, not the failover.
2. A run kills the longest-running member with SIGKILL and takes the wall-clock time just before.
   For each partition the coordinator said it owned, the *failover* is the time from the kill until
   a surviving member hands out the first record of that partition (a consumer's ``first`` line;
   the end of a Spark member's first batch holding one). The
   *fence* is the time from the kill until the coordinator recorded the member's fence (the group
   epoch history). Then a replacement member starts and the next run waits for a stable, complete
   group again: every run starts from the same shape.
3. Figures, per kind: p50, p99 and max over every partition of every run of a mode (few samples:
   p99 is the largest but one or the largest), and the fence's p50. Every wait is for a condition, bounded by
   a timeout; the only fixed wait is a short steady period under load before each kill.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from regroup.bench.procs import start_coordinator
from regroup.bench.rebalance import _events, _pct, _stop_all, _wait_stable, _worker
from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog
from regroup.rpc.client import CoordinatorClient

TOPIC = "failover"
GROUP = "bench"  # the group `rebalance_worker` joins; the Spark members are told to join it too

Kind = Literal["consumer", "spark"]
KINDS: tuple[Kind, ...] = ("consumer", "spark")


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
    #: The member kinds measured, one after the other.
    kinds: tuple[Kind, ...] = KINDS
    #: A Spark member's processing-time trigger.
    spark_trigger_ms: int = 500

    def __post_init__(self) -> None:
        if not self.kinds or any(k not in KINDS for k in self.kinds):
            raise ValueError(f"--kind must be one of {', '.join(KINDS)} or both, not {self.kinds!r}")
        if self.spark_trigger_ms <= 0:
            raise ValueError("--spark-trigger-ms must be positive")
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


@dataclass(eq=False)  # members are compared by identity (the bench keys dicts by them)
class _Member:
    kind: Kind
    proc: subprocess.Popen[bytes]
    out: Path

    def member_id(self, details: Any) -> str | None:
        """This member's id among the group's members (``describe_group``), once it has joined."""
        if self.kind == "consumer":
            if not self.out.exists():
                return None
            own = next((rest for _, kind, rest in _events(self.out) if kind == "member"), None)
            return own if own in {m.member_id for m in details.description.members} else None
        return next((mid for mid, c in details.clients.items() if self.proc.pid in _ancestry(c.client_id)),
                    None)

    def firsts(self, since: float) -> dict[int, float]:
        """When this member first processed a record of each partition after ``since``."""
        if not self.out.exists():
            return {}
        firsts = _consumer_firsts if self.kind == "consumer" else _spark_firsts
        return firsts(self.out, since)

    def working(self, since: float, batches: int = 2) -> bool:
        """Whether this member has processed records in at least ``batches`` batches (a consumer: in
        as many of its 100 ms counts) since ``since``."""
        if not self.out.exists():
            return False
        if self.kind == "consumer":
            done = sum(1 for t, kind, rest in _events(self.out)
                       if kind == "count" and t >= since and rest != "0")
        else:
            done = len({t for t in _spark_firsts_per_batch(self.out) if t >= since})
        return done >= batches

    def kill9(self) -> None:
        if self.kind == "consumer":
            self.proc.kill()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _consumer_firsts(out: Path, since: float) -> dict[int, float]:
    got: dict[int, float] = {}
    for t, kind, rest in _events(out):
        if kind == "first" and t >= since and int(rest) not in got:
            got[int(rest)] = t
    return got


def _spark_batches(out: Path) -> list[tuple[float, list[int]]]:
    """A Spark member's batches: when each ended and the partitions of its records (a batch is
    written in one write; a torn last line is skipped)."""
    batches: list[tuple[float, list[int]]] = []
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == "b":
            batches.append((float(fields[1]), []))
        elif len(fields) == 3 and batches:
            batches[-1][1].append(int(fields[1]))
    return batches


def _spark_firsts_per_batch(out: Path) -> list[float]:
    """When each of a Spark member's batches that held records ended."""
    return [t for t, parts in _spark_batches(out) if parts]


def _spark_firsts(out: Path, since: float) -> dict[int, float]:
    """From a Spark member's batches: the end of the first batch after ``since`` holding a record of
    each partition."""
    got: dict[int, float] = {}
    for t, parts in _spark_batches(out):
        if t >= since:
            for p in parts:
                got.setdefault(p, t)
    return got


def _ancestry(client_id: str) -> list[int]:
    """The process a Spark query's client id names (``spark-query@HOST:PID``) and its ancestors.
    The reader runs in a Python worker of Spark's, which may sit in a process group of its own
    (PySpark's worker daemon makes one), so the application is found up the parent chain."""
    if not client_id.startswith("spark-query@"):
        return []
    try:
        pid = int(client_id.rsplit(":", 1)[1])
    except ValueError:
        return []
    chain: list[int] = []
    while pid > 1 and len(chain) < 64:
        chain.append(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            break
        pid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
    return chain


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


def _start_member(kind: Kind, root: Path, tag: str, address: str, log_dir: Path,
                  settings: Settings) -> _Member:
    out = root / f"{tag}.out"
    if kind == "consumer":
        return _Member(kind, _worker(address, log_dir, TOPIC, out), out)
    args = [sys.executable, "-m", "regroup.chaos.soak_spark_member", address, str(log_dir), GROUP, TOPIC,
            str(out), str(root / "checkpoints" / tag), "--local-dir", str(root / "spark-local" / tag),
            "--trigger-s", str(settings.spark_trigger_ms / 1000)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    err = open(root / f"{tag}.log", "ab")  # noqa: SIM115 - the child writes to it
    proc = subprocess.Popen(args, stdout=err, stderr=err, env=env, start_new_session=True)
    err.close()
    return _Member(kind, proc, out)


def _ids(client: CoordinatorClient, members: list[_Member]) -> dict[str, _Member] | None:
    """Every member's id, once each has joined (None before)."""
    details = client.describe_group(GROUP)
    ids = {m: m.member_id(details) for m in members}
    return None if None in ids.values() else {mid: m for m, mid in ids.items() if mid is not None}


def run_mode(root: Path, log_dir: Path, settings: Settings, grace_ms: int, runs: int,
             kind: Kind = "consumer") -> dict[str, Any]:
    """Rule 1 and 2 for one coordinator and one kind of member: ``runs`` kills; the samples and
    figures."""
    name = "grace" if grace_ms else "off"
    proc, address = start_coordinator(
        root / f"coord-{kind}-{name}", "--log", str(log_dir), "--failover-grace-ms", str(grace_ms),
        "--session-timeout-ms", str(settings.session_timeout_ms),
        "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms))
    counter = 0
    #: A Spark application takes seconds to start (a JVM, then the query's first batch).
    patience = 120 if kind == "consumer" else 300

    def start() -> _Member:
        nonlocal counter
        counter += 1
        return _start_member(kind, root, f"{kind}-{name}-{counter - 1}", address, log_dir, settings)

    members = [start() for _ in range(settings.members)]
    failovers: list[float] = []
    fences: list[float] = []
    client = CoordinatorClient(address)
    try:
        for _ in range(runs):
            stable = _wait_stable(client, settings.members, settings.partitions, patience)
            ids = _wait("every member's id", functools.partial(_ids, client, members), patience)
            # Every member working: a Spark application's first batches are slow (its Python
            # workers start, the JVM compiles), and a survivor must not be measured in them.
            _wait("every member to process records",
                  functools.partial(lambda t: all(m.working(t) for m in members), stable), patience)
            time.sleep(settings.steady_s)  # under load for a while: the kill hits a working group
            owned = {m.member_id: m.assigned for m in client.describe_group(GROUP).description.members}
            victim_id, victim = next((mid, ids[mid]) for mid in ids if ids[mid] is members[0])
            lost = {s.partition for s in owned.get(victim_id, frozenset())}
            killed = time.time()
            victim.kill9()
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
        _wait_stable(client, settings.members, settings.partitions, patience)
    finally:
        client.close()
        _stop_members(members, proc)
    return {"kind": kind, "mode": name, "failover_grace_ms": grace_ms, "runs": runs,
            "partitions_measured": len(failovers), "failover_ms_p50": round(_pct(failovers, 0.5)),
            "failover_ms_p99": round(_pct(failovers, 0.99)), "failover_ms_max": round(max(failovers)),
            "fence_ms_p50": round(_pct(fences, 0.5)) if fences else None,
            "samples_ms": [round(x) for x in failovers]}


def _stop_members(members: list[_Member], coordinator: subprocess.Popen[str]) -> None:
    """SIGTERM to each member's own process (a Spark member stops its query, then its JVM), then the
    coordinator; a member that does not stop in time is killed with its process group."""
    spark = [m for m in members if m.kind == "spark"]
    for m in spark:
        with contextlib.suppress(ProcessLookupError):
            m.proc.send_signal(signal.SIGTERM)
    for m in spark:
        try:
            m.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            m.kill9()
    _stop_all([m.proc for m in members if m.kind == "consumer"], coordinator)


def failover_bench(settings: Settings, directory: Path | None = None) -> dict[str, Any]:
    """Both modes (the baseline only with ``baseline_runs``), on one log, one after the other."""
    root = directory or Path(tempfile.mkdtemp(prefix="regroup-failover-"))
    log_dir = root / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, settings.partitions)
    producer = _Producer(log, settings)
    try:
        results = []
        for kind in settings.kinds:
            results.append(run_mode(root, log_dir, settings, settings.grace_ms, settings.runs, kind))
            if settings.baseline_runs:
                results.append(run_mode(root, log_dir, settings, 0, settings.baseline_runs, kind))
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
    for col in ("members", "failover grace", "runs", "partitions", "fenced after (p50)", "p50", "p99", "max"):
        table.add_column(col, justify="right")
    for m in result["modes"]:
        grace = f"{m['failover_grace_ms']} ms" if m["failover_grace_ms"] else "off"
        fence = f"{m['fence_ms_p50']} ms" if m["fence_ms_p50"] is not None else "-"
        kind = "PySpark queries" if m["kind"] == "spark" else "consumers"
        table.add_row(kind, grace, str(m["runs"]), str(m["partitions_measured"]), fence,
                      *(f"{m[k]} ms" for k in ("failover_ms_p50", "failover_ms_p99", "failover_ms_max")))
    console = Console()
    console.print(table)
    console.print(f"session timeout {s.session_timeout_ms} ms (what finds the member with the grace off), "
                  f"heartbeat interval {s.heartbeat_interval_ms} ms"
                  + (f", Spark trigger {s.spark_trigger_ms} ms" if "spark" in s.kinds else "")
                  + "; one machine, every process on it: figures depend on its load")
    return result
