"""`regroup demo` on PySpark: a streaming pipeline of N Spark processes that changes membership while it runs.

One call starts a coordinator and the log (the embedded log in a fresh data directory, or a Kafka
cluster), produces a steady keyed workload (events of ~1,000 customers with an amount each), and runs
the pipeline — per-customer event counts and amount totals per micro-batch, written as Parquet — as
N member processes, each a streaming query on ``spark.readStream.format("regroup")`` in a SparkSession
of its own (see `regroup.demo.spark_member`). While the workload runs it

* scales out by one (a new query joins the group),
* scales in by one (a query stops: it leaves the group),
* rolls the static member (stopped and restarted with the same instanceId and checkpoint: its
  partitions wait for it and the group epoch does not move),
* kills one member with kill -9 (its partitions move once the coordinator's session times out),

each once the group is stable again. At the end it waits until every partition's committed offset is
the log's end, then checks every record (produced, processed, lost — must be 0 — and duplicated, with
the hand-off that caused each duplicate), compares the output table's per-customer totals with the
producer's, measures each member's longest pause around each event (members not involved should not
pause: the protocol has no group-wide barrier) and writes a report (PNG + HTML).

Member processes that are about to join (the scaled-out member, the static member's replacement) are
started ahead and wait at a gate file with a warm JVM: the events then measure the protocol, not the
JVM's start-up (~10 s on two busy cores), and the static restart fits in the demo's short session
timeout (production's 45 s would fit a cold restart too).

One module per job (what it shares with the stateful demo is in `regroup.demo.spark_common`):

* `processes` — starting, stopping and killing the coordinator, the Spark members and the producer;
* `watch` — the group as the coordinator describes it, sampled while the demo runs;
* `scenario` — the script: start, produce, scale out, scale in, static roll, kill -9, drain;
* `analysis` — coverage, pauses, stalls, expected aggregates, and the typed :class:`DemoResult`;
* `live` — the live table and the results as text (the terminal and the report share them);
* `run` — one run from a fresh data directory to the printed results and the report.
"""

from __future__ import annotations

from regroup.demo.spark_demo.analysis import DemoResult
from regroup.demo.spark_demo.run import run_demo, run_spark_demo

__all__ = ["DemoResult", "run_demo", "run_spark_demo"]
