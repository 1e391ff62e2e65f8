"""`regroup demo` (the default): a *stateful* PySpark pipeline whose tasks — and their state — move
between the members of a streams group while it runs.

One call starts a coordinator (one standby per task, warm-ups on, a short session timeout) and the
log (the embedded log in a fresh data directory, or a Kafka cluster), and runs the pipeline — per
customer and 10-second event-time window, the events and their amount, with a watermark, kept in
Spark's RocksDB state store with changelog checkpointing — as N Spark applications, each one member
of the streams group in task mode (`regroup.spark.streams`, see `regroup.demo.stateful_member`):
one streaming query per task it holds, active, standby or warm-up, whose checkpoint is the task's
state. Once the first members have spread the tasks it produces a steady keyed workload (events of
~1,000 customers, timestamped with their produce time), and, each once the group has settled again,

* scales out by one: the new member gets warm-up copies, which catch up and are promoted to actives;
* scales in by one: a member leaves cleanly, and its tasks go to the members holding their caught-up
  standbys (promoted in place);
* rolls the static member: stopped and restarted with the same instance id, it resumes its
  checkpoints in place and nothing moves;
* kills one member with kill -9: after the session timeout its tasks' standbys are promoted.

At the end it waits until every task has committed up to the log's end, checks the sink's output —
one file per batch key, so idempotent — against the same pipeline computed as a batch job over every
record in the log (lost must be 0; duplicates only from the kill -9), measures each task's
unavailability around each event, and writes a report (PNG + HTML) with the task ownership timeline
by role (active, standby, warm-up).

Members about to join (the scaled-out one, the static member's replacement) are started ahead and
wait at a gate file with a warm JVM, so that the events measure the protocol, not a JVM's start-up.

One module per job, as in `regroup.demo.spark_demo` (the stateless demo, ``regroup demo --stateless``);
what the two share is in `regroup.demo.spark_common`:

* `processes` — the coordinator, the Spark members, the producer;
* `watch` — the streams group as the coordinator describes it, sampled while the demo runs;
* `scenario` — the script: start, settle, produce, scale out, scale in, static roll, kill -9, drain;
* `analysis` — the output against the batch job, records, unavailability, the typed result;
* `live` — the live table and the results as text (the terminal and the report share them);
* `run` — one run from a fresh data directory to the printed results and the report.
"""

from __future__ import annotations

from regroup.demo.stateful_demo.analysis import StatefulResult
from regroup.demo.stateful_demo.run import run_demo, run_stateful_demo

__all__ = ["StatefulResult", "run_demo", "run_stateful_demo"]
