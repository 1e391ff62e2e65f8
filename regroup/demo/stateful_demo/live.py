"""What the stateful demo shows: the live table while it runs, and the results as rows of text.

Rules of this module:

1. Display only: nothing here decides or measures.
2. The result rows (`summary_rows`, `event_rows`, `EVENT_HEADER`, `REPORT_NOTES`) are the same for the
   terminal and for the HTML report, so the two never disagree.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

from regroup.demo.spark_common.live import live_frame, print_tables, record_rows, secs, shown, throughput
from regroup.demo.spark_common.scenario import EVENT_LABELS
from regroup.demo.stateful_demo.analysis import StatefulResult
from regroup.demo.stateful_demo.scenario import Event, StatefulDemo
from regroup.demo.stateful_demo.watch import ACTIVE, STANDBY, WARMUP

EVENT_HEADER = ("t (s)", "event", "member", "settled / all tasks producing after", "group epoch",
                "actives moved", "longest unavailability: its tasks / others (s)", "duplicates", "note")

REPORT_NOTES = (
    "The pipeline: per customer and 10-second event-time window, the events and their amount, with a "
    "watermark, in Spark's RocksDB state store (changelog checkpointing); one streaming query per task "
    "and copy, whose checkpoint is the task's state.",
    "An event's window runs from the event until the group has settled again (stable, no warm-up left, "
    "every task active once with its standby) and every task has produced output again, plus 2 s.",
    "Unavailability: the longest time a task produced no output while a record was waiting, over every "
    "interval between its outputs that overlaps the window. Its tasks: those that moved and those of "
    "the member concerned. A task's usual figure, outside events, is its typical wait (results).",
    "How tasks started: promoted (a warm-up or standby copy took over in place), resumed (its own "
    "checkpoint of record, in place), copied (the batch of record copied into a new copy), fresh.",
    "Duplicates: records written twice, only by a member killed with kill -9 (its last batches were "
    "written but never committed, and its successor ran them again with other boundaries).",
)


# --------------------------------------------------------------------------- while it runs
def _tasks(tasks: set[str]) -> str:
    return ",".join(t.rpartition("_")[2] for t in sorted(tasks, key=lambda t: int(t.rpartition("_")[2])))


def live_table(demo: StatefulDemo) -> Table:
    table = live_frame(demo, "stateful PySpark demo", ("member", "instance", "process", "active", "standby",
                                                       "warm-up", "tasks started", "outputs", "records/s",
                                                       "last output"),
                       right=("outputs", "records/s"))
    held = demo.watch.held(demo.members)
    now = time.time()
    for m in shown(demo.members, now):
        roles = held.get(m.name, {}) if m.in_group else {}
        recent, last = throughput([(b.t, b.records) for b in m.batches], now)
        table.add_row(m.label, m.instance or "-", f"{m.state} ({m.popen.pid})",
                      _tasks(roles.get(ACTIVE, set())) or "-", _tasks(roles.get(STANDBY, set())) or "-",
                      _tasks(roles.get(WARMUP, set())) or "-", starts_text(m.starts), str(len(m.batches)),
                      recent, last)
    d = demo.watch.description
    if d is not None:
        lag = demo.watch.samples[-1].lag if demo.watch.samples else None
        missing = demo.watch.copies_not_running(demo.members)
        table.caption = (f"group epoch {d.epoch} · target {d.target_epoch} · {d.state.value} · "
                         f"lag {lag if lag is not None else '-'}"
                         + "".join(f" · {m} does not run its copies of {_tasks(ts)}"
                                   for m, ts in sorted(missing.items()))
                         + "".join(f"\n{_event_line(e, demo.t0)}" for e in demo.events))
    return table


def starts_text(starts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(starts.items())) or "-"


def _event_line(e: Event, t0: float) -> str:
    settled = f"settled after {e.settled_at - e.at:4.1f} s" if e.settled_at else "not settled yet"
    epochs = f"group epoch {e.epoch_before} → {e.epoch_after}" if e.epoch_after >= 0 else ""
    moved = f"actives moved: {','.join(map(str, e.moved))}" if e.epoch_after >= 0 else ""
    label = EVENT_LABELS[e.kind]
    return f"{e.at - t0:6.1f} s  {label:<20} {e.member:<4} {settled}  {epochs}  {moved}  {e.note}"


# --------------------------------------------------------------------------- the results
def summary_rows(r: StatefulResult) -> list[tuple[str, str]]:
    cfg = r.config
    orphans = (f"{len(r.orphan_batches)} batches off the chain "
               f"({'all' if r.orphans_explained else 'NOT all'} from the member killed with kill -9)"
               if r.orphan_batches else "none")
    return [
        ("workload", f"{cfg.rate:,} events/s for {r.timings_s.get('workload_s', cfg.duration_s):.0f} s "
                     f"(at least {cfg.duration_s:.0f} s; each event waits for a settled group) into "
                     f"{cfg.partitions} partitions (= tasks); {cfg.members} Spark members"),
        ("coordinator", f"{cfg.standby_replicas} standby per task, {cfg.max_warmups} warm-ups at most, "
                        f"acceptable recovery lag {cfg.acceptable_recovery_lag}, session timeout "
                        f"{cfg.session_timeout_ms} ms, heartbeat every {cfg.heartbeat_interval_ms} ms"),
        *record_rows(r.produced, r.processed, r.drained, r.lost),
        ("output = batch job over every record", ("yes" if r.output_matches_batch_job else "NO")
         + f" ({r.output_keys:,} window × customer keys"
         + (f", {r.mismatched_keys} differ" if r.mismatched_keys else "")
         + ("" if r.tiled else f"; batches do not tile {', '.join(r.untiled_tasks)}") + ")"),
        ("duplicates", f"{r.duplicates:,} records; {orphans}"),
        ("static roll: nothing moved",
         {True: "yes", False: "NO", None: "-"}[r.static_roll_nothing_moved]),
        ("pipeline warnings", "; ".join(r.pipeline_warnings[:3])
         + (f" (and {len(r.pipeline_warnings) - 3} more)" if len(r.pipeline_warnings) > 3 else "")
         if r.pipeline_warnings else "none"),
        ("tasks' typical wait between outputs", "  ".join(
            f"{t} {v.typical_wait_s:.1f} s" for t, v in r.tasks.items())),
        ("tasks started (whole run)", "  ".join(
            f"{m}: {starts_text(v.starts)}" for m, v in r.members.items())),
        ("wall time", f"{r.wall_time_s:.0f} s"),
    ]


def event_rows(r: StatefulResult) -> list[list[str]]:
    return [[f"{e.at_s:.1f}", e.label, e.member, f"{secs(e.settled_after_s)} / {secs(e.resumed_after_s)}",
             f"{e.group_epoch_before} → {e.group_epoch_after}",
             "  ".join(f"{t}: {v}" for t, v in e.actives_moved.items()) or "none",
             f"{e.max_unavailable_touched_s:.1f} / {e.max_unavailable_other_s:.1f}", str(e.duplicates),
             e.note] for e in r.events]


STARTS_HEADER = ("event", "member", "how its tasks started during the event")


def starts_rows(r: StatefulResult) -> list[list[str]]:
    return [[e.label, m, starts_text(s)] for e in r.events for m, s in e.starts.items()]


def unavailability_table(r: StatefulResult) -> tuple[list[str], list[list[str]]]:
    """Events × tasks: each task's unavailability (s), * on the tasks the event touched, and the
    tasks' typical wait between outputs over the whole run as the last row."""
    tasks = list(r.tasks)
    rows = [[e.label, *(f"{e.unavailable_s.get(t, 0.0):.1f}{'*' if t in e.touched_tasks else ''}"
                        for t in tasks)] for e in r.events]
    rows.append(["typical wait", *(f"{r.tasks[t].typical_wait_s:.1f}" for t in tasks)])
    return ["unavailability (s)", *tasks], rows


def extra_tables(r: StatefulResult) -> list[tuple[str, list[str], list[list[str]]]]:
    """The tables after the events one, as (title, header, rows): the terminal and the report."""
    header, rows = unavailability_table(r)
    return [("each task's unavailability per event (* the tasks the event touched)", header, rows),
            ("how tasks started during each event", list(STARTS_HEADER), starts_rows(r))]


def print_results(console: Console, r: StatefulResult) -> None:
    summary = summary_rows(r)
    alarming = {k for k, _ in summary
                if (k == "lost" and r.lost) or (k.startswith("output =") and not r.output_matches_batch_job)}
    print_tables(console, summary=summary, alarming=alarming, events_title="events",
                 event_header=EVENT_HEADER, event_rows=event_rows(r), tables=extra_tables(r),
                 notes=REPORT_NOTES, report=r.report, data_dir=r.data_dir)
