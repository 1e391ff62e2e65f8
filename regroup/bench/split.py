"""`regroup bench split`: what a producer-side split buys over client-side filtering, measured.

One hot partition, K readers that each own a 1/K slice of its keys (what a group at parallelism K
gives K members). Two ways to lay the partition out, in the same run, on the same records:

* **filtered** — the partition is one piece: every reader reads all of it and keeps its keys
  (client-side filtering, the only way on Kafka). Each record is read K times.
* **split** — the partition is split on the producer side into K pieces along the same key slices
  (`regroup topics split`): each reader reads only its piece.

And the producers' side: one producer process writing the whole partition (one writer per piece, so
an unsplit partition has exactly one) against K producer processes, each writing one piece.

Rules of this module:

1. Real processes: every reader and producer is its own process (``spawn``), started together
   behind a barrier; the clock runs from the barrier to the last one done. Readers read through
   `EmbeddedLog.read_keys`, the call the consumer makes for a range (`regroup.client.consumer`), so
   the filtered case pays the consumer's real per-record key hashing.
2. Every run is checked: the K readers together keep every record exactly once (counted by value),
   and each key's records in produce order. A failed check exits with status 1.
3. Figures: records/s (records kept by all readers over the wall time), CPU per record kept (user +
   system time of the reader processes, over the records), records scanned per record kept (the
   read amplification), and for producers records/s with fsync per batch (the default) or never.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog, FsyncPolicy
from regroup.protocol.keyrange import key_hash, ranges

TOPIC = "hot"
KEYS = 4096
READ_STEP = 5000
PRODUCE_BATCH = 200


@dataclass(frozen=True)
class ReadFigure:
    layout: str  # "filtered" or "split"
    readers: int
    seconds: float
    records_per_s: float
    cpu_us_per_record: float
    scanned_per_kept: float


@dataclass(frozen=True)
class ProduceFigure:
    layout: str  # "one partition" or "split"
    producers: int
    fsync: str
    seconds: float
    records_per_s: float


def _value(i: int, size: int) -> bytes:
    return str(i).encode().ljust(size, b".")


def _key(i: int) -> bytes:
    return b"k%05d" % (i % KEYS)


# ------------------------------------------------------------------------------------ child processes


def _read_slice(directory: str, lo: int, hi: int, barrier: Any, out: Any) -> None:
    log = EmbeddedLog(directory, fsync="never")
    barrier.wait()
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    kept: list[int] = []
    last: dict[bytes, int] = {}
    ordered = True
    scanned = 0
    pos = 0
    while True:
        got = log.read_keys(TOPIC, 0, lo, hi, pos, READ_STEP)
        if not got.records and got.next_offset == pos:
            break
        scanned += _scanned(log, pos, got.next_offset, lo, hi)
        for r in got.records:
            i = int((r.value or b"").rstrip(b"."))
            k = r.key or b""
            if last.get(k, -1) > i:
                ordered = False
            last[k] = i
            kept.append(i)
        pos = got.next_offset
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out.put((kept, ordered, scanned, cpu, time.perf_counter() - t0))
    log.close()


def _scanned(log: EmbeddedLog, start: int, stop: int, lo: int, hi: int) -> int:
    """Records the read of ``[start, stop)`` looked at: the whole partition if it is one piece, else
    the piece of keys ``[lo, hi)``."""
    layout = log.layout(TOPIC, 0)
    if layout.trivial:
        return stop - start
    piece = layout.reading(lo, hi, start).open
    return 0 if piece is None else stop - max(start, piece.start)


def _produce_slice(directory: str, fsync: str, ids: list[int], size: int, barrier: Any, out: Any) -> None:
    log = EmbeddedLog(directory, fsync="batch" if fsync == "batch" else "never")
    barrier.wait()
    t0 = time.perf_counter()
    for at in range(0, len(ids), PRODUCE_BATCH):
        log.produce(TOPIC, 0, [LogRecord(_key(i), _value(i, size), 0) for i in ids[at:at + PRODUCE_BATCH]])
    log.close()
    out.put(time.perf_counter() - t0)


def _run_together(target: Any, argsets: list[tuple[Any, ...]]) -> tuple[float, list[Any]]:
    """Start one process per argument set behind a barrier; the wall time and their results."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(argsets) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, out)) for a in argsets]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise RuntimeError(f"a bench process exited with status {p.exitcode}")
    return wall, results


# ------------------------------------------------------------------------------------ the bench


def _slices(k: int) -> list[tuple[int, int]]:
    return list(ranges(k))


def _prepare(directory: str, records: int, size: int, split: int) -> None:
    with EmbeddedLog(directory, fsync="never") as log:
        log.create_topic(TOPIC, 1)
        if split > 1:
            log.split_partition(TOPIC, 0, split)
        for at in range(0, records, 10_000):
            log.produce(TOPIC, 0, [LogRecord(_key(i), _value(i, size), 0)
                                   for i in range(at, min(records, at + 10_000))])


def measure_reads(root: str, records: int, size: int, k: int, split: bool) -> tuple[ReadFigure, list[str]]:
    directory = os.path.join(root, f"read-{'split' if split else 'filtered'}-{k}")
    _prepare(directory, records, size, k if split else 1)
    wall, results = _run_together(_read_slice, [(directory, lo, hi) for lo, hi in _slices(k)])
    problems = []
    kept = sorted(i for r in results for i in r[0])
    if kept != list(range(records)):
        problems.append(f"{'split' if split else 'filtered'} x{k}: {len(kept)} kept of {records}, "
                        f"{len(set(kept))} distinct")
    if not all(r[1] for r in results):
        problems.append(f"{'split' if split else 'filtered'} x{k}: a key's records out of order")
    scanned = sum(r[2] for r in results)
    cpu = sum(r[3] for r in results)
    shutil.rmtree(directory, ignore_errors=True)
    return ReadFigure("split" if split else "filtered", k, wall, records / wall,
                      cpu / records * 1e6, scanned / records), problems


def measure_produce(root: str, records: int, size: int, k: int, fsync: FsyncPolicy) -> ProduceFigure:
    directory = os.path.join(root, f"produce-{k}-{fsync}")
    with EmbeddedLog(directory, fsync="never") as log:
        log.create_topic(TOPIC, 1)
        if k > 1:
            log.split_partition(TOPIC, 0, k)
    slices = _slices(k)
    ids: list[list[int]] = [[] for _ in slices]
    for i in range(records):
        point = key_hash(_key(i), 0)
        ids[next(n for n, (lo, hi) in enumerate(slices) if lo <= point < hi)].append(i)
    wall, _ = _run_together(_produce_slice, [(directory, fsync, part, size) for part in ids])
    shutil.rmtree(directory, ignore_errors=True)
    return ProduceFigure("split" if k > 1 else "one partition", k, fsync, wall, records / wall)


def run_split_bench(records: int, value_size: int, readers: list[int], producers: list[int],
                    json_output: bool) -> None:
    root = tempfile.mkdtemp(prefix="regroup-bench-split-")
    problems: list[str] = []
    reads: list[ReadFigure] = []
    produces: list[ProduceFigure] = []
    try:
        for k in readers:
            for split in (False, True):
                if split and k == 1:
                    continue
                fig, bad = measure_reads(root, records, value_size, k, split)
                reads.append(fig)
                problems += bad
        for fsync in ("batch", "never"):
            for k in producers:
                produces.append(measure_produce(root, records, value_size, k, fsync))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    if json_output:
        print(json.dumps({"records": records, "value_bytes": value_size, "keys": KEYS, "cpus": os.cpu_count(),
                          "load_average": load, "reads": [asdict(r) for r in reads],
                          "produce": [asdict(p) for p in produces], "problems": problems}))
    else:
        _print(records, value_size, reads, produces, load)
    if problems:
        for p in problems:
            Console(stderr=True).print(f"check failed: {p}")
        sys.exit(1)


def _print(records: int, size: int, reads: list[ReadFigure], produces: list[ProduceFigure],
           load: tuple[float, float, float]) -> None:
    console = Console()
    console.print(f"one partition, {records:,} records of {size} B, {KEYS} keys; {os.cpu_count()} cores, "
                  f"load average {load[0]:.1f}")
    table = Table("readers", "layout", "seconds", "records/s", "CPU µs/record", "scanned/kept",
                  title="K readers, each owning 1/K of the keys")
    for r in reads:
        table.add_row(str(r.readers), r.layout, f"{r.seconds:.2f}", f"{r.records_per_s:,.0f}",
                      f"{r.cpu_us_per_record:.2f}", f"{r.scanned_per_kept:.1f}")
    console.print(table)
    table = Table("producers", "layout", "fsync", "seconds", "records/s", title="producing the same records")
    for p in produces:
        table.add_row(str(p.producers), p.layout, p.fsync, f"{p.seconds:.2f}", f"{p.records_per_s:,.0f}")
    console.print(table)
