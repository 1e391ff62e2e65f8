"""Where a query's start on ``format("regroup")`` spends its time (a measuring script, not a test).

    .venv/bin/python -m tests.spark.startcost [--queries N]

One ``local[2]`` SparkSession, a coordinator process, an embedded log of 6 partitions. The source is
registered twice: ``regroup_zip`` as a plain ``spark.dataSource.register`` (its Python processes
import pyspark from Spark's ``pyspark.zip``, uncompiled) and ``regroup_fast`` through
`regroup.spark.startup.register_source` (what `regroup.spark.register` does). Both are instrumented
subclasses of the regroup source that write, from the driver-side reader's process, when that
process started, when it finished importing pyspark (our module is imported right after, when the
runner unpickles the data source) and regroup, and when each of Spark's first calls ran.

After one untimed warm-up query of each kind, N rounds each start one query of each kind (a fresh
group and checkpoint, 100 records per trigger, default trigger), wait for its first completed batch
and stop it. Printed: medians per phase, in ms, with ``load()`` (the planner process reads the
schema) and ``start()`` → first batch (``foreachBatch`` returned) as the totals.
"""

from __future__ import annotations

import time

_T_IMPORT_BEGIN = time.time()  # in the reader's process: pyspark is imported, regroup not yet

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from regroup.spark.options import parse_options  # noqa: E402
from regroup.spark.source import RegroupDataSource, RegroupStreamReader  # noqa: E402

_T_IMPORT_END = time.time()


def process_start_time() -> float:
    """This process's start (wall clock, 10 ms resolution), from /proc."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rpartition(")")[2].split()[19])  # since boot
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))


class TracedReader(RegroupStreamReader):
    """The regroup reader, writing when its first calls begin and end (JSON lines to ``trace``)."""

    def __init__(self, opts: Any, trace: str) -> None:
        super().__init__(opts)
        self.trace = trace
        self._calls = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "trace": self.trace, "_calls": 0}

    def _mark(self, event: str) -> None:
        with open(self.trace, "a") as f:
            f.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid()}) + "\n")

    def _traced(self, name: str, call: Callable[[], Any]) -> Any:
        self._calls += 1
        first = self._calls <= 8
        if first:
            self._mark(f"{name}:enter")
        out = call()
        if first:
            self._mark(f"{name}:exit")
        return out

    def initialOffset(self) -> dict[str, Any]:
        if self._calls == 0:
            with open(self.trace, "a") as f:
                for event, t in (("proc_start", process_start_time()), ("pyspark_imported", _T_IMPORT_BEGIN),
                                 ("regroup_imported", _T_IMPORT_END)):
                    f.write(json.dumps({"event": event, "t": t, "pid": os.getpid()}) + "\n")
        return self._traced("initialOffset", super().initialOffset)  # type: ignore[no-any-return]

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, Any]:
        base = super().latestOffset
        return self._traced("latestOffset", lambda: base(start, limit))  # type: ignore[no-any-return]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        base = super().partitions
        return self._traced("partitions", lambda: base(start, end))  # type: ignore[no-any-return]


class _Traced(RegroupDataSource):
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = {k: v for k, v in self.options.items() if k.lower() != "trace"}
        return TracedReader(parse_options(opts), self.options["trace"])


class TracedZip(_Traced):
    @classmethod
    def name(cls) -> str:
        return "regroup_zip"


class TracedFast(_Traced):
    @classmethod
    def name(cls) -> str:
        return "regroup_fast"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run_one(spark: Any, fmt: str, address: str, log_dir: Path, tmp: Path, tag: str) -> dict[str, float]:
    trace = tmp / f"trace-{tag}.jsonl"
    done: dict[str, float] = {}

    def on_batch(df: Any, batch_id: int) -> None:
        done.setdefault("batch_enter", time.time())
        df.count()
        done.setdefault("batch_exit", time.time())

    t0 = time.time()
    df = (spark.readStream.format(fmt).option("group", f"g-{tag}").option("topics", "t")
          .option("coordinator", address).option("log", str(log_dir))
          .option("maxRecordsPerTrigger", "100").option("trace", str(trace)).load())
    t1 = time.time()
    q = (df.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(tmp / "cp" / tag)).start())
    t2 = time.time()
    deadline = time.monotonic() + 120
    while "batch_exit" not in done:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{tag}: no batch in 120 s")
        time.sleep(0.005)
    while q.lastProgress is None and time.monotonic() < deadline:
        time.sleep(0.005)
    t5 = time.time()
    q.stop()
    t6 = time.time()
    marks: dict[str, float] = {}
    for line in trace.read_text().splitlines():
        ev = json.loads(line)
        marks.setdefault(ev["event"], ev["t"])
    return {
        "load()": t1 - t0,
        "start() call": t2 - t1,
        "start -> reader process exists": marks["proc_start"] - t1,
        "reader: interpreter + pyspark imports": marks["pyspark_imported"] - marks["proc_start"],
        "reader: regroup imports": marks["regroup_imported"] - marks["pyspark_imported"],
        "-> initialOffset": marks["initialOffset:enter"] - marks["regroup_imported"],
        "-> first latestOffset": marks["latestOffset:enter"] - marks["initialOffset:exit"],
        "first latestOffset (join, first plan)": marks["latestOffset:exit"] - marks["latestOffset:enter"],
        "-> partitions": marks["partitions:enter"] - marks["latestOffset:exit"],
        "partitions -> foreachBatch called": done["batch_enter"] - marks["partitions:exit"],
        "foreachBatch (count)": done["batch_exit"] - done["batch_enter"],
        "start() -> first batch done": done["batch_exit"] - t1,
        "start() -> first progress": t5 - t1,
        "stop()": t6 - t5,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=8, help="timed queries of each kind")
    args = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from regroup.log import open_log
    from regroup.log.base import LogRecord
    from regroup.spark.startup import register_source
    from tests.coordinator.server_proc import start_server

    # The classes by reference (this module by its name, not __main__), as the reader must import them.
    from tests.spark.startcost import TracedFast, TracedZip

    with tempfile.TemporaryDirectory(prefix="regroup-startcost-") as d:
        tmp = Path(d)
        log_dir = tmp / "log"
        log = open_log(f"embedded://{log_dir}?fsync=never")
        log.create_topic("t", 6)
        for p in range(6):
            log.produce("t", p, [LogRecord(b"k", b"v" * 16, 1_700_000_000_000 + i) for i in range(1000)])
        log.close()
        server = start_server(tmp / "coord", "--log", str(log_dir), "--heartbeat-interval-ms", "500")
        spark = (SparkSession.builder.master("local[2]").appName("regroup-startcost")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "1g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.dataSource.register(TracedZip)
            register_source(spark, TracedFast)
            kinds = {"zip": "regroup_zip", "fast": "regroup_fast"}
            for kind, fmt in kinds.items():  # warm-up: class loading, JIT, the worker daemons
                run_one(spark, fmt, server.address, log_dir, tmp, f"warm-{kind}")
            results: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
            for i in range(args.queries):
                for kind, fmt in kinds.items():
                    results[kind].append(run_one(spark, fmt, server.address, log_dir, tmp, f"{kind}-{i}"))
                    print(f"round {i} {kind}: start -> first batch "
                          f"{results[kind][-1]['start() -> first batch done'] * 1000:.0f} ms", flush=True)
            phases = list(results["zip"][0])
            print(f"\nmedians over {args.queries} queries each (ms); load avg {os.getloadavg()[0]:.1f}")
            print(f"{'phase':44} {'zip':>8} {'fast':>8}")
            for ph in phases:
                row = [median([r[ph] for r in results[k]]) * 1000 for k in kinds]
                print(f"{ph:44} {row[0]:8.0f} {row[1]:8.0f}")
        finally:
            spark.stop()
            server.proc.kill()
            server.proc.wait(timeout=10)


if __name__ == "__main__":
    main()
