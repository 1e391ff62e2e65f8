"""`regroup bench stateful`: how long a stateful task produces no output when it moves, cold vs warm,
and when its member is killed, with and without a standby — real processes, per state size.

Set-up, per scenario and state size, from scratch: the embedded log in a fresh directory shared by
every process, a coordinator process (session timeout 3 s by default, heartbeats every sixth of it),
and member processes (`regroup.bench.stateful_member`: `StreamsApp` running a per-key aggregate; its
docstring has the record formats). A source topic of ``tasks`` partitions is one task each.

Rules of this module:

1. Pre-load: N = size / value_bytes distinct keys per task, produced at once; the members build the
   state (N x value_bytes per task) and the bench waits until every source offset is committed.
2. Load: a producer thread in this process writes ``rate`` records per second per task, each
   carrying its produce time, to random existing keys (the state keeps its size). Every such record
   makes one output carrying (produced at, processed at). After a steady window the event happens.
3. Events. *Scale-out 2 -> 3*: a third member joins. **Cold**: the coordinator runs with
   ``--max-warmups 0 --acceptable-recovery-lag 2^62``. Warm-ups off alone is not a cold move: rule 5
   of `regroup.protocol.streams.assignor` moves an active only to a process whose copy is caught up,
   and a process with no copy has lag 2^62 in the assignor (``_NO_COPY``), so with 0 warm-ups and
   the default lag the new member would never get an active. A recovery lag of 2^62 counts every
   process as caught up: balance moves the tasks at once, and the new owner restores the whole
   changelog inside its take-over — the behaviour before KIP-441 (Kafka Streams' "no warm-ups").
   **Warm**: ``--max-warmups 2 --acceptable-recovery-lag LAG``, one run per LAG of
   ``acceptable_lags`` (default 10,000, the coordinator's default, and 100). *kill -9 of one of 3
   members* with ``--standby-replicas 1`` vs 0 (warm-ups on, the first LAG); detection takes the
   session timeout.
4. The event ends when the group is stable and balanced with no warm-up left; the load goes on for
   ``tail_s``, stops, and the bench waits until every record is committed. Then the members leave.
   Every wait is for a condition, bounded by a timeout that grows with the state; only the steady
   window before the event is a fixed time.
5. Figures come from the outputs, after the fact. Per task, the *gap* is the longest time between
   two consecutive outputs (processed-at times) from ``steady_s`` before the event to the end of the
   load; for a moved task that is the time it produced nothing. *Max latency*: the longest a record
   produced after the event waited for its output (immune to pauses of the producer). The
   *interval* is the longest gap of any task in the steady window before the event: one processing
   interval under this load. The members' event files give each take-over's duration and the
   changelog records it read (what a cold move restores). The producer's own longest pause is
   reported: an output gap no larger than it may be the producer's. Every produced record must have
   an output (``lost`` counts those without): the bench checks itself.
6. Scenarios run one after the other on one machine, cold and warm back to back for each size (and
   in the opposite order on every second ``--repeat`` round), so that both see the same machine.
"""
from __future__ import annotations

import itertools
import json
import os
import random
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
from regroup.bench.stateful_member import GROUP, OUTPUT, SOURCE, SUBTOPOLOGY, decode_output, encode_input
from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.streams.state import StreamsGroupState
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorError

__all__ = ["COLD_RECOVERY_LAG", "KINDS", "Scenario", "Settings", "parse_size", "run_stateful_bench",
           "scenarios"]

#: The assignor's lag for "no copy here" (``_NO_COPY``): at this acceptable lag every process counts
#: as caught up on every task, so an active moves wherever balance wants it, state or not.
COLD_RECOVERY_LAG = 1 << 62

KINDS = ("scale-out", "kill")
#: The member process's module (a test or a debugging session may run a wrapper of it).
MEMBER_MODULE = "regroup.bench.stateful_member"
_PRELOAD_CHUNK = 10_000
_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "B": 1}


@dataclass(frozen=True)
class Settings:
    tasks: int = 6
    #: Bytes of state per key. Below ~990 so that a row fits SQLite's local payload of a 4 KB page
    #: (`regroup.streams.local` keeps ``kv`` WITHOUT ROWID: larger rows take an overflow page each).
    value_bytes: int = 800
    rate_per_task: float = 50.0
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 500
    #: ``--acceptable-recovery-lag`` of the warm runs: one warm scale-out per value; the kills use the first.
    acceptable_lags: tuple[int, ...] = (10_000, 100)
    max_warmups: int = 2
    batch_records: int = 1_000
    steady_s: float = 3.0
    tail_s: float = 2.0

    def __post_init__(self) -> None:
        if self.tasks < 3:
            raise ValueError(f"tasks must be at least 3 (3 members each run one), got {self.tasks}")
        if self.value_bytes < 16:
            raise ValueError(f"value_bytes must be at least 16 (count and timestamp), got {self.value_bytes}")
        if not 0 < self.rate_per_task <= 1_000:
            raise ValueError(f"rate_per_task must be in (0, 1000] records/s, got {self.rate_per_task}")
        if not self.acceptable_lags or any(lag < 0 for lag in self.acceptable_lags):
            raise ValueError(f"acceptable_lags must be one or more record counts >= 0, "
                             f"got {self.acceptable_lags}")


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


def scenarios(kinds: Iterable[str], settings: Settings) -> list[Scenario]:
    """Rule 3's scenarios of ``kinds``, in the order they run: cold, then warm, for a scale-out."""
    out: list[Scenario] = []
    lags = settings.acceptable_lags
    if "scale-out" in kinds:
        out.append(Scenario("scale-out cold", "scale-out", 2, 0, 0, COLD_RECOVERY_LAG))
        out += [Scenario(f"scale-out warm, lag {lag:,}", "scale-out", 2, 0, settings.max_warmups, lag)
                for lag in lags]
    if "kill" in kinds:
        out += [Scenario("kill -9, 1 standby", "kill", 3, 1, settings.max_warmups, lags[0]),
                Scenario("kill -9, no standby", "kill", 3, 0, settings.max_warmups, lags[0])]
    return out


def parse_size(text: str) -> int:
    """``10MB`` -> 10,000,000 (KB, MB, GB are powers of 1000; a bare number is bytes)."""
    t = text.strip().upper().replace(" ", "")
    for unit in ("KB", "MB", "GB", "B"):
        if t.endswith(unit):
            number = t[:-len(unit)]
            break
    else:
        unit, number = "B", t
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"cannot read state size {text!r}: expected a number with KB, MB or GB, "
                         "like 10MB or 1GB") from None
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"state size {text!r} must be positive")
    return size


def _label(size: int) -> str:
    for unit in ("GB", "MB", "KB"):
        if size >= _UNITS[unit]:
            return f"{size / _UNITS[unit]:g} {unit}"
    return f"{size} B"


def _key(task: int, i: int) -> bytes:
    return b"t%d-k%08d" % (task, i)


class BenchError(RuntimeError):
    """A scenario could not run (a process died, a condition never came true)."""


def group_settled(d: StreamsGroupDescription | None, tasks: int, members: int, standby: int) -> bool:
    """Stable with ``members`` members, every one of ``tasks`` tasks active exactly once, balanced,
    no warm-up, every standby granted (``standby`` replicas)."""
    if d is None or d.state is not StreamsGroupState.STABLE or len(d.members) != members:
        return False
    actives = [t for m in d.members for t in m.assigned.active]
    counts = [len(m.assigned.active) for m in d.members]
    return (len(actives) == len(set(actives)) == tasks and max(counts) - min(counts) <= 1
            and not any(m.assigned.warmup or m.target.warmup for m in d.members)
            and sum(len(m.assigned.standby) for m in d.members) == tasks * min(standby, members - 1))


def standbys_within(d: StreamsGroupDescription | None, limit: int) -> bool:
    """Every standby's reported lag is at most ``limit``."""
    return d is not None and all(m.lags.get(t, limit + 1) <= limit
                                 for m in d.members for t in m.assigned.standby)


@dataclass
class _Member:
    name: str
    proc: subprocess.Popen[str]
    state_dir: Path
    events: Path
    stderr: Path

    @property
    def process_id(self) -> str:
        return (self.state_dir / "process-id").read_text().strip()


@dataclass
class _Stage:
    """One scenario's processes and log (rules 1-4)."""

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
    #: Wall-clock start of every produce round of the load.
    rounds: list[float] = field(default_factory=list)
    load_records: int = 0

    @classmethod
    def start(cls, root: Path, settings: Settings, keys: int, flags: Iterable[str]) -> _Stage:
        root.mkdir(parents=True)
        log = open_log(str(root / "log"))
        log.create_topic(SOURCE, settings.tasks)
        log.create_topic(OUTPUT, settings.tasks)
        proc, address = start_coordinator(
            root / "coordinator", "--log", str(root / "log"), "--topic-refresh-s", "0.5",
            "--session-timeout-ms", str(settings.session_timeout_ms),
            "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms), *flags)
        # Waits scale with the state: a cold restore of the whole state runs at some 10^4 records/s.
        timeout = 120 + 4 * settings.tasks * keys / 10_000
        client = CoordinatorClient(address, timeout_s=10)
        return cls(root, settings, keys, log, proc, client, address, timeout)

    # ------------------------------------------------------------------ processes
    def add_member(self) -> _Member:
        name = f"m{len(self.members) + 1}"
        s = self.settings
        stderr = self.root / f"{name}.log"
        err = open(stderr, "a")  # noqa: SIM115 - the child writes to it
        proc = subprocess.Popen(
            [sys.executable, "-m", MEMBER_MODULE, self.address, str(self.root / "log"),
             str(self.root / f"state-{name}"), str(self.root / f"events-{name}.txt"),
             "--value-bytes", str(s.value_bytes), "--session-timeout-ms", str(s.session_timeout_ms),
             "--heartbeat-interval-ms", str(s.heartbeat_interval_ms),
             "--batch-records", str(s.batch_records)],
            stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        err.close()
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            proc.wait()
            raise BenchError(f"member {name} did not start: {_tail(stderr)}")
        m = _Member(name, proc, self.root / f"state-{name}", self.root / f"events-{name}.txt", stderr)
        self.members.append(m)
        return m

    def close(self) -> None:
        self.stop_load.set()
        if self.producer is not None:
            self.producer.join()
        for m in self.members:
            if m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        for m in self.members:
            try:
                m.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
        self.client.close()
        self.coordinator.send_signal(signal.SIGTERM)
        try:
            self.coordinator.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.coordinator.kill()
            self.coordinator.wait()
        self.log.close()

    # ------------------------------------------------------------------ waiting
    def wait(self, cond: Callable[[], bool], what: str, timeout: float | None = None) -> float:
        """Poll ``cond``; return the wall-clock time it came true. A member that died unexpectedly, or
        the timeout, raises with what never happened and the members' last words."""
        deadline = time.monotonic() + (self.timeout_s if timeout is None else timeout)
        while not cond():
            dead = [m for m in self.members if m.proc.poll() not in (None, -signal.SIGKILL)]
            if dead:
                raise BenchError(f"while waiting for {what}: member {dead[0].name} exited with status "
                                 f"{dead[0].proc.returncode}: {_tail(dead[0].stderr)}")
            if time.monotonic() > deadline:
                raise BenchError(f"timed out waiting for {what}; group: {self.describe()}; "
                                 + "; ".join(f"{m.name}: {_tail(m.stderr)}" for m in self.members))
            time.sleep(0.05)
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

    def placement(self) -> tuple[dict[int, str], dict[int, list[str]]]:
        """task partition -> member name of its active, and of its standbys."""
        d = self.describe()
        if d is None:
            raise BenchError("the coordinator does not answer DescribeStreamsGroup")
        names = {m.process_id: m.name for m in self.members if m.state_dir.joinpath("process-id").exists()}
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

    def latest_output(self, task: int) -> float:
        end = self.log.end_offsets(OUTPUT)[task]
        if end == 0:
            return 0.0
        (record,) = self.log.read(OUTPUT, task, end - 1, 1)
        assert record.value is not None
        return decode_output(record.value)[1]

    def outputs_after(self, t: float) -> bool:
        return all(self.latest_output(p) > t for p in range(self.settings.tasks))

    # ------------------------------------------------------------------ producing
    def preload(self) -> None:
        """Rule 1: every key of every task once, round robin over the tasks so they grow together."""
        for start in range(0, self.keys, _PRELOAD_CHUNK):
            for p in range(self.settings.tasks):
                self.log.produce(SOURCE, p, [LogRecord(_key(p, i), encode_input(0.0), 0)
                                             for i in range(start, min(start + _PRELOAD_CHUNK, self.keys))])

    def start_load(self) -> None:
        self.producer = threading.Thread(target=self._load, name="stateful-load", daemon=True)
        self.producer.start()

    def _load(self) -> None:
        """Rule 2: one record per task every 1/rate s, on an absolute schedule (no drift; after a
        stall it resumes without a burst)."""
        rng = random.Random(848)
        interval = 1 / self.settings.rate_per_task
        due = time.monotonic()
        while not self.stop_load.is_set():
            self.rounds.append(time.time())
            for p in range(self.settings.tasks):
                t = time.time()
                self.log.produce(SOURCE, p, [LogRecord(_key(p, rng.randrange(self.keys)), encode_input(t),
                                                       int(t * 1000))])
                self.load_records += 1
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

    def read_outputs(self) -> dict[int, list[tuple[float, float]]]:
        out: dict[int, list[tuple[float, float]]] = {}
        for p in range(self.settings.tasks):
            rows = out[p] = []
            offset = 0
            while batch := self.log.read(OUTPUT, p, offset, 10_000):
                for r in batch:
                    assert r.value is not None
                    rows.append(decode_output(r.value))
                offset = batch[-1].offset + 1
        return out

    def sqlite_bytes_per_task(self) -> int:
        """The largest local file of any copy of any task (its WAL, a few MB at most, aside)."""
        sizes: dict[str, int] = {}
        for m in self.members:
            for f in m.state_dir.glob("*.sqlite3"):
                sizes[f"{m.name}/{f.name}"] = f.stat().st_size
        return max(sizes.values(), default=0)


def _tail(path: Path, chars: int = 1_500) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return "(no output)"
    return ("…" + text[-chars:]) if len(text) > chars else (text or "(no output)")


# ---------------------------------------------------------------------- one scenario

def run_scenario(sc: Scenario, size: int, settings: Settings, root: Path,
                 progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Rules 1-5 for one scenario and state size; returns its figures."""
    name, kind, before, after, standby = (sc.name, sc.kind, sc.members_before, sc.members_after,
                                          sc.standby_replicas)
    keys = max(1, size // settings.value_bytes)
    stage = _Stage.start(root, settings, keys, sc.flags())
    try:
        for _ in range(before):
            stage.add_member()
        stage.wait(lambda: stage.settled(before, standby), f"{before} members to settle")
        progress(f"{name}, {_label(size)}/task: pre-loading {keys:,} keys x {settings.tasks} tasks")
        t_pre = time.time()
        stage.preload()
        t_loaded = stage.wait(stage.drained, "the members to process the pre-load")
        preload_s = t_loaded - t_pre
        t_load = time.time()
        stage.start_load()
        stage.wait(lambda: stage.outputs_after(t_load), "every task to emit outputs under load")
        if standby:
            stage.wait(lambda: stage.standbys_caught_up(settings.batch_records), "the standbys to catch up")
        time.sleep(settings.steady_s)  # the steady window before the event (rule 5's baseline)
        placed, standbys = stage.placement()
        detection_s = None
        progress(f"{name}, {_label(size)}/task: event")
        if kind == "scale-out":
            t_event = time.time()
            stage.add_member()
        else:
            victim = stage.members[-1]
            gone = victim.process_id
            t_event = time.time()
            victim.proc.kill()
            victim.proc.wait()
            t_detected = stage.wait(lambda: (d := stage.describe()) is not None
                                    and all(m.process_id != gone for m in d.members),
                                    "the kill to be detected")
            detection_s = t_detected - t_event
        t_settled = stage.wait(lambda: stage.settled(after, standby), "the group to settle after the event")
        moved_to, _ = stage.placement()
        stage.wait(lambda: stage.outputs_after(t_settled + settings.tail_s), "outputs after the event")
        stage.end_load()
        t_end = time.time()
        stage.wait(stage.drained, "the members to process every record")
        sqlite_bytes = stage.sqlite_bytes_per_task()
        outputs = stage.read_outputs()
        events = _read_events(stage.members, t_event)
        result = _figures(outputs, events, placed, standbys, moved_to, t_event, t_end, settings)
        result.update({
            "scenario": name, "kind": kind, "state_bytes_per_task": size, "state": _label(size),
            "keys_per_task": keys, "value_bytes": settings.value_bytes, "tasks": settings.tasks,
            "members": f"{before} -> {after}", "standby_replicas": standby, "max_warmups": sc.max_warmups,
            "acceptable_recovery_lag": sc.acceptable_lag,
            "preload_s": round(preload_s, 2),
            "preload_records_per_s": round(keys * settings.tasks / max(preload_s, 1e-9)),
            "sqlite_mb_per_task": round(sqlite_bytes / 1e6, 1),
            "detection_s": None if detection_s is None else round(detection_s, 2),
            "session_timeout_s": settings.session_timeout_ms / 1000,
            "coordinator_stable_s": round(t_settled - t_event, 2),
            "producer_gap_ms": round(_max_gap(stage.rounds, t_event - settings.steady_s, t_end) * 1000),
            "load_records": stage.load_records,
        })
        result["lost"] = stage.load_records - result.pop("_distinct_outputs")
        return result
    finally:
        stage.close()


def _read_events(members: list[_Member], since: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in members:
        if not m.events.exists():
            continue
        for line in m.events.read_text().splitlines():
            t, kind, tasks, *rest = line.split(" ")
            if float(t) < since:
                continue
            fields = dict(r.split("=", 1) for r in rest)
            ev: dict[str, Any] = {"at": float(t), "member": m.name, "kind": kind,
                                  "tasks": [int(x.rpartition("_")[2]) for x in tasks.split(",")],
                                  "seconds": float(fields["seconds"])}
            if "restored" in fields:
                ev["restored"] = {int(k.rpartition("_")[2]): int(v)
                                  for k, v in (x.split(":") for x in fields["restored"].split(","))}
            out.append(ev)
    return sorted(out, key=lambda e: e["at"])


def _max_gap(stamps: list[float], lo: float, hi: float) -> float:
    inside = sorted(s for s in stamps if lo <= s <= hi)
    if len(inside) < 2:
        return hi - lo
    return max(b - a for a, b in itertools.pairwise(inside))


def _figures(outputs: dict[int, list[tuple[float, float]]], events: list[dict[str, Any]],
             placed: dict[int, str], standbys: dict[int, list[str]], moved_to: dict[int, str],
             t_event: float, t_end: float,
             settings: Settings) -> dict[str, Any]:
    """Rule 5."""
    lo = t_event - settings.steady_s
    gaps = {p: _max_gap([proc for _, proc in rows], lo, t_end) for p, rows in outputs.items()}
    baseline = max(_max_gap([proc for _, proc in rows], lo, t_event) for rows in outputs.values())
    moved = sorted(p for p in placed if moved_to.get(p) != placed[p])
    distinct = 0
    rows_out: list[dict[str, Any]] = []
    for p in sorted(outputs):
        first: dict[float, float] = {}
        for produced, processed in outputs[p]:
            if produced not in first or processed < first[produced]:
                first[produced] = processed
        distinct += len(first)
        if p in moved:
            latency = max((proc - prod for prod, proc in first.items() if prod >= t_event), default=0.0)
            takes = [e for e in events if e["kind"] == "take-over" and p in e["tasks"]]
            take = takes[0] if takes else None
            rows_out.append({
                "task": f"{SUBTOPOLOGY}_{p}", "from": placed[p], "to": moved_to.get(p),
                "standby_on": standbys.get(p, []),
                "gap_ms": round(gaps[p] * 1000), "max_latency_ms": round(latency * 1000),
                "restored_records": None if take is None else take["restored"].get(p),
                "take_over_s": None if take is None else round(take["seconds"], 3)})
    others = [gaps[p] for p in gaps if p not in moved]
    restored: list[int] = [r["restored_records"] for r in rows_out if r["restored_records"] is not None]
    take_s: list[float] = [r["take_over_s"] for r in rows_out if r["take_over_s"] is not None]
    moved_gaps: list[int] = [r["gap_ms"] for r in rows_out]
    return {
        "moved": rows_out,
        "moved_gap_ms_max": max(moved_gaps, default=None),
        "others_gap_ms_max": round(max(others) * 1000) if others else None,
        "baseline_gap_ms": round(baseline * 1000),
        # Take-overs of one member run one after another, so per call: records / duration.
        "restore_records_per_s": round(sum(restored) / sum(take_s)) if sum(take_s) > 0.05 else None,
        "_distinct_outputs": distinct,
    }


# ---------------------------------------------------------------------- the command

def run_stateful_bench(sizes: list[int], kinds: Iterable[str] = KINDS, settings: Settings | None = None, *,
                       json_output: bool = False, repeat: int = 1, directory: str | None = None,
                       keep: bool = False) -> dict[str, Any]:
    """Run every scenario of ``kinds`` for every size (rule 6), print a table or JSON, return it."""
    settings = settings or Settings()
    kinds = list(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown scenario kinds {unknown}: choose from {list(KINDS)}")
    if not sizes:
        raise ValueError("give at least one state size")
    planned = scenarios(kinds, settings)
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="regroup-bench-stateful-"))
    root.mkdir(parents=True, exist_ok=True)
    err = Console(stderr=True)
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    try:
        for round_ in range(repeat):
            for size in sizes:
                order = planned if round_ % 2 == 0 else _swapped(planned)
                for sc in order:
                    slug = "".join(c if c.isalnum() else "_" for c in sc.name)
                    where = root / f"r{round_}-{size}-{slug}"
                    result = run_scenario(sc, size, settings, where,
                                          progress=lambda msg: err.print(f"[dim]{msg}[/dim]"))
                    result["round"] = round_
                    runs.append(result)
                    if not keep:
                        shutil.rmtree(where, ignore_errors=True)
    finally:
        if not keep and not directory:
            shutil.rmtree(root, ignore_errors=True)
    plain = {**asdict(settings), "acceptable_lags": list(settings.acceptable_lags)}  # as JSON reads it back
    out: dict[str, Any] = {"settings": plain, "sizes": sizes, "repeat": repeat,
                           "runs": runs, "wall_s": round(time.time() - t0, 1),
                           "cpu_count": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    if json_output:
        print(json.dumps(out))
    else:
        _print(out)
    return out


def _swapped(planned: list[Scenario]) -> list[Scenario]:
    """Rule 6: warm before cold, no standby before one standby (same scenarios, other order)."""
    scale = [s for s in planned if s.kind == "scale-out"]
    kills = [s for s in planned if s.kind == "kill"]
    return scale[1:] + scale[:1] + kills[::-1]


def _print(out: dict[str, Any]) -> None:
    s = out["settings"]
    table = Table(title=(f"Stateful streams: {s['tasks']} tasks, {s['value_bytes']}-byte values, "
                         f"{s['rate_per_task']:g} records/s per task, session timeout "
                         f"{s['session_timeout_ms'] / 1000:g} s"))
    for col in ("state/task", "scenario", "no output, per moved task (ms)", "max latency (ms)",
                "others (ms)", "interval (ms)", "restored at take-over (records)", "take-over (s)",
                "detect (s)", "lost"):
        table.add_column(col, justify="left" if col in ("state/task", "scenario") else "right")

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:,}"

    def each(moved: list[dict[str, Any]], key: str) -> str:
        return " / ".join(num(m[key]) for m in moved) or "-"

    for r in out["runs"]:
        moved = r["moved"]
        table.add_row(r["state"], r["scenario"], each(moved, "gap_ms"), each(moved, "max_latency_ms"),
                      num(r["others_gap_ms_max"]), num(r["baseline_gap_ms"]), each(moved, "restored_records"),
                      each(moved, "take_over_s"), num(r["detection_s"]), num(r["lost"]))
    c = Console()
    c.print(table)
    for r in out["runs"]:
        restore = r["restore_records_per_s"]
        records = r["keys_per_task"] * r["tasks"]
        c.print(f"{r['state']}/task, {r['scenario']}: pre-load {records:,} records in {r['preload_s']} s "
                f"({r['preload_records_per_s']:,} records/s over {r['members'].split()[0]} members), "
                f"SQLite file {r['sqlite_mb_per_task']} MB per task"
                + (f", take-overs restored {restore:,} records/s" if restore else "")
                + f"; producer's longest pause {r['producer_gap_ms']} ms")
    c.print("'no output': per moved task, the longest time between two of its outputs around the event; "
            "'max latency': the longest a record produced after the event waited for its output; 'others': "
            "the same as 'no output' for the tasks that did not move; 'interval': the longest time between "
            "outputs of any task in the steady window before the event; 'restored at take-over': changelog "
            f"records the new owner read before processing. {out['cpu_count']} CPUs, load average "
            f"{out['load_average_1m']} at the end, {out['wall_s']} s in all.")
