"""`regroup sim compare`: every scenario against every protocol, as a table (and plots).

Each (scenario, protocol) runs once per seed; the table shows the mean over seeds (and the range of
the time figures when there are several seeds).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from rich.console import Console
from rich.table import Table

from regroup.sim.scenarios import RunResult, Scenario, run, scenarios
from regroup.sim.system import ProtocolKind

PROTOCOLS = tuple(ProtocolKind)
METRIC_COLUMNS = (
    ("handoff_s", "hand-off done (s)"),
    ("stable_s", "group stable (s)"),
    ("unavailable_partition_s", "unavailable (partition·s)"),
    ("bystander_pause_s", "bystander pause (s)"),
    ("moved", "moved"),
    ("stops", "stops"),
    ("barrier_rounds", "barrier rounds"),
    ("requests", "requests"),
)


@dataclass
class Row:
    scenario: Scenario
    protocol: ProtocolKind
    runs: list[RunResult]

    def value(self, key: str) -> float | None:
        values = [getattr(r.metrics, key) for r in self.runs]
        if any(v is None for v in values):
            return None
        return float(mean(values))

    def spread(self, key: str) -> tuple[float, float] | None:
        values = [getattr(r.metrics, key) for r in self.runs]
        if len(values) < 2 or any(v is None for v in values):
            return None
        return float(min(values)), float(max(values))

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"scenario": self.scenario.name, "protocol": self.protocol.value,
                                  "seeds": [r.seed for r in self.runs]}
        for key, _ in METRIC_COLUMNS:
            out[key] = self.value(key)
            spread = self.spread(key)
            if spread is not None and key.endswith("_s"):
                out[key + "_range"] = list(spread)
        out["wall_s"] = round(sum(r.wall_s for r in self.runs), 2)
        return out


def selected(quick: bool, names: list[str] | None = None) -> list[Scenario]:
    chosen = [s for s in scenarios() if not (quick and s.heavy)]
    if names:
        chosen = [s for s in chosen if s.name in names]
    return chosen


def run_all(quick: bool = False, seeds: int = 1, names: list[str] | None = None) -> list[Row]:
    rows = []
    for sc in selected(quick, names):
        for proto in PROTOCOLS:
            rows.append(Row(sc, proto, [run(sc, proto, seed) for seed in range(seeds)]))
    return rows


def _fmt(value: float | None, key: str) -> str:
    if value is None:
        return "not settled"
    if key in ("moved", "stops", "barrier_rounds", "requests"):
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def markdown(rows: list[Row]) -> str:
    """The table as Markdown (for docs/benchmarks.md)."""
    head = "| scenario | protocol | " + " | ".join(title for _, title in METRIC_COLUMNS) + " |"
    sep = "|---|---|" + "---:|" * len(METRIC_COLUMNS)
    lines = [head, sep]
    for r in rows:
        cells = []
        for key, _ in METRIC_COLUMNS:
            cell = _fmt(r.value(key), key)
            spread = r.spread(key)
            if spread is not None and key.endswith("_s") and key != "unavailable_partition_s":
                cell += f" ({_fmt(spread[0], key)}–{_fmt(spread[1], key)})"
            cells.append(cell)
        lines.append(f"| {r.scenario.name} | {r.protocol.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_table(rows: list[Row], console: Console) -> None:
    table = Table(title="Rebalancing, protocol by protocol (means over seeds)")
    table.add_column("scenario")
    table.add_column("protocol")
    for _, title in METRIC_COLUMNS:
        table.add_column(title, justify="right")
    previous = None
    for r in rows:
        name = r.scenario.name if r.scenario.name != previous else ""
        previous = r.scenario.name
        table.add_row(name, r.protocol.value, *(_fmt(r.value(k), k) for k, _ in METRIC_COLUMNS))
    console.print(table)


def run_compare(json_output: bool, out_dir: Path | None, quick: bool, seeds: int,
                names: list[str] | None = None) -> list[Row]:
    started = time.perf_counter()
    rows = run_all(quick, seeds, names)
    plots: list[str] = []
    if out_dir is not None:
        from regroup.sim.plots import write_plots

        plots = [str(p) for p in write_plots(rows, out_dir)]
        (out_dir / "compare.md").write_text(markdown(rows) + "\n")
    wall = round(time.perf_counter() - started, 1)
    if json_output:
        print(json.dumps({"rows": [r.as_dict() for r in rows], "seeds": seeds, "quick": quick,
                          "plots": plots, "wall_s": wall}))
    else:
        console = Console()
        print_table(rows, console)
        for s in {r.scenario.name: r.scenario for r in rows}.values():
            console.print(f"  {s.name}: {s.title} ({s.members} members, {s.partitions} partitions)")
        if plots:
            console.print("plots: " + ", ".join(plots))
        console.print(f"{len(rows) * seeds} runs in {wall} s")
    return rows
