"""Process control for the PySpark demo: the coordinator, the Spark member processes and the producer.

Rules of this module:

1. Every process the demo starts is started and stopped here, and :meth:`Processes.shutdown` stops all
   of them, whatever state the run is in: it is called on return, on error and on Ctrl-C, and is
   idempotent.
2. A member process runs in a session of its own, so that kill -9 takes its JVM and Python workers
   with it, as a crash would, and the terminal's Ctrl-C reaches only the demo, which then stops
   everyone in order.
3. A member starts Spark, optionally warms up (runs the pipeline once on made-up rows), then waits at a
   gate file; :meth:`Processes.release` opens the gate and it joins the group. Members that join during
   the run are started ahead so that an event measures the protocol, not a cold JVM.
4. What a member does is read from its progress file (:meth:`Proc.poll`), complete lines only; an exit
   the demo did not ask for is a failure, and :meth:`Processes.check_alive` raises it.
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
from typing import Any

from regroup.demo.common import Workload, kill_process_group, start_demo_coordinator, stop_coordinator
from regroup.log import open_log
from regroup.rpc.client import CoordinatorClient

HEARTBEAT_INTERVAL_MS = 1_000
#: Records per micro-batch at most: small batches keep revocations (done at batch boundaries) quick.
MAX_RECORDS_PER_TRIGGER = 4_000
#: The members' processingTime trigger (s): a micro-batch costs ~0.5 s of CPU even when small, and
#: N+2 Spark processes share two cores.
TRIGGER_S = 2.0


def rebalance_tag(name: str) -> int:
    """A member's rebalance timeout: 60 s plus its number in ms — the same for all practical purposes,
    and distinct, so that the coordinator's describe tells which member id is which member."""
    return 60_000 + int(name.removeprefix("m"))


@dataclass(frozen=True, slots=True)
class BatchDone:
    """A completed micro-batch of a member (a line of its progress file)."""

    t: float
    batch: int
    rows: int
    partitions: tuple[int, ...]


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


def reap(popen: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a member to exit; past ``timeout`` kill it and everything it started."""
    try:
        popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_group(popen)


class Processes:
    """The demo's processes: one coordinator (and a client of it), the Spark members, the producer."""

    def __init__(self, root: Path, log_spec: str, topic: str) -> None:
        self.root, self.log_spec, self.topic = root, log_spec, topic
        self.out = root / "out"
        self.addr = ""
        #: The coordinator's dashboard (on loopback), once it runs.
        self.dashboard_url = ""
        self.coordinator: subprocess.Popen[str] | None = None
        self.client: CoordinatorClient | None = None
        self.procs: list[Proc] = []
        self.workload: Workload | None = None
        self.stop_producing = threading.Event()
        self._producer: threading.Thread | None = None

    # ------------------------------------------------------------------ the coordinator
    def start_coordinator(self, partitions: int, session_timeout_ms: int) -> None:
        """Create the topic, start the coordinator on the log and connect a client to it."""
        log = open_log(self.log_spec)
        try:
            log.create_topic(self.topic, partitions)
        finally:
            log.close()
        self.coordinator, self.addr, self.dashboard_url = start_demo_coordinator(
            self.root, self.log_spec, session_timeout_ms, HEARTBEAT_INTERVAL_MS)
        self.client = CoordinatorClient(self.addr)

    # ------------------------------------------------------------------ the producer
    def start_producer(self, log_spec: str, partitions: int, rate: int) -> None:
        """Produce the keyed workload on a thread of this process until `stop_producer`."""
        self.workload = Workload(log_spec, self.topic, partitions, rate)
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
            popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env,
                                     start_new_session=True)  # rule 2
        proc = Proc(name, incarnation, instance, popen, progress, gate, log)
        self.procs.append(proc)
        return proc

    def release(self, proc: Proc) -> None:
        """Let a warmed-up member start its query: it joins the group."""
        proc.gate.touch()
        proc.released_at = time.time()
        proc.state = "joining"

    def stop(self, proc: Proc) -> None:
        """SIGTERM: the member stops its query at the next batch boundary (so that the group has its
        last batch's offsets) — the source leaves the group — then Spark, and exits."""
        if proc.popen.poll() is None:
            proc.state = "stopping"
            proc.popen.send_signal(signal.SIGTERM)

    def reap_later(self, proc: Proc) -> None:
        """Wait for a member's exit on a thread, so that the demo keeps watching the group meanwhile."""
        threading.Thread(target=reap, args=(proc.popen, 60.0), daemon=True).start()

    def terminate(self, proc: Proc) -> None:
        """`stop` a member and `reap_later` its process."""
        self.stop(proc)
        self.reap_later(proc)

    def kill(self, proc: Proc) -> None:
        kill_process_group(proc.popen)
        proc.state, proc.ended_at = "killed", time.time()

    def poll(self) -> None:
        for p in self.procs:
            p.poll()

    def check_alive(self) -> None:
        """Raise if the producer, the coordinator or a member failed (rule 4)."""
        if self.workload is not None and self.workload.error is not None:
            raise RuntimeError(f"the producer failed: {self.workload.error!r}")
        if self.coordinator is not None and self.coordinator.poll() is not None:
            raise RuntimeError(f"the coordinator exited with status {self.coordinator.returncode}; see "
                               f"{self.root / 'coordinator.log'}")
        for p in self.procs:
            if p.state == "failed":
                raise RuntimeError(f"member {p.label} failed: {p.error or 'exit ' + str(p.popen.returncode)}"
                                   f"; see {p.log}")

    def shutdown(self) -> None:
        """Stop the producer, every member still running (in parallel: each takes seconds), then the
        coordinator. Idempotent."""
        self.stop_producing.set()
        alive = [p for p in self.procs if p.popen.poll() is None]
        for p in alive:
            p.state = "stopping"
            p.popen.send_signal(signal.SIGTERM)
        for p in alive:
            reap(p.popen, 45.0)
        for p in self.procs:
            kill_process_group(p.popen)  # whatever a member left behind (a JVM that hung on)
            p.poll()
        if self.client is not None:
            self.client.close()
            self.client = None
        stop_coordinator(self.coordinator)
        self.coordinator = None
