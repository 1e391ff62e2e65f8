"""Process control for both PySpark demos: the coordinator, the Spark member processes and the producer.

Rules of this module (each demo's `processes` module subclasses it and follows them):

1. Every process a demo starts is started and stopped here, and :meth:`DemoProcesses.shutdown` stops
   all of them, whatever state the run is in: it is called on return, on error and on Ctrl-C, and is
   idempotent.
2. A member process runs in a session of its own, so that kill -9 takes its JVM and Python workers
   with it, as a crash would, and the terminal's Ctrl-C reaches only the demo, which then stops
   everyone in order.
3. A member starts Spark, optionally warms up, then waits at a gate file; :meth:`DemoProcesses.release`
   opens the gate and it joins the group. Members that join during the run are started ahead so that
   an event measures the protocol, not a cold JVM.
4. What a member does is read from its progress file (:meth:`MemberProcess.poll`), complete lines only;
   an exit the demo did not ask for is a failure, and :meth:`DemoProcesses.check_alive` raises it.

What differs between the demos is a subclass's, explicitly: the member's module and the arguments only
it takes (`DemoProcesses.MEMBER_MODULE`, `DemoProcesses.member_args`), the progress lines only it writes
(`MemberProcess.apply_own`) and the one it writes when it fails (`MemberProcess.FAILED`), how long a
member told to stop may take (`DemoProcesses.REAP_AFTER_STOP_S`, `DemoProcesses.REAP_AT_SHUTDOWN_S`),
the workload (`DemoProcesses.WORKLOAD`), and how the coordinator is started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from regroup.demo.common import (
    Workload,
    kill_process_group,
    read_new_lines,
    start_demo_coordinator,
    stop_coordinator,
)
from regroup.log import open_log
from regroup.rpc.client import CoordinatorClient


@dataclass
class MemberProcess:
    """One Spark member process, as its progress file tells it. A static member's restart is a new one
    with the same name (and the next ``incarnation``)."""

    #: The progress line a member writes when its work failed (the line's ``error`` says why).
    FAILED: ClassVar[str] = "failed"

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
        """Read the progress lines appended since the last look (complete lines only: rule 4)."""
        lines, self._pos = read_new_lines(self.progress, self._pos)
        for line in lines:
            self._apply(json.loads(line))
        if self.popen.poll() is not None and self.state not in ("stopped", "killed", "failed"):
            # An exit the demo did not ask for is a failure, whatever its status (the status of one it
            # asked for is in the results).
            self.state = "stopped" if self.state == "stopping" else "failed"
            self.ended_at = self.ended_at or time.time()

    def _apply(self, rec: dict[str, Any]) -> None:
        """The lifecycle lines every member writes: ``ready``, `FAILED` and ``stopped``."""
        kind = rec["kind"]
        if kind == "ready":
            self.ready_at = rec["t"]
            if self.state == "starting":
                self.state = "ready"
        elif kind == self.FAILED:
            self.state, self.error = "failed", rec.get("error")
        elif kind == "stopped":
            if self.state not in ("failed", "killed"):
                self.state = "stopped"
                self.ended_at = rec["t"]
        else:
            self.apply_own(rec)

    def apply_own(self, rec: dict[str, Any]) -> None:
        """A progress line of the demo's own (its batches, ...); none here."""


def reap(popen: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a member to exit; past ``timeout`` kill it and everything it started."""
    try:
        popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_group(popen)


M = TypeVar("M", bound=MemberProcess)


class DemoProcesses(Generic[M]):
    """A demo's processes: one coordinator (and a client of it), the Spark members, the producer."""

    #: The member process's module (``python -m``).
    MEMBER_MODULE: ClassVar[str]
    #: How long (s) a member told to stop may take before it is killed: during the run (reaped on a
    #: thread, `reap_later`) and at `shutdown` (all at once).
    REAP_AFTER_STOP_S: ClassVar[float]
    REAP_AT_SHUTDOWN_S: ClassVar[float]
    #: The producer's workload.
    WORKLOAD: ClassVar[type[Workload]] = Workload

    def __init__(self, root: Path, log_spec: str, topic: str, member_type: type[M]) -> None:
        self.root, self.log_spec, self.topic = root, log_spec, topic
        self.member_type = member_type
        self.out = root / "out"
        self.addr = ""
        #: The coordinator's dashboard (on loopback), once it runs.
        self.dashboard_url = ""
        self.coordinator: subprocess.Popen[str] | None = None
        self.client: CoordinatorClient | None = None
        self.members: list[M] = []
        self.workload: Workload | None = None
        self.stop_producing = threading.Event()
        self._producer: threading.Thread | None = None

    # ------------------------------------------------------------------ the coordinator and the topic
    def connect_coordinator(self, session_timeout_ms: int, heartbeat_interval_ms: int, *options: str) -> None:
        """Start the coordinator on the log (``options``: more of its command-line options) and connect
        a client to it."""
        self.coordinator, self.addr, self.dashboard_url = start_demo_coordinator(
            self.root, self.log_spec, session_timeout_ms, heartbeat_interval_ms, *options)
        self.client = CoordinatorClient(self.addr)

    def create_topic(self, partitions: int) -> None:
        """Create the topic; a coordinator already running reads the topic metadata at once."""
        log = open_log(self.log_spec)
        try:
            log.create_topic(self.topic, partitions)
        finally:
            log.close()
        if self.client is not None:
            self.client.refresh_topics()

    # ------------------------------------------------------------------ the producer
    def start_producer(self, partitions: int, rate: int) -> None:
        """Produce the `WORKLOAD` on a thread of this process until `stop_producer`. To the embedded log
        in the data directory it writes without fsync: the demo is about hand-offs, not disks."""
        embedded = self.log_spec == str(self.root / "log")
        spec = f"embedded://{self.log_spec}?fsync=never" if embedded else self.log_spec
        self.workload = self.WORKLOAD(spec, self.topic, partitions, rate)
        self._producer = threading.Thread(target=self.workload.run, args=(self.stop_producing,), daemon=True)
        self._producer.start()

    def stop_producer(self) -> None:
        """Stop producing and wait for the producer; raise if it failed (a dead producer is no drain)."""
        self.stop_producing.set()
        if self._producer is not None:
            self._producer.join()
        if self.workload is not None and self.workload.error is not None:
            raise RuntimeError(f"the producer failed: {self.workload.error!r}")

    # ------------------------------------------------------------------ the members
    def member_args(self, name: str) -> list[str]:
        """The member's fifth argument (where its state lives) and the options only it takes."""
        raise NotImplementedError

    def spawn(self, name: str, instance: str | None = None, warm_up: bool = False) -> M:
        """Start a member process; it starts Spark (``warm_up``: and runs the pipeline once on made-up
        rows), then waits at its gate (see `release`)."""
        incarnation = 1 + sum(m.name == name for m in self.members)
        tag = f"{name}.{incarnation}"
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        progress, gate = self.out / "progress" / f"{tag}.jsonl", self.root / "gates" / tag
        gate.parent.mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / f"{tag}.log"
        args = [sys.executable, "-m", self.MEMBER_MODULE, name, self.addr, self.log_spec, str(self.out),
                *self.member_args(name), "--topic", self.topic, "--progress", str(progress),
                "--wait-for", str(gate), "--local-dir", str(self.root / "spark-local" / tag)]
        if instance:
            args += ["--instance", instance]
        if warm_up:
            args.append("--warm-up")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as sink:
            popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env,
                                     start_new_session=True)  # rule 2
        member = self.member_type(name, incarnation, instance, popen, progress, gate, log)
        self.members.append(member)
        return member

    def release(self, member: M) -> None:
        """Open a ready member's gate: it joins the group (rule 3)."""
        member.gate.touch()
        member.released_at = time.time()
        member.state = "joining"

    def stop(self, member: M) -> None:
        """SIGTERM: the member leaves the group cleanly (how is its own business: see its module), then
        stops Spark and exits."""
        if member.popen.poll() is None:
            member.state = "stopping"
            member.popen.send_signal(signal.SIGTERM)

    def reap_later(self, member: M) -> None:
        """Wait for a member's exit on a thread, so that the demo keeps watching the group meanwhile."""
        threading.Thread(target=reap, args=(member.popen, self.REAP_AFTER_STOP_S), daemon=True).start()

    def terminate(self, member: M) -> None:
        """`stop` a member and `reap_later` its process."""
        self.stop(member)
        self.reap_later(member)

    def kill(self, member: M) -> None:
        """kill -9 the member's process and everything it started (rule 2)."""
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
        """Stop the producer, every member still running (in parallel: each takes seconds), then the
        coordinator. Idempotent (rule 1)."""
        self.stop_producing.set()
        alive = [m for m in self.members if m.popen.poll() is None]
        for m in alive:
            if m.state != "killed":
                m.state = "stopping"
            m.popen.send_signal(signal.SIGTERM)
        for m in alive:
            reap(m.popen, self.REAP_AT_SHUTDOWN_S)
        for m in self.members:
            kill_process_group(m.popen)  # whatever a member left behind (a JVM that hung on)
            m.poll()
        if self.client is not None:
            self.client.close()
            self.client = None
        stop_coordinator(self.coordinator)
        self.coordinator = None
