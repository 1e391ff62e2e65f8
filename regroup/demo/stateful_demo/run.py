"""One run of the stateful demo, from a fresh data directory to the printed results and the report.

Its rules are those of `regroup.demo.spark_common.run`; the result is a :class:`StatefulResult`,
and before it is published the output is checked against the batch job (``check_s``).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from regroup.demo.spark_common.run import fresh_run, publish, run_guarded, watch_live
from regroup.demo.spark_common.scenario import EVENT_LABELS
from regroup.demo.stateful_demo.analysis import StatefulResult, analyse, read_log, read_outputs
from regroup.demo.stateful_demo.live import (
    EVENT_HEADER,
    REPORT_NOTES,
    event_rows,
    extra_tables,
    live_table,
    print_results,
    summary_rows,
)
from regroup.demo.stateful_demo.processes import Settings
from regroup.demo.stateful_demo.scenario import DemoConfig, StatefulDemo, play

#: Defaults: 6 tasks spread over 3, then 4, then 2 members; 50 records/s per task.
MEMBERS, PARTITIONS, RATE, DURATION_S = 3, 6, 300, 90.0


def run_stateful_demo(members: int = MEMBERS, partitions: int = PARTITIONS, rate: int = RATE,
                      duration: float = DURATION_S, json_output: bool = False, keep: bool = False,
                      log_spec: str | None = None, report: str | Path | None = None,
                      settings: Settings | None = None) -> dict[str, Any]:
    """Run the stateful demo (see `regroup.demo.stateful_demo`); returns the results as ``--json``
    prints them. The caller exits 1 when ``result["lost"]`` is not 0 or the output does not match the
    batch job."""
    return run_demo(members, partitions, rate, duration, json_output, keep, log_spec, report,
                    settings).to_json()


def run_demo(members: int = MEMBERS, partitions: int = PARTITIONS, rate: int = RATE,
             duration: float = DURATION_S, json_output: bool = False, keep: bool = False,
             log_spec: str | None = None, report: str | Path | None = None,
             settings: Settings | None = None) -> StatefulResult:
    """Run the stateful demo; returns the typed results (also printed, as text or ``json_output``).

    ``log_spec``: None for the embedded log in the data directory, or ``kafka://HOST:PORT`` (a fresh
    topic is created for the run). ``report``: the directory for the report's PNG and HTML (default:
    ``report/`` in the data directory, which is kept even without ``keep``).
    """
    if members < 2:
        raise ValueError("the demo needs at least 2 members (one is static, one is killed)")
    if partitions < members + 1:
        raise ValueError(f"the demo needs at least {members + 1} partitions (a task for each member "
                         "after the scale out)")
    started = time.time()
    cfg = DemoConfig(members, partitions, rate, duration, settings or Settings())
    root, log, topic = fresh_run("regroup-stateful-demo-", log_spec)
    console = Console(stderr=json_output)
    demo = StatefulDemo(root, log, topic, cfg)
    drained = run_guarded(demo, keep, console, lambda: _run(demo, console, json_output))
    t = time.time()
    result = _results(demo, drained)
    demo.timings["check_s"] = round(time.time() - t, 1)
    result = dataclasses.replace(result, timings_s=demo.timings, wall_time_s=round(time.time() - started, 1))
    return publish(result, root, report, keep, json_output, console,
                   lambda r, directory: _write_report(demo, r, directory), print_results)


def _run(demo: StatefulDemo, console: Console, json_output: bool) -> bool:
    """The run itself, watched live: start, settle, produce, the events, drain. Returns drained."""
    demo.processes.start_coordinator()
    drained = watch_live(demo, console, json_output, live_table, lambda: play(demo))
    demo.stop_members()
    return drained


def _results(demo: StatefulDemo, drained: bool) -> StatefulResult:
    """Read back what the log holds and what the sink wrote, and analyse it."""
    assert demo.workload is not None
    records = read_log(demo.log_spec, demo.topic)
    files = read_outputs(demo.processes.out)
    return analyse(cfg=demo.cfg, produced=demo.workload.produced, records=records, members=demo.members,
                   events=demo.events, t0=demo.t0, end=time.time(), files=files, drained=drained,
                   log_spec=demo.log_spec, topic=demo.topic, data_dir=str(demo.root))


def _write_report(demo: StatefulDemo, result: StatefulResult, directory: Path) -> dict[str, str]:
    from regroup.demo.report import ReportData, write_report

    batches: dict[str, list[tuple[float, int]]] = {}
    for m in demo.members:
        batches.setdefault(m.name, []).extend((b.t, b.records) for b in m.batches)
    samples = [s for s in demo.watch.samples if s.t >= demo.t0 - 30]
    data = ReportData(
        title=f"regroup stateful PySpark demo: {result.produced:,} produced, {result.lost} lost, "
              f"output {'=' if result.output_matches_batch_job else '≠'} batch job, "
              f"{result.duplicates:,} duplicates",
        t0=demo.t0, partitions=demo.partitions,
        ownership=[(s.t, s.active, s.absent) for s in samples],
        copies=[(s.t, s.copies) for s in samples], row_label="task", throughput_label="records/s output",
        batches=batches, events=[(e.at, EVENT_LABELS[e.kind]) for e in demo.events],
        summary=summary_rows(result), event_header=EVENT_HEADER, event_rows=event_rows(result),
        tables=extra_tables(result),
        notes=REPORT_NOTES, dashboard_url=demo.processes.dashboard_url or None)
    return write_report(directory, data)
