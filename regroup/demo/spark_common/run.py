"""One run of either PySpark demo, around what the demo does: a fresh data directory, the run watched
live, every process stopped however it ends, and the result written, reported and printed.

Rules of this module (each demo's `run` module follows them):

1. Every child process is stopped on return, on error and on Ctrl-C (`run_guarded`). After an error
   the data directory is kept (its logs/ say what happened); after Ctrl-C it is removed unless
   ``keep``.
2. The result is computed once, typed; ``results.json``, ``--json`` and the value the demo's run
   function returns are its ``to_json()`` (`publish`). The report and ``results.json`` are written
   before the data directory is removed, to ``report/`` in it unless told otherwise (kept even
   without ``keep``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from rich.console import Console
from rich.live import Live
from rich.table import Table

from regroup.demo.common import TOPIC
from regroup.demo.spark_common.scenario import DemoRun


class Result(Protocol):
    """What `publish` needs of a demo's typed result (a frozen dataclass)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def report(self) -> Mapping[str, str]: ...

    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Result)
T = TypeVar("T")
D = TypeVar("D", bound=DemoRun[Any])


def fresh_run(prefix: str, log_spec: str | None) -> tuple[Path, str, str]:
    """A fresh data directory, the log (``log_spec``, or the embedded log in that directory) and the
    topic (on a given log, a fresh one)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if log_spec is None:
        return root, str(root / "log"), TOPIC
    return root, log_spec, f"{TOPIC}-{uuid.uuid4().hex[:8]}"


def run_guarded(demo: DemoRun[Any], keep: bool, console: Console, body: Callable[[], T]) -> T:
    """``body()``, with every process of ``demo`` stopped however it ends (rule 1)."""
    try:
        return body()
    except KeyboardInterrupt:
        demo.close()
        if not keep:
            shutil.rmtree(demo.root, ignore_errors=True)
        raise
    except BaseException:
        demo.close()
        console.print(f"[red]the demo failed; its data directory is kept for inspection: {demo.root}[/red]")
        raise
    finally:
        demo.close()


def watch_live(demo: D, console: Console, json_output: bool, table: Callable[[D], Table],
               play: Callable[[], bool]) -> bool:
    """``play()`` with the live ``table`` on the terminal (on stderr, and gone at the end, with
    ``json_output``); returns what ``play`` returns."""
    console.print(f"dashboard: {demo.processes.dashboard_url} (while the demo runs)")
    with Live(console=console, refresh_per_second=4, transient=json_output) as live:
        demo.redraw = lambda: live.update(table(demo))
        drained = play()
        demo.phase = "stopping the members"
        demo.refresh()
        demo.redraw = lambda: None
    return drained


def publish(result: R, root: Path, report: str | Path | None, keep: bool, json_output: bool,
            console: Console, write_report: Callable[[R, Path], dict[str, str]],
            print_results: Callable[[Console, R], None]) -> R:
    """Write the report and ``results.json``, remove the data directory unless ``keep``, and print the
    result (as one JSON object with ``json_output``); returns it as published (rule 2)."""
    report_dir = Path(report) if report is not None else root / "report"
    paths = write_report(result, report_dir)
    result = dataclasses.replace(result, report={**paths, "json": str(report_dir / "results.json")})
    Path(result.report["json"]).write_text(json.dumps(result.to_json(), indent=1))
    if not keep:
        cleanup(root, report_dir)
        result = dataclasses.replace(result, data_dir=None)
    if json_output:
        print(json.dumps(result.to_json()))
    else:
        print_results(console, result)
    return result


def cleanup(root: Path, report_dir: Path) -> None:
    """Remove the data directory — all but the report when it lives there."""
    inside = report_dir.resolve().is_relative_to(root.resolve())
    for child in root.iterdir():
        if not (inside and report_dir.resolve().is_relative_to(child.resolve())):
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
    if not inside:
        shutil.rmtree(root, ignore_errors=True)
