"""One member of the stateful demo: a Spark application that is one member of a *streams group*.

Usage: python -m regroup.demo.stateful_member NAME COORDINATOR LOG OUT_DIR STATE_ROOT
       [--topic T] [--instance ID] [--progress FILE] [--wait-for FILE] [--warm-up]
       [--trigger-ms MS] [--session-timeout-ms MS] [--heartbeat-interval-ms MS]
       [--max-records N] [--local-dir DIR]

The pipeline (`build`): per customer and 10-second event-time window, the number of events and the
sum of their amounts, with a watermark — Spark keeps the open windows in its state store (RocksDB,
changelog checkpointing). It runs in task mode (`regroup.spark.streams`): one streaming query per
task this member holds, whose checkpoint under STATE_ROOT is the task's state and moves with the
task (copied for a warm-up or a standby, promoted in place, resumed in place by a static restart).

The sink (`OutputSink`): each batch of an active task is written to
``OUT_DIR/output/<task>/<batch key>.json`` with the member's name and the rows (the key is the task
and the offsets the batch covers, so a batch run again — after a kill -9 — overwrites its own file:
the output is idempotent), then a
``batch`` line goes to the progress file with the key, the offsets and the time the output was
written. The progress file (JSON lines) also gets ``ready``, ``joined`` (with the process id the
coordinator knows this member by), ``tasks`` whenever the tasks held, their roles or how they
started change, ``warning`` for each warning the pipeline logs, and ``stopped``.

``--wait-for FILE``: start Spark (``--warm-up``: and run the pipeline once as a streaming query on a
few made-up rows, so that the JIT, RocksDB's native library and the Python workers are warm), say
``ready``, then wait for FILE before joining the group. The demo uses it so that its events measure
the protocol, not a JVM's start-up.

With ``REGROUP_DEMO_PROGRESS`` set in its environment, a member logs every micro-batch's timings
(Spark's progress events) to its log, for diagnosis.

SIGTERM (or SIGINT) leaves the group cleanly — every active finishes its batch and commits, a static
member leaves temporarily — then stops Spark and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from regroup.demo.common import GROUP
from regroup.demo.spark_common.member import (
    VALUE_SCHEMA,
    Progress,
    made_up_events,
    member_parser,
    start_spark,
    wait_at_gate,
    write_atomic,
)

#: The streams group of the stateful demo (the stateless demo's consumer group is `GROUP`).
STREAMS_GROUP = f"{GROUP}-stateful"
#: The one subtopology: every partition of the topic is one task, ``s_<partition>``.
SUBTOPOLOGY = "s"
#: Event-time windows and the watermark's delay (records carry their produce time as event time:
#: in order within a partition, so none is ever late).
WINDOW_S = 10
WATERMARK_DELAY_S = 5
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def key_file(key: str) -> str:
    """A batch key as a file name (``s_3:events/3@120-180`` -> ``s_3~events~3@120-180.json``)."""
    return key.replace("/", "~").replace(":", "~") + ".json"


class WarningsToProgress(logging.Handler):
    """Forwards the pipeline's warnings (a copy's query failed, a commit refused...) to the progress
    file, first line only: the demo reports them."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a warning must never break the member
            self.progress.write("warning", message=record.getMessage().splitlines()[0][:300])


#: The stateful settings on top of `start_spark`'s small session.
SPARK_CONFIG = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # A batch without data only evicts expired windows: with update output nothing to emit.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


def start_session(name: str, local_dir: Path | None = None) -> Any:
    """The member's SparkSession (`start_spark`) with the RocksDB state store."""
    spark = start_spark(f"regroup-stateful-demo-{name}", local_dir, SPARK_CONFIG)
    from regroup.spark.startup import BOOT_DIR

    # The task queries' Python processes (one per query start) import the installed, compiled
    # pyspark rather than Spark's zip: see `regroup.spark.startup` (fast start).
    spark.sparkContext.environment["PYTHONPATH"] = BOOT_DIR
    return spark


def build(df: Any, task: Any = None) -> Any:
    """The pipeline of one task: per 10-second window and customer, events and their amount."""
    from pyspark.sql import functions as F

    v = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    return (df.select(v.alias("v"), "timestamp")
            .withWatermark("timestamp", f"{WATERMARK_DELAY_S} seconds")
            .groupBy(F.window("timestamp", f"{WINDOW_S} seconds").alias("w"),
                     F.col("v.customer").alias("customer"))
            .agg(F.count(F.lit(1)).alias("events"), F.sum("v.amount").alias("amount"))
            .select(F.col("w.start").cast("long").alias("window"), "customer", "events", "amount"))


class OutputSink:
    """The idempotent sink: one file per batch key, then a ``batch`` progress line."""

    def __init__(self, out: Path, progress: Progress, member: str) -> None:
        self.out, self.progress, self.member = out / "output", progress, member

    def __call__(self, df: Any, batch: Any) -> None:
        rows = [[r["window"], r["customer"], r["events"], r["amount"]] for r in df.collect()]
        start = {s.partition: o for s, o in batch.start.items()}
        end = {s.partition: o for s, o in batch.end.items()}
        directory = self.out / str(batch.task)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / key_file(batch.key),
                     json.dumps({"key": batch.key, "task": str(batch.task), "member": self.member,
                                 "start": start, "end": end, "rows": rows}).encode())
        self.progress.write("batch", task=str(batch.task), key=batch.key, batch=batch.batch_id,
                            epoch=batch.epoch, start=start, end=end, rows=len(rows))


def warm_up(spark: Any, directory: Path) -> None:
    """Run the pipeline once as a streaming query on a few made-up rows (file source, RocksDB state,
    foreachBatch): the JIT compiles the stateful operators, RocksDB's library loads, and a Python
    worker that has loaded the task source's read path waits for reuse — what a member's first
    task query would otherwise pay after an event."""
    from datetime import UTC, datetime

    from regroup.spark.read import SPARK_SCHEMA_DDL

    src, checkpoint = directory / "in", directory / "checkpoint"
    now = datetime.now(tz=UTC).replace(tzinfo=None)
    made_up_events(spark, partitions=1, offsets=5, timestamp=now).write.mode("overwrite").parquet(str(src))
    stream = spark.readStream.schema(SPARK_SCHEMA_DDL).parquet(str(src))
    query = (build(stream).writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: df.collect())
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    query.stop()


def _log_progress(spark: Any) -> None:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            logging.info("query %s started", event.name)

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            logging.info("query %s batch %s rows %s durations %s", p.name, p.batchId, p.numInputRows,
                         json.dumps(p.durationMs))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Listener())


def main(argv: list[str] | None = None) -> int:
    p = member_parser(__doc__.splitlines()[0])
    p.add_argument("state", type=Path, help="the state root shared by every member")
    p.add_argument("--trigger-ms", type=int, default=1_000)
    p.add_argument("--session-timeout-ms", type=int, default=6_000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    p.add_argument("--max-records", type=int, default=None, help="maxRecordsPerTrigger per task")
    args = p.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    progress = Progress.start(args)
    logging.getLogger("regroup.spark.tasks").addHandler(WarningsToProgress(progress))
    spark = start_session(args.name, args.local_dir)
    from regroup.spark.tasks.source import TaskDataSource

    # The pipeline registers its source when it starts; the first registration in a session costs
    # seconds (a Python process reads the class), which would delay the join — a static member's
    # restart must fit in the session timeout. Registered here, before the gate, it costs nothing then.
    spark.dataSource.register(TaskDataSource)
    if os.environ.get("REGROUP_DEMO_PROGRESS"):  # every query's micro-batch timings, for diagnosis
        _log_progress(spark)
    if args.warm_up:
        scratch = Path(tempfile.mkdtemp(prefix="warm-up-", dir=args.local_dir))
        try:
            warm_up(spark, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    status = 0
    if wait_at_gate(progress, args.wait_for, stop.is_set):
        status = _run(spark, args, progress, stop)
    progress.write("stopped")
    spark.stop()
    return status


def _run(spark: Any, args: argparse.Namespace, progress: Progress, stop: threading.Event) -> int:
    from regroup.spark import streams

    pipeline = streams(spark, group=STREAMS_GROUP, topology={SUBTOPOLOGY: [args.topic]}, build=build,
                       sink=OutputSink(args.out, progress, args.name), output_mode="update",
                       coordinator=args.coordinator, log=args.log, state=str(args.state),
                       instance_id=args.instance, trigger_ms=args.trigger_ms,
                       session_timeout_ms=args.session_timeout_ms,
                       heartbeat_interval_ms=args.heartbeat_interval_ms,
                       max_records_per_trigger=args.max_records)
    pipeline.start()
    progress.write("joined", process_id=pipeline.process_id, member_id=pipeline.member_id)
    last: dict[str, Any] | None = None
    status = 0
    while not stop.is_set():
        now = {"tasks": {str(t): r for t, r in sorted(pipeline.tasks.items())},
               "starts": dict(sorted(pipeline.starts.items()))}
        if now != last:
            progress.write("tasks", **now)
            last = now
        if pipeline.error is not None:
            progress.write("failed", error=str(pipeline.error)[:2000])
            status = 1
            break
        stop.wait(0.1)
    progress.write("leaving")
    pipeline.stop()
    progress.write("left", error=str(pipeline.error or "")[:2000] or None)
    return status


if __name__ == "__main__":
    sys.exit(main())
