"""The demo's report: a PNG (who owned which partition when, and each member's throughput) and an HTML
page with the PNG and the results tables. Plain data in, files out: nothing here knows Spark.

For a streams group the rows are tasks and each task's row also shows its copies (`ReportData.copies`):
the active is the tall bar, a standby a thin light bar and a warm-up a thin dotted bar beneath it,
each in its member's colour."""

from __future__ import annotations

import base64
import html
import itertools
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

#: Throughput is averaged over this sliding window (s): several micro-batches, so that batches
#: falling on either side of a bin edge do not make the curves saw-toothed.
WINDOW_S = 8.0


@dataclass(frozen=True)
class ReportData:
    title: str
    t0: float
    partitions: int
    #: (wall time, {partition: member}, partitions whose owner is gone) as sampled from the coordinator;
    #: a missing partition: no owner.
    ownership: Sequence[tuple[float, Mapping[int, str], Set[int]]]
    #: Per member, (wall time, records) of each completed micro-batch.
    batches: Mapping[str, Sequence[tuple[float, int]]]
    #: (wall time, label) of each event, drawn as vertical lines.
    events: Sequence[tuple[float, str]]
    summary: Sequence[tuple[str, str]]
    event_header: Sequence[str]
    event_rows: Sequence[Sequence[str]]
    notes: Sequence[str] = ()
    #: The coordinator's dashboard during the run (it stops with the demo's coordinator).
    dashboard_url: str | None = None
    #: Streams groups: (wall time, {task: ((member, role), ...)}) of the standby and warm-up copies
    #: as sampled (roles ``standby`` and ``warm-up``); empty for a consumer group.
    copies: Sequence[tuple[float, Mapping[int, Sequence[tuple[str, str]]]]] = ()
    #: What a row of the ownership chart is ("partition", or "task" for a streams group).
    row_label: str = "partition"
    #: The throughput panel's unit.
    throughput_label: str = "records/s"
    #: More tables after the events table: (title, header, rows).
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]]]] = ()


def ownership_segments(ownership: Sequence[tuple[float, Mapping[int, str], Set[int]]],
                       partition: int) -> list[tuple[float, float, str, bool]]:
    """(start, end, member, gone) runs of one partition's owner; each sample holds until the next."""
    out: list[tuple[float, float, str, bool]] = []
    for (t, owners, absent), (t_next, _, _) in itertools.pairwise(ownership):
        owner = owners.get(partition)
        if owner is None:
            continue
        gone = partition in absent
        if out and out[-1][2:] == (owner, gone) and abs(out[-1][1] - t) < 1e-9:
            out[-1] = (out[-1][0], t_next, owner, gone)
        else:
            out.append((t, t_next, owner, gone))
    return out


#: The copies' roles, drawn beneath the active: (band offset from the row's centre, style).
COPY_ROLES = ("standby", "warm-up")


def copy_segments(copies: Sequence[tuple[float, Mapping[int, Sequence[tuple[str, str]]]]], row: int,
                  role: str) -> list[tuple[float, float, str]]:
    """(start, end, member) runs of one row's copies in one role; each sample holds until the next.
    Two copies in one role at once (a standby on each of two members) give overlapping runs."""
    out: list[tuple[float, float, str]] = []
    open_runs: dict[str, int] = {}  # member -> index in out of its run still open
    for (t, held), (t_next, _) in itertools.pairwise(copies):
        now = {m for m, r in held.get(row, ()) if r == role}
        for m in sorted(now):
            i = open_runs.get(m)
            if i is not None and abs(out[i][1] - t) < 1e-9:
                out[i] = (out[i][0], t_next, m)
            else:
                open_runs[m] = len(out)
                out.append((t, t_next, m))
        for m in list(open_runs):
            if m not in now:
                del open_runs[m]
    return out


def throughput_series(batches: Sequence[tuple[float, int]], t0: float, t_end: float,
                      window_s: float = WINDOW_S, step_s: float = 1.0) -> tuple[list[float], list[float]]:
    """Records/s over the ``window_s`` before each ``step_s`` from ``t0`` (x: seconds since ``t0``)."""
    xs, ys = [], []
    n = max(1, int((t_end - t0) / step_s) + 1)
    for i in range(n):
        t = t0 + i * step_s
        xs.append(i * step_s)
        ys.append(sum(rows for tb, rows in batches if t - window_s < tb <= t) / window_s)
    return xs, ys


def write_report(directory: Path, data: ReportData) -> dict[str, str]:
    """Write ``report.png`` and ``report.html`` into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    png, page = directory / "report.png", directory / "report.html"
    _plot(png, data)
    page.write_text(_html(data, png), encoding="utf-8")
    return {"png": str(png), "html": str(page)}


def _plot(path: Path, data: ReportData) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    members = sorted(set(data.batches) | {m for _, o, _ in data.ownership for m in o.values()}
                     | {m for _, held in data.copies for cs in held.values() for m, _ in cs})
    palette = plt.get_cmap("tab10")
    color = {m: palette(i % 10) for i, m in enumerate(members)}
    t_end = max([data.t0 + 1, *(t for t, _, _ in data.ownership),
                 *(t for b in data.batches.values() for t, _ in b)])
    fig, (own, thr) = plt.subplots(2, 1, figsize=(12, 7.5), sharex=True,
                                   gridspec_kw={"height_ratios": [max(3, data.partitions / 3), 3]})
    # With copies, the active takes the upper part of a row and each copy role a thin band beneath.
    active_band = (-0.05, 0.45) if data.copies else (-0.4, 0.8)
    copy_bands = {"standby": (-0.22, 0.14), "warm-up": (-0.4, 0.14)}
    for p in range(data.partitions):
        segs = ownership_segments(data.ownership, p)
        band = (p + active_band[0], active_band[1])
        for m, gone in sorted({(s[2], s[3]) for s in segs}):
            bars = [(a - data.t0, b - a) for a, b, o, g in segs if (o, g) == (m, gone)]
            if gone:  # still assigned, nobody processing: a static member away, a killed one
                own.broken_barh(bars, band, facecolor="white", edgecolor=color.get(m, "grey"),
                                hatch="////", linewidth=0.5)
            else:
                own.broken_barh(bars, band, color=color.get(m, "grey"))
        for role in COPY_ROLES if data.copies else ():
            off, height = copy_bands[role]
            for a, b, m in copy_segments(data.copies, p, role):
                if role == "standby":
                    own.broken_barh([(a - data.t0, b - a)], (p + off, height), color=color.get(m, "grey"),
                                    alpha=0.45, linewidth=0)
                else:
                    own.broken_barh([(a - data.t0, b - a)], (p + off, height), facecolor="white",
                                    edgecolor=color.get(m, "grey"), hatch="....", linewidth=0.6)
    own.set_ylim(-0.7, data.partitions - 0.3)
    own.set_yticks(range(data.partitions))
    own.set_ylabel(data.row_label)
    if data.copies:
        own.set_title(f"{data.row_label} ownership by role (coordinator's view): tall bar active, "
                      "thin bars standby / warm-up", pad=16)
    else:
        own.set_title(f"{data.row_label} ownership (coordinator's view; hatched: its owner is not running; "
                      "blank: no owner)", pad=16)
    handles = [Patch(color=color[m], label=m) for m in members]
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="////", label="owner gone"))
    if data.copies:
        handles.append(Patch(facecolor="grey", alpha=0.45, label="standby"))
        handles.append(Patch(facecolor="white", edgecolor="grey", hatch="....", label="warm-up"))
    own.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="member")
    total: list[float] = []
    for m in members:
        xs, ys = throughput_series(data.batches.get(m, ()), data.t0, t_end)
        thr.plot(xs, ys, color=color[m], label=m)
        total = [a + b for a, b in zip(total, ys, strict=True)] if total else list(ys)
    if total:
        thr.plot(xs, total, color="black", linestyle="--", linewidth=0.8, label="all")
    thr.set_ylabel(f"{data.throughput_label} (last {WINDOW_S:.0f} s)")
    thr.set_xlabel("seconds since the workload started")
    thr.set_title("throughput per member (completed micro-batches)")
    thr.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for t, label in data.events:
        for ax in (own, thr):
            ax.axvline(t - data.t0, color="crimson", linestyle=":", linewidth=1.2)
        own.annotate(label, (t - data.t0, data.partitions - 0.3), xytext=(2, 2), textcoords="offset points",
                     rotation=0, fontsize=8, color="crimson", annotation_clip=False)
    fig.suptitle(data.title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    head = "" if header is None else (
        "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>")
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _dashboard_link(url: str | None) -> str:
    if url is None:
        return ""
    href = html.escape(url, quote=True)
    return (f'<p>The group as it rebalanced, live: <a href="{href}">the coordinator\'s dashboard</a> '
            f"({html.escape(url)}; it answers only while the demo runs).</p>")


def _html(data: ReportData, png: Path) -> str:
    image = base64.b64encode(png.read_bytes()).decode()  # inline: the page stands on its own
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(data.title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1400px}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}
th{{background:#f3f3f3}}img{{max-width:100%}}</style></head>
<body><h1>{html.escape(data.title)}</h1>
{_dashboard_link(data.dashboard_url)}
<h2>Results</h2>{_table(None, data.summary)}
<h2>Events</h2>{_table(data.event_header, data.event_rows)}
{"".join(f"<h3>{html.escape(t)}</h3>{_table(h, rows)}" for t, h, rows in data.tables)}
{"".join(f"<p>{html.escape(n)}</p>" for n in data.notes)}
<img alt="partition ownership and throughput over time" src="data:image/png;base64,{image}">
</body></html>
"""
