"""`regroup bench assignors`: the uniform and range assignors on Kafka's JMH benchmark grid.

The grid and the inputs follow Kafka's ``ServerSideAssignorBenchmark`` (jmh-benchmarks, package
``org.apache.kafka.jmh.assignor``): ``members × partitions-per-member`` partitions spread evenly
over the topics (``partitionsPerTopic = members * ppm // topics``); heterogeneous groups split
members and topics into 5 buckets, each bucket's members subscribing to that bucket's topics;
*full* assigns a group with no current assignment; *incremental* adds one member (subscribed
like the last existing one) to a group whose ``current`` is the assignor's own balanced result
for the others. Kafka's grid also has 500 members and a rack-aware axis, which regroup's
assignors do not use; cells with fewer partitions than topics are skipped.

Only ``assign()`` is timed: inputs are built outside the clock (the topic metadata with its shards
built, as a coordinator keeps it between rebalances; subscriptions shared per bucket, as an
interning coordinator passes them), every run gets a fresh assignor (for *incremental*, one that
computed just the previous round), the garbage collector is off during the call (as in timeit)
and the output is freed after the clock stops. Figures are the best of 3-9 runs.

``--java`` times Kafka's own Java ``UniformAssignor`` and ``RangeAssignor`` (the
``kafka-group-coordinator`` artifact; see `regroup.bench.assignors_java`) on every cell in the same
run, right after regroup's, and reports regroup's time over Java's per cell. Then regroup gets
1 s and up to 50 runs per cell, and Java a warmed loop (2 s and at least 20 calls of warm-up, then
1 s and 5-200 timed runs) in one JVM kept for the whole grid.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from regroup.protocol.assignors import (
    Assignor,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
)
from regroup.protocol.shard import EMPTY
from regroup.protocol.topics import TopicMetadata

if TYPE_CHECKING:
    from regroup.bench.assignors_java import JavaAssignors, JavaCell

MEMBERS = (100, 1000, 5000, 10000)
PARTITIONS_PER_MEMBER = (5, 10, 50)
TOPICS = (10, 100, 1000)
QUICK_MEMBERS = (100, 1000)
QUICK_PARTITIONS_PER_MEMBER = (5, 10)
QUICK_TOPICS = (10, 100)
SUBSCRIPTIONS = ("homogeneous", "heterogeneous")
ASSIGNORS = ("uniform", "range")
MODES = ("full", "incremental")
BUCKETS = 5  # Kafka's MAX_BUCKET_COUNT for heterogeneous subscriptions

#: Published JMH figures (ms per assignment), uniform / homogeneous / full, keyed by
#: (members, partitions per member, topics).
JAVA_MS: dict[tuple[int, int, int], float] = {
    (5000, 10, 1000): 1.714,
    (5000, 50, 1000): 7.491,
    (10000, 10, 1000): 4.309,
}

#: Time to spend per cell, building inputs included (full grid, quick slice), and the bounds on
#: the number of timed runs.
_CELL_BUDGET_S = 0.25
_QUICK_CELL_BUDGET_S = 0.02
_MIN_RUNS = 3
_MAX_RUNS = 9
#: With ``--java``: regroup's budget and run cap per cell, closer to the Java side's timed second.
_JAVA_CELL_BUDGET_S = 1.0
_JAVA_MAX_RUNS = 50


@dataclass(frozen=True)
class Cell:
    """One measured cell of the grid (times in ms per assignment)."""

    assignor: str
    subscription: str
    mode: str
    members: int
    partitions_per_member: int
    topics: int
    partitions: int
    runs: int
    best_ms: float
    median_ms: float
    #: The timing thread's CPU time, best of runs (leaves out waiting for a core).
    best_cpu_ms: float | None = None
    #: With ``--java``: Kafka's Java assignor on the same cell, in the same run (ms per assignment).
    java_best_ms: float | None = None
    java_median_ms: float | None = None
    java_best_cpu_ms: float | None = None

    @property
    def ratio(self) -> float | None:
        """regroup's best time over Java's (below 1: regroup is faster)."""
        if self.java_best_ms is None or self.java_best_ms <= 0:
            return None
        return self.best_ms / self.java_best_ms

    @property
    def cpu_ratio(self) -> float | None:
        """The same ratio on the timing threads' CPU time."""
        if self.best_cpu_ms is None or not self.java_best_cpu_ms:
            return None
        return self.best_cpu_ms / self.java_best_cpu_ms


def _subscriptions(count: int, topics: list[str], heterogeneous: bool) -> list[frozenset[str]]:
    """Subscriptions of members 0..count-1, as Kafka's AssignorBenchmarkUtils builds them.

    Members of one bucket share one frozenset object, as a coordinator that interns
    subscriptions would pass them.
    """
    if not heterogeneous:
        return [frozenset(topics)] * count
    buckets = min(BUCKETS, count)
    topics_per_bucket = math.ceil(len(topics) / buckets)
    members_per_bucket = math.ceil(count / buckets)
    subs: list[frozenset[str]] = []
    for b in range(buckets):
        bucket_topics = frozenset(topics[b * topics_per_bucket:(b + 1) * topics_per_bucket])
        size = min((b + 1) * members_per_bucket, count) - b * members_per_bucket
        subs.extend([bucket_topics] * max(size, 0))
    return subs


def cell_metadata(members: int, ppm: int, topic_count: int) -> TopicMetadata | None:
    """The cell's topics with their shards already built (None below one partition per topic).

    A coordinator keeps its topic metadata between rebalances, so the shards (built once per
    metadata value and shared) are not part of an assignment's cost.
    """
    per_topic = members * ppm // topic_count
    if per_topic < 1:
        return None
    metadata = TopicMetadata({f"topic-{i}": per_topic for i in range(topic_count)})
    for t in metadata:
        metadata.shards(t)
    return metadata


def build_spec(assignor: Assignor, metadata: TopicMetadata, members: int, heterogeneous: bool,
               incremental: bool) -> GroupSpec:
    """The input of one grid cell; *incremental* runs ``assignor`` for the group before the join."""
    names = list(metadata)
    existing = members - 1 if incremental else members
    subs = _subscriptions(existing, names, heterogeneous)
    specs = {f"member{i}": MemberSpec(f"member{i}", subs[i]) for i in range(existing)}
    if not incremental:
        return GroupSpec(specs, metadata)
    before = assignor.assign(GroupSpec(specs, metadata))
    specs = {mid: MemberSpec(mid, m.topics, before[mid]) for mid, m in specs.items()}
    joiner_topics = subs[existing - 1] if heterogeneous else frozenset(names)
    specs["newMember"] = MemberSpec("newMember", joiner_topics, EMPTY)
    return GroupSpec(specs, metadata)


#: Inputs built ahead of one batch of back-to-back timed calls: at most this many shards in all
#: (each input of an incremental cell holds the previous round's result).
_BATCH_SHARDS = 2_000_000


def _time_batch(pairs: list[tuple[Assignor, GroupSpec]]) -> list[tuple[float, float]]:
    """(wall-clock, this thread's CPU) seconds of each ``assign()``, timed back to back.

    As Kafka's harness times its calls (one after another, on warm caches), with the garbage
    collector off as timeit has it: a collection triggered by earlier garbage is not assign()'s
    cost, and one `gc.collect()` per call would also empty the caches before each call.
    """
    gc.collect()
    gc.disable()
    times: list[tuple[float, float]] = []
    try:
        for assignor, spec in pairs:
            cpu = time.thread_time()
            start = time.perf_counter()
            result = assignor.assign(spec)
            elapsed = time.perf_counter() - start
            cpu = time.thread_time() - cpu
            del result  # freeing the output is not part of computing it
            times.append((elapsed, cpu))
        return times
    finally:
        gc.enable()


def measure(name: str, members: int, ppm: int, topic_count: int, heterogeneous: bool,
            incremental: bool, budget_s: float = _CELL_BUDGET_S,
            max_runs: int = _MAX_RUNS) -> tuple[int, int, float, float, float] | None:
    """(partitions, runs, best ms, median ms, best CPU ms) of one cell; None when the cell is empty.

    The CPU time is the timing thread's (``time.thread_time``): on a loaded machine it leaves out
    the time the thread waited for a core, which the wall-clock time does not.

    Every run gets a fresh assignor and input built outside the timing, so each run sees what a
    coordinator would: for *incremental*, an assignor that computed the previous round (the
    uniform assignor remembers it, see `UniformAssignor`) and nothing else. The inputs of a batch
    are built first, then its calls are timed back to back (see `_time_batch`); the first call of
    the cell is a warm-up and is not counted.
    """
    metadata = cell_metadata(members, ppm, topic_count)
    if metadata is None:
        return None
    partitions = sum(metadata.values())

    def pair() -> tuple[Assignor, GroupSpec]:
        assignor: Assignor = UniformAssignor() if name == "uniform" else RangeAssignor()
        return assignor, build_spec(assignor, metadata, members, heterogeneous, incremental)

    built = time.perf_counter()
    _time_batch([pair()])  # warm-up: first-time costs (caches, the metadata's shard tuples)
    cost = time.perf_counter() - built
    runs = max(_MIN_RUNS, min(max_runs, int(budget_s / max(cost, 1e-6)) + 1))
    per_batch = max(1, _BATCH_SHARDS // max(partitions, 1))
    times: list[float] = []
    cpu_times: list[float] = []
    while len(times) < runs:
        pairs = [pair() for _ in range(min(per_batch, runs - len(times)))]
        for wall, cpu in _time_batch(pairs):
            times.append(wall)
            cpu_times.append(cpu)
        del pairs
    return (partitions, len(times), min(times) * 1e3, statistics.median(times) * 1e3,
            min(cpu_times) * 1e3)


def calibrate() -> float:
    """ns per iteration of a trivial pure-Python loop: how fast this machine runs Python.

    For scale: a recent desktop CPU with CPython 3.11 takes a few tens of ns.
    """
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        x = 0
        for i in range(1_000_000):
            x += i
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def grid(quick: bool) -> Iterator[tuple[int, int, int]]:
    """The (members, partitions per member, topics) triples of the grid or of its quick slice."""
    members = QUICK_MEMBERS if quick else MEMBERS
    ppms = QUICK_PARTITIONS_PER_MEMBER if quick else PARTITIONS_PER_MEMBER
    topic_counts = QUICK_TOPICS if quick else TOPICS
    for m in members:
        for p in ppms:
            for t in topic_counts:
                yield m, p, t


def run_grid(quick: bool, progress: Console | None = None, java: JavaAssignors | None = None,
             triples: Iterable[tuple[int, int, int]] | None = None) -> list[Cell]:
    """Measure every cell of the grid (or of the quick slice, or of ``triples``).

    With ``java``, Kafka's Java assignor times each cell right after regroup does, so both sides
    see the same machine load.
    """
    cells: list[Cell] = []
    if java is not None:
        budget, max_runs = _JAVA_CELL_BUDGET_S, _JAVA_MAX_RUNS
    else:
        budget, max_runs = (_QUICK_CELL_BUDGET_S if quick else _CELL_BUDGET_S), _MAX_RUNS
    for members, ppm, topics in (grid(quick) if triples is None else triples):
        for name in ASSIGNORS:
            for subscription in SUBSCRIPTIONS:
                for mode in MODES:
                    got = measure(name, members, ppm, topics, subscription == "heterogeneous",
                                  mode == "incremental", budget, max_runs)
                    if got is None:
                        continue
                    partitions, runs, best, median, best_cpu = got
                    cell = Cell(name, subscription, mode, members, ppm, topics,
                                partitions, runs, best, median, best_cpu)
                    note = ""
                    if java is not None:
                        j = _java_cell(java, cell)
                        cell = Cell(name, subscription, mode, members, ppm, topics, partitions, runs,
                                    best, median, best_cpu, j.best_ms, j.median_ms, j.best_cpu_ms)
                        note = (f", Java {j.best_ms:.3f} ms, ratio {cell.ratio:.2f} "
                                f"(CPU {best_cpu:.3f} / {j.best_cpu_ms:.3f})")
                    cells.append(cell)
                    if progress is not None:
                        progress.print(f"{name} {subscription} {mode} {members}x{ppm}x{topics}: "
                                       f"{best:.3f} ms{note}", highlight=False)
    return cells


def _java_cell(java: JavaAssignors, cell: Cell) -> JavaCell:
    got = java.measure(cell.assignor, cell.subscription, cell.mode, cell.members,
                       cell.partitions_per_member, cell.topics)
    if (got.partitions, got.assigned, got.members_out) != (cell.partitions, cell.partitions,
                                                            cell.members):
        raise RuntimeError(f"Java's {cell.assignor} assignment of {cell.members}x"
                           f"{cell.partitions_per_member}x{cell.topics} covers {got.assigned} of "
                           f"{got.partitions} partitions for {got.members_out} members; expected "
                           f"{cell.partitions} for {cell.members}")
    return got


def _java_rows(cells: list[Cell]) -> list[dict[str, float | int]]:
    rows: list[dict[str, float | int]] = []
    for (members, ppm, topics), java in JAVA_MS.items():
        for c in cells:
            if (c.assignor, c.subscription, c.mode) == ("uniform", "homogeneous", "full") and \
                    (c.members, c.partitions_per_member, c.topics) == (members, ppm, topics):
                rows.append({"members": members, "partitions_per_member": ppm, "topics": topics,
                             "python_ms": round(c.best_ms, 3), "java_ms": java,
                             "ratio": round(c.best_ms / java, 2)})
    return rows


def _cell_json(c: Cell) -> dict[str, object]:
    d: dict[str, object] = {k: round(v, 3) if isinstance(v, float) else v
                            for k, v in asdict(c).items()}
    if c.java_best_ms is None:
        del d["java_best_ms"], d["java_median_ms"], d["java_best_cpu_ms"]
    else:
        d["ratio"] = round(c.best_ms / c.java_best_ms, 3)
        cpu_ratio = c.cpu_ratio
        d["cpu_ratio"] = None if cpu_ratio is None else round(cpu_ratio, 3)
    return d


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, values)))


def _print_java_table(console: Console, cells: list[Cell], info: dict[str, object]) -> None:
    table = Table(title=f"regroup against Kafka {info.get('kafka')}'s Java assignors "
                        f"(Java {info.get('java')}), same run: ms per assignment, best of runs")
    for head in ("members", "ppm", "topics", "assignor", "subscription", "mode", "regroup ms",
                 "Java ms", "ratio", "regroup CPU", "Java CPU", "CPU ratio"):
        table.add_column(head, justify="left" if head in ("assignor", "subscription", "mode")
                         else "right")
    for c in cells:
        if c.ratio is None or c.java_best_ms is None:
            continue
        ratio = f"×{c.ratio:.2f}"
        cpu_ratio = c.cpu_ratio
        cpu = ["", "", ""] if cpu_ratio is None else [
            f"{c.best_cpu_ms:.3f}", f"{c.java_best_cpu_ms:.3f}",
            f"[green]×{cpu_ratio:.2f}[/green]" if cpu_ratio <= 1 else f"×{cpu_ratio:.2f}"]
        table.add_row(str(c.members), str(c.partitions_per_member), str(c.topics), c.assignor,
                      c.subscription, c.mode, f"{c.best_ms:.3f}", f"{c.java_best_ms:.3f}",
                      f"[green]{ratio}[/green]" if c.ratio <= 1 else ratio, *cpu)
    console.print(table)
    summary = Table(title="ratio regroup / Java by kind (geometric mean over cells; below 1: "
                          "regroup faster)")
    for head in ("assignor", "subscription", "mode", "cells", "geomean", "min", "max", "regroup faster",
                 "CPU geomean"):
        summary.add_column(head, justify="left" if head in ("assignor", "subscription", "mode")
                           else "right")
    for a in ASSIGNORS:
        for s in SUBSCRIPTIONS:
            for m in MODES:
                ratios = [c.ratio for c in cells if (c.assignor, c.subscription, c.mode) == (a, s, m)
                          and c.ratio is not None]
                cpu_ratios = [r for c in cells if (c.assignor, c.subscription, c.mode) == (a, s, m)
                              and (r := c.cpu_ratio) is not None]
                if ratios:
                    summary.add_row(a, s, m, str(len(ratios)), f"×{_geomean(ratios):.2f}",
                                    f"×{min(ratios):.2f}", f"×{max(ratios):.2f}",
                                    f"{sum(r <= 1 for r in ratios)}/{len(ratios)}",
                                    f"×{_geomean(cpu_ratios):.2f}" if cpu_ratios else "")
    console.print(summary)


def run_assignor_bench(json_output: bool, quick: bool, java: bool = False,
                       triples: Iterable[tuple[int, int, int]] | None = None) -> None:
    """Run the grid and print a table (or one JSON object with ``--json``).

    With ``java``, Kafka's Java assignors run on every cell in the same run (see the module
    docstring) and the table gives regroup's time over Java's per cell.
    """
    console = Console()
    if console.width < 140:  # the table needs the room; rich assumes 80 columns when piped
        console = Console(width=140)
    loop_ns = calibrate()
    load_before = os.getloadavg()
    started = time.perf_counter()
    progress = None if json_output else Console(stderr=True)
    java_info: dict[str, object] = {}
    if java:
        from regroup.bench.assignors_java import JavaAssignors

        if progress is not None:
            progress.print("building/starting the Java assignor harness (Maven, first run only)...",
                           highlight=False)
        with JavaAssignors() as harness:
            java_info = dict(harness.info)
            cells = run_grid(quick, progress=progress, java=harness, triples=triples)
    else:
        cells = run_grid(quick, progress=progress, triples=triples)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()
    published = _java_rows(cells)
    if json_output:
        out: dict[str, object] = {
            "unit": "ms per assignment (best of runs; median also given)",
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "quick": quick,
            "elapsed_s": round(elapsed, 1),
            "python_loop_ns_per_iteration": round(loop_ns, 1),
            "load_average_1m": [round(load_before[0], 1), round(load_after[0], 1)],
            "cells": [_cell_json(c) for c in cells],
            "java_comparison": published,
        }
        if java:
            out["java"] = java_info
        print(json.dumps(out))
        return
    if java:
        _print_java_table(console, cells, java_info)
        console.print(f"{len(cells)} cells in {elapsed:.0f} s; Python {sys.version.split()[0]}, "
                      f"{loop_ns:.0f} ns per pure-Python loop iteration; 1-minute load average "
                      f"{load_before[0]:.1f} before, {load_after[0]:.1f} after "
                      f"({os.cpu_count()} CPUs); ratio = regroup best / Java best (wall clock); "
                      "CPU: the timing thread's CPU time, best of runs.", highlight=False)
        return

    by_key = {(c.members, c.partitions_per_member, c.topics, c.assignor, c.subscription, c.mode): c
              for c in cells}
    columns = [(a, s, m) for a in ASSIGNORS for s in SUBSCRIPTIONS for m in MODES]
    table = Table(title="Assignors on Kafka's JMH grid: ms per assignment (best of runs)")
    for head in ("members", "ppm", "topics", "partitions"):
        table.add_column(head, justify="right")
    for a, s, m in columns:
        table.add_column(f"{a}\n{'homog.' if s == 'homogeneous' else 'heter.'}\n{m}", justify="right")
    for members, ppm, topics in grid(quick):
        row = [by_key.get((members, ppm, topics, a, s, m)) for a, s, m in columns]
        if all(c is None for c in row):
            continue
        partitions = next(c.partitions for c in row if c is not None)
        texts = []
        for (a, s, m), c in zip(columns, row, strict=True):
            if c is None:
                texts.append("n/a")
                continue
            text = f"{c.best_ms:.3f}"
            java_ms = JAVA_MS.get((members, ppm, topics))
            if java_ms is not None and (a, s, m) == ("uniform", "homogeneous", "full"):
                text = f"[bold]{text}[/bold]\nJava {java_ms}\n×{c.best_ms / java_ms:.1f}"
            texts.append(text)
        table.add_row(str(members), str(ppm), str(topics), str(partitions), *texts)
    console.print(table)
    if published:
        cmp = Table(title="uniform / homogeneous / full against Kafka's published JMH figures")
        for head in ("members", "ppm", "topics", "regroup ms", "Java ms", "ratio"):
            cmp.add_column(head, justify="right")
        for r in published:
            cmp.add_row(str(r["members"]), str(r["partitions_per_member"]), str(r["topics"]),
                        f"{r['python_ms']:.3f}", f"{r['java_ms']:.3f}", f"×{r['ratio']:.1f}")
        console.print(cmp)
    console.print(f"{len(cells)} cells in {elapsed:.0f} s; Python {sys.version.split()[0]}, "
                  f"{loop_ns:.0f} ns per pure-Python loop iteration on this machine; "
                  "n/a: fewer partitions than topics.", highlight=False)
