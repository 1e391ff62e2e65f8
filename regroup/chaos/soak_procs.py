"""The chaos soak's processes: the coordinator, the members (each life an `Incarnation`), the producer.

Rules of this module:

1. Every child runs in a session of its own: kill -9, SIGSTOP and SIGCONT of a member go to its whole
   process group (a Spark member's JVM and Python workers with it, as a crash or a frozen host would),
   and the soak's Ctrl-C reaches only the soak, which then stops everyone in order. SIGTERM, a clean
   stop, goes to the member's own process only: it stops what it started itself.
2. The coordinator's stderr is a pipe, copied line by line to its log file by a thread of the soak:
   a pipe is not subject to the file-size limit that makes its disk "full" (`Coordinator.limit_files`),
   so its last words are never lost, and the soak keeps the lines of its current life to quote them.
3. The coordinator keeps one address (its first, on a free port) and one data dir for all its lives:
   a restart is the same coordinator recovering from its data dir.
4. A member's life is an `Incarnation`: its own output files, named ``NAME.N`` (its N-th life); a
   restart of a member is a new incarnation of the same name (and, static, the same instance id).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

_LISTENING = re.compile(r"listening on (\S+?)[;\s]")
_ALARM = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) |^Traceback ")


@dataclass
class Started:
    """How a start of the coordinator went: listening, or exited (with its status and last lines)."""

    ok: bool
    status: int | None = None
    lines: tuple[str, ...] = ()
    seconds: float = 0.0


class Coordinator:
    """The coordinator process, across its lives (rules 2 and 3)."""

    def __init__(self, data_dir: Path, log_path: Path, args: tuple[str, ...]) -> None:
        self.data_dir, self.log_path, self.args = data_dir, log_path, args
        self.address = "127.0.0.1:0"
        self.proc: subprocess.Popen[str] | None = None
        self.lines: deque[str] = deque(maxlen=200)
        self.starts = 0
        #: Per life (1, 2, ...): its ERROR and CRITICAL lines and tracebacks.
        self.alarms: dict[int, list[str]] = {}
        self._copier: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> Started:
        """Start a life; returns once it listens or has exited."""
        self.starts += 1
        self.lines = deque(maxlen=200)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "regroup.coordinator.server", "--listen", self.address, "--data-dir",
             str(self.data_dir), *self.args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        self.proc = proc
        lines = self.lines
        with open(self.log_path, "a") as log:
            log.write(f"=== soak: coordinator start {self.starts} at {time.time():.3f}, pid {proc.pid} ===\n")
        self._copier = threading.Thread(target=self._copy, args=(proc, lines, self.starts), daemon=True,
                                        name=f"coordinator-stderr-{self.starts}")
        self._copier.start()
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sel.select(timeout=0.1):
                line = proc.stdout.readline()
                m = _LISTENING.search(line)
                if m:
                    self.address = m.group(1)
                    return Started(True, seconds=time.monotonic() - t0)
                if not line and proc.poll() is not None:
                    break
            elif proc.poll() is not None:
                break
        if proc.poll() is None:
            self.kill9()
        self._copier.join(timeout=10)
        return Started(False, proc.returncode, tuple(lines), time.monotonic() - t0)

    def _copy(self, proc: subprocess.Popen[str], lines: deque[str], life: int) -> None:
        assert proc.stderr is not None
        with open(self.log_path, "a", buffering=1) as log:
            for line in proc.stderr:
                log.write(line)
                lines.append(line.rstrip("\n"))
                if _ALARM.match(line):
                    self.alarms.setdefault(life, []).append(line.rstrip("\n"))

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (a clean stop: queued records written, data dir unlocked); kill -9 past ``timeout``."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self._copier is not None:
            self._copier.join(timeout=10)
        return proc.returncode

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the current life ended by itself, or None after ``timeout`` s."""
        if self.proc is None:
            return None
        try:
            status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._copier is not None:
            self._copier.join(timeout=10)
        return status

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def limit_files(self, max_bytes: int | None) -> None:
        """Make the running coordinator's disk "full" (`soak_faults`): from now on, its writes to any
        file at or beyond ``max_bytes`` fail with EFBIG (``RLIMIT_FSIZE``; Python ignores SIGXFSZ, so
        the write fails rather than the process); None: no limit. Pipes are not subject to it (rule 2)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        limit = resource.RLIM_INFINITY if max_bytes is None else max_bytes
        with contextlib.suppress(ProcessLookupError):
            resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (limit, limit))


@dataclass
class Incarnation:
    """One life of a member process (rule 4)."""

    id: int
    name: str
    #: 1 for the member's first life, 2 after its first restart, ...
    life: int
    spark: bool
    instance: str | None
    out: Path
    log: Path
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)
    ended: float | None = None
    #: How it ended: "" (running), "killed", "stopped", "exited N" (on its own).
    end: str = ""
    #: (unix time, cause) of what ended its membership uncleanly: kill -9 (added by the soak), lost,
    #: refused commits, an exit of its own (added as its files are read).
    unclean: list[tuple[float, str]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name}.{self.life}"

    @property
    def events(self) -> Path:
        return Path(f"{self.out}.events")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.ended, self.end = time.time(), "killed"
        self.unclean.append((self.ended, "killed"))

    def stop(self, timeout: float) -> None:
        """SIGTERM to the member's own process (a clean stop: commit, leave; a Spark member stops its
        query and then its JVM, which must not get the signal too); kill -9 past ``timeout``."""
        if self.alive:
            self.signal(signal.SIGCONT)
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
                self.ended, self.end = time.time(), "stopped"
            except subprocess.TimeoutExpired:
                self.kill9()
                self.end = "killed (did not stop in time)"


def spawn_member(root: Path, id: int, name: str, life: int, spark: bool, instance: str | None,
                 coordinator: str, log_dir: Path, group: str, topic: str) -> Incarnation:
    """Start one life of member ``name`` (a consumer, or a Spark query with its checkpoint under
    ``root/checkpoints/NAME``, kept across its lives)."""
    members = root / "members"
    members.mkdir(parents=True, exist_ok=True)
    tag = f"{name}.{life}"
    out, log = members / f"{tag}.out", members / f"{tag}.log"
    if spark:
        args = [sys.executable, "-m", "regroup.chaos.soak_spark_member", coordinator, str(log_dir), group,
                topic, str(out), str(root / "checkpoints" / name), "--local-dir",
                str(root / "spark-local" / tag)]
    else:
        args = [sys.executable, "-m", "regroup.chaos.soak_member", coordinator, str(log_dir), group, topic,
                str(out)]
    if instance:
        args += ["--instance", instance]
    err = open(log, "ab")  # noqa: SIM115 - the child writes to it
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.Popen(args, stdout=err, stderr=err, env=env, start_new_session=True)
    err.close()
    return Incarnation(id, name, life, spark, instance, out, log, proc)


def spawn_producer(root: Path, log_dir: Path, topic: str, partitions: int, rate: int,
                   ) -> tuple[subprocess.Popen[bytes], Path]:
    """The producer process (`regroup.chaos.soak_producer`) and its status file."""
    status = root / "producer.status"
    err = open(root / "producer.log", "ab")  # noqa: SIM115 - the child writes to it
    proc = subprocess.Popen([sys.executable, "-m", "regroup.chaos.soak_producer", str(log_dir), topic,
                             str(partitions), str(rate), str(status)], stdout=err, stderr=err,
                            start_new_session=True)
    err.close()
    return proc, status
