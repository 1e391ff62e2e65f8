"""One member process of `regroup bench spark-stateful`: a Spark application (its own JVM) that is
one member of a streams group through `regroup.spark.streams`, running a per-key aggregate whose
state per task grows to the size the bench asks for.

    python -m regroup.bench.spark_stateful_member NAME COORDINATOR LOG STATE OUT
        [--wait-for FILE] [--cores N] [--memory 1g] [--trigger-ms MS] [--batch-records N]
        [--session-timeout-ms MS] [--heartbeat-interval-ms MS]

Rules of this module:

1. Input records are ``key -> payload`` with the produce time as the record's timestamp (0 for the
   bench's pre-load). The pipeline (`build`) is ``groupBy(key).agg(count, max(produced at),
   max(payload))``, projected to ``key, count, last, bytes``: the state keeps one row per key whose
   aggregation buffer holds the payload (``bytes`` refers to it, so Catalyst cannot prune it away),
   so N distinct keys of ``value_bytes`` random (incompressible) payload make about N x value_bytes
   of state per task — in Spark's RocksDB state store with changelog checkpointing, the
   recommended set-up (as in tests/spark/task_member.py).
2. The sink (`FileSink`) writes each batch's rows (``key, count``) to an Arrow IPC file of its own
   in OUT and then appends one JSON line to ``OUT/batches-NAME.jsonl``: ``t`` (wall-clock seconds
   once the rows are written: the batch's *processed at*), ``task``, the batch's idempotency
   ``key``, ``rows``, ``file``. A row ``(key, count)`` says the key's first ``count`` records are
   processed. A batch run again (after a kill -9) writes a second file: every run is kept.
3. ``OUT/events-NAME.jsonl`` gets a line whenever the member's tasks or roles change (polled every
   50 ms: ``{"t", "kind": "roles", "tasks": {TASK: ROLE}, "starts": {...}}``) and one per message of
   the ``regroup.spark.tasks`` logger (``{"t", "kind": "log", "msg"}``: copies, promotions, query
   starts and stops); one ``{"t", "kind": "progress", "task", "role", "at"}`` whenever a task's
   query completed a batch (``at``: the end offset it reached, summed over the task's partitions);
   and one ``{"t", "kind": "spark", "query", "batch", "rows", "ms", "state"}`` per Spark progress
   event of a task query (``ms``: Spark's ``durationMs``; ``state``: the state operator's rows,
   memory and RocksDB metrics — where a batch's time went, e.g. loading the state store).
   ``OUT/status-NAME.json`` holds the process id. The bench reads them after the fact; nothing here
   changes what the pipeline does.
4. It starts Spark, then runs the pipeline once as a streaming query on a few made-up rows (file
   source, RocksDB state store, ``foreachBatch``), through a Python worker that has imported the
   task source's read path: the first real batch pays neither for code generation, nor for loading
   RocksDB's library, nor for starting Spark's Python worker daemon — one-off costs of a new
   application, not of a task's state. It prints ``ready``, waits for ``--wait-for FILE`` if given
   (the bench's scale-out starts the member's JVM ahead and times the join only), then joins.
   SIGTERM leaves cleanly (exit 0); SIGKILL of its process group is the bench's crash.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

GROUP = "spark-stateful"
SUBTOPOLOGY = "agg"
SOURCE = "input"
TOPOLOGY = {SUBTOPOLOGY: [SOURCE]}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: The serial collector: three JVMs share two cores, and these heaps are small.
JAVA_OPTIONS = "-XX:+UseSerialGC"


def build(df: Any, task: Any) -> Any:
    """Rule 1: the user's pipeline for one task's records."""
    from pyspark.sql import functions as F

    produced = F.unix_micros("timestamp") / 1e6
    return (df.select(F.col("key").cast("string").alias("key"), F.col("value").alias("payload"),
                      produced.alias("produced"))
            .groupBy("key")
            .agg(F.count(F.lit(1)).alias("count"), F.max("produced").alias("last"),
                 F.max("payload").alias("payload"))
            .select("key", "count", "last", F.length("payload").alias("bytes")))


class Events:
    """Rule 3's file: one ``write`` of a whole line per event, from any thread."""

    def __init__(self, path: Path) -> None:
        self._f: TextIO = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
        self._lock = threading.Lock()

    def write(self, **fields: Any) -> None:
        line = json.dumps({"t": round(time.time(), 4), **fields}) + "\n"
        with self._lock:
            self._f.write(line)

    def close(self) -> None:
        with self._lock:
            self._f.close()


class _LogToEvents(logging.Handler):
    def __init__(self, events: Events) -> None:
        super().__init__(logging.INFO)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.events.write(kind="log", msg=record.getMessage())
        except Exception:  # never let the bench's bookkeeping break the pipeline
            self.handleError(record)


class FileSink:
    """Rule 2 (called on Spark's callback threads, one per query: serialised by a lock)."""

    def __init__(self, name: str, out: Path) -> None:
        self.name, self.out = name, out
        self._lines: TextIO = open(out / f"batches-{name}.jsonl", "a", buffering=1)  # noqa: SIM115
        self._lock = threading.Lock()
        self._seq = 0

    def __call__(self, df: Any, batch: Any) -> None:
        import pyarrow as pa

        table = df.select("key", "count").toArrow()
        with self._lock:
            self._seq += 1
            name = f"{self.name}-{self._seq:07d}.arrow"
            tmp = self.out / f".{name}.tmp"
            with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
                writer.write_table(table)
            os.replace(tmp, self.out / name)
            self._lines.write(json.dumps({"t": round(time.time(), 4), "task": str(batch.task),
                                          "key": batch.key, "batch": batch.batch_id, "epoch": batch.epoch,
                                          "rows": table.num_rows, "file": name}) + "\n")

    def close(self) -> None:
        with self._lock:
            self._lines.close()


def start_spark(name: str, cores: int, memory: str, scratch: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    scratch.mkdir(parents=True, exist_ok=True)
    spark = (SparkSession.builder.master(f"local[{cores}]").appName(f"spark-stateful-{name}")
             .config("spark.driver.memory", memory)
             .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)
             .config("spark.local.dir", str(scratch))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _import_read_path(batches: Iterator[Any]) -> Iterator[Any]:
    import regroup.spark.read  # noqa: F401 - loaded into the Python worker that Spark will reuse

    yield from batches


def warm_up(spark: Any, scratch: Path) -> None:
    """Rule 4: the pipeline once, as a streaming query (RocksDB state, ``foreachBatch``) on a few
    made-up rows that pass through a Python worker (started here, with the source's read path
    imported, rather than in the first batch of a task)."""
    import datetime

    from regroup.spark.read import SPARK_SCHEMA_DDL

    src, checkpoint = scratch / "warm-up-in", scratch / "warm-up-checkpoint"
    at = datetime.datetime(2024, 1, 1)
    rows: list[tuple[Any, ...]] = [("t", 0, o, b"k%d" % o, b"v" * 8, at, []) for o in range(4)]
    made = spark.createDataFrame(rows, SPARK_SCHEMA_DDL).mapInArrow(_import_read_path, SPARK_SCHEMA_DDL)
    made.write.mode("overwrite").parquet(str(src))
    stream = spark.readStream.schema(SPARK_SCHEMA_DDL).parquet(str(src))
    query = (build(stream, None).writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: df.select("key", "count").toArrow())
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(300)
    finally:
        query.stop()


def listen(spark: Any, events: Events) -> None:
    """Rule 3's ``spark`` events: each task query's progress (`regroup.spark.tasks` names its
    queries ``GROUP.TASK.DIRECTORY``)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            try:
                p = json.loads(event.progress.json)
                if not str(p.get("name") or "").startswith(f"{GROUP}."):
                    return
                state = [{"rows": o.get("numRowsTotal"), "memory": o.get("memoryUsedBytes"),
                          **{k: v for k, v in (o.get("customMetrics") or {}).items()
                             if k.startswith("rocksdb") and v}}
                         for o in p.get("stateOperators") or []]
                events.write(kind="spark", query=p["name"], batch=p.get("batchId"),
                             rows=p.get("numInputRows"), ms=p.get("durationMs") or {}, state=state)
            except Exception:  # never let the bench's bookkeeping break the pipeline
                logging.getLogger(__name__).exception("progress event")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Listener())


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m regroup.bench.spark_stateful_member")
    p.add_argument("name")
    p.add_argument("coordinator")
    p.add_argument("log")
    p.add_argument("state")
    p.add_argument("out")
    p.add_argument("--wait-for", default=None)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="1g")
    p.add_argument("--trigger-ms", type=int, default=500)
    p.add_argument("--batch-records", type=int, default=50_000)
    p.add_argument("--session-timeout-ms", type=int, default=3_000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    events = Events(out / f"events-{args.name}.jsonl")
    logging.getLogger("regroup.spark.tasks").addHandler(_LogToEvents(events))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    scratch = Path(args.state).parent / f"scratch-{args.name}"
    spark = start_spark(args.name, args.cores, args.memory, scratch)
    warm_up(spark, scratch)
    listen(spark, events)
    from regroup.spark import streams

    sink = FileSink(args.name, out)
    print("ready", flush=True)
    if args.wait_for:
        while not os.path.exists(args.wait_for):
            if stop.wait(0.01):  # told to stop before it was let in: it never joins
                spark.stop()
                sys.exit(0)
    pipeline = streams(spark, group=GROUP, topology=TOPOLOGY, build=build, sink=sink, output_mode="update",
                       coordinator=args.coordinator, log=args.log, state=args.state,
                       trigger_ms=args.trigger_ms, session_timeout_ms=args.session_timeout_ms,
                       heartbeat_interval_ms=args.heartbeat_interval_ms,
                       max_records_per_trigger=args.batch_records)
    status = out / f"status-{args.name}.json"
    tmp = status.with_name(f".{status.name}.tmp")
    tmp.write_text(json.dumps({"process_id": pipeline.process_id, "pid": os.getpid()}))
    os.replace(tmp, status)
    events.write(kind="joining")
    pipeline.start()
    last: dict[str, Any] | None = None
    reached: dict[str, int] = {}
    while not stop.is_set():
        held = sorted(pipeline.tasks.items())
        now = {"tasks": {str(t): r for t, r in held}, "starts": dict(pipeline.starts)}
        if now != last:
            events.write(kind="roles", **now)
            last = now
        for t, role in held:
            ends = pipeline.task_ends(t)
            at = sum(ends.values()) if ends else 0
            if reached.get(str(t)) != at:
                reached[str(t)] = at
                events.write(kind="progress", task=str(t), role=role, at=at)
        if pipeline.error is not None:
            events.write(kind="error", msg=str(pipeline.error))
            print(f"the pipeline stopped on an error: {pipeline.error}", file=sys.stderr, flush=True)
            break
        stop.wait(0.05)
    pipeline.stop()
    events.write(kind="left")
    spark.stop()
    sink.close()
    events.close()
    sys.exit(0 if pipeline.error is None else 1)


if __name__ == "__main__":
    main()
