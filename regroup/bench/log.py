"""`regroup bench log`: produce and read throughput of the embedded log.

The embedded log must never be the bottleneck of a demo, so this measures the paths a demo uses:
producing in batches with the default durability (fsync per batch) and without fsync, producing one
record per call (the worst case, dominated by the per-call fsync), reading back as Python records
(what the consumer shell does) and as Arrow batches (what the PySpark source does). Each figure is the
best of a few passes over the same data, to keep noise from other processes out of it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog, FsyncPolicy

PRODUCE_BATCH = 1000
READ_BATCH = 10_000
ARROW_BATCH = 100_000
SINGLE_RECORD_CALLS = 1000
PASSES = 3


def _records(n: int, value_size: int) -> list[LogRecord]:
    value = os.urandom(value_size)
    base_ts = 1_700_000_000_000
    return [LogRecord(b"key-%012d" % i, value, base_ts + i) for i in range(n)]


def _best(passes: int, run: Callable[[], int]) -> tuple[float, int]:
    """Run ``passes`` times; return (best seconds, records of that pass)."""
    best = float("inf")
    count = 0
    for _ in range(passes):
        t0 = time.perf_counter()
        count = run()
        best = min(best, time.perf_counter() - t0)
    return best, count


def _figure(name: str, seconds: float, records: int, record_bytes: int) -> dict[str, Any]:
    rate = records / seconds if seconds > 0 else float("inf")
    return {
        "name": name,
        "records": records,
        "seconds": round(seconds, 4),
        "records_per_s": round(rate),
        "mb_per_s": round(rate * record_bytes / 1e6, 1),
    }


def run_log_bench(directory: str | None, records: int, value_size: int, json_output: bool) -> None:
    """Measure the embedded log in ``directory`` (a fresh temporary directory if None) and print it."""
    if records < 1 or value_size < 0:
        raise ValueError("records must be >= 1 and value_size >= 0")
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="regroup-bench-log-") as tmp:
            _run(tmp, records, value_size, json_output)
    else:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="bench-", dir=directory) as tmp:
            _run(tmp, records, value_size, json_output)


def _run(directory: str, records: int, value_size: int, json_output: bool) -> None:
    recs = _records(min(records, PRODUCE_BATCH), value_size)
    record_bytes = len(recs[0].key or b"") + value_size
    figures: list[dict[str, Any]] = []

    def produce_all(log: EmbeddedLog, topic: str) -> int:
        done = 0
        while done < records:
            n = min(PRODUCE_BATCH, records - done)
            log.produce(topic, 0, recs[:n])
            done += n
        return done

    policies: tuple[FsyncPolicy, ...] = ("batch", "never")
    for fsync in policies:
        with EmbeddedLog(os.path.join(directory, f"fsync-{fsync}"), fsync=fsync) as log:
            passes = [0]

            def one_pass(log: EmbeddedLog = log, fsync: str = fsync, passes: list[int] = passes) -> int:
                passes[0] += 1
                topic = f"produce-{fsync}-{passes[0]}"
                log.create_topic(topic, 1)
                return produce_all(log, topic)

            secs, n = _best(PASSES, one_pass)
            figures.append(_figure(f"produce, {PRODUCE_BATCH}/call, fsync={fsync}", secs, n, record_bytes))

    for fsync in policies:
        with EmbeddedLog(os.path.join(directory, f"single-{fsync}"), fsync=fsync) as log:
            log.create_topic("single", 1)
            calls = min(SINGLE_RECORD_CALLS, records)

            def singles(log: EmbeddedLog = log, calls: int = calls) -> int:
                for i in range(calls):
                    log.produce("single", 0, recs[i % len(recs) : i % len(recs) + 1])
                return calls

            secs, n = _best(1, singles)
            figures.append(_figure(f"produce, 1/call, fsync={fsync}", secs, n, record_bytes))

    # Reads go over the data written with fsync=never (same bytes on disk, page cache warm).
    with EmbeddedLog(os.path.join(directory, "fsync-never")) as log:
        topic = "produce-never-1"

        def read_all() -> int:
            pos = 0
            while batch := log.read(topic, 0, pos, READ_BATCH):
                pos += len(batch)
            return pos

        def read_arrow_all() -> int:
            pos = 0
            while (rows := log.read_arrow(topic, 0, pos, ARROW_BATCH).num_rows) > 0:
                pos += rows
            return pos

        secs, n = _best(PASSES, read_all)
        figures.append(_figure(f"read, {READ_BATCH}/call (Python records)", secs, n, record_bytes))
        secs, n = _best(PASSES, read_arrow_all)
        figures.append(_figure(f"read_arrow, {ARROW_BATCH}/call (Arrow batches)", secs, n, record_bytes))

    out = {
        "records": records,
        "value_size": value_size,
        "record_bytes": record_bytes,
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "results": figures,
    }
    if json_output:
        print(json.dumps(out))
        return
    table = Table(title=f"Embedded log: {records:,} records of {record_bytes} bytes (16-byte key + value)")
    table.add_column("operation")
    table.add_column("records/s", justify="right")
    table.add_column("MB/s", justify="right")
    table.add_column("seconds", justify="right")
    for f in figures:
        table.add_row(f["name"], f"{f['records_per_s']:,}", f"{f['mb_per_s']:,}", str(f["seconds"]))
    c = Console()
    c.print(table)
    c.print(
        f"best of {PASSES} passes (1 for single-record produce); {out['cpu_count']} CPUs, "
        f"load average {out['load_average_1m']} during the run"
    )
