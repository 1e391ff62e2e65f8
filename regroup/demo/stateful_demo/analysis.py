"""What the stateful demo found: the output checked against the batch job, every record accounted
for, each task's unavailability per event, and the typed result.

Rules of this module:

1. Pure computations on plain data, apart from reading back what the log holds (`read_log`) and what
   the sink wrote (`read_outputs`); the run hands in everything else.
2. The expected output is the pipeline computed as a batch job over every record in the log, read
   back from the log (not from the producer's bookkeeping): per task, 10-second window and
   customer, the events and their amount. Records are timestamped with their produce time, in
   order within a partition, so none is late for the watermark and the streaming result must be
   exactly this.
3. The sink's output is read as a user would read an idempotent sink: one file per batch key. Per
   task, the batches must tile the task's offsets ``[0, end)`` with no gap and no overlap; the
   value of each (window, customer) is the one of the last batch along that chain that updated it
   (update output mode). Batches off the chain are duplicates: allowed only from a member killed
   with kill -9 (written, never committed, run again by the successor with other boundaries), and
   each must start where a batch of the chain starts.
4. A task's unavailability around an event is the longest time it produced no output while a
   record was waiting: between consecutive outputs at ``t1`` and ``t2`` of batches with records,
   ``t2 - max(t1, produced)`` where ``produced`` is when the first record of the second batch was
   produced (a task with nothing to do is not unavailable). Every interval that overlaps the
   event's window counts whole. Outputs come from the members' progress lines — every output
   written, duplicates included.
5. The result is typed (:class:`StatefulResult`); ``--json`` and ``results.json`` are its
   :meth:`~StatefulResult.to_json` (`regroup.demo.spark_common.result`), whose keys are the field names.
"""

from __future__ import annotations

import array
import bisect
import dataclasses
import itertools
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from regroup.demo.spark_common.member import VALUE_SCHEMA
from regroup.demo.spark_common.result import JsonResult, ProcessStats, released_by_name
from regroup.demo.spark_common.scenario import EVENT_LABELS
from regroup.demo.stateful_demo.processes import BatchOut, Member
from regroup.demo.stateful_demo.scenario import DemoConfig, Event, task_name
from regroup.demo.stateful_member import WATERMARK_DELAY_S, WINDOW_S
from regroup.log import open_log

#: (partition, window start in epoch seconds, customer) -> [events, amount]
Output = dict[tuple[int, int, str], list[int]]


# --------------------------------------------------------------------------- the log, read back
@dataclass
class LogRecords:
    """Per partition, every record's customer, amount and produce time (ms), by offset."""

    customers: dict[int, list[str]]
    amounts: dict[int, array.array[int]]
    times_ms: dict[int, array.array[int]]

    @property
    def ends(self) -> dict[int, int]:
        return {p: len(c) for p, c in self.customers.items()}


def read_log(log_spec: str, topic: str, chunk: int = 20_000) -> LogRecords:
    """Every record of ``topic`` (rule 2: the batch job reads the log, not the producer's memory)."""
    log = open_log(log_spec)
    out = LogRecords({}, {}, {})
    try:
        for p, end in sorted(log.end_offsets(topic).items()):
            customers: list[str] = []
            amounts, times = array.array("q"), array.array("q")
            at = 0
            while at < end:
                recs = log.read(topic, p, at, min(chunk, end - at))
                if not recs:
                    break
                for r in recs:
                    value = json.loads(r.value or b"{}")
                    customers.append(str(value.get("customer")))
                    amounts.append(int(value.get("amount", 0)))
                    times.append(r.timestamp_ms)
                at = recs[-1].offset + 1
            out.customers[p], out.amounts[p], out.times_ms[p] = customers, amounts, times
    finally:
        log.close()
    return out


def batch_job(records: LogRecords) -> Output:
    """The pipeline as a batch job (rule 2): per partition, window and customer, events and amount."""
    out: Output = {}
    for p, customers in records.customers.items():
        amounts, times = records.amounts[p], records.times_ms[p]
        for customer, amount, ts in zip(customers, amounts, times, strict=True):
            acc = out.setdefault((p, window_of(ts), customer), [0, 0])
            acc[0] += 1
            acc[1] += amount
    return out


def window_of(ts_ms: int) -> int:
    """The start (epoch seconds) of the tumbling event-time window of a record."""
    return (ts_ms // 1000 // WINDOW_S) * WINDOW_S


# --------------------------------------------------------------------------- the sink, read back
@dataclass(frozen=True, slots=True)
class OutputFile:
    """One file of the sink: a batch key's rows ``[window, customer, events, amount]``."""

    key: str
    partition: int
    start: int
    end: int
    member: str
    rows: tuple[tuple[int, str, int, int], ...]


def read_outputs(out: Path) -> list[OutputFile]:
    files = []
    for f in sorted((out / "output").glob("*/*.json")):
        rec = json.loads(f.read_text())
        (p, start), = ((int(k), v) for k, v in rec["start"].items())
        end = int(next(iter(rec["end"].values())))
        files.append(OutputFile(rec["key"], p, start, end, rec.get("member", "?"),
                                tuple((int(w), str(c), int(e), int(a)) for w, c, e, a in rec["rows"])))
    return files


def tiling(files: Sequence[OutputFile], end: int) -> list[OutputFile] | None:
    """A chain of batches from offset 0 to ``end`` (rule 3), preferring longer batches; None if the
    batches leave a gap. Batches without records (a position only) are never on it."""
    by_start: dict[int, list[OutputFile]] = defaultdict(list)
    for f in files:
        if f.start < f.end:
            by_start[f.start].append(f)
    reach: dict[int, OutputFile | None] = {end: None}  # offset -> the next batch on a chain to end
    for start in sorted(by_start, reverse=True):
        for f in sorted(by_start[start], key=lambda f: -f.end):
            if f.end in reach:
                reach[start] = f
                break
    if end != 0 and 0 not in reach:
        return None
    chain: list[OutputFile] = []
    at = 0
    while at != end:
        step = reach[at]
        assert step is not None
        chain.append(step)
        at = step.end
    return chain


@dataclass(frozen=True, slots=True)
class OrphanBatch:
    """A batch off the chain (rule 3): written, then its records written again by another batch."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("records",)

    key: str
    task: str
    member: str
    start: int
    end: int
    explained: bool  # by a member killed with kill -9, and starting where a chain batch starts

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class OutputCheck:
    processed: int
    lost: int
    duplicates: int
    tiled: bool
    orphans: tuple[OrphanBatch, ...]
    final: Output
    untiled_tasks: tuple[str, ...]


def check_outputs(files: Sequence[OutputFile], ends: Mapping[int, int], killed: Iterable[str]) -> OutputCheck:
    """Coverage of every offset, the chain per task, the orphans, and the final output (rule 3)."""
    killed = set(killed)
    by_part: dict[int, list[OutputFile]] = defaultdict(list)
    for f in files:
        by_part[f.partition].append(f)
    processed = lost = dups = 0
    orphans: list[OrphanBatch] = []
    untiled: list[str] = []
    final: Output = {}
    for p in sorted(set(ends) | set(by_part)):
        end = ends.get(p, 0)
        fs = [f for f in by_part.get(p, []) if f.start < f.end]
        times = [0] * (end + 1)
        for f in fs:
            for o in range(f.start, min(f.end, end)):
                times[o] += 1
        covered = sum(1 for n in times[:end] if n)
        processed += covered
        lost += end - covered
        dups += sum(n - 1 for n in times[:end] if n > 1)
        chain = tiling(fs, end)
        if chain is None:
            untiled.append(task_name(p))
            chain = []
        on = {f.key for f in chain}
        starts = {f.start for f in chain}
        orphans += [OrphanBatch(f.key, task_name(p), f.member, f.start, f.end,
                                f.member in killed and f.start in starts) for f in fs if f.key not in on]
        for f in chain:
            for w, c, events, amount in f.rows:
                final[(p, w, c)] = [events, amount]
    return OutputCheck(processed, lost, dups, not untiled, tuple(orphans), final, tuple(untiled))


def compare(final: Output, expected: Output) -> list[str]:
    """The (window, customer) keys whose output differs from the batch job's, described."""
    out = []
    for k in sorted(set(final) | set(expected)):
        if final.get(k) != expected.get(k):
            p, w, c = k
            out.append(f"{task_name(p)} window {w} {c}: output {final.get(k)}, batch job {expected.get(k)}")
    return out


# --------------------------------------------------------------------------- unavailability
def outputs_by_task(members: Iterable[Member]) -> dict[int, list[BatchOut]]:
    """Per task, every batch with records whose output was written, by time (rule 4)."""
    out: dict[int, list[BatchOut]] = defaultdict(list)
    for m in members:
        for b in m.batches:
            if b.records:
                out[int(b.task.rpartition("_")[2])].append(b)
    for bs in out.values():
        bs.sort(key=lambda b: b.t)
    return dict(out)


def unavailability(outputs: Sequence[BatchOut], produced_ms: Sequence[int], lo: float, hi: float) -> float:
    """The longest time the task had a record waiting and produced no output, over every interval
    between outputs that overlaps ``[lo, hi]`` (rule 4). An interval still open at ``hi`` (no output
    since) counts up to ``hi``."""
    if hi <= lo:
        return 0.0
    times = [b.t for b in outputs]
    i = bisect.bisect_right(times, lo)
    prev = times[i - 1] if i > 0 else None
    worst = 0.0
    for b in outputs[i:]:
        waiting = produced_ms[b.start] / 1000 if b.start < len(produced_ms) else b.t
        worst = max(worst, b.t - (max(prev, waiting) if prev is not None else max(lo, waiting)))
        prev = b.t
        if b.t >= hi:
            return round(worst, 2)
    # No output after hi: open since the last output, if a record was waiting.
    last_end = outputs[-1].end if outputs else 0
    if last_end < len(produced_ms):
        waiting = produced_ms[last_end] / 1000
        since = max(prev, waiting) if prev is not None else max(lo, waiting)
        worst = max(worst, hi - since)
    return round(worst, 2)


def typical_wait(outputs: Sequence[BatchOut], produced_ms: Sequence[int]) -> float:
    """The median of the same intervals over the whole run: a task's usual time between outputs."""
    waits = [b.t - max(a.t, produced_ms[b.start] / 1000 if b.start < len(produced_ms) else b.t)
             for a, b in itertools.pairwise(outputs)]
    return round(statistics.median(waits), 2) if waits else 0.0


# --------------------------------------------------------------------------- the typed result
@dataclass(frozen=True, slots=True)
class EventResult:
    """One scripted event, measured."""

    event: str  # scale-out, scale-in, static-roll, kill-9
    label: str
    member: str
    at_s: float
    settled_after_s: float | None
    resumed_after_s: float | None
    group_epoch_before: int
    group_epoch_after: int
    #: task -> "from → to" for each active that moved.
    actives_moved: Mapping[str, str]
    touched_tasks: tuple[str, ...]
    #: member -> how tasks started on it during the event ("promoted active": 2, ...).
    starts: Mapping[str, Mapping[str, int]]
    #: task -> its unavailability in the event's window (rule 4), every task.
    unavailable_s: Mapping[str, float]
    max_unavailable_touched_s: float
    max_unavailable_other_s: float
    duplicates: int
    note: str


@dataclass(frozen=True, slots=True)
class TaskStats:
    batches: int  # on the chain
    records: int
    output_rows: int  # (window, customer) keys in the final output
    typical_wait_s: float


@dataclass(frozen=True, slots=True)
class MemberStats:
    """One member over the whole run (a static member's restart is the same member)."""

    instance: str | None
    batches: int
    records: int
    starts: Mapping[str, int]
    processes: tuple[ProcessStats, ...]


@dataclass(frozen=True, slots=True)
class RunSettings:
    members: int
    partitions: int
    rate: int
    duration_s: float
    session_timeout_ms: int
    heartbeat_interval_ms: int
    standby_replicas: int
    max_warmups: int
    acceptable_recovery_lag: int
    trigger_ms: int
    window_s: int
    watermark_delay_s: int
    value_schema: str
    log: str
    topic: str


@dataclass(frozen=True, slots=True)
class StatefulResult(JsonResult):
    """Everything the stateful demo checked and measured. ``lost`` must be 0 and
    ``output_matches_batch_job`` true (the CLI exits 1 otherwise)."""

    demo: str
    produced: int
    in_log: int
    processed: int
    lost: int
    duplicates: int
    output_matches_batch_job: bool
    output_keys: int
    mismatched_keys: int
    mismatches: tuple[str, ...]  # the first 10
    tiled: bool
    untiled_tasks: tuple[str, ...]
    orphan_batches: tuple[OrphanBatch, ...]
    orphans_explained: bool
    drained: bool
    static_roll_nothing_moved: bool | None
    #: "member at t s: message" of each warning a member's pipeline logged (a copy's query failed...).
    pipeline_warnings: tuple[str, ...]
    events: tuple[EventResult, ...]
    tasks: Mapping[str, TaskStats]
    members: Mapping[str, MemberStats]
    config: RunSettings
    data_dir: str | None
    timings_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    wall_time_s: float = 0.0
    report: Mapping[str, str] = dataclasses.field(default_factory=dict)


def starts_during(members: Sequence[Member], lo: float, hi: float) -> dict[str, dict[str, int]]:
    """Per member name, how its tasks started between ``lo`` and ``hi`` (every incarnation)."""
    out: dict[str, dict[str, int]] = {}
    for m in members:
        before, after = m.starts_at(lo), m.starts_at(hi)
        diff = {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0) > 0}
        if diff:
            acc = out.setdefault(m.name, {})
            for k, n in diff.items():
                acc[k] = acc.get(k, 0) + n
    return {name: dict(sorted(v.items())) for name, v in sorted(out.items())}


def analyse(*, cfg: DemoConfig, produced: int, records: LogRecords, members: Sequence[Member],
            events: Sequence[Event], t0: float, end: float, files: Sequence[OutputFile], drained: bool,
            log_spec: str, topic: str, data_dir: str) -> StatefulResult:
    """Check the output and measure every event and every member: the demo's verdict."""
    ends = records.ends
    killed = {e.member for e in events if e.kind == "kill-9"}
    check = check_outputs(files, ends, killed)
    expected = batch_job(records)
    mismatches = compare(check.final, expected)
    outputs = outputs_by_task(members)
    event_results = []
    for ev in events:
        lo, hi = ev.window
        unavailable = {task_name(p): unavailability(outputs.get(p, []), records.times_ms.get(p, []), lo, hi)
                       for p in range(cfg.partitions)}
        touched = {task_name(p) for p in ev.touched}
        dups = sum(o.records for o in check.orphans if ev.kind == "kill-9" and o.member == ev.member)
        event_results.append(EventResult(
            event=ev.kind, label=EVENT_LABELS[ev.kind], member=ev.member, at_s=round(ev.at - t0, 1),
            settled_after_s=round(ev.settled_at - ev.at, 1) if ev.settled_at else None,
            resumed_after_s=round(ev.resumed_at - ev.at, 1) if ev.resumed_at else None,
            group_epoch_before=ev.epoch_before, group_epoch_after=ev.epoch_after,
            actives_moved={task_name(p): f"{ev.actives_before.get(p, '-')} → {ev.actives_after.get(p, '-')}"
                           for p in ev.moved},
            touched_tasks=tuple(sorted(touched, key=_task_order)),
            starts=starts_during(members, ev.at, hi), unavailable_s=unavailable,
            max_unavailable_touched_s=max([v for t, v in unavailable.items() if t in touched], default=0.0),
            max_unavailable_other_s=max([v for t, v in unavailable.items() if t not in touched], default=0.0),
            duplicates=dups, note=ev.note))
    roll = next((e for e in events if e.kind == "static-roll"), None)
    chain_rows: dict[int, int] = defaultdict(int)
    for p, _, _ in check.final:
        chain_rows[p] += 1
    files_by_part: dict[int, int] = defaultdict(int)
    orphan_keys = {o.key for o in check.orphans}
    for f in files:
        if f.start < f.end and f.key not in orphan_keys:
            files_by_part[f.partition] += 1
    tasks = {task_name(p): TaskStats(files_by_part[p], ends.get(p, 0), chain_rows[p],
                                     typical_wait(outputs.get(p, []), records.times_ms.get(p, [])))
             for p in range(cfg.partitions)}
    s = cfg.settings
    return StatefulResult(
        demo="stateful", produced=produced, in_log=sum(ends.values()), processed=check.processed,
        lost=check.lost + max(0, produced - sum(ends.values())), duplicates=check.duplicates,
        output_matches_batch_job=not mismatches and check.tiled, output_keys=len(expected),
        mismatched_keys=len(mismatches), mismatches=tuple(mismatches[:10]), tiled=check.tiled,
        untiled_tasks=check.untiled_tasks, orphan_batches=check.orphans,
        orphans_explained=all(o.explained for o in check.orphans), drained=drained,
        static_roll_nothing_moved=None if roll is None else not roll.moved,
        pipeline_warnings=tuple(f"{m.label} at {t - t0:.1f} s: {msg}"
                                for m in members for t, msg in m.warnings),
        events=tuple(event_results), tasks=tasks, members=member_stats(members),
        config=RunSettings(cfg.members, cfg.partitions, cfg.rate, cfg.duration, s.session_timeout_ms,
                           s.heartbeat_interval_ms, s.standby_replicas, s.max_warmups,
                           s.acceptable_recovery_lag, s.trigger_ms, WINDOW_S, WATERMARK_DELAY_S,
                           VALUE_SCHEMA, log_spec, topic),
        data_dir=data_dir)


def _task_order(task: str) -> int:
    return int(task.rpartition("_")[2])


def member_stats(members: Sequence[Member]) -> dict[str, MemberStats]:
    out: dict[str, MemberStats] = {}
    for name, ms in sorted(released_by_name(members).items()):
        starts: dict[str, int] = defaultdict(int)
        for m in ms:
            for k, n in m.starts.items():
                starts[k] += n
        out[name] = MemberStats(
            instance=ms[0].instance, batches=sum(len(m.batches) for m in ms),
            records=sum(b.records for m in ms for b in m.batches), starts=dict(sorted(starts.items())),
            processes=tuple(ProcessStats.of(m) for m in ms))
    return out
