"""`regroup demo` on PySpark: a streaming pipeline of N Spark processes that changes membership while it runs.

One call starts a coordinator and the log (the embedded log in a fresh data directory, or a Kafka
cluster), produces a steady keyed workload (events of ~1,000 customers with an amount each), and runs
the pipeline — per-customer event counts and amount totals per micro-batch, written as Parquet — as
N member processes, each a streaming query on ``spark.readStream.format("regroup")`` in a SparkSession
of its own (see `regroup.demo.spark_member`). While the workload runs it

* scales out by one (a new query joins the group),
* scales in by one (a query stops: it leaves the group),
* rolls the static member (stopped and restarted with the same instanceId and checkpoint: its
  partitions wait for it and the group epoch does not move),
* kills one member with kill -9 (its partitions move once the coordinator's session times out),

each once the group is stable again. At the end it waits until every partition's committed offset is
the log's end, then checks every record (produced, processed, lost — must be 0 — and duplicated, with
the hand-off that caused each duplicate), compares the output table's per-customer totals with the
producer's, measures each member's longest pause around each event (members not involved should not
pause: the protocol has no group-wide barrier) and writes a report (PNG + HTML).

Member processes that are about to join (the scaled-out member, the static member's replacement) are
started ahead and wait at a gate file with a warm JVM: the events then measure the protocol, not the
JVM's start-up (~10 s on two busy cores), and the static restart fits in the demo's short session
timeout (production's 45 s would fit a cold restart too).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from regroup.demo.common import (
    GROUP,
    TOPIC,
    Workload,
    customer_key,
    kill_process_group,
    start_demo_coordinator,
    stop_coordinator,
)
from regroup.log import open_log
from regroup.protocol.describe import GroupDescription
from regroup.protocol.records import MemberStatus
from regroup.protocol.state import GroupState
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.types import GroupDetails

#: The coordinator's session timeout: a kill -9'd member's partitions move after it; a static member
#: must restart within it. A Spark query needs ~4 s from start to join on an idle 2-core machine and
#: three times that under load, hence more than the 6-10 s that would do for plain consumers.
SESSION_TIMEOUT_MS = 20_000
HEARTBEAT_INTERVAL_MS = 1_000
STATIC_INSTANCE = "static-1"
#: How long after the group is stable again an event's window still runs (catching late pauses).
WINDOW_MARGIN_S = 2.0
#: Records per micro-batch at most: small batches keep revocations (done at batch boundaries) quick.
MAX_RECORDS_PER_TRIGGER = 4_000
#: The members' processingTime trigger (s): a micro-batch costs ~0.5 s of CPU even when small, and
#: N+2 Spark processes share two cores.
TRIGGER_S = 2.0
#: At least this long between the group becoming stable and the next event.
STEADY_S = 6.0
#: When the events happen, as fractions of the duration (each also waits for a stable group).
EVENT_PLAN = (("scale-out", 0.12), ("scale-in", 0.34), ("static-roll", 0.56), ("kill-9", 0.78))
EVENT_LABELS = {"scale-out": "scale out +1", "scale-in": "scale in -1", "static-roll": "roll static member",
                "kill-9": "kill -9"}


# --------------------------------------------------------------------------- records read back
@dataclass(frozen=True, slots=True)
class BatchDone:
    """A completed micro-batch of a member (a line of its progress file)."""

    t: float
    batch: int
    rows: int
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Offsets ``first..last`` of ``partition`` that batch ``batch`` of ``member`` processed."""

    member: str
    batch: int
    t: float
    partition: int
    first: int
    last: int
    count: int


@dataclass(frozen=True, slots=True)
class OffsetSpan:
    """Offsets ``first..last`` of a partition read ``times`` times (0: lost), last read at ``t`` by
    ``members``."""

    partition: int
    first: int
    last: int
    times: int
    members: tuple[str, ...] = ()
    t: float = 0.0

    @property
    def records(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class Coverage:
    distinct: int
    reads: int
    lost: int
    duplicates: int
    lost_spans: tuple[OffsetSpan, ...]
    duplicate_spans: tuple[OffsetSpan, ...]
    gapped_ranges: int  # ranges whose count is not last - first + 1 (a batch skipped offsets)


# --------------------------------------------------------------------------- pure computations
def count_coverage(ranges: Iterable[ReadRange], ends: Mapping[int, int]) -> Coverage:
    """How often each offset ``[0, ends[p])`` was processed, summed up: distinct, lost, duplicated."""
    by_part: dict[int, list[ReadRange]] = {}
    gapped = 0
    for r in ranges:
        by_part.setdefault(r.partition, []).append(r)
        gapped += r.count != r.last - r.first + 1
    distinct = reads = lost = dups = 0
    lost_spans: list[OffsetSpan] = []
    dup_spans: list[OffsetSpan] = []
    for p in sorted(set(ends) | set(by_part)):
        end = ends.get(p, 0)
        rs = by_part.get(p, [])
        times = _times_read(rs, end)
        for first, last, n in _runs(times):
            if first >= end:
                continue  # read past the log's end: impossible, ignored rather than counted as lost
            if n == 0:
                lost += last - first + 1
                lost_spans.append(OffsetSpan(p, first, last, 0))
                continue
            distinct += last - first + 1
            reads += (last - first + 1) * n
            if n > 1:
                dups += (last - first + 1) * (n - 1)
                over = [r for r in rs if r.first <= last and r.last >= first]
                dup_spans.append(OffsetSpan(p, first, last, n, tuple(sorted({r.member for r in over})),
                                            max(r.t for r in over)))
    return Coverage(distinct, reads, lost, dups, tuple(lost_spans), tuple(_merge(dup_spans)), gapped)


def _times_read(ranges: Sequence[ReadRange], end: int) -> list[int]:
    size = max([end, *(r.last + 1 for r in ranges)])
    diff = [0] * (size + 1)
    for r in ranges:
        diff[r.first] += 1
        diff[r.last + 1] -= 1
    out, run = [], 0
    for d in diff[:size]:
        run += d
        out.append(run)
    return out


def _runs(values: Sequence[int]) -> Iterable[tuple[int, int, int]]:
    """(first, last, value) of each run of equal values."""
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            yield start, i - 1, values[start]
            start = i


def _merge(spans: list[OffsetSpan]) -> list[OffsetSpan]:
    """Adjacent duplicate spans of one partition and the same readers are one hand-off."""
    out: list[OffsetSpan] = []
    for s in spans:
        prev = out[-1] if out else None
        if prev and prev.partition == s.partition and prev.last + 1 == s.first and prev.members == s.members:
            out[-1] = OffsetSpan(s.partition, prev.first, s.last, max(prev.times, s.times), s.members,
                                 max(prev.t, s.t))
        else:
            out.append(s)
    return out


def longest_gap(times: Sequence[float], lo: float, hi: float) -> float:
    """The longest interval without a completed batch that overlaps ``[lo, hi]``.

    ``times`` are sorted completion times. The interval before the first completion inside the window
    starts at the last completion before ``lo`` (or at ``lo`` when there is none: a member that just
    joined waits for its first batch); an interval still open at ``hi`` counts up to ``hi``.
    """
    if hi <= lo:
        return 0.0
    i = bisect.bisect_right(times, lo)
    points = [times[i - 1] if i > 0 else lo]
    points += [t for t in times[i:] if t <= hi]
    points.append(hi)
    return max(b - a for a, b in itertools.pairwise(points))


def typical_gap(times: Sequence[float]) -> float:
    """The median interval between consecutive batches: a member's normal rhythm."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else 0.0


def moved_partitions(before: Mapping[int, str], after: Mapping[int, str]) -> list[int]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


# --------------------------------------------------------------------------- member processes
def rebalance_tag(name: str) -> int:
    """A member's rebalance timeout: 60 s plus its number in ms — the same for all practical purposes,
    and distinct, so that the coordinator's describe tells which member id is which member."""
    return 60_000 + int(name.removeprefix("m"))


@dataclass
class Proc:
    """One Spark member process. A static member's restart is a new Proc with the same name."""

    name: str
    incarnation: int
    instance: str | None
    popen: subprocess.Popen[bytes]
    progress: Path
    gate: Path
    log: Path
    state: str = "starting"  # starting, ready, joining, running, stopping, stopped, killed, failed
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    released_at: float | None = None
    ended_at: float | None = None
    member_id: str | None = None
    batches: list[BatchDone] = field(default_factory=list)
    error: str | None = None
    _pos: int = 0

    @property
    def label(self) -> str:
        return self.name if self.incarnation == 1 else f"{self.name}#{self.incarnation}"

    @property
    def in_group(self) -> bool:
        """Released and not yet stopped or killed: the coordinator should see it as a member."""
        return self.released_at is not None and self.state in ("joining", "running")

    def poll(self) -> None:
        """Read the progress lines appended since the last look (complete lines only)."""
        try:
            with open(self.progress, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data.rfind(b"\n") + 1
        self._pos += complete
        for line in data[:complete].splitlines():
            self._apply(json.loads(line))
        if self.popen.poll() is not None and self.state not in ("stopped", "killed", "failed"):
            # An exit the demo did not ask for is a failure, whatever its status (the status of one it
            # asked for is in the results).
            self.state = "stopped" if self.state == "stopping" else "failed"
            self.ended_at = self.ended_at or time.time()

    def _apply(self, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        if kind == "ready":
            self.ready_at = rec["t"]
            if self.state == "starting":
                self.state = "ready"
        elif kind == "batch":
            self.batches.append(BatchDone(rec["t"], rec["batch"], rec["rows"], tuple(rec["partitions"])))
            if self.state == "joining":
                self.state = "running"
        elif kind == "query-failed":
            self.state, self.error = "failed", rec.get("error")
        elif kind == "stopped" and self.state not in ("failed", "killed"):
            self.state = "stopped"
            self.ended_at = rec["t"]


@dataclass
class Sample:
    """The group as the coordinator described it at ``t``: who owns which partition."""

    t: float
    epoch: int
    state: str
    owners: dict[int, str]
    #: Partitions whose owner is not processing: killed, or a static member between stop and restart.
    absent: frozenset[int] = frozenset()


@dataclass
class Event:
    kind: str
    member: str
    at: float
    epoch_before: int
    owners_before: dict[int, str]
    stable_at: float | None = None
    #: When every partition the event touched had been processed again by its new owner.
    resumed_at: float | None = None
    epoch_after: int = -1
    owners_after: dict[int, str] = field(default_factory=dict)
    note: str = ""

    @property
    def touched(self) -> list[int]:
        """The partitions that moved, and those of the member concerned (a static member's wait)."""
        mine = {p for p, m in self.owners_after.items() if m == self.member}
        return sorted(set(moved_partitions(self.owners_before, self.owners_after)) | mine)

    @property
    def window(self) -> tuple[float, float]:
        """From the event until the group is stable and every touched partition is processed again."""
        ends = [t for t in (self.stable_at, self.resumed_at) if t is not None]
        return self.at, (max(ends) if ends else self.at + 30.0) + WINDOW_MARGIN_S


# --------------------------------------------------------------------------- the orchestrator
class SparkDemo:
    def __init__(self, root: Path, log_spec: str, topic: str, partitions: int, console: Console,
                 json_output: bool) -> None:
        self.root, self.log_spec, self.topic, self.partitions = root, log_spec, topic, partitions
        self.out = root / "out"
        self.console, self.json_output = console, json_output
        self.addr = ""
        self.coordinator: subprocess.Popen[str] | None = None
        self.client: CoordinatorClient | None = None
        self.procs: list[Proc] = []
        self.samples: list[Sample] = []
        self.events: list[Event] = []
        self.ids: dict[str, str] = {}  # coordinator member id -> member name
        self.details: GroupDetails | None = None
        self.phase = "starting"
        self.t0 = time.time()
        self.workload: Workload | None = None
        self.live: Live | None = None
        self.stop_producing = threading.Event()
        self.started = time.time()
        self.timings: dict[str, float] = {}
        self._last_sample = 0.0

    # ------------------------------------------------------------------ processes
    def spawn(self, name: str, instance: str | None = None, warm_up: bool = False) -> Proc:
        """Start a member process; it starts Spark (and ``warm_up``: runs the pipeline once on made-up
        rows), then waits at its gate (see `release`)."""
        incarnation = 1 + sum(p.name == name for p in self.procs)
        tag = f"{name}.{incarnation}"
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        progress, gate = self.out / "progress" / f"{tag}.jsonl", self.root / "gates" / tag
        gate.parent.mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / f"{tag}.log"
        args = [sys.executable, "-m", "regroup.demo.spark_member", name, self.addr, self.log_spec,
                str(self.out), str(self.root / "checkpoints" / name), "--topic", self.topic,
                "--progress", str(progress), "--wait-for", str(gate),
                "--max-records", str(MAX_RECORDS_PER_TRIGGER), "--trigger-s", str(TRIGGER_S),
                "--rebalance-timeout-ms", str(rebalance_tag(name)),
                "--local-dir", str(self.root / "spark-local" / tag)]
        if instance:
            args += ["--instance", instance]
        if warm_up:
            args.append("--warm-up")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as sink:
            # Own session: kill -9 takes the JVM and the Python workers with it, as a crash would,
            # and the terminal's Ctrl-C reaches only the demo, which then stops everyone in order.
            popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env,
                                     start_new_session=True)
        proc = Proc(name, incarnation, instance, popen, progress, gate, log)
        self.procs.append(proc)
        return proc

    def release(self, proc: Proc) -> None:
        """Let a warmed-up member start its query: it joins the group."""
        proc.gate.touch()
        proc.released_at = time.time()
        proc.state = "joining"

    def terminate(self, proc: Proc) -> None:
        """SIGTERM: the member stops its query at the next batch boundary (so that the group has its
        last batch's offsets) — the source leaves the group — then Spark, and exits. A thread waits for
        the exit so that the demo keeps watching the group meanwhile."""
        if proc.popen.poll() is None:
            proc.state = "stopping"
            proc.popen.send_signal(signal.SIGTERM)
        threading.Thread(target=_reap, args=(proc.popen, 60.0), daemon=True).start()

    def kill(self, proc: Proc) -> None:
        kill_process_group(proc.popen)
        proc.state, proc.ended_at = "killed", time.time()

    def shutdown(self) -> None:
        """Stop the producer, every member still running (in parallel: each takes seconds), then the
        coordinator. Idempotent."""
        self.stop_producing.set()
        alive = [p for p in self.procs if p.popen.poll() is None]
        for p in alive:
            p.state = "stopping"
            p.popen.send_signal(signal.SIGTERM)
        for p in alive:
            _reap(p.popen, 45.0)
        for p in self.procs:
            kill_process_group(p.popen)  # whatever a member left behind (a JVM that hung on)
            p.poll()
        if self.client is not None:
            self.client.close()
            self.client = None
        stop_coordinator(self.coordinator)
        self.coordinator = None

    # ------------------------------------------------------------------ watching
    def refresh(self) -> None:
        """Read the members' progress, sample the group, redraw the live view."""
        for p in self.procs:
            p.poll()
        now = time.time()
        if self.client is not None and now - self._last_sample >= 0.4:
            self._last_sample = now
            try:
                self.details = self.client.describe_group(GROUP)
            except Exception:  # the coordinator is busy or restarting: keep the last view
                self.details = None
            if self.details is not None:
                d = self.details.description
                self._map_ids(d)
                self.samples.append(Sample(now, d.epoch, d.state.value, self.owners(d), self.absent(d)))
        if self.live is not None:
            self.live.update(self.table())

    def _map_ids(self, d: GroupDescription) -> None:
        """Name the coordinator's member ids by the rebalance timeout each member was given (see
        `rebalance_tag`): the source does not let a query name itself in describe otherwise."""
        for m in d.members:
            if m.member_id in self.ids:
                continue
            candidates = [p for p in self.procs if p.in_group and p.member_id is None
                          and rebalance_tag(p.name) == m.rebalance_timeout_ms]
            if candidates:
                proc = min(candidates, key=lambda p: p.released_at or 0.0)
                proc.member_id = m.member_id
                self.ids[m.member_id] = proc.name

    def owners(self, d: GroupDescription) -> dict[int, str]:
        out: dict[int, str] = {}
        for m in d.members:
            for s in m.assigned | m.pending_revocation:
                if s.topic == self.topic:
                    out[s.partition] = self.ids.get(m.member_id, "?")
        return out

    def absent(self, d: GroupDescription) -> frozenset[int]:
        """Partitions assigned to a member id whose process is gone (the coordinator does not know yet,
        or keeps them for a static member's return)."""
        live = {p.member_id for p in self.procs if p.in_group}
        return frozenset(s.partition for m in d.members if m.member_id not in live
                         for s in m.assigned | m.pending_revocation if s.topic == self.topic)

    def stable(self) -> bool:
        """Every member in the group is known, at the group epoch, with nothing left to move."""
        if self.details is None:
            return False
        d = self.details.description
        want = {p.member_id for p in self.procs if p.in_group}
        have = {m.member_id for m in d.members}
        return (d.state is GroupState.STABLE and None not in want and want == have
                and all(m.status is MemberStatus.STABLE and m.epoch == d.epoch for m in d.members))

    def drained(self) -> bool:
        """Every partition's committed offset is the log's end (and the log holds what was produced)."""
        if self.details is None or self.workload is None:
            return False
        offs = [o for o in self.details.offsets if o.shard.topic == self.topic]
        ends = sum(o.log_end_offset or 0 for o in offs)
        return (len(offs) == self.partitions and ends == self.workload.produced
                and all(o.committed == o.log_end_offset for o in offs))

    def wait(self, pred: Callable[[], bool], timeout: float, tick: float = 0.25) -> bool:
        deadline = time.time() + timeout
        while True:
            self.refresh()
            if pred():
                return True
            if time.time() >= deadline:
                return False
            self._check_alive()
            time.sleep(tick)

    def _check_alive(self) -> None:
        if self.workload is not None and self.workload.error is not None:
            raise RuntimeError(f"the producer failed: {self.workload.error!r}")
        if self.coordinator is not None and self.coordinator.poll() is not None:
            raise RuntimeError(f"the coordinator exited with status {self.coordinator.returncode}; see "
                               f"{self.root / 'coordinator.log'}")
        for p in self.procs:
            if p.state == "failed":
                raise RuntimeError(f"member {p.label} failed: {p.error or 'exit ' + str(p.popen.returncode)}"
                                   f"; see {p.log}")

    def warm(self) -> bool:
        """Every member has finished two batches with records: past its slow first one (a cold JVM
        compiles), which should not count as a pause caused by the next event."""
        return all(sum(1 for b in p.batches if b.rows) >= 2 for p in self.procs if p.in_group)

    def resumed_times(self, ev: Event) -> dict[int, float]:
        """For each partition the event touched, when its owner now first completed a batch with it
        (by a process that was in the group then, so not the stopping half of a static roll)."""
        first: dict[int, float] = {}
        for p in self.procs:
            if not p.in_group:
                continue
            for b in p.batches:
                if b.t > ev.at:
                    for part in b.partitions:
                        if ev.owners_after.get(part) == p.name and part not in first:
                            first[part] = b.t
        return {part: first[part] for part in ev.touched if part in first}

    def resumed(self, ev: Event) -> bool:
        return len(self.resumed_times(ev)) == len(ev.touched)

    def epoch(self) -> int:
        return self.details.description.epoch if self.details is not None else -1

    def current_owners(self) -> dict[int, str]:
        return dict(self.samples[-1].owners) if self.samples else {}

    # ------------------------------------------------------------------ live view
    def table(self) -> Table:
        elapsed = time.time() - self.t0
        produced = self.workload.produced if self.workload else 0
        title = f"regroup · PySpark demo · {elapsed:5.1f} s · {self.phase} · produced {produced:,}"
        table = Table(title=title, title_justify="left", caption_justify="left")
        for col in ("member", "instance", "process", "epoch", "partitions", "batches", "records/s",
                    "processed", "last batch"):
            table.add_column(col, justify="right" if col in ("records/s", "processed", "batches") else "left")
        by_id = {m.member_id: m for m in self.details.description.members} if self.details else {}
        now = time.time()
        for p in self.procs:
            if p.state in ("stopped", "killed") and p.ended_at and now - p.ended_at > 20:
                continue
            desc = by_id.get(p.member_id or "")
            parts = ",".join(str(s.partition) for s in sorted(desc.assigned)) if desc else "-"
            recent = sum(b.rows for b in p.batches if b.t > now - 5.0) / 5.0
            last = f"{now - p.batches[-1].t:4.1f} s ago" if p.batches else "-"
            table.add_row(p.label, p.instance or "-", f"{p.state} ({p.popen.pid})",
                          str(desc.epoch) if desc else "-", parts or "(none)", str(len(p.batches)),
                          f"{recent:,.0f}", f"{sum(b.rows for b in p.batches):,}", last)
        if self.details is not None:
            d = self.details.description
            lag = sum(o.lag or 0 for o in self.details.offsets if o.shard.topic == self.topic)
            table.caption = (f"group epoch {d.epoch} · target {d.target_epoch} · {d.state.value} · "
                             f"lag {lag:,}" + "".join(f"\n{_event_line(e, self.t0)}" for e in self.events))
        return table


def _reap(popen: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a member to exit; past ``timeout`` kill it and everything it started."""
    try:
        popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_group(popen)


def _event_line(e: Event, t0: float) -> str:
    stable = f"stable after {e.stable_at - e.at:4.1f} s" if e.stable_at else "not stable yet"
    epochs = f"group epoch {e.epoch_before} → {e.epoch_after}" if e.epoch_after >= 0 else ""
    return f"{e.at - t0:6.1f} s  {EVENT_LABELS[e.kind]:<20} {e.member:<4} {stable}  {epochs}  {e.note}"


# --------------------------------------------------------------------------- the run
@dataclass
class DemoConfig:
    members: int
    partitions: int
    rate: int
    duration: float
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    join_timeout_s: float = 180.0  # JVM start-up of several members at once on two cores


def _start(demo: SparkDemo, cfg: DemoConfig) -> tuple[Proc, Proc]:
    """Start the first members and the spare of the scale out, let the first ones join as soon as
    each is ready, and start the static member's replacement. (The workload starts then: the group
    settles faster with data to process, and every event waits for a stable group anyway.)"""
    first = [demo.spawn(f"m{i + 1}", STATIC_INSTANCE if i == 0 else None) for i in range(cfg.members)]
    # The spares are warmed up: the events should measure the protocol, not a cold JVM's first batch.
    # The static member's replacement starts once the first ones are up (JVMs starting together slow
    # each other down); it has until the roll to warm up.
    spare = demo.spawn(f"m{cfg.members + 1}", warm_up=True)
    replacement: list[Proc] = []
    demo.phase = "starting Spark"

    def joined() -> bool:
        for p in first:
            if p.ready_at and p.released_at is None:
                demo.release(p)
        if not replacement and all(p.ready_at for p in first):
            replacement.append(demo.spawn("m1", STATIC_INSTANCE, warm_up=True))
        return all(p.member_id for p in first)

    if not demo.wait(joined, cfg.join_timeout_s):
        raise RuntimeError(f"the Spark members did not start and join within {cfg.join_timeout_s:.0f} s;"
                           f" see {demo.root / 'logs'}")
    return spare, replacement[0]


def _event(demo: SparkDemo, kind: str, member: str, act: Callable[[], None], note: str = "") -> Event:
    """Do ``act`` and follow the group until it is stable again."""
    demo.phase = f"{EVENT_LABELS[kind]}: {member}"
    ev = Event(kind, member, time.time(), demo.epoch(), demo.current_owners(), note=note)
    demo.events.append(ev)
    act()
    if demo.wait(demo.stable, 90):
        ev.stable_at = time.time()
    else:
        ev.note = (ev.note + " · the group was not stable within 90 s").strip(" ·")
    ev.epoch_after, ev.owners_after = demo.epoch(), demo.current_owners()
    demo.phase += " · waiting for its partitions to be processed again"
    if demo.wait(lambda: demo.resumed(ev), 60):
        ev.resumed_at = max(demo.resumed_times(ev).values(), default=ev.stable_at)
    return ev


def _roll(demo: SparkDemo, old: Proc, new: Proc) -> Callable[[], None]:
    def act() -> None:
        old.state = "stopping"
        old.popen.send_signal(signal.SIGTERM)
        # The checkpoint is free once the old query has stopped (before its Spark shuts down).
        demo.wait(lambda: old.state == "stopped" or old.popen.poll() is not None, 60, tick=0.05)
        demo.release(new)
        threading.Thread(target=_reap, args=(old.popen, 60.0), daemon=True).start()
    return act


def _run_events(demo: SparkDemo, cfg: DemoConfig, spare: Proc, replacement: Proc) -> None:
    for kind, frac in EVENT_PLAN:
        demo.phase = "steady"
        prev = demo.events[-1].stable_at or demo.events[-1].at if demo.events else demo.t0
        at = max(demo.t0 + frac * cfg.duration, prev + STEADY_S)
        demo.wait(lambda at=at: time.time() >= at, cfg.duration)  # type: ignore[misc]
        demo.phase = "waiting for a stable group, every member past its first batches"
        demo.wait(lambda: demo.stable() and demo.warm(), 90)
        dynamic = [p for p in demo.procs if p.in_group and p.instance is None]
        static = next(p for p in demo.procs if p.in_group and p.instance == STATIC_INSTANCE)
        if kind == "scale-out":
            demo.wait(lambda: spare.ready_at is not None, 120)
            _event(demo, kind, spare.name, lambda: demo.release(spare))
        elif kind == "scale-in":
            victim = min(dynamic, key=lambda p: p.name)
            _event(demo, kind, victim.name, functools.partial(demo.terminate, victim))
        elif kind == "static-roll":
            demo.wait(lambda: replacement.ready_at is not None, 120)
            ev = _event(demo, kind, static.name, _roll(demo, static, replacement))
            ev.note = ("group epoch unchanged" if ev.epoch_after == ev.epoch_before
                       else "group epoch CHANGED")
        elif dynamic:
            victim = min(dynamic, key=lambda p: p.name)
            _event(demo, kind, victim.name, functools.partial(demo.kill, victim))


def run_spark_demo(members: int = 3, partitions: int = 12, rate: int = 2_000, duration: float = 120.0,
                   json_output: bool = False, keep: bool = False, log_spec: str | None = None,
                   report: str | Path | None = None,
                   session_timeout_ms: int = SESSION_TIMEOUT_MS) -> dict[str, Any]:
    """Run the PySpark demo (see the module docstring); returns the results (also printed).

    ``log_spec``: None for the embedded log in the data directory, or ``kafka://HOST:PORT`` (a fresh
    topic is created for the run). ``report``: the directory for the report's PNG and HTML (default:
    ``report/`` in the data directory, which is kept even without ``keep``). The caller exits 1 when
    ``result["lost"]`` is not 0. Every child process is stopped on return, error and Ctrl-C; after
    an error the data directory is kept (its logs/ say what happened), after Ctrl-C it is removed
    unless ``keep``.
    """
    if members < 2:
        raise ValueError("the demo needs at least 2 members (one is static, one is killed)")
    started = time.time()
    cfg = DemoConfig(members, partitions, rate, duration, session_timeout_ms)
    root = Path(tempfile.mkdtemp(prefix="regroup-spark-demo-"))
    topic = TOPIC if log_spec is None else f"{TOPIC}-{uuid.uuid4().hex[:8]}"
    console = Console(stderr=json_output)
    demo = SparkDemo(root, str(root / "log") if log_spec is None else log_spec, topic, partitions, console,
                     json_output)
    try:
        drained, history = _run(demo, cfg)
    except KeyboardInterrupt:
        demo.shutdown()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        raise
    except BaseException:
        demo.shutdown()
        console.print(f"[red]the demo failed; its data directory is kept for inspection: {root}[/red]")
        raise
    finally:
        demo.shutdown()
    result = _results(demo, cfg, drained, history)
    result["timings_s"] = demo.timings
    result["wall_time_s"] = round(time.time() - started, 1)  # the report's few seconds aside
    report_dir = Path(report) if report is not None else root / "report"
    result["report"] = _write_report(demo, result, report_dir)
    result["report"]["json"] = str(report_dir / "results.json")
    Path(result["report"]["json"]).write_text(json.dumps(result, indent=1))
    _cleanup(root, report_dir, keep, result)
    if json_output:
        print(json.dumps(result))
    else:
        _print_results(console, result)
    return result


def _run(demo: SparkDemo, cfg: DemoConfig) -> tuple[bool, list[dict[str, Any]]]:
    """The run itself, watched live: start, produce, the events, drain. Returns (drained, epochs)."""
    log = open_log(demo.log_spec)
    try:
        log.create_topic(demo.topic, cfg.partitions)
    finally:
        log.close()
    demo.coordinator, demo.addr = start_demo_coordinator(demo.root, demo.log_spec, cfg.session_timeout_ms,
                                                         HEARTBEAT_INTERVAL_MS)
    demo.client = CoordinatorClient(demo.addr)
    with Live(console=demo.console, refresh_per_second=4, transient=demo.json_output) as live:
        demo.live = live
        spare, replacement = _start(demo, cfg)
        # The producer writes fsync-free to the embedded log: the demo is about hand-offs, not disks.
        embedded = demo.log_spec == str(demo.root / "log")
        demo.workload = Workload(f"embedded://{demo.log_spec}?fsync=never" if embedded else demo.log_spec,
                                 demo.topic, cfg.partitions, cfg.rate)
        producer = threading.Thread(target=demo.workload.run, args=(demo.stop_producing,), daemon=True)
        demo.t0 = time.time()
        demo.timings["startup_s"] = round(demo.t0 - demo.started, 1)
        producer.start()
        _run_events(demo, cfg, spare, replacement)
        demo.phase = "steady"
        demo.wait(lambda: time.time() - demo.t0 >= cfg.duration, cfg.duration)
        demo.stop_producing.set()
        producer.join()
        if demo.workload.error is not None:
            raise RuntimeError(f"the producer failed: {demo.workload.error!r}")
        demo.timings["workload_s"] = round(time.time() - demo.t0, 1)
        demo.phase = "draining: waiting until every partition is committed up to the log's end"
        t = time.time()
        drained = demo.wait(demo.drained, 120, tick=0.5)
        demo.timings["drain_s"] = round(time.time() - t, 1)
        demo.phase = "stopping the members"
        demo.refresh()
        demo.live = None
    history = _epoch_history(demo)
    t = time.time()
    demo.shutdown()
    demo.timings["shutdown_s"] = round(time.time() - t, 1)
    return drained, history


# --------------------------------------------------------------------------- results
def _read_ranges(out: Path) -> tuple[list[ReadRange], set[tuple[str, int]]]:
    """Every batch's offset ranges, and which (member, batch) finished (empty batches included)."""
    ranges: list[ReadRange] = []
    done: set[tuple[str, int]] = set()
    for f in sorted((out / "ranges").glob("*.json")):
        rec = json.loads(f.read_text())
        done.add((rec["member"], rec["batch"]))
        ranges += [ReadRange(rec["member"], rec["batch"], rec["t"], r["partition"], r["first"], r["last"],
                             r["count"]) for r in rec["ranges"]]
    return ranges, done


def _read_aggregates(out: Path, done: set[tuple[str, int]]) -> tuple[dict[str, list[int]], int]:
    """The output table summed per customer, over the batches whose ranges file exists — a batch's
    marker that its output is complete; returns the totals and how many outputs lack their marker
    (a member killed between its two writes)."""
    import pyarrow.parquet as pq

    totals: dict[str, list[int]] = {}
    incomplete = 0
    for f in sorted((out / "aggregates").glob("member=*/batch=*.parquet")):
        key = (f.parent.name.removeprefix("member="), int(f.stem.removeprefix("batch=")))
        if key not in done:
            incomplete += 1
            continue
        t = pq.read_table(f).to_pydict()
        for customer, events, amount in zip(t.get("customer", []), t.get("events", []), t.get("amount", []),
                                            strict=True):
            acc = totals.setdefault(customer, [0, 0])
            acc[0] += events
            acc[1] += amount
    return totals, incomplete


def expected_from_reads(ranges: Iterable[ReadRange], workload: Workload) -> dict[str, list[int]]:
    """What the output table must hold given what the batches read (duplicates included)."""
    totals: dict[str, list[int]] = {}
    for r in ranges:
        if r.partition not in workload.at_offset:
            continue
        customers, amounts = workload.at_offset[r.partition]
        for o in range(r.first, min(r.last + 1, len(customers))):
            acc = totals.setdefault(customer_key(customers[o]), [0, 0])
            acc[0] += 1
            acc[1] += amounts[o]
    return totals


def _names(demo: SparkDemo) -> dict[str, list[Proc]]:
    out: dict[str, list[Proc]] = {}
    for p in demo.procs:
        if p.released_at is not None:
            out.setdefault(p.name, []).append(p)
    return out


def _pauses(demo: SparkDemo, ev: Event, end: float) -> dict[str, float]:
    """Each member's longest pause within the event's window (members alive in it only)."""
    lo, hi = ev.window
    out: dict[str, float] = {}
    for name, procs in sorted(_names(demo).items()):
        alive_from = min(p.released_at or end for p in procs)
        alive_to = max(p.ended_at or end for p in procs)
        a, b = max(lo, alive_from), min(hi, alive_to)
        if a < b:
            times = sorted(bt.t for p in procs for bt in p.batches)
            out[name] = round(longest_gap(times, a, b), 2)
    return out


def _stalls(ranges: Sequence[ReadRange], ev: Event, partitions: int) -> tuple[float, float]:
    """The longest time a partition went unprocessed in the event's window: (the partitions the event
    touched — moved, or owned by the member concerned —, every other partition)."""
    lo, hi = ev.window
    touched = set(ev.touched) | {p for p, m in ev.owners_before.items() if m == ev.member}
    worst = {True: 0.0, False: 0.0}
    for p in range(partitions):
        times = sorted(r.t for r in ranges if r.partition == p)
        worst[p in touched] = max(worst[p in touched], longest_gap(times, lo, hi))
    return round(worst[True], 2), round(worst[False], 2)


def _attribute(span: OffsetSpan, events: Sequence[Event]) -> str:
    """The event whose hand-off a duplicate belongs to: the last one that began before the re-read."""
    before = [e for e in events if e.at <= span.t]
    return before[-1].kind if before else "-"


def _epoch_history(demo: SparkDemo) -> list[dict[str, Any]]:
    try:
        assert demo.client is not None
        history = demo.client.describe_group(GROUP).history
    except Exception:
        return []
    return [{"at_s": round(h.at_unix_ms / 1000 - demo.t0, 1), "epoch": h.epoch, "cause": h.cause}
            for h in history if h.kind == "group"]


def _results(demo: SparkDemo, cfg: DemoConfig, drained: bool,
             history: list[dict[str, Any]]) -> dict[str, Any]:
    assert demo.workload is not None
    w, end = demo.workload, time.time()
    log = open_log(demo.log_spec)
    try:
        ends = log.end_offsets(demo.topic)
    finally:
        log.close()
    ranges, done = _read_ranges(demo.out)
    cov = count_coverage(ranges, ends)
    totals, incomplete = _read_aggregates(demo.out, done)
    events = []
    for ev in demo.events:
        pauses = _pauses(demo, ev, end)
        touched, others = _stalls(ranges, ev, cfg.partitions)
        events.append({
            "event": ev.kind, "label": EVENT_LABELS[ev.kind], "member": ev.member,
            "at_s": round(ev.at - demo.t0, 1),
            "stable_after_s": round(ev.stable_at - ev.at, 1) if ev.stable_at else None,
            "resumed_after_s": round(ev.resumed_at - ev.at, 1) if ev.resumed_at else None,
            "touched_partitions": ev.touched,
            "group_epoch_before": ev.epoch_before, "group_epoch_after": ev.epoch_after,
            "partitions_moved": moved_partitions(ev.owners_before, ev.owners_after),
            "pauses_s": pauses,
            "max_pause_uninvolved_s": max((v for k, v in pauses.items() if k != ev.member), default=0.0),
            "max_stall_touched_partitions_s": touched, "max_stall_other_partitions_s": others,
            "duplicates": sum(s.records * (s.times - 1) for s in cov.duplicate_spans
                              if _attribute(s, demo.events) == ev.kind),
            "note": ev.note,
        })
    roll = next((e for e in events if e["event"] == "static-roll"), None)
    return {
        "produced": w.produced, "in_log": sum(ends.values()), "processed": cov.distinct, "reads": cov.reads,
        "lost": cov.lost + max(0, w.produced - sum(ends.values())), "duplicates": cov.duplicates,
        "totals_match": totals == w.totals,
        "totals_mismatched_customers": sum(totals.get(k) != v for k, v in w.totals.items())
        + len(set(totals) - set(w.totals)),
        "output_matches_reads": totals == expected_from_reads(ranges, w),
        "incomplete_batches": incomplete, "gapped_ranges": cov.gapped_ranges, "drained": drained,
        "static_roll_epoch_unchanged": None if roll is None
        else roll["group_epoch_before"] == roll["group_epoch_after"],
        "events": events,
        "duplicate_spans": [{"partition": s.partition, "first": s.first, "last": s.last,
                             "records": s.records, "times": s.times, "members": list(s.members),
                             "event": _attribute(s, demo.events)} for s in cov.duplicate_spans],
        "lost_spans": [asdict(s) for s in cov.lost_spans[:20]],
        "group_epochs": history,
        "members": _member_stats(demo),
        "config": {"members": cfg.members, "partitions": cfg.partitions, "rate": cfg.rate,
                   "duration_s": cfg.duration, "session_timeout_ms": cfg.session_timeout_ms,
                   "max_records_per_trigger": MAX_RECORDS_PER_TRIGGER, "log": demo.log_spec,
                   "topic": demo.topic},
        "data_dir": str(demo.root),
    }


def _member_stats(demo: SparkDemo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, procs in sorted(_names(demo).items()):
        times = sorted(b.t for p in procs for b in p.batches)
        out[name] = {
            "instance": procs[0].instance, "batches": len(times),
            "records": sum(b.rows for p in procs for b in p.batches),
            "typical_batch_interval_s": round(typical_gap(times), 2),
            "processes": [{"pid": p.popen.pid, "end": p.state, "exit_status": p.popen.returncode}
                          for p in procs],
        }
    return out


# --------------------------------------------------------------------------- output
EVENT_HEADER = ("t (s)", "event", "member", "stable / processing again after", "group epoch",
                "partitions moved", "longest pause per member (s)", "stall: its partitions / others (s)",
                "duplicates", "note")


REPORT_NOTES = (
    "Each event's window runs from the event until the group is stable again and every partition it "
    "touched has been processed again, plus 2 s.",
    "Longest pause: the longest time a member went without completing a micro-batch in that window "
    "(* the member concerned: the one that joined, left, restarted or was killed). Members not concerned "
    "should pause no longer than their usual time between batches: the protocol has no group-wide "
    "barrier.",
    "Stall: the longest time a partition went unprocessed in the window — the partitions the event "
    "touched (moved, or the member's own) / all the others.",
    "Duplicates are records processed twice; only a kill -9 should cause them (its victim's last "
    "batch was written but not committed).",
)


def _summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    cfg = r["config"]
    return [
        ("workload", f"{cfg['rate']:,} events/s for {cfg['duration_s']:.0f} s into {cfg['partitions']} "
                     f"partitions; {cfg['members']} Spark members; "
                     f"session timeout {cfg['session_timeout_ms']} ms"),
        ("produced", f"{r['produced']:,}"),
        ("processed (distinct)", f"{r['processed']:,}" + ("" if r["drained"] else " (NOT fully drained)")),
        ("lost", str(r["lost"])),
        ("duplicates", f"{r['duplicates']:,}" + "".join(
            f"; {s['records']} in partition {s['partition']} ({s['event']}: "
            f"read by {', '.join(s['members'])})" for s in r["duplicate_spans"][:5])),
        ("per-customer totals = producer's", "yes" if r["totals_match"]
         else f"no: {r['totals_mismatched_customers']} customers differ"
              + (" (the duplicates)" if r["duplicates"] and r["output_matches_reads"] else "")),
        ("output table = what the batches read", "yes" if r["output_matches_reads"] else "NO"),
        ("static roll kept the group epoch",
         {True: "yes", False: "NO", None: "-"}[r["static_roll_epoch_unchanged"]]),
        ("members' usual time between batches", "  ".join(
            f"{m} {v['typical_batch_interval_s']:.1f} s" for m, v in r["members"].items())),
        ("wall time", f"{r.get('wall_time_s', 0):.0f} s"),
    ]


def _event_rows(r: dict[str, Any]) -> list[list[str]]:
    rows = []
    for e in r["events"]:
        pauses = "  ".join(f"{m}{'*' if m == e['member'] else ''} {v:.1f}" for m, v in e["pauses_s"].items())
        rows.append([
            f"{e['at_s']:.1f}", e["label"], e["member"],
            f"{_secs(e['stable_after_s'])} / {_secs(e['resumed_after_s'])}",
            f"{e['group_epoch_before']} → {e['group_epoch_after']}",
            ",".join(map(str, e["partitions_moved"])) or "none", pauses,
            f"{e['max_stall_touched_partitions_s']:.1f} / {e['max_stall_other_partitions_s']:.1f}",
            str(e["duplicates"]), e["note"]])
    return rows


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _write_report(demo: SparkDemo, result: dict[str, Any], directory: Path) -> dict[str, str]:
    from regroup.demo.report import ReportData, write_report

    batches: dict[str, list[tuple[float, int]]] = {}
    for p in demo.procs:
        batches.setdefault(p.name, []).extend((b.t, b.rows) for b in p.batches)
    data = ReportData(
        title=f"regroup PySpark demo: {result['produced']:,} produced, {result['processed']:,} processed, "
              f"{result['lost']} lost, {result['duplicates']:,} duplicates",
        t0=demo.t0, partitions=demo.partitions,
        ownership=[(s.t, s.owners, s.absent) for s in demo.samples if s.t >= demo.t0 - 5],
        batches=batches, events=[(e.at, EVENT_LABELS[e.kind]) for e in demo.events],
        summary=_summary_rows(result), event_header=EVENT_HEADER, event_rows=_event_rows(result),
        notes=REPORT_NOTES)
    return write_report(directory, data)


def _cleanup(root: Path, report_dir: Path, keep: bool, result: dict[str, Any]) -> None:
    """Without ``keep``, remove the data directory — all but the report when it lives there."""
    if keep:
        return
    inside = report_dir.resolve().is_relative_to(root.resolve())
    for child in root.iterdir():
        if not (inside and report_dir.resolve().is_relative_to(child.resolve())):
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    if not inside:
        shutil.rmtree(root, ignore_errors=True)
    result["data_dir"] = None


def _print_results(console: Console, r: dict[str, Any]) -> None:
    summary = Table(show_header=False, title="results", title_justify="left")
    for k, v in _summary_rows(r):
        style = "bold red" if (k == "lost" and r["lost"]) else None
        summary.add_row(k, v, style=style)
    console.print(summary)
    events = Table(*EVENT_HEADER, title="events (* the member concerned)", title_justify="left")
    for row in _event_rows(r):
        events.add_row(*row)
    console.print(events)
    for note in REPORT_NOTES:
        console.print(note, style="dim")
    console.print(f"report: {r['report']['png']}\n        {r['report']['html']}")
    if r["data_dir"]:
        console.print(f"data directory kept: {r['data_dir']}")
