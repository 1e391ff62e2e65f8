"""`regroup bench spark-stateful`: how long a stateful Spark task produces no output when it moves,
cold vs warm, and when its member is killed, with and without a standby — real processes, per state
size. The PySpark counterpart of `regroup bench stateful` (same rules, same figures where they apply).

Set-up, per scenario and state size, from scratch: the embedded log in a fresh directory shared by
every process, a coordinator process (session timeout 3 s by default, heartbeats every sixth of it),
and member processes (`regroup.bench.spark_stateful_member`: a Spark application, ``local[2]``, its
own JVM, running `regroup.spark.streams` with a per-key aggregate in the RocksDB state store; its
docstring has the pipeline and the files it writes). A source topic of ``tasks`` partitions is one
task each; every member's checkpoints live under one shared state root (a member copies another's
checkpoint of record from there).

Rules of this module:

1. Pre-load: N = size / value_bytes distinct keys per task, each produced once with a random
   (incompressible) payload of value_bytes and timestamp 0; the members build the state and the
   bench waits until every source offset is committed. Few large values (10 kB by default) rather
   than many small ones: Spark builds the state faster per byte, and the pre-load is most of a
   run's time. A micro-batch reads at most ``batch_bytes`` of input. The member that joins in a
   scale-out starts its JVM with the others (it waits for a file to join): the event times the
   join, not the JVM.
2. Load: a producer thread in this process writes ``rate`` records per second per task to random
   existing keys (the state keeps its size), each with its produce time as the record's timestamp.
   The bench remembers, per record, which occurrence of its key it is (the pre-load's is the first).
3. Events. *Scale-out 2 -> 3*: a third member joins. **Cold**: the coordinator runs with
   ``--max-warmups 0 --acceptable-recovery-lag 2^62`` (`regroup.bench.stateful` rule 3 says why
   both): the new owner copies the checkpoint of record and starts the query from it, so Spark
   restores the state store inside the move. **Warm**: ``--max-warmups 2 --acceptable-recovery-lag
   LAG`` (one run per LAG of ``acceptable_lags``): the new member first runs a warm-up (a copy of
   the checkpoint and a sink-off query catching up), which is promoted in place. LAG is in records,
   so it is meant against the records of a task's state (N): the default 500 is far below N for
   every size (a copy left on a member by the start-up's moves, at offset 0, is N + load records
   behind and must not count as caught up), and above a standby's lag under load. LAG 0 promotes a
   warm-up only once it has reached the very last commit, i.e. after its query has run batches.
   *kill -9 of one of 3 members* (the one with the most actives; its whole process group: driver,
   JVM and Spark's Python workers) with ``--standby-replicas 1`` vs 0 (warm-ups on, the first LAG);
   detection takes the session timeout. With standbys, the kill waits until every standby is
   within 200 records of the commit (the largest standby lag at the kill is reported).
4. The event ends when the group is stable and balanced with no warm-up left; the load goes on until
   every task has output ``tail_s`` after that, stops, and the bench waits until every record is
   committed; then the members leave. Every wait is for a condition, bounded by a timeout that grows
   with the state; only the steady window before the event is a fixed time.
5. Figures come from the sinks' files, after the fact. A batch's *processed at* is when its sink
   finished writing it; a row ``(key, count)`` means the key's first ``count`` records are
   processed. Per task, the *gap* is the longest time between two consecutive outputs from
   ``steady_s`` before the event to the end of the load; for a moved task that is the time it
   produced nothing. *Max latency*: the longest a record produced after the event waited for the
   first output that covers it. The *interval* is the longest gap of any task in the steady window
   before the event: one micro-batch interval under this load. How each moved task started on its
   new owner (promoted in place, or copied), how long the copy took, and whether the query it became
   active in had finished a batch before (Spark loads a query's state store in its first batch, so
   a copy that has not is not warm yet) come from the members' ``regroup.spark.tasks`` log and
   progress lines; that first batch's duration from Spark's progress events. *Lost*: records whose
   effect is in no output (per key, the largest count output must equal the records produced for
   it); a key counted beyond that is *extra*. Both must be 0: the bench raises otherwise.
6. Scenarios run one after the other on one machine, cold and warm back to back for each size.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.bench.procs import start_coordinator
from regroup.bench.spark_stateful_figures import (
    Load,
    check_outputs,
    figures,
    key_name,
    max_gap,
    read_events,
    task_name,
)
from regroup.bench.spark_stateful_member import GROUP, SOURCE
from regroup.bench.stateful import COLD_RECOVERY_LAG, BenchError, group_settled, parse_size, standbys_within
from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorError

__all__ = ["SCENARIOS", "BenchError", "LostRecordsError", "Scenario", "Settings", "parse_size",
           "run_spark_stateful_bench", "scenarios"]

#: The scenarios by name, in the order they run (``--scenarios`` also takes ``scale-out``, ``kill``
#: and ``all``).
SCENARIOS = ("scale-out-cold", "scale-out-warm", "kill-standby", "kill-no-standby")
GROUPS = {"all": SCENARIOS, "scale-out": SCENARIOS[:2], "kill": SCENARIOS[2:]}
#: The member process's module (a test or a debugging session may run a wrapper of it).
MEMBER_MODULE = "regroup.bench.spark_stateful_member"
_PRELOAD_CHUNK = 10_000
#: Records a standby may be behind before the kill (a batch or two of the load, with room for a slow
#: machine); the lag it actually had is reported.
_STANDBY_LAG = 200
_UNITS = {"GB": 10**9, "MB": 10**6, "KB": 10**3}


class LostRecordsError(BenchError):
    """Some produced record's effect is in no output (or a key was counted twice)."""


@dataclass(frozen=True)
class Settings:
    tasks: int = 4
    #: Bytes of random payload per key: the state per task is about keys x this.
    value_bytes: int = 10_000
    rate_per_task: float = 20.0
    trigger_ms: int = 500
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 500
    #: ``--acceptable-recovery-lag`` of the warm runs: one warm scale-out per value; the kills use the first.
    acceptable_lags: tuple[int, ...] = (500, 0)
    max_warmups: int = 2
    #: Input bytes per micro-batch at most (``maxRecordsPerTrigger`` = this / value_bytes): bounds a
    #: pre-load batch's memory.
    batch_bytes: int = 32_000_000
    #: Spark's ``local[N]`` and driver memory of each member.
    cores: int = 2
    memory: str = "1g"
    steady_s: float = 8.0
    tail_s: float = 3.0

    def __post_init__(self) -> None:
        if self.tasks < 2:
            raise ValueError(f"tasks must be at least 2, got {self.tasks}")
        if self.value_bytes < 1:
            raise ValueError(f"value_bytes must be positive, got {self.value_bytes}")
        if not 0 < self.rate_per_task <= 500:
            raise ValueError(f"rate_per_task must be in (0, 500] records/s, got {self.rate_per_task}")
        if self.trigger_ms < 50:
            raise ValueError(f"trigger_ms must be at least 50, got {self.trigger_ms}")
        if not self.acceptable_lags or any(lag < 0 for lag in self.acceptable_lags):
            raise ValueError(f"acceptable_lags must be one or more record counts >= 0, "
                             f"got {self.acceptable_lags}")

    @property
    def batch_records(self) -> int:
        return max(1, self.batch_bytes // self.value_bytes)


@dataclass(frozen=True)
class Scenario:
    """One event under one coordinator configuration (rule 3)."""

    name: str
    kind: str
    members_before: int
    standby_replicas: int
    max_warmups: int
    acceptable_lag: int

    @property
    def members_after(self) -> int:
        return self.members_before + (1 if self.kind == "scale-out" else -1)

    def flags(self) -> list[str]:
        return ["--standby-replicas", str(self.standby_replicas), "--acceptable-recovery-lag",
                str(self.acceptable_lag), "--max-warmups", str(self.max_warmups)]


def scenarios(names: Iterable[str], settings: Settings) -> list[Scenario]:
    """Rule 3's scenarios of ``names`` (scenario names or groups), in the order they run."""
    wanted: set[str] = set()
    for n in names:
        if n in GROUPS:
            wanted |= set(GROUPS[n])
        elif n in SCENARIOS:
            wanted.add(n)
        else:
            raise ValueError(f"unknown scenario {n!r}: choose from {[*SCENARIOS, *GROUPS]}")
    lags = settings.acceptable_lags
    out: list[Scenario] = []
    if "scale-out-cold" in wanted:
        out.append(Scenario("scale-out cold", "scale-out", 2, 0, 0, COLD_RECOVERY_LAG))
    if "scale-out-warm" in wanted:
        out += [Scenario(f"scale-out warm, lag {lag:,}", "scale-out", 2, 0, settings.max_warmups, lag)
                for lag in lags]
    if "kill-standby" in wanted:
        out.append(Scenario("kill -9, 1 standby", "kill", 3, 1, settings.max_warmups, lags[0]))
    if "kill-no-standby" in wanted:
        out.append(Scenario("kill -9, no standby", "kill", 3, 0, settings.max_warmups, lags[0]))
    return out


def _label(size: int) -> str:
    for unit, n in _UNITS.items():
        if size >= n:
            return f"{size / n:g} {unit}"
    return f"{size} B"


@dataclass
class _Member:
    name: str
    proc: subprocess.Popen[str]
    stderr: Path
    status: Path
    go: Path | None = None
    killed: bool = False

    @property
    def process_id(self) -> str | None:
        try:
            return str(json.loads(self.status.read_text())["process_id"])
        except (FileNotFoundError, ValueError, KeyError):
            return None


@dataclass
class _Stage:
    """One scenario's processes, log and files (rules 1-4)."""

    root: Path
    settings: Settings
    keys: int
    log: PartitionedLog
    coordinator: subprocess.Popen[str]
    client: CoordinatorClient
    address: str
    timeout_s: float
    members: list[_Member] = field(default_factory=list)
    stop_load: threading.Event = field(default_factory=threading.Event)
    producer: threading.Thread | None = None
    load: Load = field(default_factory=Load)
    _lines: dict[Path, tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, settings: Settings, keys: int, flags: Iterable[str]) -> _Stage:
        root.mkdir(parents=True)
        (root / "out").mkdir()
        log = open_log(str(root / "log"))
        log.create_topic(SOURCE, settings.tasks)
        proc, address = start_coordinator(
            root / "coordinator", "--log", str(root / "log"), "--topic-refresh-s", "0.5",
            "--session-timeout-ms", str(settings.session_timeout_ms),
            "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms), *flags)
        # Waits scale with the state: Spark builds (pre-load) or restores (cold move) state at a
        # few MB/s on a loaded 2-core machine; 1 MB/s per byte of every task's state is the bound.
        timeout = 300 + settings.tasks * keys * settings.value_bytes / 1e6
        client = CoordinatorClient(address, timeout_s=10)
        return cls(root, settings, keys, log, proc, client, address, timeout)

    @property
    def out(self) -> Path:
        return self.root / "out"

    # ------------------------------------------------------------------ processes
    def spawn(self, *, gated: bool = False) -> _Member:
        """Start a member process (it prints ``ready`` once its JVM is up); ``gated``: it joins only
        when its go-file appears (`release`)."""
        name = f"m{len(self.members) + 1}"
        s = self.settings
        stderr = self.root / f"{name}.log"
        go = self.root / f"go-{name}" if gated else None
        err = open(stderr, "a")  # noqa: SIM115 - the child writes to it
        args = [sys.executable, "-m", MEMBER_MODULE, name, self.address, str(self.root / "log"),
                str(self.root / "state"), str(self.out), "--cores", str(s.cores), "--memory", s.memory,
                "--trigger-ms", str(s.trigger_ms), "--batch-records", str(s.batch_records),
                "--session-timeout-ms", str(s.session_timeout_ms),
                "--heartbeat-interval-ms", str(s.heartbeat_interval_ms)]
        if go is not None:
            args += ["--wait-for", str(go)]
        # A session of its own: a kill -9 takes the JVM and Spark's Python workers with it.
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        err.close()
        m = _Member(name, proc, stderr, self.out / f"status-{name}.json", go)
        self.members.append(m)
        return m

    def ready(self, m: _Member, timeout: float = 600) -> None:
        assert m.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(m.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if sel.select(timeout=0.2):
                    line = m.proc.stdout.readline()
                    if line.strip() == "ready":
                        return
                    if not line:
                        break
                if m.proc.poll() is not None:
                    break
        finally:
            sel.close()
        raise BenchError(f"member {m.name} did not start (status {m.proc.poll()}): {_tail(m.stderr)}")

    def release(self, m: _Member) -> None:
        assert m.go is not None
        m.go.touch()

    def kill(self, m: _Member) -> None:
        m.killed = True
        _killpg(m.proc.pid)
        m.proc.wait()

    def close(self) -> None:
        self.end_load()
        for m in self.members:
            if m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        for m in self.members:
            with contextlib.suppress(subprocess.TimeoutExpired):
                m.proc.wait(timeout=120)
            _killpg(m.proc.pid)  # whatever of its JVM and workers outlived it
            m.proc.wait()
            if m.proc.stdout is not None:
                m.proc.stdout.close()
        self.client.close()
        self.coordinator.send_signal(signal.SIGTERM)
        try:
            self.coordinator.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.coordinator.kill()
            self.coordinator.wait()
        if self.coordinator.stdout is not None:
            self.coordinator.stdout.close()
        self.log.close()

    # ------------------------------------------------------------------ waiting
    def wait(self, cond: Callable[[], bool], what: str, timeout: float | None = None) -> float:
        """Poll ``cond``; return the wall-clock time it came true. A member that died unexpectedly, or
        the timeout, raises with what never happened and the members' last words."""
        deadline = time.monotonic() + (self.timeout_s if timeout is None else timeout)
        while not cond():
            dead = [m for m in self.members if not m.killed and m.proc.poll() is not None]
            if dead:
                raise BenchError(f"while waiting for {what}: member {dead[0].name} exited with status "
                                 f"{dead[0].proc.returncode}: {_tail(dead[0].stderr)}")
            if time.monotonic() > deadline:
                raise BenchError(f"timed out waiting for {what}; group: {self.describe()}; "
                                 + "; ".join(f"{m.name}: {_tail(m.stderr)}" for m in self.members))
            time.sleep(0.1)
        return time.time()

    def describe(self) -> StreamsGroupDescription | None:
        try:
            return self.client.describe_streams_group(GROUP)
        except CoordinatorError:
            return None

    def settled(self, members: int, standby: int) -> bool:
        return group_settled(self.describe(), self.settings.tasks, members, standby)

    def standbys_caught_up(self, limit: int) -> bool:
        return standbys_within(self.describe(), limit)

    def standby_lag(self) -> int | None:
        """The largest lag of any standby, as the coordinator last heard it."""
        d = self.describe()
        lags = [] if d is None else [m.lags.get(t) for m in d.members for t in m.assigned.standby]
        return None if not lags or None in lags else max(x for x in lags if x is not None)

    def placement(self) -> tuple[dict[int, str], dict[int, list[str]]]:
        """task partition -> member name of its active, and of its standbys."""
        d = self.describe()
        deadline = time.monotonic() + 60
        while d is None and time.monotonic() < deadline:  # a busy machine: a call can time out
            time.sleep(0.2)
            d = self.describe()
        if d is None:
            raise BenchError("the coordinator does not answer DescribeStreamsGroup")
        names = {pid: m.name for m in self.members if (pid := m.process_id) is not None}
        actives: dict[int, str] = {}
        standbys: dict[int, list[str]] = {}
        for m in d.members:
            name = names.get(m.process_id, m.process_id[:8])
            for t in m.assigned.active:
                actives[t.partition] = name
            for t in m.assigned.standby:
                standbys.setdefault(t.partition, []).append(name)
        return actives, standbys

    def drained(self) -> bool:
        """Every source record is processed and committed."""
        try:
            resp = self.client.fetch_offsets(OffsetFetchRequest(GROUP))
        except CoordinatorError:
            return False
        if resp.error is not ErrorCode.NONE:
            return False
        end = self.log.end_offsets(SOURCE)
        return all((c := resp.offsets.get(Shard(SOURCE, p))) is not None and c.offset >= end[p] for p in end)

    # ------------------------------------------------------------------ outputs
    def batches(self) -> list[dict[str, Any]]:
        """Every sink call so far (rule 2 of the member), each with ``member``; read incrementally."""
        out: list[dict[str, Any]] = []
        for path in sorted(self.out.glob("batches-*.jsonl")):
            size = path.stat().st_size
            done, rows = self._lines.get(path, (0, []))
            if size > done:
                with open(path, "rb") as f:
                    f.seek(done)
                    chunk = f.read(size - done)
                complete = chunk[:chunk.rfind(b"\n") + 1]  # a line being written waits for next time
                member = path.stem.removeprefix("batches-")
                rows = rows + [{**json.loads(line), "member": member} for line in complete.splitlines()]
                self._lines[path] = (done + len(complete), rows)
            out += rows
        return out

    def outputs_after(self, t: float) -> bool:
        latest: dict[str, float] = {}
        for b in self.batches():
            latest[b["task"]] = max(latest.get(b["task"], 0.0), b["t"])
        return all(latest.get(task_name(p), 0.0) > t for p in range(self.settings.tasks))

    def checkpoint_bytes(self) -> int:
        """The largest checkpoint directory of any copy of any task (offset and commit logs, state
        store files: RocksDB's SST files and changelogs)."""
        sizes = [sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
                 for d in (self.root / "state" / GROUP / "tasks").glob("*/*") if d.is_dir()]
        return max(sizes, default=0)

    # ------------------------------------------------------------------ producing
    def preload(self) -> None:
        """Rule 1: every key of every task once, round robin over the tasks so they grow together."""
        rng = random.Random(848)
        vb = self.settings.value_bytes
        for start in range(0, self.keys, _PRELOAD_CHUNK):
            for p in range(self.settings.tasks):
                n = min(start + _PRELOAD_CHUNK, self.keys) - start
                blob = rng.randbytes(n * vb)
                self.log.produce(SOURCE, p, [LogRecord(key_name(p, start + j).encode(),
                                                       blob[j * vb:(j + 1) * vb], 0) for j in range(n)])

    def start_load(self) -> None:
        self.producer = threading.Thread(target=self._load, name="spark-stateful-load", daemon=True)
        self.producer.start()

    def _load(self) -> None:
        """Rule 2: one record per task every 1/rate s, on an absolute schedule (no drift; after a
        stall it resumes without a burst)."""
        rng = random.Random(4242)
        interval = 1 / self.settings.rate_per_task
        vb = self.settings.value_bytes
        load = self.load
        due = time.monotonic()
        while not self.stop_load.is_set():
            load.rounds.append(time.time())
            for p in range(self.settings.tasks):
                i = rng.randrange(self.keys)
                t = time.time()
                # The record's timestamp is in ms: the occurrence's produce time is that, exactly.
                ms = int(t * 1000)
                self.log.produce(SOURCE, p, [LogRecord(key_name(p, i).encode(), rng.randbytes(vb), ms)])
                load.occurrences[(p, i)] += 1
                load.records.append((p, i, load.occurrences[(p, i)], ms / 1000))
            due += interval
            delay = due - time.monotonic()
            if delay > 0:
                self.stop_load.wait(delay)
            else:
                due = time.monotonic()

    def end_load(self) -> None:
        self.stop_load.set()
        if self.producer is not None:
            self.producer.join()
            self.producer = None


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _tail(path: Path, chars: int = 1_500) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return "(no output)"
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("at ")]  # JVM stack frames
    text = "\n".join(lines)
    return ("…" + text[-chars:]) if len(text) > chars else (text or "(no output)")


# ---------------------------------------------------------------------- one scenario

def run_scenario(sc: Scenario, size: int, settings: Settings, root: Path,
                 progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Rules 1-5 for one scenario and state size; returns its figures."""
    name, kind, before, after, standby = (sc.name, sc.kind, sc.members_before, sc.members_after,
                                          sc.standby_replicas)
    keys = max(1, size // settings.value_bytes)
    stage = _Stage.start(root, settings, keys, sc.flags())
    t0 = time.time()
    phases: dict[str, float] = {}

    def step(what: str) -> None:
        progress(f"{name}, {_label(size)}/task, {time.time() - t0:.0f} s: {what}")

    try:
        step(f"starting {before} Spark members" + (" and the newcomer" if kind == "scale-out" else ""))
        # Rule 1: the newcomer's JVM starts with the others (it joins at the event only).
        for _ in range(before):
            stage.spawn()
        newcomer = stage.spawn(gated=True) if kind == "scale-out" else None
        for m in list(stage.members):
            stage.ready(m)
        phases["spark_start"] = time.time() - t0
        stage.wait(lambda: stage.settled(before, standby), f"{before} members to settle")
        step(f"pre-loading {keys:,} keys x {settings.tasks} tasks ({settings.value_bytes:,} bytes each)")
        t_pre = time.time()
        stage.preload()
        t_loaded = stage.wait(stage.drained, "the members to process the pre-load")
        phases["preload"] = t_loaded - t_pre
        t_load = time.time()
        stage.start_load()
        stage.wait(lambda: stage.outputs_after(t_load), "every task to emit outputs under load")
        if standby:
            stage.wait(lambda: stage.standbys_caught_up(_STANDBY_LAG), "the standbys to catch up")
        phases["load_until_steady"] = time.time() - t_load
        time.sleep(settings.steady_s)  # the steady window before the event (rule 5's baseline)
        placed, standbys = stage.placement()
        standby_lag = stage.standby_lag() if standby else None
        detection_s = None
        victim = None
        step("event")
        if newcomer is not None:
            t_event = time.time()
            stage.release(newcomer)
        else:
            counts = {m.name: sum(1 for who in placed.values() if who == m.name) for m in stage.members}
            victim = max(reversed(stage.members), key=lambda m: counts[m.name])
            gone = victim.process_id
            t_event = time.time()
            stage.kill(victim)
            t_detected = stage.wait(lambda: (d := stage.describe()) is not None
                                    and all(m.process_id != gone for m in d.members),
                                    "the kill to be detected")
            detection_s = t_detected - t_event
        t_settled = stage.wait(lambda: stage.settled(after, standby), "the group to settle after the event")
        moved_to, _ = stage.placement()
        stage.wait(lambda: stage.outputs_after(t_settled + settings.tail_s), "outputs after the event")
        stage.end_load()
        t_end = time.time()
        phases["event_to_end"] = t_end - t_event
        stage.wait(stage.drained, "the members to process every record")
        step("checking the outputs")
        checkpoint_bytes = stage.checkpoint_bytes()
        batches = stage.batches()
        events = read_events(stage.out)
        result = figures(batches, events, placed, standbys, moved_to, t_event, t_end, settings.tasks,
                         settings.steady_s)
        result.update(check_outputs(stage.out, batches, stage.load, settings.tasks, keys, t_event))
        result.update({
            "scenario": name, "kind": kind, "state_bytes_per_task": size, "state": _label(size),
            "keys_per_task": keys, "value_bytes": settings.value_bytes, "tasks": settings.tasks,
            "members": f"{before} -> {after}", "standby_replicas": standby, "max_warmups": sc.max_warmups,
            "acceptable_recovery_lag": sc.acceptable_lag,
            "killed": None if victim is None else victim.name,
            "spark_start_s": round(phases["spark_start"], 1),
            "preload_s": round(phases["preload"], 2),
            "preload_records_per_s": round(keys * settings.tasks / max(phases["preload"], 1e-9)),
            "preload_mb_per_s": round(size * settings.tasks / 1e6 / max(phases["preload"], 1e-9), 1),
            "checkpoint_mb_per_task": round(checkpoint_bytes / 1e6, 1),
            "detection_s": None if detection_s is None else round(detection_s, 2),
            "standby_lag_at_event": standby_lag,
            "session_timeout_s": settings.session_timeout_ms / 1000,
            "coordinator_stable_s": round(t_settled - t_event, 2),
            "producer_gap_ms": round(max_gap(stage.load.rounds, t_event - settings.steady_s, t_end) * 1000),
            "load_records": len(stage.load.records),
            "phases_s": {k: round(v, 1) for k, v in phases.items()},
            "load_average_1m": round(os.getloadavg()[0], 2),
        })
        if result["lost"] or result["extra"]:
            raise LostRecordsError(
                f"{name}, {_label(size)}/task: {result['lost']} records lost, {result['extra']} keys "
                f"counted beyond their records (examples: {result['lost_examples']}); files kept in {root}")
        return result
    finally:
        stage.close()


# ---------------------------------------------------------------------- the command

def run_spark_stateful_bench(sizes: list[int], names: Iterable[str] = ("all",),
                             settings: Settings | None = None, *, json_output: bool = False,
                             directory: str | None = None, keep: bool = False) -> dict[str, Any]:
    """Run every scenario of ``names`` for every size (rule 6), print a table or JSON, return it."""
    settings = settings or Settings()
    planned = scenarios(list(names), settings)
    if not planned:
        raise ValueError(f"give at least one scenario of {[*SCENARIOS, *GROUPS]}")
    if not sizes:
        raise ValueError("give at least one state size")
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="regroup-bench-spark-stateful-"))
    root.mkdir(parents=True, exist_ok=True)
    err = Console(stderr=True)
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    failed = False
    try:
        for size in sizes:
            for sc in planned:
                slug = "".join(c if c.isalnum() else "_" for c in sc.name)
                where = root / f"{size}-{slug}"
                t_run = time.time()
                try:
                    result = run_scenario(sc, size, settings, where,
                                          progress=lambda msg: err.print(f"[dim]{msg}[/dim]"))
                except BaseException:
                    failed = True  # the files stay for a post-mortem
                    raise
                result["wall_s"] = round(time.time() - t_run, 1)
                runs.append(result)
                gaps = " / ".join(f"{m['gap_ms']:,} ms ({m['how']})" for m in result["moved"]) or "none moved"
                err.print(f"[dim]{sc.name}, {_label(size)}/task: done in {result['wall_s']} s; no output per "
                          f"moved task: {gaps}; interval {result['baseline_gap_ms']:,} ms; "
                          f"lost {result['lost']}[/dim]")
                if not keep:
                    shutil.rmtree(where, ignore_errors=True)
    finally:
        if not keep and not directory and not failed:
            shutil.rmtree(root, ignore_errors=True)
    plain = {**asdict(settings), "acceptable_lags": list(settings.acceptable_lags)}  # as JSON reads it back
    out: dict[str, Any] = {"settings": plain, "sizes": sizes, "runs": runs,
                           "lost": sum(r["lost"] for r in runs), "wall_s": round(time.time() - t0, 1),
                           "cpu_count": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    if json_output:
        print(json.dumps(out))
    else:
        _print(out)
    return out


def _print(out: dict[str, Any]) -> None:
    s = out["settings"]
    table = Table(title=(f"Stateful Spark tasks: {s['tasks']} tasks, {s['value_bytes']:,}-byte values, "
                         f"{s['rate_per_task']:g} records/s per task, trigger {s['trigger_ms']} ms, "
                         f"session timeout {s['session_timeout_ms'] / 1000:g} s"))
    for col in ("state/task", "scenario", "no output, per moved task (ms)", "how", "loaded before active",
                "first batch there (ms)", "max latency (ms)", "others (ms)", "interval (ms)", "batch (ms)",
                "copy (s)", "detect (s)", "lost"):
        table.add_column(col, justify="left" if col in ("state/task", "scenario", "how") else "right")

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:,}"

    def each(moved: list[dict[str, Any]], key: str) -> str:
        if key == "how":
            return " / ".join(m[key] or "?" for m in moved) or "-"
        if key == "warm_at_activation":
            return " / ".join("yes" if m[key] else "no" for m in moved) or "-"
        return " / ".join(num(m[key]) for m in moved) or "-"

    for r in out["runs"]:
        moved = r["moved"]
        table.add_row(r["state"], r["scenario"], each(moved, "gap_ms"), each(moved, "how"),
                      each(moved, "warm_at_activation"), each(moved, "first_batch_ms"),
                      num(r["max_latency_ms"]), num(r["others_gap_ms_max"]), num(r["baseline_gap_ms"]),
                      num(r["batch_ms_median"]), each(moved, "copy_s"), num(r["detection_s"]), num(r["lost"]))
    c = Console() if sys.stdout.isatty() else Console(width=250)  # a log file: no wrapping
    c.print(table)
    for r in out["runs"]:
        records = r["keys_per_task"] * r["tasks"]
        c.print(f"{r['state']}/task, {r['scenario']}: pre-load {records:,} records in {r['preload_s']} s "
                f"({r['preload_mb_per_s']} MB/s over {r['members'].split()[0]} members), checkpoint "
                f"{r['checkpoint_mb_per_task']} MB per task; Spark start {r['spark_start_s']} s; group "
                f"stable {r['coordinator_stable_s']} s after the event; producer's longest pause "
                f"{r['producer_gap_ms']} ms; {r['batches_run_twice']} batches run twice; load average "
                f"{r['load_average_1m']}; {r['wall_s']} s")
    c.print("'no output': per moved task, the longest time between two of its outputs around the event; "
            "'how': how it became active on its new owner (promoted warm-up/standby: the copy's query, in "
            "place; copied: the checkpoint of record copied and a query started on it); 'loaded before "
            "active': the query it became active in had finished a batch (Spark had loaded the state "
            "store) before; 'first batch there': Spark's duration of that query's first batch with input "
            "(it loads the state); 'max latency': the longest a record produced after the event waited "
            "for its output; 'others': 'no output' of the tasks that did not move; 'interval': the "
            "longest time between outputs of any task in the steady window before the event; 'batch': "
            "the median batch duration in that window; 'copy': the checkpoint copy on the new owner "
            f"(for the active, or for its warm-up). {out['cpu_count']} CPUs, load average "
            f"{out['load_average_1m']} at the end, {out['wall_s']} s in all.")
    c.print(f"lost: {out['lost']}")
