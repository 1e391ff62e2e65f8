"""`regroup bench key-ranges`: one hot partition, processed by 1 member and by N members on key ranges.

Parallelism beyond the partition count, measured: the same topic of ONE partition, the same records
and the same handler, drained by a group whose parallelism is 1 (one member: the partition count
caps it, as in any consumer group) and by groups cut into N key ranges with ``Consumer(workers=N)``
— N members in one process, one thread each.

Real processes and sockets: a coordinator process (`regroup.bench.procs`), the embedded log in a
temporary directory, and the consumers in this process.

Rules of this module:

1. Every configuration drains the same records (produced once, before any consumer starts) with
   its own group; the group's parallelism is set before its consumer joins, so the ranges are
   there from the first assignment.
2. Two handlers. ``io``: the handler waits ``--work-ms`` per record (a database write or a call to
   another service, done per batch: it sleeps for the batch's total, releasing the GIL, as I/O
   does). ``cpu``: it does a fixed amount of pure-Python work per record, holding the GIL — as
   much as takes ``--work-ms`` on one thread alone (calibrated at the start). Threads scale
   the first and not the second; the figure shows by how much (docs/key-ranges.md says when to
   use processes instead).
3. The clock runs from the first record handled to the last one (the drain); the time until every
   worker held its range is reported apart (joining is not throughput). The speed-up is the
   drain rate over the baseline's, measured in the same run.
4. Every run is checked: every record handled exactly once (a clean run has no hand-off to repeat
   anything) and every key's records in offset order. A failed check is printed and the command
   exits with status 1: a fast wrong answer is not a figure.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.bench.procs import start_coordinator
from regroup.client.consumer import Consumer
from regroup.client.workers import Worker
from regroup.log import open_log
from regroup.log.base import ConsumedRecord, LogRecord
from regroup.rpc.client import CoordinatorClient

TOPIC = "hot"
HANDLERS = ("io", "cpu")


@dataclass(frozen=True, slots=True)
class Settings:
    records: int = 4_000
    keys: int = 64
    work_ms: float = 1.0
    workers: tuple[int, ...] = (2, 4, 8)
    handlers: tuple[str, ...] = HANDLERS
    batch: int = 100
    #: Records one read of the log returns (a worker keeps the records of its own range from them).
    read_records: int = 1_000


@dataclass(frozen=True, slots=True)
class Run:
    handler: str
    parallelism: int
    workers: int
    records: int
    #: From run() to the moment every worker had handled a record (its range assigned and read).
    all_workers_busy_s: float
    drain_s: float
    records_per_s: float
    speedup: float
    exactly_once: bool
    key_order_kept: bool
    errors: tuple[str, ...] = ()


@dataclass
class _Tally:
    """What the handlers saw, from every worker thread."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: dict[int, int] = field(default_factory=dict)  # offset -> times handled
    last_by_key: dict[bytes, int] = field(default_factory=dict)
    out_of_order: list[str] = field(default_factory=list)
    first_at: dict[int, float] = field(default_factory=dict)  # worker index -> first record time
    started: float | None = None
    ended: float | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _spin(iterations: int) -> int:
    """Pure-Python work (it holds the GIL throughout, as pure-Python computation does)."""
    acc = 0
    for i in range(iterations):
        acc = (acc + i * i) % 1_000_003
    return acc


def _iterations_per_ms() -> int:
    """How many `_spin` iterations take a millisecond here, alone. A fixed amount of work, not a
    spin until a deadline: a thread waiting for the GIL would count its wait as work."""
    n = 20_000
    while True:
        t = time.perf_counter()
        _spin(n)
        took = time.perf_counter() - t
        if took >= 0.05:
            return max(1, int(n / (took * 1000)))
        n *= 2


def _handler(kind: str, work_s: float, tally: _Tally, total: int, per_ms: int) -> Any:
    def handle(worker: Worker, records: list[ConsumedRecord]) -> None:
        now = time.monotonic()
        with tally.lock:
            if tally.started is None:
                tally.started = now
            tally.first_at.setdefault(worker.index, now)
        if kind == "io":
            time.sleep(work_s * len(records))
        else:
            _spin(int(per_ms * work_s * 1000 * len(records)))
        with tally.lock:
            for r in records:
                tally.seen[r.offset] = tally.seen.get(r.offset, 0) + 1
                key = r.key or b""
                prev = tally.last_by_key.get(key, -1)
                if r.offset <= prev:
                    tally.out_of_order.append(f"key {key!r}: offset {r.offset} after {prev}")
                tally.last_by_key[key] = r.offset
            if len(tally.seen) >= total and tally.ended is None:
                tally.ended = time.monotonic()
                tally.done.set()
    return handle


def _produce(log_dir: Path, s: Settings) -> None:
    log = open_log(str(log_dir))
    try:
        log.create_topic(TOPIC, 1)
        recs = [LogRecord(f"key-{i % s.keys}".encode(), f"v{i}".encode(), 0) for i in range(s.records)]
        for i in range(0, len(recs), 1_000):
            log.produce(TOPIC, 0, recs[i:i + 1_000])
    finally:
        log.close()


def _one(addr: str, log_dir: Path, s: Settings, kind: str, workers: int, baseline: float | None,
         per_ms: int) -> Run:
    group = f"kr-{kind}-{workers}"
    client = CoordinatorClient(addr)
    try:
        if workers > 1:
            ack = client.set_parallelism(group, TOPIC, workers)
            if not ack.ok:  # else this would time parallelism 1 under the label of N workers
                raise RuntimeError(f"setting parallelism {workers} on {group!r} was refused: {ack.message}")
    finally:
        client.close()
    tally = _Tally()
    stop = threading.Event()
    consumer = Consumer(group, coordinator=addr, log=str(log_dir), topics=[TOPIC], workers=workers,
                        max_batch_records=s.read_records)
    errors: list[str] = []
    t0 = time.monotonic()

    def run() -> None:
        try:
            consumer.run(_handler(kind, s.work_ms / 1000, tally, s.records, per_ms), stop=stop, batch=s.batch,
                         timeout=0.2)
        except Exception as e:  # reported with the run, not lost in a thread
            errors.append(f"{type(e).__name__}: {e}")
            tally.done.set()

    runner = threading.Thread(target=run, name=f"bench-{group}")
    runner.start()
    # Bounded generously: a drain takes records x work / workers; this is a guard against a hang.
    finished = tally.done.wait(timeout=120 + 3 * s.records * s.work_ms / 1000)
    stop.set()
    runner.join()
    consumer.close()
    if not finished:
        errors.append("timed out before every record was handled")
    drain = (tally.ended or time.monotonic()) - (tally.started or t0)
    busy = max(tally.first_at.values(), default=t0) - t0
    rate = s.records / drain if drain > 0 else float("nan")
    exactly = len(tally.seen) == s.records and all(n == 1 for n in tally.seen.values())
    return Run(kind, workers, workers, s.records, round(busy, 3), round(drain, 3), round(rate, 1),
               round(rate / baseline, 2) if baseline else 1.0, exactly, not tally.out_of_order,
               tuple(errors + tally.out_of_order[:3]))


def run_key_range_bench(s: Settings, *, json_output: bool = False) -> int:
    """Run every configuration and print the table (or JSON); 0 if every check passed, else 1."""
    tmp = Path(tempfile.mkdtemp(prefix="regroup-bench-keyranges-"))
    console = Console()
    runs: list[Run] = []
    try:
        log_dir = tmp / "log"
        _produce(log_dir, s)
        proc, addr = start_coordinator(tmp / "coord", "--log", str(log_dir), "--heartbeat-interval-ms", "500")
        try:
            per_ms = _iterations_per_ms() if "cpu" in s.handlers else 0
            for kind in s.handlers:
                base = _one(addr, log_dir, s, kind, 1, None, per_ms)
                runs.append(base)
                for n in s.workers:
                    runs.append(_one(addr, log_dir, s, kind, n, base.records_per_s, per_ms))
                    if not json_output:
                        console.print(f"[dim]{kind} handler, {n} workers: "
                                      f"{runs[-1].records_per_s:,.0f} records/s[/dim]")
        finally:
            proc.terminate()
            proc.wait(30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = all(r.exactly_once and r.key_order_kept and not r.errors for r in runs)
    if json_output:
        print(json.dumps({"settings": asdict(s), "runs": [asdict(r) for r in runs], "ok": ok}, indent=2))
    else:
        _table(console, s, runs)
    return 0 if ok else 1


def _table(console: Console, s: Settings, runs: list[Run]) -> None:
    t = Table(title=f"One partition, {s.records:,} records of {s.keys} keys, {s.work_ms:g} ms of work "
                    "per record: 1 member vs N workers on N key ranges (Consumer(workers=N))")
    for col in ("handler", "parallelism = workers", "all workers busy after (s)", "drain (s)", "records/s",
                "speed-up", "exactly once", "key order"):
        t.add_column(col, justify="right" if col not in ("handler",) else "left")
    for r in runs:
        t.add_row(r.handler, str(r.workers), f"{r.all_workers_busy_s:.2f}", f"{r.drain_s:.2f}",
                  f"{r.records_per_s:,.0f}", f"{r.speedup:.2f}×", "yes" if r.exactly_once else "NO",
                  "yes" if r.key_order_kept else "NO")
    console.print(t)
    for r in runs:
        for e in r.errors:
            console.print(f"[red]{r.handler}, {r.workers} workers: {e}[/red]")
