"""A PySpark member of the chaos soak: a streaming query on the ``regroup`` source, in a process of its own.

Usage: python -m regroup.chaos.soak_spark_member COORDINATOR LOG GROUP TOPIC OUT CHECKPOINT
       [--instance ID] [--local-dir DIR] [--trigger-s S] [--max-records N]

Rules of this module:

1. OUT is this process's own file (one per incarnation), in the consumer member's format
   (`regroup.chaos.soak_member`, rule 1): each micro-batch is written in one write() as
   ``b <unix time> <batch id>`` and one ``<seq> <partition> <offset>`` line per record, then flushed;
   the source commits the batch when Spark plans the next one. A batch Spark replays after a restart
   from CHECKPOINT is written again, by the new incarnation, to its own file: it counts as processed
   twice, explained by the kill that made Spark replay it.
2. OUT.events gets ``<unix time> started <pid>``, ``query-started``, ``stopped``, ``failed <error>``.
   What the source does with the group (lost membership, refused commits) is logged by the source in
   the process Spark runs it in, to this process's stderr; the soak reads it there.
3. SIGTERM (or SIGINT) stops the query at a batch boundary (`regroup.demo.spark_member.Stopper`): the
   last batch is committed, the member leaves (temporarily, if static), Spark stops, exit 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import IO, Any

from regroup.demo.spark_member import Stopper, start_session

#: The source's rebalance timeout: longer than any micro-batch of a soak, even on a loaded machine.
REBALANCE_TIMEOUT_MS = 30_000


def batch_writer(out: IO[str], stopper: Stopper) -> Any:
    """The foreachBatch function (rule 1)."""
    from pyspark.sql import functions as F

    def write_batch(df: Any, batch_id: int) -> None:
        stopper.check(batch_id)
        seq = F.get_json_object(F.col("value").cast("string"), "$.seq").cast("long")
        rows = df.select("partition", "offset", seq.alias("seq")).collect()
        lines = [f"b {time.time():.3f} {batch_id}\n"]
        lines += [f"{-1 if r['seq'] is None else r['seq']} {r['partition']} {r['offset']}\n" for r in rows]
        out.write("".join(lines))
        out.flush()
        stopper.batch_done()

    return write_batch


def main(argv: list[str] | None = None) -> int:
    import os
    import signal

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("coordinator", "log", "group", "topic", "out"):
        p.add_argument(name)
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--instance")
    p.add_argument("--local-dir", type=Path, default=None)
    p.add_argument("--trigger-s", type=float, default=1.0)
    p.add_argument("--max-records", type=int, default=2_000)
    args = p.parse_args(argv)
    stopper = Stopper(args.trigger_s)

    def on_term(*_: Any) -> None:
        stopper.requested = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    events = open(args.out + ".events", "a", buffering=1)  # noqa: SIM115 - the process's lifetime

    def event(*fields: str) -> None:
        events.write(" ".join((f"{time.time():.3f}", *fields)) + "\n")

    event("started", str(os.getpid()))
    spark = start_session(f"soak-{Path(args.out).name}", args.local_dir)
    reader = (spark.readStream.format("regroup").option("group", args.group).option("topics", args.topic)
              .option("coordinator", args.coordinator).option("log", args.log)
              .option("maxRecordsPerTrigger", str(args.max_records))
              .option("rebalanceTimeoutMs", str(REBALANCE_TIMEOUT_MS)))
    if args.instance:
        reader = reader.option("instanceId", args.instance)
    status = 0
    with open(args.out, "a") as out:
        query = (reader.load().writeStream.queryName(f"soak-{Path(args.out).stem}")
                 .foreachBatch(batch_writer(out, stopper))
                 .option("checkpointLocation", str(args.checkpoint))
                 .trigger(processingTime=f"{int(args.trigger_s * 1000)} milliseconds")
                 .start())
        event("query-started")
        stopper.batch_done()
        while not stopper.requested and query.isActive:
            _await(query, 0.2)
        deadline = time.time() + 4 * args.trigger_s + 30
        while stopper.requested and not stopper.safe_to_stop(query) and time.time() < deadline:
            _await(query, 0.1)
        if not stopper.requested and query.exception() is not None:
            event("failed", str(query.exception()).replace("\n", " ")[:1000])
            status = 1
        query.stop()
    event("stopped")
    spark.stop()
    return status


def _await(query: Any, timeout: float) -> None:
    try:
        query.awaitTermination(timeout)
    except Exception:  # a query that ended with an error: query.exception() says which
        return


if __name__ == "__main__":
    sys.exit(main())
