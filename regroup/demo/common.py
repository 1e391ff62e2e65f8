"""What every demo shares (the consumer demo and both PySpark demos): the keyed workload, the coordinator,
child processes and the files they append to. What only the two PySpark demos share is
`regroup.demo.spark_common`."""

from __future__ import annotations

import array
import collections
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from regroup.bench.procs import start_coordinator_with_dashboard
from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog
from regroup.rpc.client import CoordinatorClient

GROUP = "demo"
TOPIC = "events"
CUSTOMERS = 1_000


def customer_of(seq: int) -> int:
    """The customer of the ``seq``-th event: every customer in turn, in a scrambled order."""
    return (seq * 7919) % CUSTOMERS


def amount_of(seq: int) -> int:
    return 1 + (seq * 31) % 100


def customer_key(customer: int) -> str:
    return f"c{customer:04d}"


def partition_of(key: bytes, partitions: int) -> int:
    """Records of one customer always go to one partition (as a keyed Kafka producer does)."""
    return zlib.crc32(key) % partitions


@dataclass
class Workload:
    """A steady keyed workload: ``rate`` events/s, ``{"customer", "amount", "seq"}`` JSON values.

    Keeps what it produced — per customer totals, and per partition the customer and amount at each
    offset — so that a demo can check its output against the input without reading the log back.
    """

    log_spec: str
    topic: str
    partitions: int
    rate: int
    produced: int = 0
    totals: dict[str, list[int]] = field(default_factory=dict)  # customer -> [events, amount]
    at_offset: dict[int, tuple[array.array[int], array.array[int]]] = field(default_factory=dict)
    error: BaseException | None = None
    _last_request: dict[int, int] = field(default_factory=dict)  # partition -> records in it

    def run(self, stop: threading.Event, tick: float = 0.05) -> None:
        """Produce until ``stop`` is set (a thread's target); an error is kept in ``error``."""
        log = open_log(self.log_spec)
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                self._produce_tick(log, max(1, round(self.rate * tick)))
                time.sleep(max(0.0, tick - (time.monotonic() - t0)))
            self._seal(log)
        except BaseException as e:  # surfaced by the demo: a dead producer must not look like a drain
            self.error = e
        finally:
            log.close()

    def _produce_tick(self, log: PartitionedLog, n: int) -> None:
        batches: dict[int, list[tuple[int, int, LogRecord]]] = collections.defaultdict(list)
        for seq in range(self.produced, self.produced + n):
            customer = customer_of(seq)
            p, rec = self._record(seq, customer)
            batches[p].append((customer, amount_of(seq), rec))
        for p, recs in sorted(batches.items()):
            first = log.produce(self.topic, p, [r for _, _, r in recs])
            self._remember(p, first, recs)
        self.produced += n

    def _record(self, seq: int, customer: int) -> tuple[int, LogRecord]:
        key = customer_key(customer)
        value = json.dumps({"customer": key, "amount": amount_of(seq), "seq": seq}).encode()
        return partition_of(key.encode(), self.partitions), LogRecord(key.encode(), value,
                                                                     int(time.time() * 1000))

    def _seal(self, log: PartitionedLog) -> None:
        """End every partition with a one-record request: Tansu 0.6 (the Kafka broker of the tests)
        reports the end offset as the last request's first offset + 1, which would hide the rest of
        that request from every reader for good. Harmless elsewhere: one more event per partition."""
        todo = {p for p, n in self._last_request.items() if n > 1}
        for customer in range(CUSTOMERS):
            if not todo:
                break
            p, rec = self._record(self.produced, customer)
            if p in todo:
                todo.discard(p)
                self._remember(p, log.produce(self.topic, p, [rec]),
                               [(customer, amount_of(self.produced), rec)])
                self.produced += 1

    def _remember(self, partition: int, first: int, recs: list[tuple[int, int, LogRecord]]) -> None:
        self._last_request[partition] = len(recs)
        customers, amounts = self.at_offset.setdefault(partition, (array.array("i"), array.array("i")))
        if len(customers) != first:  # offsets are dense in a fresh topic; pad if a backend skips some
            customers.extend([-1] * (first - len(customers)))
            amounts.extend([0] * (first - len(amounts)))
        for customer, amount, _ in recs:
            customers.append(customer)
            amounts.append(amount)
            t = self.totals.setdefault(customer_key(customer), [0, 0])
            t[0] += 1
            t[1] += amount


def start_demo_coordinator(root: Path, log_spec: str, session_timeout_ms: int, heartbeat_interval_ms: int,
                           *options: str) -> tuple[subprocess.Popen[str], str, str]:
    """The demo's coordinator process (its own data dir under ``root``) with its dashboard on loopback;
    ``options``: more of the coordinator's command-line options. Returns it, its HOST:PORT and the
    dashboard's URL."""
    return start_coordinator_with_dashboard(root / "coordinator", "--log", log_spec,
                                            "--session-timeout-ms", str(session_timeout_ms),
                                            "--heartbeat-interval-ms", str(heartbeat_interval_ms), *options)


def read_new_lines(path: Path, pos: int) -> tuple[list[bytes], int]:
    """The complete lines appended to a child's file since byte ``pos``, and the position after them.
    A line still being written (no newline yet: the child is writing it, or was killed mid-write)
    waits for the next look; a file not created yet has no lines."""
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return [], pos
    complete = data.rfind(b"\n") + 1
    return data[:complete].splitlines(), pos + complete


def group_epoch(client: CoordinatorClient, group: str = GROUP) -> int:
    """The group epoch now; -1 when the coordinator does not answer (the demo carries on)."""
    try:
        return client.describe_group(group).description.epoch
    except Exception:
        return -1


def stop_coordinator(proc: subprocess.Popen[str] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def kill_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child started with ``start_new_session=True`` and everything it started (a JVM, its
    Python workers): what a crashed machine looks like to the rest of the group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
