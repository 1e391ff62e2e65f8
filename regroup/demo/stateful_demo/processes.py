"""Process control for the stateful demo: the coordinator, the Spark member processes and the producer.

Rules of this module (those of `regroup.demo.spark_demo.processes`, for streams members):

1. Every process the demo starts is started and stopped here, and :meth:`Processes.shutdown` stops all
   of them, whatever state the run is in: it is called on return, on error and on Ctrl-C, and is
   idempotent.
2. A member process runs in a session of its own, so that kill -9 takes its JVM and Python workers
   with it, as a crash would, and the terminal's Ctrl-C reaches only the demo.
3. A member starts Spark, optionally warms up, then waits at a gate file; :meth:`Processes.release`
   opens the gate and it joins the group. Members that join during the run are started ahead.
4. What a member does is read from its progress file (:meth:`Member.poll`), complete lines only; an
   exit the demo did not ask for is a failure, and :meth:`Processes.check_alive` raises it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup.bench.procs import start_coordinator_with_dashboard
from regroup.demo.common import Workload, kill_process_group, stop_coordinator
from regroup.demo.spark_demo.processes import reap
from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.rpc.client import CoordinatorClient


@dataclass(frozen=True)
class Settings:
    """The coordinator's and the members' settings (the protocol's knobs the demo turns)."""

    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 500
    standby_replicas: int = 1
    max_warmups: int = 2
    #: Records a copy may be behind the committed offsets and still take a task over: about one
    #: batch of a task at the demo's rate, so that a warm-up that follows the active counts as
    #: caught up although the active commits again while the report travels.
    acceptable_recovery_lag: int = 500
    #: The task queries' processingTime trigger: a micro-batch of a stateful query costs ~0.4 s of
    #: CPU however small, and 12 queries (6 actives, 6 standbys) share two cores with their JVMs.
    trigger_ms: int = 2_000


class TimedWorkload(Workload):
    """`Workload` whose records' timestamps (their produce time: the pipeline's event time, and the
    start of each record's wait for its output) never go back, even if the wall clock does: within
    a partition records are in event-time order, so none is ever late for the watermark."""

    def __init__(self, log_spec: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(log_spec, topic, partitions, rate)
        self._clock = 0

    def _record(self, seq: int, customer: int) -> tuple[int, LogRecord]:
        p, rec = super()._record(seq, customer)
        self._clock = max(self._clock, rec.timestamp_ms)
        return p, LogRecord(rec.key, rec.value, self._clock)


#: The pipeline's warning when a copy's query fails (`regroup.spark.tasks.pipeline`, ``_watch``).
_COPY_FAILED = re.compile(r"^task (\S+): the (?:standby|warm-up) query failed")


@dataclass(frozen=True, slots=True)
class BatchOut:
    """A batch of an active task whose output the sink wrote (a ``batch`` line of a member)."""

    t: float
    task: str
    key: str
    batch: int
    start: int
    end: int
    rows: int

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass
class Member:
    """One Spark member process. A static member's restart is a new Member with the same name."""

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
    process_id: str | None = None
    batches: list[BatchOut] = field(default_factory=list)
    #: The tasks the member runs and their roles, as it last said (``parked`` copies included).
    tasks: dict[str, str] = field(default_factory=dict)
    #: How its tasks started, counted (``promoted active``, ``resumed active``, ``copied warm-up``...).
    starts: dict[str, int] = field(default_factory=dict)
    #: (time, tasks, starts) each time the member reported a change.
    history: list[tuple[float, dict[str, str], dict[str, int]]] = field(default_factory=list)
    #: (time, message) of each warning the member's pipeline logged (a copy's query failed...).
    warnings: list[tuple[float, str]] = field(default_factory=list)
    error: str | None = None
    _pos: int = 0

    @property
    def label(self) -> str:
        return self.name if self.incarnation == 1 else f"{self.name}#{self.incarnation}"

    @property
    def in_group(self) -> bool:
        """Released and not yet stopped or killed: the coordinator should see it as a member."""
        return self.released_at is not None and self.state in ("joining", "running")

    def roles(self, role: str) -> set[str]:
        return {t for t, r in self.tasks.items() if r == role}

    def dropped_copies(self) -> set[str]:
        """Copies whose query failed (the pipeline logged it) and that the member does not run now:
        it drops such a copy and does not start it again while it keeps the assignment."""
        failed = {m.group(1) for _, msg in self.warnings if (m := _COPY_FAILED.match(msg))}
        return failed - set(self.tasks)

    def starts_at(self, t: float) -> dict[str, int]:
        """The ``starts`` counter as it was at time ``t``."""
        out: dict[str, int] = {}
        for at, _, starts in self.history:
            if at > t:
                break
            out = starts
        return out

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
            self.state = "stopped" if self.state == "stopping" else "failed"
            self.ended_at = self.ended_at or time.time()

    def _apply(self, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        if kind == "ready":
            self.ready_at = rec["t"]
            if self.state == "starting":
                self.state = "ready"
        elif kind == "joined":
            self.process_id = rec["process_id"]
            if self.state == "joining":
                self.state = "running"
        elif kind == "batch":
            start, end = sum(rec["start"].values()), sum(rec["end"].values())  # one partition a task
            self.batches.append(BatchOut(rec["t"], rec["task"], rec["key"], rec["batch"], start, end,
                                         rec["rows"]))
        elif kind == "tasks":
            self.tasks, self.starts = dict(rec["tasks"]), dict(rec["starts"])
            self.history.append((rec["t"], self.tasks, self.starts))
        elif kind == "warning":
            self.warnings.append((rec["t"], rec["message"]))
        elif kind == "failed":
            self.state, self.error = "failed", rec.get("error")
        elif kind == "stopped" and self.state not in ("failed", "killed"):
            self.state = "stopped"
            self.ended_at = rec["t"]


class Processes:
    """The demo's processes: one coordinator (and a client of it), the Spark members, the producer."""

    def __init__(self, root: Path, log_spec: str, topic: str, settings: Settings) -> None:
        self.root, self.log_spec, self.topic, self.settings = root, log_spec, topic, settings
        self.out = root / "out"
        self.state_root = root / "state"
        self.addr = ""
        self.dashboard_url = ""
        self.coordinator: subprocess.Popen[str] | None = None
        self.client: CoordinatorClient | None = None
        self.members: list[Member] = []
        self.workload: TimedWorkload | None = None
        self.stop_producing = threading.Event()
        self._producer: threading.Thread | None = None

    # ------------------------------------------------------------------ the coordinator
    def start_coordinator(self) -> None:
        """Start the coordinator (standbys and warm-ups on) and connect to it. The topic is created
        later (`create_topic`)."""
        s = self.settings
        self.coordinator, self.addr, self.dashboard_url = start_coordinator_with_dashboard(
            self.root / "coordinator", "--log", self.log_spec,
            "--session-timeout-ms", str(s.session_timeout_ms),
            "--heartbeat-interval-ms", str(s.heartbeat_interval_ms),
            "--standby-replicas", str(s.standby_replicas), "--max-warmups", str(s.max_warmups),
            "--acceptable-recovery-lag", str(s.acceptable_recovery_lag), "--topic-refresh-s", "1")
        self.client = CoordinatorClient(self.addr)

    def create_topic(self, partitions: int) -> None:
        """Create the topic and have the coordinator read the topic metadata at once."""
        log = open_log(self.log_spec)
        try:
            log.create_topic(self.topic, partitions)
        finally:
            log.close()
        if self.client is not None:
            self.client.refresh_topics()

    # ------------------------------------------------------------------ the producer
    def start_producer(self, log_spec: str, partitions: int, rate: int) -> None:
        """Produce the timestamped keyed workload on a thread of this process until `stop_producer`."""
        self.workload = TimedWorkload(log_spec, self.topic, partitions, rate)
        self._producer = threading.Thread(target=self.workload.run, args=(self.stop_producing,), daemon=True)
        self._producer.start()

    def stop_producer(self) -> None:
        """Stop producing and wait for the producer; raise if it failed."""
        self.stop_producing.set()
        if self._producer is not None:
            self._producer.join()
        if self.workload is not None and self.workload.error is not None:
            raise RuntimeError(f"the producer failed: {self.workload.error!r}")

    # ------------------------------------------------------------------ the members
    def spawn(self, name: str, instance: str | None = None, warm_up: bool = False) -> Member:
        """Start a member process; it starts Spark (``warm_up``: and runs the pipeline once on made-up
        rows), then waits at its gate (see `release`)."""
        incarnation = 1 + sum(m.name == name for m in self.members)
        tag = f"{name}.{incarnation}"
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        progress, gate = self.out / "progress" / f"{tag}.jsonl", self.root / "gates" / tag
        gate.parent.mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / f"{tag}.log"
        s = self.settings
        args = [sys.executable, "-m", "regroup.demo.stateful_member", name, self.addr, self.log_spec,
                str(self.out), str(self.state_root), "--topic", self.topic,
                "--progress", str(progress), "--wait-for", str(gate),
                "--trigger-ms", str(s.trigger_ms), "--session-timeout-ms", str(s.session_timeout_ms),
                "--heartbeat-interval-ms", str(s.heartbeat_interval_ms),
                "--local-dir", str(self.root / "spark-local" / tag)]
        if instance:
            args += ["--instance", instance]
        if warm_up:
            args.append("--warm-up")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as sink:
            popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env,
                                     start_new_session=True)  # rule 2
        member = Member(name, incarnation, instance, popen, progress, gate, log)
        self.members.append(member)
        return member

    def release(self, member: Member) -> None:
        """Let a ready member join the group."""
        member.gate.touch()
        member.released_at = time.time()
        member.state = "joining"

    def stop(self, member: Member) -> None:
        """SIGTERM: the member leaves the group cleanly (each active finishes its batch and commits),
        then stops Spark and exits."""
        if member.popen.poll() is None:
            member.state = "stopping"
            member.popen.send_signal(signal.SIGTERM)

    def reap_later(self, member: Member) -> None:
        """Wait for a member's exit on a thread, so that the demo keeps watching the group meanwhile."""
        threading.Thread(target=reap, args=(member.popen, 90.0), daemon=True).start()

    def terminate(self, member: Member) -> None:
        self.stop(member)
        self.reap_later(member)

    def kill(self, member: Member) -> None:
        kill_process_group(member.popen)
        member.state, member.ended_at = "killed", time.time()

    def poll(self) -> None:
        for m in self.members:
            m.poll()

    def check_alive(self) -> None:
        """Raise if the producer, the coordinator or a member failed (rule 4)."""
        if self.workload is not None and self.workload.error is not None:
            raise RuntimeError(f"the producer failed: {self.workload.error!r}")
        if self.coordinator is not None and self.coordinator.poll() is not None:
            raise RuntimeError(f"the coordinator exited with status {self.coordinator.returncode}; see "
                               f"{self.root / 'coordinator.log'}")
        for m in self.members:
            if m.state == "failed":
                raise RuntimeError(f"member {m.label} failed: {m.error or 'exit ' + str(m.popen.returncode)}"
                                   f"; see {m.log}")

    def shutdown(self) -> None:
        """Stop the producer, every member still running (in parallel), then the coordinator.
        Idempotent."""
        self.stop_producing.set()
        alive = [m for m in self.members if m.popen.poll() is None]
        for m in alive:
            if m.state != "killed":
                m.state = "stopping"
            m.popen.send_signal(signal.SIGTERM)
        for m in alive:
            reap(m.popen, 60.0)
        for m in self.members:
            kill_process_group(m.popen)  # whatever a member left behind (a JVM that hung on)
            m.poll()
        if self.client is not None:
            self.client.close()
            self.client = None
        stop_coordinator(self.coordinator)
        self.coordinator = None
