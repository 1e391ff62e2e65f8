"""One run of the PySpark demo, from a fresh data directory to the printed results and the report.

Rules of this module:

1. Every child process is stopped on return, on error and on Ctrl-C. After an error the data directory
   is kept (its logs/ say what happened); after Ctrl-C it is removed unless ``keep``.
2. The result is computed once, typed (:class:`DemoResult`); ``results.json``, ``--json`` and the value
   :func:`run_spark_demo` returns are its :meth:`~DemoResult.to_json`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from regroup.demo.common import GROUP, TOPIC
from regroup.demo.spark_demo.analysis import DemoResult, EpochChange, analyse, read_aggregates, read_ranges
from regroup.demo.spark_demo.live import (
    EVENT_HEADER,
    REPORT_NOTES,
    event_rows,
    live_table,
    print_results,
    summary_rows,
)
from regroup.demo.spark_demo.scenario import EVENT_LABELS, SESSION_TIMEOUT_MS, DemoConfig, SparkDemo, play
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
    root = Path(tempfile.mkdtemp(prefix="regroup-spark-demo-"))
    topic = TOPIC if log_spec is None else f"{TOPIC}-{uuid.uuid4().hex[:8]}"
    console = Console(stderr=json_output)
    demo = SparkDemo(root, str(root / "log") if log_spec is None else log_spec, topic, partitions)
    try:
        drained, history = _run(demo, cfg, console, json_output)
    except KeyboardInterrupt:
        demo.processes.shutdown()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        raise
    except BaseException:
        demo.processes.shutdown()
        console.print(f"[red]the demo failed; its data directory is kept for inspection: {root}[/red]")
        raise
    finally:
        demo.processes.shutdown()
    result = dataclasses.replace(_results(demo, cfg, drained, history), timings_s=demo.timings,
                                 wall_time_s=round(time.time() - started, 1))  # the report's seconds aside
    report_dir = Path(report) if report is not None else root / "report"
    paths = _write_report(demo, result, report_dir)
    result = dataclasses.replace(result, report={**paths, "json": str(report_dir / "results.json")})
    Path(result.report["json"]).write_text(json.dumps(result.to_json(), indent=1))
    if not keep:
        _cleanup(root, report_dir)
        result = dataclasses.replace(result, data_dir=None)
    if json_output:
        print(json.dumps(result.to_json()))
    else:
        print_results(console, result)
    return result


def _run(demo: SparkDemo, cfg: DemoConfig, console: Console,
         json_output: bool) -> tuple[bool, tuple[EpochChange, ...]]:
    """The run itself, watched live: start, produce, the events, drain. Returns (drained, epochs)."""
    demo.processes.start_coordinator(cfg.partitions, cfg.session_timeout_ms)
    console.print(f"dashboard: {demo.processes.dashboard_url} (while the demo runs)")
    with Live(console=console, refresh_per_second=4, transient=json_output) as live:
        demo.redraw = lambda: live.update(live_table(demo))
        drained = play(demo, cfg)
        demo.phase = "stopping the members"
        demo.refresh()
        demo.redraw = lambda: None
    history = _epoch_history(demo)
    t = time.time()
    demo.processes.shutdown()
    demo.timings["shutdown_s"] = round(time.time() - t, 1)
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


def _cleanup(root: Path, report_dir: Path) -> None:
    """Remove the data directory — all but the report when it lives there."""
    inside = report_dir.resolve().is_relative_to(root.resolve())
    for child in root.iterdir():
        if not (inside and report_dir.resolve().is_relative_to(child.resolve())):
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    if not inside:
        shutil.rmtree(root, ignore_errors=True)
