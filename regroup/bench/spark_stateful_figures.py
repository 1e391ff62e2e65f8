"""The figures of `regroup bench spark-stateful` (its rule 5), computed after the fact from what the
members wrote (`regroup.bench.spark_stateful_member`: sink batches, Arrow files, event lines) and
from what the bench produced. Nothing here starts a process or waits: the functions are pure but for
reading the output files, so they are unit-tested without Spark.
"""
from __future__ import annotations

import bisect
import itertools
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup.bench.spark_stateful_member import GROUP, SUBTOPOLOGY

__all__ = ["Load", "check_outputs", "figures", "how_started", "key_name", "max_gap", "read_events",
           "task_name"]

_COPIED = re.compile(r"^task (\S+): copied batch (\d+) of (\S+) for the (\S+) in ([\d.]+) s$")
_PROMOTED = re.compile(r"^task (\S+): (\S+) copy here becomes (\S+) \(at (\S+), committed (\S+)\)")
_STARTED = re.compile(r"^task (\S+): (\S+) query started on (\S+) at (\S+)$")


def key_name(task: int, i: int) -> str:
    """The key of the ``i``-th distinct key of task (partition) ``task``."""
    return f"t{task}-k{i:08d}"


def task_name(p: int) -> str:
    return f"{SUBTOPOLOGY}_{p}"


@dataclass
class Load:
    """Rule 2's records: per (task, key index) the occurrences produced (the pre-load's is the
    first), and per load record (task, key index, occurrence, produced at)."""

    occurrences: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(lambda: 1))
    records: list[tuple[int, int, int, float]] = field(default_factory=list)
    #: Wall-clock start of every produce round.
    rounds: list[float] = field(default_factory=list)


def read_events(out: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The members' event lines (rule 3 of the member) from ``since`` on, oldest first, each with
    ``member``."""
    events: list[dict[str, Any]] = []
    for path in out.glob("events-*.jsonl"):
        member = path.stem.removeprefix("events-")
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:  # a killed member's last line may be torn
                continue
            if e["t"] >= since:
                events.append({**e, "member": member})
    return sorted(events, key=lambda e: e["t"])


def offsets_sum(text: str) -> int:
    """``input/0@1179`` (or several, comma-separated) -> the offsets' sum."""
    return sum(int(part.rpartition("@")[2]) for part in text.split(",") if "@" in part)


def how_started(task: str, member: str, events: list[dict[str, Any]], t_event: float) -> dict[str, Any]:
    """How ``task`` became active on ``member`` after the event, from its log and progress lines
    (``events`` from before the event too, for a standby's start): promoted in place (a copy started
    as a warm-up or a standby; how many records it had processed by then), or copied and started;
    when its copy was made, when the query it became active in started and first finished a batch,
    and that query's directory."""
    out: dict[str, Any] = {"how": None, "copy_s": None, "copied_for": None, "active_at": None,
                           "query_started_at": None, "first_batch_at": None, "query_dir": None,
                           "processed_before_promotion": None}
    begin: int | None = None
    started_as: str | None = None
    for e in events:
        if e["member"] != member:
            continue
        if e.get("kind") == "progress" and e["task"] == task:
            if begin is not None and e["at"] > begin and out["first_batch_at"] is None:
                out["first_batch_at"] = e["t"]
            continue
        if e.get("kind") != "log" or out["active_at"] is not None:
            continue
        msg = e["msg"]
        if (m := _COPIED.match(msg)) and m.group(1) == task:
            out["copy_s"], out["copied_for"] = round(float(m.group(5)), 2), m.group(4)
        elif (m := _STARTED.match(msg)) and m.group(1) == task:
            out["query_started_at"], out["first_batch_at"] = e["t"], None
            started_as, out["query_dir"], begin = m.group(2), m.group(3), offsets_sum(m.group(4))
            if started_as == "active" and e["t"] >= t_event:
                out["how"] = "copied" if out["copied_for"] == "active" else "started"
                out["active_at"] = e["t"]
        elif (m := _PROMOTED.match(msg)) and m.group(1) == task and m.group(3) == "active" \
                and e["t"] >= t_event:
            # The copy may have been parked on the way (a promotion is a stop, then a start): name
            # the role it was started in.
            out["how"], out["active_at"] = f"promoted {started_as or m.group(2)}", e["t"]
            if begin is not None:
                out["processed_before_promotion"] = offsets_sum(m.group(4)) - begin
    return out


def first_batch(task: str, member: str, query_dir: str | None, events: list[dict[str, Any]]
                ) -> dict[str, Any] | None:
    """Spark's progress of the first batch with input of ``member``'s query on ``query_dir`` (rule 3
    of the member: ``spark`` events): when it ended, its duration, how much of it was the batch
    itself (``addBatch``: reading, the aggregate, the state store, the sink) and RocksDB's load."""
    if query_dir is None:
        return None
    name = f"{GROUP}.{task}.{query_dir.rsplit('/', 1)[-1]}"
    for e in events:
        if e["member"] == member and e.get("kind") == "spark" and e["query"] == name and e.get("rows"):
            state = e["state"][0] if e.get("state") else {}
            return {"at": e["t"], "ms": e["ms"].get("triggerExecution"),
                    "add_batch_ms": e["ms"].get("addBatch"),
                    "rocksdb_load_ms": state.get("rocksdbLoadLatencyMs"), "rows": e["rows"],
                    "state_rows": state.get("rows")}
    return None


def batch_ms(events: list[dict[str, Any]], lo: float, hi: float) -> tuple[int | None, int | None]:
    """Median and longest Spark batch (``triggerExecution``, batches with input) ending in [lo, hi]."""
    ms = [e["ms"]["triggerExecution"] for e in events if e.get("kind") == "spark" and e.get("rows")
          and lo <= e["t"] <= hi and "triggerExecution" in e["ms"]]
    return (round(statistics.median(ms)), max(ms)) if ms else (None, None)


def distinct_in_order(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out


def max_gap(stamps: list[float], lo: float, hi: float) -> float:
    """The longest silence that overlaps [lo, hi]: the longest time between consecutive stamps, the
    first counted from the last stamp at or before ``lo`` (from ``lo`` if none), the last up to
    ``hi``. A task whose last output before the window was long before it has been silent since."""
    ordered = sorted(stamps)
    before = [s for s in ordered if s <= lo]
    points = [before[-1] if before else lo, *(s for s in ordered if lo < s <= hi), hi]
    return max(b - a for a, b in itertools.pairwise(points))


def figures(batches: list[dict[str, Any]], events: list[dict[str, Any]], placed: dict[int, str],
            standbys: dict[int, list[str]], moved_to: dict[int, str], t_event: float, t_end: float,
            tasks: int, steady_s: float) -> dict[str, Any]:
    """Rule 5: gaps, the baseline interval, how each moved task started and its first batch there."""
    lo = t_event - steady_s
    times: dict[int, list[float]] = {p: [] for p in range(tasks)}
    for b in batches:
        times[int(b["task"].rpartition("_")[2])].append(b["t"])
    gaps = {p: max_gap(ts, lo, t_end) for p, ts in times.items()}
    baseline = max(max_gap(ts, lo, t_event) for ts in times.values())
    moved = sorted(p for p in placed if moved_to.get(p) != placed[p])
    rows: list[dict[str, Any]] = []

    def since(t: float | None) -> float | None:
        return None if t is None else round(t - t_event, 2)

    for p in moved:
        to, name = moved_to.get(p, "?"), task_name(p)
        how = how_started(name, to, events, t_event)
        first = first_batch(name, to, how["query_dir"], events)
        first_out = min((b["t"] for b in batches if b["task"] == name and b["member"] == to
                         and b["t"] >= t_event), default=None)
        last_before = max((b["t"] for b in batches if b["task"] == name and b["t"] <= t_event), default=None)
        rows.append({
            "task": name, "from": placed[p], "to": to, "standby_on": standbys.get(p, []),
            "gap_ms": round(gaps[p] * 1000), "how": how["how"], "copy_s": how["copy_s"],
            "copied_for": how["copied_for"],
            # Records the promoted copy had processed beyond where its checkpoint copy began (0: it
            # was promoted before its query finished a batch, i.e. before Spark loaded its state).
            "processed_before_promotion": how["processed_before_promotion"],
            # Seconds after the event: the new owner's query (the warm-up's, for a promotion) started,
            # finished its first batch; the task became active there; its first output.
            "query_started_s": since(how["query_started_at"]),
            "first_batch_s": since(how["first_batch_at"]),
            "active_s": since(how["active_at"]),
            "first_output_s": since(first_out),
            "last_output_before_event_s": None if last_before is None else round(t_event - last_before, 2),
            # Spark's progress of that query's first batch with input (None: no progress event).
            "first_batch_ms": None if first is None else first["ms"],
            "first_batch_add_ms": None if first is None else first["add_batch_ms"],
            "first_batch_rocksdb_load_ms": None if first is None else first["rocksdb_load_ms"],
            # Whether the query the task became active in had loaded its state (finished a batch)
            # before it became active: what a warm-up is for.
            "warm_at_activation": (how["first_batch_at"] is not None and how["active_at"] is not None
                                   and how["first_batch_at"] <= how["active_at"]),
            # Who held the task active, and who output it, from the event on, in order (a task can
            # move twice: a standby takes it over, then balance moves it on through a warm-up).
            "active_on": distinct_in_order(e["member"] for e in events if e.get("kind") == "roles"
                                           and e["t"] >= t_event and e["tasks"].get(name) == "active"),
            "output_by": distinct_in_order(b["member"] for b in sorted(batches, key=lambda b: b["t"])
                                           if b["task"] == name and b["t"] >= t_event),
        })
    others = [gaps[p] for p in gaps if p not in moved]
    median_ms, longest_ms = batch_ms(events, lo, t_event)
    return {
        "moved": rows,
        "moved_gap_ms_max": max((r["gap_ms"] for r in rows), default=None),
        "others_gap_ms_max": round(max(others) * 1000) if others else None,
        "baseline_gap_ms": round(baseline * 1000),
        "batch_ms_median": median_ms, "batch_ms_max": longest_ms,
    }


def check_outputs(out: Path, batches: list[dict[str, Any]], load: Load, tasks: int, keys: int,
                  t_event: float) -> dict[str, Any]:
    """Rule 5's latency and loss: every output file (in ``out``) read back, against what was
    produced (``load``; ``keys`` pre-loaded keys per task)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    expected: dict[tuple[int, int], int] = dict(load.occurrences)
    load_keys = {key_name(p, i) for p, i in expected}
    final: dict[str, int] = {}
    # Per loaded key: (processed at, count) of every output row, for the first output covering each record.
    seen: dict[str, list[tuple[float, int]]] = defaultdict(list)
    runs: dict[str, int] = defaultdict(int)
    filter_keys = pa.array(sorted(load_keys), pa.string())
    for b in batches:
        runs[b["key"]] += 1
        with pa.memory_map(str(out / b["file"])) as source:
            table = pa.ipc.open_file(source).read_all()
        if table.num_rows == 0:
            continue
        best = table.group_by("key").aggregate([("count", "max")])
        for k, c in zip(best.column("key").to_pylist(), best.column("count_max").to_pylist(), strict=True):
            if c > final.get(k, 0):
                final[k] = c
        hits = table.filter(pc.is_in(table.column("key"), value_set=filter_keys))
        for k, c in zip(hits.column("key").to_pylist(), hits.column("count").to_pylist(), strict=True):
            seen[k].append((b["t"], c))
    lost = extra = 0
    examples: list[str] = []
    for p in range(tasks):
        for i in range(keys):
            k = key_name(p, i)
            want, got = expected.get((p, i), 1), final.get(k, 0)
            if got < want:
                lost += want - got
                if len(examples) < 5:
                    examples.append(f"{k}: {got} of {want}")
            elif got > want:
                extra += 1
                if len(examples) < 5:
                    examples.append(f"{k}: {got}, produced {want}")
    return {"lost": lost, "extra": extra, "lost_examples": examples,
            "max_latency_ms": round(max_latency(seen, load.records, t_event) * 1000),
            "batches_run_twice": sum(1 for n in runs.values() if n > 1)}


def max_latency(seen: dict[str, list[tuple[float, int]]], records: list[tuple[int, int, int, float]],
                t_event: float) -> float:
    """The longest a record produced after the event waited for the first output covering it (a row
    of its key with a count at least its occurrence); ``seen``: per key, (processed at, count) of its
    output rows."""
    firsts: dict[str, tuple[list[float], list[int]]] = {}
    for k, rows in seen.items():
        ts, running = [], []
        top = 0
        for t, c in sorted(rows):
            top = max(top, c)
            ts.append(t)
            running.append(top)
        firsts[k] = (ts, running)
    latency = 0.0
    for p, i, n, produced in records:
        if produced < t_event:
            continue
        ts, running = firsts.get(key_name(p, i), ([], []))
        at = bisect.bisect_left(running, n)
        if at < len(ts):
            latency = max(latency, ts[at] - produced)
    return latency
