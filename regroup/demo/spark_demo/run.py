"""One run of the PySpark demo, from a fresh data directory to the printed results and the report.

Its rules are those of `regroup.demo.spark_common.run`; the result is a :class:`DemoResult`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from regroup.demo.common import GROUP
from regroup.demo.spark_common.run import fresh_run, publish, run_guarded, watch_live
from regroup.demo.spark_common.scenario import EVENT_LABELS
from regroup.demo.spark_demo.analysis import DemoResult, EpochChange, analyse, read_aggregates, read_ranges
from regroup.demo.spark_demo.live import (
    EVENT_HEADER,
    REPORT_NOTES,
    event_rows,
    live_table,
    print_results,
    summary_rows,
)
from regroup.demo.spark_demo.scenario import SESSION_TIMEOUT_MS, DemoConfig, SparkDemo, play
from regroup.log import open_log


def run_spark_demo(members: int = 3, partitions: int = 12, rate: int = 2_000, duration: float = 120.0,
                   json_output: bool = False, keep: bool = False, log_spec: str | None = None,
                   report: str | Path | None = None,
                   session_timeout_ms: int = SESSION_TIMEOUT_MS) -> dict[str, Any]:
    """Run the PySpark demo (see `regroup.demo.spark_demo`); returns the results as ``--json`` prints them.

    The caller exits 1 when ``result["lost"]`` is not 0. See :func:`run_demo` for the arguments.
    """
    return run_demo(members, partitions, rate, duration, json_output, keep, log_spec, report,
                    session_timeout_ms).to_json()


def run_demo(members: int = 3, partitions: int = 12, rate: int = 2_000, duration: float = 120.0,
             json_output: bool = False, keep: bool = False, log_spec: str | None = None,
             report: str | Path | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> DemoResult:
    """Run the PySpark demo; returns the typed results (also printed, as text or ``json_output``).

    ``log_spec``: None for the embedded log in the data directory, or ``kafka://HOST:PORT`` (a fresh
    topic is created for the run). ``report``: the directory for the report's PNG and HTML (default:
    ``report/`` in the data directory, which is kept even without ``keep``).
    """
    if members < 2:
        raise ValueError("the demo needs at least 2 members (one is static, one is killed)")
    started = time.time()
    cfg = DemoConfig(members, partitions, rate, duration, session_timeout_ms)
    root, log, topic = fresh_run("regroup-spark-demo-", log_spec)
    console = Console(stderr=json_output)
    demo = SparkDemo(root, log, topic, partitions)
    drained, history = run_guarded(demo, keep, console, lambda: _run(demo, cfg, console, json_output))
    result = dataclasses.replace(_results(demo, cfg, drained, history), timings_s=demo.timings,
                                 wall_time_s=round(time.time() - started, 1))  # the report's seconds aside
    return publish(result, root, report, keep, json_output, console,
                   lambda r, directory: _write_report(demo, r, directory), print_results)


def _run(demo: SparkDemo, cfg: DemoConfig, console: Console,
         json_output: bool) -> tuple[bool, tuple[EpochChange, ...]]:
    """The run itself, watched live: start, produce, the events, drain. Returns (drained, epochs)."""
    demo.processes.start_coordinator(cfg.partitions, cfg.session_timeout_ms)
    drained = watch_live(demo, console, json_output, live_table, lambda: play(demo, cfg))
    history = _epoch_history(demo)
    demo.stop_members()
    return drained, history


def _epoch_history(demo: SparkDemo) -> tuple[EpochChange, ...]:
    try:
        assert demo.processes.client is not None
        history = demo.processes.client.describe_group(GROUP).history
    except Exception:
        return ()
    return tuple(EpochChange(round(h.at_unix_ms / 1000 - demo.t0, 1), h.epoch, h.cause)
                 for h in history if h.kind == "group")


def _results(demo: SparkDemo, cfg: DemoConfig, drained: bool, history: tuple[EpochChange, ...]) -> DemoResult:
    """Read back what the log holds and what the members wrote, and analyse it."""
    assert demo.workload is not None
    end = time.time()
    log = open_log(demo.log_spec)
    try:
        ends = log.end_offsets(demo.topic)
    finally:
        log.close()
    out = demo.processes.out
    ranges, done = read_ranges(out)
    totals, incomplete = read_aggregates(out, done)
    return analyse(cfg=cfg, workload=demo.workload, procs=demo.procs, events=demo.events, t0=demo.t0,
                   end=end, ends=ends, ranges=ranges, totals=totals, incomplete=incomplete, drained=drained,
                   history=history, log_spec=demo.log_spec, topic=demo.topic, data_dir=str(demo.root))


def _write_report(demo: SparkDemo, result: DemoResult, directory: Path) -> dict[str, str]:
    from regroup.demo.report import ReportData, write_report

    batches: dict[str, list[tuple[float, int]]] = {}
    for p in demo.procs:
        batches.setdefault(p.name, []).extend((b.t, b.rows) for b in p.batches)
    data = ReportData(
        title=f"regroup PySpark demo: {result.produced:,} produced, {result.processed:,} processed, "
              f"{result.lost} lost, {result.duplicates:,} duplicates",
        t0=demo.t0, partitions=demo.partitions,
        ownership=[(s.t, s.owners, s.absent) for s in demo.watch.samples if s.t >= demo.t0 - 5],
        batches=batches, events=[(e.at, EVENT_LABELS[e.kind]) for e in demo.events],
        summary=summary_rows(result), event_header=EVENT_HEADER, event_rows=event_rows(result),
        notes=REPORT_NOTES, dashboard_url=demo.processes.dashboard_url or None)
    return write_report(directory, data)
