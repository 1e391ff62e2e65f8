"""One run of the stateful demo, from a fresh data directory to the printed results and the report.

Rules of this module:

1. Every child process is stopped on return, on error and on Ctrl-C. After an error the data directory
   is kept (its logs/ say what happened); after Ctrl-C it is removed unless ``keep``.
2. The result is computed once, typed (:class:`StatefulResult`); ``results.json``, ``--json`` and the
   value :func:`run_stateful_demo` returns are its :meth:`~StatefulResult.to_json`.
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

from regroup.demo.common import TOPIC
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
from regroup.demo.stateful_demo.scenario import EVENT_LABELS, DemoConfig, StatefulDemo, play

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
    root = Path(tempfile.mkdtemp(prefix="regroup-stateful-demo-"))
    topic = TOPIC if log_spec is None else f"{TOPIC}-{uuid.uuid4().hex[:8]}"
    console = Console(stderr=json_output)
    demo = StatefulDemo(root, str(root / "log") if log_spec is None else log_spec, topic, cfg)
    try:
        drained = _run(demo, console, json_output)
    except KeyboardInterrupt:
        demo.processes.shutdown()
        demo.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        raise
    except BaseException:
        demo.processes.shutdown()
        demo.close()
        console.print(f"[red]the demo failed; its data directory is kept for inspection: {root}[/red]")
        raise
    finally:
        demo.processes.shutdown()
        demo.close()
    t = time.time()
    result = _results(demo, drained)
    demo.timings["check_s"] = round(time.time() - t, 1)
    result = dataclasses.replace(result, timings_s=demo.timings, wall_time_s=round(time.time() - started, 1))
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


def _run(demo: StatefulDemo, console: Console, json_output: bool) -> bool:
    """The run itself, watched live: start, settle, produce, the events, drain. Returns drained."""
    demo.processes.start_coordinator()
    console.print(f"dashboard: {demo.processes.dashboard_url} (while the demo runs)")
    with Live(console=console, refresh_per_second=4, transient=json_output) as live:
        demo.redraw = lambda: live.update(live_table(demo))
        drained = play(demo)
        demo.phase = "stopping the members"
        demo.refresh()
        demo.redraw = lambda: None
    t = time.time()
    demo.processes.shutdown()
    demo.timings["shutdown_s"] = round(time.time() - t, 1)
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


def _cleanup(root: Path, report_dir: Path) -> None:
    """Remove the data directory — all but the report when it lives there."""
    inside = report_dir.resolve().is_relative_to(root.resolve())
    for child in root.iterdir():
        if not (inside and report_dir.resolve().is_relative_to(child.resolve())):
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    if not inside:
        shutil.rmtree(root, ignore_errors=True)
