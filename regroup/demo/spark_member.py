"""One member of the PySpark demo: a streaming query on the ``regroup`` source, in a process of its own.

Usage: python -m regroup.demo.spark_member NAME COORDINATOR LOG OUT_DIR CHECKPOINT
       [--topic T] [--instance ID] [--max-records N] [--trigger-s S] [--progress FILE] [--wait-for FILE]
       [--warm-up] [--rebalance-timeout-ms MS] [--local-dir DIR]

The pipeline: per customer (the record key), the number of events and the sum of their amounts, per
micro-batch, written as Parquet to ``OUT_DIR/aggregates/member=NAME/batch=ID.parquet``. Then
``OUT_DIR/ranges/NAME-ID.json`` says which offsets of which partitions the batch read (so that the
demo can count every record); it is also the batch's "done" marker. The progress file (default
``OUT_DIR/progress/NAME.jsonl``) gets a line per batch and per lifecycle step, for live throughput
and pauses. Every file is written under a temporary name and renamed, so a process killed mid-write
leaves no half file, and a batch that Spark replays after a restart (same name, same checkpoint)
overwrites its own files: the output is idempotent per (member, batch).

``--wait-for FILE``: start Spark (``--warm-up``: and run the pipeline once on made-up rows), say
"ready", then wait for FILE before starting the query. The demo uses it to scale out and to roll the
static member with a warm JVM: the replacement warms up while the old process still runs, so the
restart fits within the demo's short session timeout.

SIGTERM (or SIGINT) stops the query at the next batch boundary (see `Stopper`) — the source leaves the
group, temporarily for a static member — then Spark, and exits 0.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from dataclasses import dataclass, field
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


def start_session(name: str, local_dir: Path | None = None) -> Any:
    """The member's SparkSession (`start_spark`), with the ``regroup`` source registered."""
    spark = start_spark(f"regroup-demo-{name}", local_dir)
    from regroup.spark import register

    register(spark)
    return spark


def per_partition_and_customer(df: Any) -> Any:
    """The pipeline's one Spark job per batch: per partition and customer, the events, their amount,
    and the first and last offset. Customers are keys, so each lives in one partition: summing the
    rows per customer gives the per-customer aggregates, per partition the offset range read."""
    from pyspark.sql import functions as F

    v = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    return (df.select("partition", "offset", v.alias("v"))
            .groupBy("partition", F.col("v.customer").alias("customer"))
            .agg(F.count(F.lit(1)).alias("events"), F.sum("v.amount").alias("amount"),
                 F.min("offset").alias("first"), F.max("offset").alias("last")))


def warm_up(spark: Any) -> None:
    """Run the pipeline's job once on a few made-up rows, and load the source's read path into a
    Python worker, so that a member released from its gate does not spend its first batch compiling
    and importing (what the demo's events should not measure)."""
    per_partition_and_customer(made_up_events(spark, partitions=2, offsets=3)).collect()


def summarise(rows: list[Any]) -> tuple[dict[str, list[int]], list[dict[str, int]]]:
    """Per-customer [events, amount] and per-partition offset ranges from the job's rows."""
    totals: dict[str, list[int]] = {}
    ranges: dict[int, dict[str, int]] = {}
    for r in rows:  # pyspark Rows
        acc = totals.setdefault(r["customer"], [0, 0])
        acc[0] += r["events"]
        acc[1] += r["amount"]
        rg = ranges.setdefault(r["partition"], {"partition": r["partition"], "first": r["first"],
                                                "last": r["last"], "count": 0})
        rg["first"], rg["last"] = min(rg["first"], r["first"]), max(rg["last"], r["last"])
        rg["count"] += r["events"]
    return totals, [ranges[p] for p in sorted(ranges)]


class StopAtBoundary(Exception):
    """Ends the query at the start of a batch once a stop was asked (see `Stopper`)."""


@dataclass
class Stopper:
    """Stops the query at a batch boundary, so that its last batch is committed to the group.

    The source commits a finished batch's offsets when Spark plans the next one, and query.stop()
    alone may come in between: the next owner of its partitions would then read that batch again.
    Once a stop is asked, the next batch — planned, so everything before it is committed — raises
    instead of running; it is neither processed nor marked done, so a restart replays it. With no new
    data there is no next batch, but Spark still asks the source for offsets at every trigger, which
    commits: one trigger interval after the last batch, stopping is safe too.
    """

    trigger_s: float
    requested: bool = False
    reached: bool = False
    last_batch_end: float = field(default_factory=time.time)

    def check(self, batch_id: int) -> None:
        if self.requested:
            self.reached = True
            raise StopAtBoundary(f"stopping before batch {batch_id}, at a boundary")

    def batch_done(self) -> None:
        self.last_batch_end = time.time()

    def safe_to_stop(self, query: Any) -> bool:
        if self.reached or not query.isActive:
            return True
        idle = not query.status.get("isTriggerActive", True)
        return idle and time.time() - self.last_batch_end > 1.5 * self.trigger_s + 0.5


def make_batch_writer(name: str, out: Path, progress: Progress, stopper: Stopper) -> Any:
    """The foreachBatch function: the aggregates, then the ranges (the batch's "done" marker), then a
    progress line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    agg_dir = out / "aggregates" / f"member={name}"
    ranges_dir = out / "ranges"
    agg_dir.mkdir(parents=True, exist_ok=True)
    ranges_dir.mkdir(parents=True, exist_ok=True)

    def write_batch(df: Any, batch_id: int) -> None:
        stopper.check(batch_id)
        t0 = time.time()
        totals, ranges = summarise(per_partition_and_customer(df).collect())
        customers = sorted(totals)
        table = pa.table({"customer": pa.array(customers, pa.string()),
                          "events": pa.array([totals[c][0] for c in customers], pa.int64()),
                          "amount": pa.array([totals[c][1] for c in customers], pa.int64())})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        write_atomic(agg_dir / f"batch={batch_id}.parquet", sink.getvalue().to_pybytes())
        write_atomic(ranges_dir / f"{name}-{batch_id}.json",
                     json.dumps({"member": name, "batch": batch_id, "t": round(time.time(), 3),
                                 "ranges": ranges}).encode())
        progress.write("batch", batch=batch_id, rows=sum(r["count"] for r in ranges),
                       partitions=[r["partition"] for r in ranges], ms=round((time.time() - t0) * 1000))
        stopper.batch_done()

    return write_batch


def _await(query: Any, timeout: float) -> None:
    # A query that ended with an error (StopAtBoundary included) raises here; exception() says which.
    with contextlib.suppress(Exception):
        query.awaitTermination(timeout)


def main(argv: list[str] | None = None) -> int:
    p = member_parser(__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--max-records", type=int, default=2_000, help="maxRecordsPerTrigger")
    p.add_argument("--trigger-s", type=float, default=1.0, help="processingTime trigger interval")
    p.add_argument("--rebalance-timeout-ms", type=int, default=None, help="the source's rebalanceTimeoutMs")
    args = p.parse_args(argv)

    stopper = Stopper(args.trigger_s)

    def on_term(*_: Any) -> None:
        stopper.requested = True

    # A flag only: the main loop stops the query from the main thread, outside any Py4J call.
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    progress = Progress.start(args)
    spark = start_session(args.name, args.local_dir)
    if args.warm_up:
        warm_up(spark)
    reader = (spark.readStream.format("regroup").option("group", GROUP).option("topics", args.topic)
              .option("coordinator", args.coordinator).option("log", args.log)
              .option("maxRecordsPerTrigger", str(args.max_records)))
    if args.instance:
        reader = reader.option("instanceId", args.instance)
    if args.rebalance_timeout_ms:
        reader = reader.option("rebalanceTimeoutMs", str(args.rebalance_timeout_ms))
    events = reader.load()  # checks the options and asks the source for its schema; joins nothing yet
    status = 0
    if wait_at_gate(progress, args.wait_for, lambda: stopper.requested):
        query = (events.writeStream.queryName(f"demo-{args.name}")
                 .foreachBatch(make_batch_writer(args.name, args.out, progress, stopper))
                 .option("checkpointLocation", str(args.checkpoint))
                 .trigger(processingTime=f"{int(args.trigger_s * 1000)} milliseconds")
                 .start())
        progress.write("query-started")
        stopper.batch_done()  # nothing to commit before the first batch
        while not stopper.requested and query.isActive:
            _await(query, 0.2)
        deadline = time.time() + 4 * args.trigger_s + 30  # a batch still running may take a while
        while stopper.requested and not stopper.safe_to_stop(query) and time.time() < deadline:
            _await(query, 0.1)
        if not stopper.requested and query.exception() is not None:
            progress.write("query-failed", error=str(query.exception())[:2000])
            status = 1
        query.stop()  # the source's reader process leaves the group (if the query still runs)
    progress.write("stopped", at_boundary=stopper.reached)
    spark.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
