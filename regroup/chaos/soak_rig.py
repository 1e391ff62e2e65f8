"""The chaos soak's rig: a coordinator, a proxy in front of it, a producer and the members, watched.

Rules of this module:

1. Members reach the coordinator only through the `Proxy`; the rig's own client talks to the
   coordinator directly (to describe the group while members are cut off).
2. `tick` is the rig's heartbeat and every wait calls it: it reads what every member life wrote
   (`soak_verify.Ledger`) and notices processes that ended without the soak asking. A member that
   exited by itself is a finding, its exit an unclean end of its life, and it is restarted; so is a
   coordinator that exited by itself, unless a fault expects it (`coordinator_down`). At `shutdown`,
   every ERROR or CRITICAL line and traceback the coordinator logged is a finding, but in the lives a
   fault made fail on purpose (`expected_alarms`: a full disk, a start on a damaged file).
3. Members ``c0, c1, ...`` are consumers and ``s0, s1, ...`` Spark queries; the even ones of each are
   static (instance id ``soak-NAME``), the odd ones dynamic (a new member id every life).
4. Waits are on conditions, with a deadline; `idle` is the only plain wait — the steady load between
   faults, a fault's own duration — and it keeps ticking.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regroup.chaos.soak_procs import Coordinator, Incarnation, Started, spawn_member, spawn_producer
from regroup.chaos.soak_proxy import Proxy
from regroup.chaos.soak_schedule import KINDS
from regroup.chaos.soak_verify import Ledger
from regroup.log import PartitionedLog, open_log
from regroup.protocol.describe import GroupDescription
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.types import GroupDetails

GROUP = "soak"
TOPIC = "soak"


@dataclass(frozen=True)
class Settings:
    """What a soak runs (the CLI's options), and the coordinator's timing."""

    minutes: float
    seed: int
    members: int = 3
    spark_members: int = 0
    partitions: int = 6
    rate: int = 200
    kinds: tuple[str, ...] = KINDS
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    failover_grace_ms: int = 2_000
    snapshot_every: int = 1_000
    #: How long a fault may take to recover before it counts as not recovered.
    recover_timeout_s: float = 120.0

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class Rig:
    """Everything a soak runs, and what it noticed (`findings`)."""

    def __init__(self, root: Path, settings: Settings, progress: Callable[[str], None]) -> None:
        self.root, self.settings, self.progress = root, settings, progress
        self.names = ([f"c{i}" for i in range(settings.members)]
                      + [f"s{i}" for i in range(settings.spark_members)])
        self.log_dir = root / "log"
        self.ledger = Ledger(settings.partitions)
        self.lives: dict[int, Incarnation] = {}
        self.current: dict[str, Incarnation] = {}
        self.findings: list[dict[str, Any]] = []
        #: A fault has stopped the coordinator on purpose: its absence is no finding.
        self.coordinator_down = False
        #: Lives of the coordinator whose ERROR/CRITICAL lines and tracebacks a fault caused on purpose.
        self.expected_alarms: set[int] = set()
        self.coordinator = Coordinator(root / "coordinator", root / "coordinator.log", (
            "--log", str(self.log_dir), "--session-timeout-ms", str(settings.session_timeout_ms),
            "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms), "--failover-grace-ms",
            str(settings.failover_grace_ms), "--snapshot-every", str(settings.snapshot_every)))
        self.proxy: Proxy | None = None
        self.client: CoordinatorClient | None = None
        self.producer: Any = None
        self.producer_status = root / "producer.status"
        self._read_done: set[int] = set()
        self._log: PartitionedLog | None = None
        self.t0 = time.time()

    # ------------------------------------------------------------------ start and stop
    def start(self) -> None:
        log = open_log(str(self.log_dir))
        try:
            log.create_topic(TOPIC, self.settings.partitions)
        finally:
            log.close()
        started = self.coordinator.start()
        if not started.ok:
            raise RuntimeError(f"the coordinator did not start: {' | '.join(started.lines[-5:])}")
        self.client = CoordinatorClient(self.coordinator.address, timeout_s=5)
        self.proxy = Proxy(self.coordinator.address)
        self.proxy.start()
        self.producer, self.producer_status = spawn_producer(self.root, self.log_dir, TOPIC,
                                                             self.settings.partitions, self.settings.rate)
        for name in self.names:
            self.spawn(name)
        if not self.wait_until(lambda: self.group_size() == len(self.names), 300):
            raise RuntimeError(f"the group did not reach {len(self.names)} members within 300 s")

    def spawn(self, name: str) -> Incarnation:
        assert self.proxy is not None
        i = int(name[1:])
        instance = f"soak-{name}" if i % 2 == 0 else None
        life = 1 + sum(inc.name == name for inc in self.lives.values())
        inc = spawn_member(self.root, len(self.lives) + 1, name, life, name.startswith("s"), instance,
                           self.proxy.address, self.log_dir, GROUP, TOPIC)
        self.lives[inc.id] = inc
        self.current[name] = inc
        return inc

    def stop_producer(self) -> int:
        """Stop producing; the number of records produced (the producer's last word)."""
        if self.producer is not None and self.producer.poll() is None:
            self.producer.terminate()
            self.producer.wait(timeout=60)
        return self.produced()

    def produced(self) -> int:
        import json

        try:
            lines = self.producer_status.read_text().splitlines()
        except FileNotFoundError:
            return 0
        last = json.loads(lines[-1]) if lines else {}
        if "error" in last:
            self.finding("producer", f"the producer failed: {last['error']}")
        return int(last.get("produced", 0))

    def shutdown(self, member_timeout: float = 60.0) -> None:
        """Stop everything, members first (idempotent)."""
        for inc in self.current.values():
            inc.stop(member_timeout)
        for inc in self.lives.values():
            if inc.alive:
                inc.kill9()
        self.tick()
        if self.producer is not None and self.producer.poll() is None:
            self.producer.kill()
            self.producer.wait(timeout=30)
        if self.client is not None:
            self.client.close()
        if self.proxy is not None:
            self.proxy.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.coordinator_down = True
        self.coordinator.terminate()
        if (self.root / "spark-local").exists():
            shutil.rmtree(self.root / "spark-local", ignore_errors=True)
        for life, lines in sorted(self.coordinator.alarms.items()):
            if life not in self.expected_alarms:
                self.finding("coordinator-log", f"life {life} of the coordinator logged {len(lines)} errors, "
                                                f"first: {lines[0][:300]}")

    # ------------------------------------------------------------------ watching (rule 2)
    def finding(self, kind: str, text: str, known: str | None = None) -> None:
        self.findings.append({"kind": kind, "text": text, "known": known,
                              "at_s": round(time.time() - self.t0, 1)})
        self.progress(f"finding ({kind}): {text}" + (f" [known: {known}]" if known else ""))

    def tick(self) -> None:
        for inc in list(self.lives.values()):
            if inc.id in self._read_done:
                continue
            self.ledger.tail(inc)
            if inc.end and not inc.alive:
                self._read_done.add(inc.id)
        for name, inc in list(self.current.items()):
            if inc.end or inc.alive:
                continue
            inc.ended, inc.end = time.time(), f"exited {inc.proc.returncode}"
            inc.unclean.append((inc.ended, "exited"))
            tail = inc.log.read_text(errors="replace").strip().splitlines()[-3:] if inc.log.exists() else []
            self.finding("member", f"member {inc.label} exited by itself with status {inc.proc.returncode}: "
                                   f"{' | '.join(tail)[-500:]}")
            self.spawn(name)
        if not self.coordinator_down and not self.coordinator.alive:
            status = self.coordinator.wait_exit(5)
            self.finding("coordinator", f"the coordinator exited by itself with status {status}: "
                                        f"{' | '.join(list(self.coordinator.lines)[-3:])[-500:]}")
            self.start_coordinator()

    def idle(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.tick()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.2, left))

    def wait_until(self, cond: Callable[[], bool], timeout: float) -> bool:
        end = time.monotonic() + timeout
        while True:
            self.tick()
            if cond():
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.2)

    # ------------------------------------------------------------------ the coordinator
    def start_coordinator(self) -> Started:
        started = self.coordinator.start()
        self.coordinator_down = not started.ok
        return started

    def describe(self) -> GroupDescription | None:
        details = self.details()
        return details.description if details is not None else None

    def details(self) -> GroupDetails | None:
        if self.client is None or not self.coordinator.alive:
            return None
        try:
            return self.client.describe_group(GROUP)
        except Exception:
            return None

    def group_size(self) -> int:
        d = self.describe()
        return len(d.members) if d is not None else -1

    def check_durable(self, stopped_at: float, what: str) -> None:
        """Every commit acknowledged before ``stopped_at`` is still there (a finding if not)."""
        acked = self.ledger.acked(stopped_at)
        found: list[GroupDescription] = []

        def described() -> bool:
            d = self.describe()
            if d is not None:
                found.append(d)
            return d is not None

        if not self.wait_until(described, 60):
            self.finding("durability", f"after {what}: the coordinator does not describe the group")
            return
        offsets = found[-1].offsets
        behind = {p: (o, offsets[Shard(TOPIC, p)].offset if Shard(TOPIC, p) in offsets else None)
                  for p, o in acked.items()
                  if Shard(TOPIC, p) not in offsets or offsets[Shard(TOPIC, p)].offset < o}
        if behind:
            self.finding("durability", f"after {what}: acknowledged commits are gone (partition: "
                                       f"acknowledged, now): {behind}")

    # ------------------------------------------------------------------ the load
    def ends(self) -> dict[int, int]:
        if self._log is None:
            self._log = open_log(str(self.log_dir))
        return self._log.end_offsets(TOPIC)

    def caught_up(self, ends: dict[int, int]) -> bool:
        return self.ledger.caught_up(ends) and all(inc.alive for inc in self.current.values())
