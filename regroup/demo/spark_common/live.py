"""What both PySpark demos show the same way: the frame of the live table, and the results as text.

Rules of this module (each demo's `live` module follows them):

1. Display only: nothing here decides or measures.
2. The result rows a demo prints are the rows its report shows (summary, events, more tables, notes),
   so the terminal and the report never disagree.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from regroup.demo.spark_common.processes import MemberProcess
from regroup.demo.spark_common.scenario import DemoRun

#: A member that ended leaves the live table this long (s) after it ended.
SHOWN_AFTER_END_S = 20.0
#: The live table's records/s: over this many seconds.
RECENT_S = 5.0

M = TypeVar("M", bound=MemberProcess)


def live_frame(demo: DemoRun[Any], title: str, columns: Sequence[str], right: Collection[str]) -> Table:
    """The live table without rows: ``title`` (the demo's name), the time since the workload started,
    the phase, what was produced and the dashboard; the ``columns``, those in ``right`` right-justified."""
    elapsed = time.time() - demo.t0
    produced = demo.workload.produced if demo.workload else 0
    text = f"regroup · {title} · {elapsed:5.1f} s · {demo.phase} · produced {produced:,}"
    if demo.processes.dashboard_url:
        text += f"\ndashboard: {demo.processes.dashboard_url}"
    table = Table(title=text, title_justify="left", caption_justify="left")
    for col in columns:
        table.add_column(col, justify="right" if col in right else "left")
    return table


def shown(members: Sequence[M], now: float) -> list[M]:
    """The members on the live table: all but those that stopped or were killed a while ago."""
    return [m for m in members
            if not (m.state in ("stopped", "killed") and m.ended_at and now - m.ended_at > SHOWN_AFTER_END_S)]


def throughput(batches: Sequence[tuple[float, int]], now: float) -> tuple[str, str]:
    """A member's records/s over the last `RECENT_S` and how long ago its last batch was, from its
    batches' (time, records)."""
    recent = sum(n for t, n in batches if t > now - RECENT_S) / RECENT_S
    last = f"{now - batches[-1][0]:4.1f} s ago" if batches else "-"
    return f"{recent:,.0f}", last


def record_rows(produced: int, processed: int, drained: bool, lost: int) -> list[tuple[str, str]]:
    """The summary's rows on the records, the same in both demos: produced, processed, lost."""
    return [("produced", f"{produced:,}"),
            ("processed (distinct)", f"{processed:,}" + ("" if drained else " (NOT fully drained)")),
            ("lost", str(lost))]


def secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def print_tables(console: Console, *, summary: Sequence[tuple[str, str]], alarming: Collection[str],
                  events_title: str, event_header: Sequence[str], event_rows: Sequence[Sequence[str]],
                  tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]]]] = (),
                  notes: Sequence[str], report: Mapping[str, str], data_dir: str | None) -> None:
    """The results on the terminal: the summary (the rows named in ``alarming`` in bold red), the
    events, more ``tables`` as (title, header, rows), the notes, and where the report and the data are."""
    table = Table(show_header=False, title="results", title_justify="left")
    for k, v in summary:
        table.add_row(k, v, style="bold red" if k in alarming else None)
    console.print(table)
    for title, header, rows in [(events_title, event_header, event_rows), *tables]:
        table = Table(*header, title=title, title_justify="left")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for note in notes:
        console.print(note, style="dim")
    console.print(f"report: {report['png']}\n        {report['html']}")
    if data_dir:
        console.print(f"data directory kept: {data_dir}")
