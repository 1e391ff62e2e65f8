"""`regroup bench spark`: records/s of one streaming query on the regroup source, against Parquet.

Setup (not timed): an embedded log (``fsync=never``) with one topic of ``partitions`` partitions
holding ``records`` records in total — 16-byte keys, ``value_bytes``-byte values that differ from
record to record (windows of a random buffer, so Parquet can neither dictionary-encode nor compress
them away), consecutive timestamps, no headers — and the very same rows written to Parquet, one file
per log partition, by reading the log back with ``read_arrow`` (so both sides hold identical rows with
the source's seven columns and types; Parquet with pyarrow's defaults: snappy, dictionary encoding).
Then a coordinator process (``--log`` on that log) and one ``local[2]`` SparkSession.

Measured, interleaved (regroup, parquet, regroup, parquet, ...) so that load from other processes
hits both alike, after one untimed warm-up query of each (the first queries of a session pay for the
JVM's class loading and JIT and for starting Spark's Python worker daemons); figures are medians:

* **regroup**: ``spark.readStream.format("regroup")`` over the topic, a fresh group and checkpoint
  each run, no ``maxRecordsPerTrigger`` by default (one micro-batch reads everything, like the
  Parquet query below);
* **parquet**: ``spark.readStream.schema(<the source's schema>).parquet(dir)`` — Spark's file stream
  source with ``maxFilesPerTrigger`` unset, so its first micro-batch reads every file.

Both queries write to the same sink with the default trigger. Why a streaming read of Parquet rather
than a batch read: it pays what the regroup query pays — building the DataFrame, query start, a
checkpoint (offset and commit logs), micro-batch planning, the sink — so the ratio isolates the
source. Why the ``noop`` sink by default: it consumes every column of every row at negligible cost.
A sink that touches only some columns (say ``sum(length(value))``) would let the Parquet reader skip
the others (column pruning) while a Python data source always produces all of them — a comparison
of different work. ``sink="agg"`` instead runs one aggregation over every column per micro-batch
(count, key and value bytes, sum of offsets, max timestamp, header count) and checks that both
sources return the same totals; it costs more per row, the same on both sides.

Timed: from building the streaming DataFrame (``load()``) until the query's progress reports every
record processed (polled every few ms), so the group join (the first micro-batch waits for the
member's assignment) and the start of the source's driver-side Python process are included; the
SparkSession start is not. Also reported per run: the micro-batches' ``triggerExecution`` time (the
execution proper, without the query start), from which the *execution* rate, and — on Linux — the
CPU seconds of the JVM, of Spark's Python processes and of the bench's own process, a figure that
other processes' load barely moves (records per CPU-second is the one to compare across runs on a
busy machine).

Measured (defaults: 4 M records of 116 bytes, 8 partitions; this project's 2-CPU VM with other Spark
jobs running, load average 5-7, so wall-clock figures vary by up to 2x between runs): regroup
≈ 0.3-0.65 M records/s per query from start, ≈ 0.4-1.05 M/s during the micro-batch; Parquet
≈ 0.55-1.55 M/s; ratio 0.42-0.55. CPU per 4 M records, steadier: regroup ≈ 9.5-12 CPU-s (JVM 5-7,
Python 4-5), Parquet ≈ 4.6-5.4. Where the regroup query's time goes: ≈ 2 CPU-s (1-2 s of wall time)
start the source's driver-side Python process, which imports pyspark from Spark's ``pyspark.zip``
(pure source, compiled at every start; ≈ 1 CPU-s less when it imports the installed package);
≈ 1 CPU-s is the log read itself (``read_arrow`` + cast, ≈ 3.8 M records/CPU-s); the rest is Spark
moving Arrow batches from the Python workers into the JVM and turning them into rows (Arrow Java's
bounds checks alone ≈ 1 CPU-s: ``arrow_unchecked``).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog

DEFAULT_RECORDS = 4_000_000
DEFAULT_PARTITIONS = 8
DEFAULT_VALUE_BYTES = 100
DEFAULT_RUNS = 3
#: The issue's goal: at least this many records/s per query on 2 cores.
TARGET_RECORDS_PER_S = 1_000_000
TOPIC = "bench"
KEY_BYTES = 16
SINKS = ("noop", "agg")
SOURCES = ("regroup", "parquet")

#: Turn off Arrow Java's bounds and null checks on every value access. Measured on 4 M records: about
#: 15 % less JVM CPU for the regroup query (Spark reads a Python source's batches as Arrow vectors), no
#: change for Parquet (whose reader does not use Arrow).
ARROW_UNCHECKED_JAVA_OPTIONS = (
    "-Darrow.enable_unsafe_memory_access=true -Darrow.enable_null_check_for_get=false")

_PRODUCE_CHUNK = 4096
_READ_CHUNK = 65_536
_POLL_S = 0.01
_BASE_TS_MS = 1_700_000_000_000


@dataclass
class Run:
    """One timed query."""

    seconds: float
    records: int
    batches: int
    trigger_s: float  # sum of the micro-batches' triggerExecution
    cpu: dict[str, float] | None = None
    checksum: dict[str, Any] | None = None

    def figures(self) -> dict[str, Any]:
        cpu_s = sum(self.cpu.values()) if self.cpu is not None else None
        return {
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records / self.seconds),
            "start_s": round(self.seconds - self.trigger_s, 3),
            "execution_s": round(self.trigger_s, 3),
            "execution_records_per_s": round(self.records / self.trigger_s) if self.trigger_s > 0 else None,
            "batches": self.batches,
            "cpu_s": round(cpu_s, 2) if cpu_s is not None else None,
            "cpu": {k: round(v, 2) for k, v in self.cpu.items()} if self.cpu is not None else None,
            "records_per_cpu_s": round(self.records / cpu_s) if cpu_s else None,
        }


@dataclass
class _Sums:
    """The ``agg`` sink's per-micro-batch totals of one query."""

    parts: list[dict[str, Any]] = field(default_factory=list)

    def total(self) -> dict[str, Any] | None:
        parts = [p for p in self.parts if p["rows"]]
        if not parts:
            return None
        out: dict[str, Any] = {k: sum(p[k] for p in parts)
                               for k in ("rows", "key_bytes", "value_bytes", "offset_sum", "headers")}
        out["max_timestamp"] = max(p["max_timestamp"] for p in parts)
        return out


# ------------------------------------------------------------------------------------------ setup


def _values(count: int, value_bytes: int, seed: int, blob: bytes) -> list[bytes]:
    """``count`` distinct values: windows of a random buffer at pseudo-random starts."""
    span = len(blob) - value_bytes
    starts = [(seed + i) * 7919 % span for i in range(count)]
    return [blob[s : s + value_bytes] for s in starts]


def build_log(directory: str, records: int, partitions: int, value_bytes: int) -> None:
    """Create :data:`TOPIC` with ``partitions`` partitions and ``records`` records spread evenly."""
    blob = os.urandom(max(1 << 20, 4 * value_bytes))
    with EmbeddedLog(directory, fsync="never") as log:
        log.create_topic(TOPIC, partitions)
        n = 0
        for p in range(partitions):
            share = records // partitions + (1 if p < records % partitions else 0)
            done = 0
            while done < share:
                k = min(_PRODUCE_CHUNK, share - done)
                values = _values(k, value_bytes, n, blob)
                log.produce(TOPIC, p, [
                    LogRecord(b"key-%012d" % (n + i), values[i], _BASE_TS_MS + n + i) for i in range(k)])
                done += k
                n += k


def write_parquet(log_dir: str, parquet_dir: str) -> None:
    """The log's records as Parquet, one file per partition, with the regroup source's Spark schema."""
    import pyarrow.parquet as pq

    from regroup.spark.read import SPARK_ARROW_SCHEMA

    os.makedirs(parquet_dir, exist_ok=True)
    with EmbeddedLog(log_dir) as log:
        for p, end in sorted(log.end_offsets(TOPIC).items()):
            with pq.ParquetWriter(os.path.join(parquet_dir, f"part-{p:05d}.parquet"),
                                  SPARK_ARROW_SCHEMA) as writer:
                at = 0
                while at < end:
                    batch = log.read_arrow(TOPIC, p, at, min(_READ_CHUNK, end - at))
                    at += batch.num_rows
                    writer.write_batch(batch.cast(SPARK_ARROW_SCHEMA), row_group_size=1 << 20)


# ------------------------------------------------------------------------------------------ CPU time


def _cpu_snapshot(exclude: set[int]) -> dict[int, tuple[str, float]] | None:
    """CPU seconds (user + system) of every descendant of this process but ``exclude``, by pid, with
    a category: ``jvm``, ``python`` (Spark's Python workers and the source's driver-side process).
    None where /proc is not there (not Linux)."""
    if not os.path.isdir("/proc/self"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                exe = f.read().split(b"\0", 1)[0]
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        kind = "jvm" if exe.endswith(b"java") else "python"
        info[pid] = (kind, (int(fields[11]) + int(fields[12])) / tick)
    out: dict[int, tuple[str, float]] = {}
    stack = [p for p in children.get(os.getpid(), []) if p not in exclude]
    while stack:
        pid = stack.pop()
        if pid in info:
            out[pid] = info[pid]
        stack += [p for p in children.get(pid, []) if p not in exclude]
    me = os.times()
    out[os.getpid()] = ("bench", me.user + me.system)
    return out


def _cpu_used(before: dict[int, tuple[str, float]] | None,
              after: dict[int, tuple[str, float]] | None) -> dict[str, float] | None:
    """CPU seconds per category between two snapshots (processes that ended in between are missed)."""
    if before is None or after is None:
        return None
    used = {"jvm": 0.0, "python": 0.0, "bench": 0.0}
    for pid, (kind, cpu) in after.items():
        used[kind] += cpu - (before[pid][1] if pid in before else 0.0)
    return used


# ------------------------------------------------------------------------------------------ Spark


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """While the JVM starts, point file descriptor 1 at stderr so that the JVM (and every process it
    starts) inherits stderr as its stdout: nothing Spark prints can get into ``--json`` output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _spark_session(driver_memory: str, arrow_unchecked: bool) -> tuple[Any, bool]:
    """A ``local[2]`` session (and whether this call created it, so it should stop it). An active
    session is used as it is."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = (SparkSession.builder.master("local[2]").appName("regroup-bench-spark")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", driver_memory)
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.numRecentProgressUpdates", "1000"))
    if arrow_unchecked:
        builder = builder.config("spark.driver.extraJavaOptions", ARROW_UNCHECKED_JAVA_OPTIONS)
    with _stdout_to_stderr():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def _agg_sink(sums: _Sums) -> Callable[[Any, int], None]:
    from pyspark.sql import functions as F

    def each_batch(df: Any, batch_id: int) -> None:
        row = df.agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.length("key")).alias("key_bytes"),
            F.sum(F.length("value")).alias("value_bytes"),
            F.sum("offset").alias("offset_sum"),
            F.max("timestamp").alias("max_timestamp"),
            F.sum(F.size("headers")).alias("headers"),
        ).collect()[0].asDict()
        row["max_timestamp"] = str(row["max_timestamp"])
        sums.parts.append(row)

    return each_batch


def _timed_query(name: str, load: Callable[[], Any], sink: str, checkpoint: str, expected: int,
                 timeout_s: float, exclude_pids: set[int]) -> Run:
    """Build the streaming DataFrame (``load``), start its query writing to ``sink``, and wait until
    ``expected`` rows went through."""
    sums = _Sums()
    cpu0 = _cpu_snapshot(exclude_pids)
    t0 = time.perf_counter()
    writer = load().writeStream.option("checkpointLocation", checkpoint).queryName(
        f"bench_{name}_{os.path.basename(checkpoint)}".replace("-", "_"))
    writer = writer.foreachBatch(_agg_sink(sums)) if sink == "agg" else writer.format("noop")
    query = writer.start()
    seen: dict[int, Any] = {}
    try:
        while True:
            last = query.lastProgress
            if last is not None and last.batchId not in seen:
                if last.batchId - 1 in seen or last.batchId == 0:
                    seen[last.batchId] = last
                else:  # missed one between two polls
                    seen.update((p.batchId, p) for p in query.recentProgress)
            done = sum(p.numInputRows for p in seen.values())
            if done >= expected:
                seconds = time.perf_counter() - t0
                break
            if not query.isActive:
                raise RuntimeError(f"the {name} query stopped after {done:,} of {expected:,} records: "
                                   f"{query.exception()}")
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"the {name} query read {done:,} of {expected:,} records "
                                   f"in {timeout_s:.0f} s")
            time.sleep(_POLL_S)
        cpu = _cpu_used(cpu0, _cpu_snapshot(exclude_pids))
    finally:
        query.stop()
    batches = [p for p in seen.values() if p.numInputRows > 0]
    return Run(
        seconds=seconds,
        records=done,
        batches=len(batches),
        trigger_s=sum(p.durationMs.get("triggerExecution", 0) for p in batches) / 1000,
        cpu=cpu,
        checksum=sums.total() if sink == "agg" else None,
    )


# ------------------------------------------------------------------------------------------ bench


def run_spark_bench(
    records: int = DEFAULT_RECORDS,
    partitions: int = DEFAULT_PARTITIONS,
    value_bytes: int = DEFAULT_VALUE_BYTES,
    json_output: bool = False,
    *,
    runs: int = DEFAULT_RUNS,
    warmup: bool = True,
    directory: str | None = None,
    max_records_per_trigger: int | None = None,
    sink: str = "noop",
    arrow_unchecked: bool = False,
    driver_memory: str = "2g",
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Measure (see the module docstring), print a table or one JSON object, and return the figures.

    ``directory``: where the temporary data goes (default: the system's temporary directory).
    ``arrow_unchecked``: start the JVM with Arrow Java's bounds/null checks off
    (:data:`ARROW_UNCHECKED_JAVA_OPTIONS`; only when this call starts the SparkSession).
    """
    if records < 1 or partitions < 1 or value_bytes < 0 or runs < 1:
        raise ValueError("records, partitions and runs must be >= 1 and value_bytes >= 0")
    if sink not in SINKS:
        raise ValueError(f"sink must be one of {SINKS}, not {sink!r}")
    if max_records_per_trigger is not None and max_records_per_trigger < 1:
        raise ValueError("max_records_per_trigger must be >= 1")
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="regroup-bench-spark-", dir=directory) as tmp:
        out = _run(Path(tmp), records, partitions, value_bytes, runs, warmup, max_records_per_trigger,
                   sink, arrow_unchecked, driver_memory, timeout_s)
    if json_output:
        print(json.dumps(out))
    else:
        _print_table(out)
    return out


def _run(tmp: Path, records: int, partitions: int, value_bytes: int, runs: int, warmup: bool,
         max_records_per_trigger: int | None, sink: str, arrow_unchecked: bool, driver_memory: str,
         timeout_s: float) -> dict[str, Any]:
    from regroup.bench.procs import start_coordinator
    from regroup.spark import register
    from regroup.spark.read import SPARK_SCHEMA_DDL

    log_dir, parquet_dir = str(tmp / "log"), str(tmp / "parquet")
    t0 = time.perf_counter()
    build_log(log_dir, records, partitions, value_bytes)
    produce_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_parquet(log_dir, parquet_dir)
    parquet_write_s = time.perf_counter() - t0

    coordinator, address = start_coordinator(tmp / "coordinator", "--log", log_dir)
    spark = None
    created = False
    results: dict[str, list[Run]] = {s: [] for s in SOURCES}
    warm: dict[str, Run] = {}
    try:
        t0 = time.perf_counter()
        spark, created = _spark_session(driver_memory, arrow_unchecked)
        session_s = time.perf_counter() - t0
        register(spark)

        def regroup_df(group: str) -> Any:
            reader = (spark.readStream.format("regroup").option("group", group).option("topics", TOPIC)
                      .option("coordinator", address).option("log", log_dir))
            if max_records_per_trigger is not None:
                reader = reader.option("maxRecordsPerTrigger", str(max_records_per_trigger))
            return reader.load()

        def parquet_df() -> Any:
            return spark.readStream.schema(SPARK_SCHEMA_DDL).parquet(parquet_dir)

        def measure(label: str) -> dict[str, Run]:
            return {
                "regroup": _timed_query("regroup", lambda: regroup_df(f"bench-spark-{label}"), sink,
                                        str(tmp / f"checkpoint-regroup-{label}"), records, timeout_s,
                                        {coordinator.pid}),
                "parquet": _timed_query("parquet", parquet_df, sink, str(tmp / f"checkpoint-parquet-{label}"),
                                        records, timeout_s, {coordinator.pid}),
            }

        if warmup:
            warm = measure("warmup")
        for i in range(runs):
            for source, run in measure(str(i)).items():
                results[source].append(run)
    finally:
        if spark is not None and created:
            spark.stop()
        coordinator.kill()
        coordinator.wait()

    checksum = None
    if sink == "agg":
        sums = {json.dumps(r.checksum, sort_keys=True) for rs in results.values() for r in rs}
        if len(sums) != 1:
            raise RuntimeError(f"the regroup and Parquet queries read different data: {sorted(sums)}")
        checksum = results["regroup"][0].checksum

    def summary(rs: list[Run]) -> dict[str, Any]:
        figs = [r.figures() for r in rs]

        def median(key: str) -> Any:
            values = [f[key] for f in figs if f[key] is not None]
            return round(statistics.median(values), 3) if values else None

        return {
            "median_records_per_s": round(statistics.median(f["records_per_s"] for f in figs)),
            "median_seconds": median("seconds"),
            "median_start_s": median("start_s"),
            "median_execution_records_per_s": median("execution_records_per_s"),
            "median_cpu_s": median("cpu_s"),
            "median_records_per_cpu_s": median("records_per_cpu_s"),
            "runs": figs,
        }

    regroup, parquet = summary(results["regroup"]), summary(results["parquet"])
    ratio = regroup["median_records_per_s"] / parquet["median_records_per_s"]
    return {
        "records": records,
        "partitions": partitions,
        "value_bytes": value_bytes,
        "key_bytes": KEY_BYTES,
        "runs": runs,
        "sink": sink,
        "max_records_per_trigger": max_records_per_trigger,
        "arrow_unchecked": arrow_unchecked and created,
        "regroup": regroup,
        "parquet": parquet,
        "ratio": round(ratio, 3),
        "target_records_per_s": TARGET_RECORDS_PER_S,
        "target_met": regroup["median_records_per_s"] >= TARGET_RECORDS_PER_S,
        "checksum": checksum,
        "warmup": {s: r.figures() for s, r in warm.items()},
        "setup": {
            "produce_s": round(produce_s, 2),
            "parquet_write_s": round(parquet_write_s, 2),
            "session_start_s": round(session_s, 2),
            "log_bytes": sum(f.stat().st_size for f in Path(log_dir).rglob("log")),
            "parquet_bytes": sum(f.stat().st_size for f in Path(parquet_dir).iterdir()),
        },
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def _print_table(out: dict[str, Any]) -> None:
    table = Table(title=(f"One streaming query, local[2]: {out['records']:,} records "
                         f"({out['key_bytes']}-byte keys, {out['value_bytes']}-byte values) "
                         f"in {out['partitions']} partitions, {out['sink']} sink"))
    table.add_column("source")
    table.add_column("records/s", justify="right")
    table.add_column("s", justify="right")
    table.add_column("start s", justify="right")
    table.add_column("exec. rec/s", justify="right")
    table.add_column("CPU s", justify="right")

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:,}"

    for name in SOURCES:
        s = out[name]
        table.add_row(name, num(s["median_records_per_s"]), num(s["median_seconds"]),
                      num(s["median_start_s"]), num(s["median_execution_records_per_s"]),
                      num(s["median_cpu_s"]))
    c = Console()
    c.print(table)
    met = "met" if out["target_met"] else "NOT met"
    c.print(f"ratio regroup/parquet (records/s): {out['ratio']}; target "
            f"{out['target_records_per_s']:,} records/s per query: {met}")
    for name in SOURCES:
        c.print(f"{name} runs (s): " + ", ".join(str(r["seconds"]) for r in out[name]["runs"]))
    c.print(f"Medians of {out['runs']} interleaved runs each, after a warm-up query of each; timed from "
            f"load() (group join included) to the last record. 'start': time before the micro-batches "
            f"ran; 'exec. rec/s': records / micro-batch time; CPU: JVM + Spark's Python processes. "
            f"{out['cpu_count']} CPUs, load average {out['load_average_1m']} at the end.")
