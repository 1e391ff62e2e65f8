"""Figures of `regroup sim compare` (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from regroup.sim.compare import Row

COLORS = {"classic-eager": "#d62728", "classic-cooperative": "#ff7f0e", "kip848": "#1f77b4",
          "regroup": "#2ca02c"}
#: Scenarios whose availability over time gets its own figure.
TIMELINES = ("scale-out-100", "topic-growth", "slow-member", "rolling-dynamic")


def write_plots(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        _bars(rows, "stable_s", "time until the group is stable (s, log)", out_dir / "compare_stable.png"),
        _bars(rows, "unavailable_partition_s", "partition-seconds unavailable (log)",
              out_dir / "compare_unavailable.png"),
        _bars(rows, "bystander_pause_s", "longest pause of a member not involved (s, log)",
              out_dir / "compare_bystander_pause.png"),
    ]
    for name in TIMELINES:
        series = [r for r in rows if r.scenario.name == name]
        if series:
            written.append(_timeline(series, out_dir / f"timeline_{name}.png"))
    return written


def _bars(rows: Sequence[Row], key: str, ylabel: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.scenario.name for r in rows))
    protocols = list(dict.fromkeys(r.protocol.value for r in rows))
    width = 0.8 / len(protocols)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.3 * len(names)), 4.5))
    for i, proto in enumerate(protocols):
        xs, ys = [], []
        for j, name in enumerate(names):
            row = next((r for r in rows if r.scenario.name == name and r.protocol.value == proto), None)
            value = row.value(key) if row is not None else None
            xs.append(j + (i - (len(protocols) - 1) / 2) * width)
            ys.append(max(value, 0.01) if value is not None else 0.0)
        ax.bar(xs, ys, width, label=proto, color=COLORS.get(proto))
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _timeline(rows: Sequence[Row], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 4.0))
    for r in rows:
        series = r.runs[0].availability
        xs = [t for t, _, _ in series]
        ys = [100.0 * a / n if n else 100.0 for _, a, n in series]
        ax.plot(xs, ys, label=r.protocol.value, color=COLORS.get(r.protocol.value), linewidth=1.4)
    sc = rows[0].scenario
    ax.set_title(f"{sc.name}: {sc.title}")
    ax.set_xlabel("seconds since the change")
    ax.set_ylabel("partitions being processed (%)")
    ax.set_ylim(-2, 102)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
