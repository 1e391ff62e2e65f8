"""The record-level pieces of `regroup bench ranges --shape parallel-consumer`, and its member process.

Used by both deployments of the bench (`regroup.bench.key_ranges`): ``threads`` calls `handle_batch` in
`Consumer(workers=K)`'s worker threads, ``members`` runs this module as K separate processes, each one
member of the group (``Consumer(workers=1)``), and reads what each wrote.

The rules:

1. A record's work is in its value: the microseconds it takes, drawn once by the bench from a seeded
   RNG when it produced the record, so every deployment and every K does exactly the same work.
2. A worker handles its batch one record at a time, in offset order: ``io`` sleeps each record's wait
   in turn (a remote call per record, releasing the GIL while it waits), ``cpu`` does that many
   microseconds of pure-Python work per record (holding the GIL; the bench calibrates the
   iterations per millisecond once and hands the figure to every member). A sleep per record rather
   than one per batch: the wall time of a sequential worker is the same sum, but a real call per record
   costs its own overhead (the sleep's wake-up here), and this counts it.
3. What a worker handled is recorded per record: the offset and the time its work ended, plus the time
   its first record's work began. Times are `time.monotonic()`: on Linux CLOCK_MONOTONIC, one clock
   for every process of the machine, so the times of separate members compare.
4. `CountingLog` counts the records the member reads from the log (each member reads the whole
   partition and keeps its own range's records: the read amplification of consumer-side key ranges).
   It opens one log per thread, as a log given by its directory is opened once per worker.

The member process: ``python -m regroup.bench.key_ranges_member COORDINATOR LOG_DIR TOPIC GROUP OUT
HANDLER ITERATIONS_PER_MS BATCH READ_RECORDS``. It joins, then writes to OUT (line-buffered, one write
per batch, after the batch): ``joined MEMBER_ID``, ``first T`` (when its first record's work began),
``h OFFSET T`` per record handled, in the order handled; on SIGTERM it finishes the batch in hand,
commits and leaves the group, writes ``reads N`` (records read from the log) and ``exit``, and exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa

from regroup.client.consumer import Consumer
from regroup.client.workers import Worker
from regroup.log import open_log
from regroup.log.base import ConsumedRecord, PartitionedLog

HANDLERS = ("io", "cpu")


def spin(iterations: int) -> int:
    """Pure-Python work (it holds the GIL throughout, as pure-Python computation does)."""
    acc = 0
    for i in range(iterations):
        acc = (acc + i * i) % 1_000_003
    return acc


def iterations_per_ms(tries: int = 1) -> int:
    """How many `spin` iterations take a millisecond here, alone: the best of ``tries`` measurements
    (other processes of a busy machine only ever slow one down). A fixed amount of work, not a spin
    until a deadline: a thread waiting for the GIL would count its wait as work."""
    n, best = 20_000, 0
    while tries > 0:
        t = time.perf_counter()
        spin(n)
        took = time.perf_counter() - t
        if took < 0.05:
            n *= 2
            continue
        best, tries = max(best, int(n / (took * 1000))), tries - 1
    return max(1, best)


def work_value(work_us: int) -> bytes:
    """A record's value: its work in microseconds (rule 1)."""
    return str(work_us).encode()


@dataclass
class Tally:
    """What one worker handled (rule 3). Only that worker's thread writes it."""

    first: float | None = None
    handled: list[tuple[int, float]] = field(default_factory=list)  # (offset, end of its work), in order


def do_work(kind: str, per_ms: int) -> Callable[[ConsumedRecord], None]:
    """One record's work (rule 2)."""
    if kind == "io":
        def wait(r: ConsumedRecord) -> None:
            time.sleep(int(r.value or b"0") / 1e6)
        return wait
    if kind == "cpu":
        def compute(r: ConsumedRecord) -> None:
            spin(per_ms * int(r.value or b"0") // 1000)
        return compute
    raise ValueError(f"unknown handler {kind!r}; choose from {', '.join(HANDLERS)}")


def handle_batch(work: Callable[[ConsumedRecord], None], tally: Tally, records: list[ConsumedRecord]) -> None:
    """Handle ``records`` one at a time, in offset order, recording each (rules 2 and 3)."""
    if tally.first is None:
        tally.first = time.monotonic()
    clock, out = time.monotonic, tally.handled
    for r in records:
        work(r)
        out.append((r.offset, clock()))


class CountingLog:
    """A log directory read through one embedded log per thread, counting the records read (rule 4).

    Pass it to a consumer as ``cast(PartitionedLog, ...)``: what it does not count it hands to the
    thread's log as it is. Counted: what `read` and `read_arrow` return, and for `read_keys` the
    offsets the read moved over (the records looked at, its range's or not)."""

    def __init__(self, spec: str) -> None:
        self._spec = spec
        self._local = threading.local()
        self._lock = threading.Lock()
        self._logs: list[PartitionedLog] = []
        self.records_read = 0

    def _log(self) -> PartitionedLog:
        log: PartitionedLog | None = getattr(self._local, "log", None)
        if log is None:
            log = open_log(self._spec)
            self._local.log = log
            with self._lock:
                self._logs.append(log)
        return log

    def _count(self, n: int) -> None:
        with self._lock:
            self.records_read += n

    def read(self, topic: str, partition: int, start: int, max_records: int) -> list[ConsumedRecord]:
        recs = self._log().read(topic, partition, start, max_records)
        self._count(len(recs))
        return recs

    def read_arrow(self, topic: str, partition: int, start: int, max_records: int) -> pa.RecordBatch:
        batch = self._log().read_arrow(topic, partition, start, max_records)
        self._count(batch.num_rows)
        return batch

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._log(), name)
        if name != "read_keys":
            return attr

        def read_keys(topic: str, partition: int, lo: int, hi: int, start: int, max_records: int) -> Any:
            got = attr(topic, partition, lo, hi, start, max_records)
            self._count(max(0, got.next_offset - start))
            return got
        return read_keys

    def close(self) -> None:
        with self._lock:
            logs, self._logs = self._logs, []
        for log in logs:
            log.close()


def start_member(coordinator: str, log_dir: str, topic: str, group: str, out: Path, kind: str, per_ms: int,
                 batch: int, read_records: int) -> subprocess.Popen[bytes]:
    """A member process writing to ``out``, its stderr beside it (``.err``)."""
    with open(out.with_suffix(".err"), "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "regroup.bench.key_ranges_member", coordinator, log_dir, topic, group,
             str(out), kind, str(per_ms), str(batch), str(read_records)],
            stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"})


class MemberOutput:
    """A member process's output file, read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path, self.tally, self.reads, self.exited = path, Tally(), 0, False
        self._pos, self._rest = 0, ""

    def update(self) -> int:
        """Read what was appended; returns the records handled so far."""
        if self.path.exists():
            with open(self.path) as f:
                f.seek(self._pos)
                text = self._rest + f.read()
                self._pos = f.tell()
            *lines, self._rest = text.split("\n")
            for line in lines:
                kind, _, rest = line.partition(" ")
                if kind == "h":
                    o, t = rest.split()
                    self.tally.handled.append((int(o), float(t)))
                elif kind == "first":
                    self.tally.first = float(rest)
                elif kind == "reads":
                    self.reads = int(rest)
                elif kind == "exit":
                    self.exited = True
        return len(self.tally.handled)


def main(coordinator: str, log_dir: str, topic: str, group: str, out_path: str, kind: str, per_ms: str,
         batch: str, read_records: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out: IO[str] = open(out_path, "a", buffering=1)  # noqa: SIM115 - closed below
    log = CountingLog(log_dir)
    consumer = Consumer(group, coordinator=coordinator, log=cast(PartitionedLog, log), topics=[topic],
                        max_batch_records=int(read_records))
    out.write(f"joined {consumer.member_id}\n")
    work, tally = do_work(kind, int(per_ms)), Tally()

    def handle(_worker: Worker, records: list[ConsumedRecord]) -> None:
        first = tally.first is None
        done = len(tally.handled)
        handle_batch(work, tally, records)
        lines = [f"first {tally.first!r}\n"] if first else []
        lines.extend(f"h {o} {t!r}\n" for o, t in tally.handled[done:])
        out.write("".join(lines))

    try:
        consumer.run(handle, stop=stop, batch=int(batch), timeout=0.2)
    finally:
        consumer.close()
        log.close()
        out.write(f"reads {log.records_read}\nexit\n")
        out.close()


if __name__ == "__main__":
    main(*sys.argv[1:10])
