"""What the PySpark demo shows: the live table while it runs, and the results as rows of text.

Rules of this module:

1. Display only: nothing here decides or measures. The live table reads the run's state; the result
   rows read the typed :class:`DemoResult`.
2. The result rows (`summary_rows`, `event_rows`, `EVENT_HEADER`, `REPORT_NOTES`) are the same for the
   terminal and for the HTML report, so the two never disagree.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from regroup.demo.spark_common.live import live_frame, print_tables, record_rows, secs, shown, throughput
from regroup.demo.spark_common.scenario import EVENT_LABELS
from regroup.demo.spark_demo.analysis import DemoResult
from regroup.demo.spark_demo.scenario import Event, SparkDemo

EVENT_HEADER = ("t (s)", "event", "member", "stable / processing again after", "group epoch",
                "partitions moved", "longest pause per member (s)", "stall: its partitions / others (s)",
                "duplicates", "note")


REPORT_NOTES = (
    "Each event's window runs from the event until the group is stable again and every partition it "
    "touched has been processed again, plus 2 s.",
    "Longest pause: the longest time a member went without completing a micro-batch in that window "
    "(* the member concerned: the one that joined, left, restarted or was killed). Members not concerned "
    "should pause no longer than their usual time between batches: the protocol has no group-wide "
    "barrier.",
    "Stall: the longest time a partition went unprocessed in the window — the partitions the event "
    "touched (moved, or the member's own) / all the others.",
    "Duplicates are records processed twice; only a kill -9 should cause them (its victim's last "
    "batch was written but not committed).",
)


# --------------------------------------------------------------------------- while it runs
def live_table(demo: SparkDemo) -> Table:
    table = live_frame(demo, "PySpark demo", ("member", "instance", "process", "epoch", "partitions",
                                               "batches", "records/s", "processed", "last batch"),
                       right=("records/s", "processed", "batches"))
    details = demo.watch.details
    by_id = {m.member_id: m for m in details.description.members} if details else {}
    now = time.time()
    for p in shown(demo.procs, now):
        desc = by_id.get(p.member_id or "")
        parts = ",".join(str(s.partition) for s in sorted(desc.assigned)) if desc else "-"
        recent, last = throughput([(b.t, b.rows) for b in p.batches], now)
        table.add_row(p.label, p.instance or "-", f"{p.state} ({p.popen.pid})",
                      str(desc.epoch) if desc else "-", parts or "(none)", str(len(p.batches)),
                      recent, f"{sum(b.rows for b in p.batches):,}", last)
    if details is not None:
        d = details.description
        lag = sum(o.lag or 0 for o in details.offsets if o.shard.topic == demo.topic)
        table.caption = (f"group epoch {d.epoch} · target {d.target_epoch} · {d.state.value} · "
                         f"lag {lag:,}" + "".join(f"\n{_event_line(e, demo.t0)}" for e in demo.events))
    return table


def _event_line(e: Event, t0: float) -> str:
    stable = f"stable after {e.stable_at - e.at:4.1f} s" if e.stable_at else "not stable yet"
    epochs = f"group epoch {e.epoch_before} → {e.epoch_after}" if e.epoch_after >= 0 else ""
    return f"{e.at - t0:6.1f} s  {EVENT_LABELS[e.kind]:<20} {e.member:<4} {stable}  {epochs}  {e.note}"


# --------------------------------------------------------------------------- the results
def summary_rows(r: DemoResult) -> list[tuple[str, str]]:
    cfg = r.config
    return [
        ("workload", f"{cfg.rate:,} events/s for {cfg.duration_s:.0f} s into {cfg.partitions} "
                     f"partitions; {cfg.members} Spark members; "
                     f"session timeout {cfg.session_timeout_ms} ms"),
        *record_rows(r.produced, r.processed, r.drained, r.lost),
        ("duplicates", f"{r.duplicates:,}" + "".join(
            f"; {s.records} in partition {s.partition} ({s.event}: "
            f"read by {', '.join(s.members)})" for s in r.duplicate_spans[:5])),
        ("per-customer totals = producer's", "yes" if r.totals_match
         else f"no: {r.totals_mismatched_customers} customers differ"
              + (" (the duplicates)" if r.duplicates and r.output_matches_reads else "")),
        ("output table = what the batches read", "yes" if r.output_matches_reads else "NO"),
        ("static roll kept the group epoch",
         {True: "yes", False: "NO", None: "-"}[r.static_roll_epoch_unchanged]),
        ("members' usual time between batches", "  ".join(
            f"{m} {v.typical_batch_interval_s:.1f} s" for m, v in r.members.items())),
        ("wall time", f"{r.wall_time_s:.0f} s"),
    ]


def event_rows(r: DemoResult) -> list[list[str]]:
    rows = []
    for e in r.events:
        pauses = "  ".join(f"{m}{'*' if m == e.member else ''} {v:.1f}" for m, v in e.pauses_s.items())
        rows.append([
            f"{e.at_s:.1f}", e.label, e.member,
            f"{secs(e.stable_after_s)} / {secs(e.resumed_after_s)}",
            f"{e.group_epoch_before} → {e.group_epoch_after}",
            ",".join(map(str, e.partitions_moved)) or "none", pauses,
            f"{e.max_stall_touched_partitions_s:.1f} / {e.max_stall_other_partitions_s:.1f}",
            str(e.duplicates), e.note])
    return rows


def print_results(console: Console, r: DemoResult) -> None:
    print_tables(console, summary=summary_rows(r), alarming={"lost"} if r.lost else set(),
                 events_title="events (* the member concerned)", event_header=EVENT_HEADER,
                 event_rows=event_rows(r), notes=REPORT_NOTES, report=r.report, data_dir=r.data_dir)
