"""What the PySpark demo found: every record counted, pauses and stalls per event, and the typed result.

Rules of this module:

1. Pure computations on plain data: batches completed, offset ranges read, events with their
   before/after ownership. The only I/O is reading back what the members wrote (`read_ranges`,
   `read_aggregates`); the run hands in everything else.
2. The result is typed (:class:`DemoResult` and the dataclasses it holds). The JSON object that
   ``--json`` prints and ``results.json`` stores is produced from it in one place,
   :meth:`DemoResult.to_json` (`regroup.demo.spark_common.result`), and its keys are the field names:
   renaming a field changes the JSON contract.
3. Lost records are counted against the log's end offsets and what the producer says it produced; a
   duplicate is attributed to the last event that began before it was read again.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from regroup.demo.common import Workload, customer_key
from regroup.demo.spark_common.result import JsonResult, ProcessStats, released_by_name
from regroup.demo.spark_common.scenario import EVENT_LABELS, moved_partitions
from regroup.demo.spark_demo.processes import MAX_RECORDS_PER_TRIGGER, Proc
from regroup.demo.spark_demo.scenario import DemoConfig, Event


# --------------------------------------------------------------------------- records read back
@dataclass(frozen=True, slots=True)
class ReadRange:
    """Offsets ``first..last`` of ``partition`` that batch ``batch`` of ``member`` processed."""

    member: str
    batch: int
    t: float
    partition: int
    first: int
    last: int
    count: int


@dataclass(frozen=True, slots=True)
class OffsetSpan:
    """Offsets ``first..last`` of a partition read ``times`` times (0: lost), last read at ``t`` by
    ``members``."""

    partition: int
    first: int
    last: int
    times: int
    members: tuple[str, ...] = ()
    t: float = 0.0

    @property
    def records(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class Coverage:
    distinct: int
    reads: int
    lost: int
    duplicates: int
    lost_spans: tuple[OffsetSpan, ...]
    duplicate_spans: tuple[OffsetSpan, ...]
    gapped_ranges: int  # ranges whose count is not last - first + 1 (a batch skipped offsets)


def read_ranges(out: Path) -> tuple[list[ReadRange], set[tuple[str, int]]]:
    """Every batch's offset ranges, and which (member, batch) finished (empty batches included)."""
    ranges: list[ReadRange] = []
    done: set[tuple[str, int]] = set()
    for f in sorted((out / "ranges").glob("*.json")):
        rec = json.loads(f.read_text())
        done.add((rec["member"], rec["batch"]))
        ranges += [ReadRange(rec["member"], rec["batch"], rec["t"], r["partition"], r["first"], r["last"],
                             r["count"]) for r in rec["ranges"]]
    return ranges, done


def read_aggregates(out: Path, done: set[tuple[str, int]]) -> tuple[dict[str, list[int]], int]:
    """The output table summed per customer, over the batches whose ranges file exists — a batch's
    marker that its output is complete; returns the totals and how many outputs lack their marker
    (a member killed between its two writes)."""
    import pyarrow.parquet as pq

    totals: dict[str, list[int]] = {}
    incomplete = 0
    for f in sorted((out / "aggregates").glob("member=*/batch=*.parquet")):
        key = (f.parent.name.removeprefix("member="), int(f.stem.removeprefix("batch=")))
        if key not in done:
            incomplete += 1
            continue
        t = pq.read_table(f).to_pydict()
        for customer, events, amount in zip(t.get("customer", []), t.get("events", []), t.get("amount", []),
                                            strict=True):
            acc = totals.setdefault(customer, [0, 0])
            acc[0] += events
            acc[1] += amount
    return totals, incomplete


# --------------------------------------------------------------------------- coverage
def count_coverage(ranges: Iterable[ReadRange], ends: Mapping[int, int]) -> Coverage:
    """How often each offset ``[0, ends[p])`` was processed, summed up: distinct, lost, duplicated."""
    by_part: dict[int, list[ReadRange]] = {}
    gapped = 0
    for r in ranges:
        by_part.setdefault(r.partition, []).append(r)
        gapped += r.count != r.last - r.first + 1
    distinct = reads = lost = dups = 0
    lost_spans: list[OffsetSpan] = []
    dup_spans: list[OffsetSpan] = []
    for p in sorted(set(ends) | set(by_part)):
        end = ends.get(p, 0)
        rs = by_part.get(p, [])
        times = _times_read(rs, end)
        for first, last, n in _runs(times):
            if first >= end:
                continue  # read past the log's end: impossible, ignored rather than counted as lost
            if n == 0:
                lost += last - first + 1
                lost_spans.append(OffsetSpan(p, first, last, 0))
                continue
            distinct += last - first + 1
            reads += (last - first + 1) * n
            if n > 1:
                dups += (last - first + 1) * (n - 1)
                over = [r for r in rs if r.first <= last and r.last >= first]
                dup_spans.append(OffsetSpan(p, first, last, n, tuple(sorted({r.member for r in over})),
                                            max(r.t for r in over)))
    return Coverage(distinct, reads, lost, dups, tuple(lost_spans), tuple(_merge(dup_spans)), gapped)


def _times_read(ranges: Sequence[ReadRange], end: int) -> list[int]:
    size = max([end, *(r.last + 1 for r in ranges)])
    diff = [0] * (size + 1)
    for r in ranges:
        diff[r.first] += 1
        diff[r.last + 1] -= 1
    out, run = [], 0
    for d in diff[:size]:
        run += d
        out.append(run)
    return out


def _runs(values: Sequence[int]) -> Iterable[tuple[int, int, int]]:
    """(first, last, value) of each run of equal values."""
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            yield start, i - 1, values[start]
            start = i


def _merge(spans: list[OffsetSpan]) -> list[OffsetSpan]:
    """Adjacent duplicate spans of one partition and the same readers are one hand-off."""
    out: list[OffsetSpan] = []
    for s in spans:
        prev = out[-1] if out else None
        if prev and prev.partition == s.partition and prev.last + 1 == s.first and prev.members == s.members:
            out[-1] = OffsetSpan(s.partition, prev.first, s.last, max(prev.times, s.times), s.members,
                                 max(prev.t, s.t))
        else:
            out.append(s)
    return out


def expected_from_reads(ranges: Iterable[ReadRange], workload: Workload) -> dict[str, list[int]]:
    """What the output table must hold given what the batches read (duplicates included)."""
    totals: dict[str, list[int]] = {}
    for r in ranges:
        if r.partition not in workload.at_offset:
            continue
        customers, amounts = workload.at_offset[r.partition]
        for o in range(r.first, min(r.last + 1, len(customers))):
            acc = totals.setdefault(customer_key(customers[o]), [0, 0])
            acc[0] += 1
            acc[1] += amounts[o]
    return totals


# --------------------------------------------------------------------------- pauses and stalls
def longest_gap(times: Sequence[float], lo: float, hi: float) -> float:
    """The longest interval without a completed batch that overlaps ``[lo, hi]``.

    ``times`` are sorted completion times. The interval before the first completion inside the window
    starts at the last completion before ``lo`` (or at ``lo`` when there is none: a member that just
    joined waits for its first batch); an interval still open at ``hi`` counts up to ``hi``.
    """
    if hi <= lo:
        return 0.0
    i = bisect.bisect_right(times, lo)
    points = [times[i - 1] if i > 0 else lo]
    points += [t for t in times[i:] if t <= hi]
    points.append(hi)
    return max(b - a for a, b in itertools.pairwise(points))


def typical_gap(times: Sequence[float]) -> float:
    """The median interval between consecutive batches: a member's normal rhythm."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else 0.0


def pauses(members: Mapping[str, Sequence[Proc]], ev: Event, end: float) -> dict[str, float]:
    """Each member's longest pause within the event's window (members alive in it only)."""
    lo, hi = ev.window
    out: dict[str, float] = {}
    for name, procs in sorted(members.items()):
        alive_from = min(p.released_at or end for p in procs)
        alive_to = max(p.ended_at or end for p in procs)
        a, b = max(lo, alive_from), min(hi, alive_to)
        if a < b:
            times = sorted(bt.t for p in procs for bt in p.batches)
            out[name] = round(longest_gap(times, a, b), 2)
    return out


def stalls(ranges: Sequence[ReadRange], ev: Event, partitions: int) -> tuple[float, float]:
    """The longest time a partition went unprocessed in the event's window: (the partitions the event
    touched — moved, or owned by the member concerned —, every other partition)."""
    lo, hi = ev.window
    touched = set(ev.touched) | {p for p, m in ev.owners_before.items() if m == ev.member}
    worst = {True: 0.0, False: 0.0}
    for p in range(partitions):
        times = sorted(r.t for r in ranges if r.partition == p)
        worst[p in touched] = max(worst[p in touched], longest_gap(times, lo, hi))
    return round(worst[True], 2), round(worst[False], 2)


def attribute(span: OffsetSpan, events: Sequence[Event]) -> str:
    """The event whose hand-off a duplicate belongs to: the last one that began before the re-read."""
    before = [e for e in events if e.at <= span.t]
    return before[-1].kind if before else "-"


# --------------------------------------------------------------------------- the typed result
@dataclass(frozen=True, slots=True)
class EventResult:
    """One scripted event, measured: how long the group took to settle and who paused how long."""

    event: str  # the kind: scale-out, scale-in, static-roll, kill-9
    label: str
    member: str
    at_s: float
    stable_after_s: float | None
    resumed_after_s: float | None
    touched_partitions: tuple[int, ...]
    group_epoch_before: int
    group_epoch_after: int
    partitions_moved: tuple[int, ...]
    pauses_s: Mapping[str, float]
    max_pause_uninvolved_s: float
    max_stall_touched_partitions_s: float
    max_stall_other_partitions_s: float
    duplicates: int
    note: str


@dataclass(frozen=True, slots=True)
class DuplicateSpan:
    """Records of one partition processed more than once, and the event whose hand-off caused it."""

    partition: int
    first: int
    last: int
    records: int
    times: int
    members: tuple[str, ...]
    event: str


@dataclass(frozen=True, slots=True)
class MemberStats:
    """One member over the whole run (all its processes: a static member's restart is the same member)."""

    instance: str | None
    batches: int
    records: int
    typical_batch_interval_s: float
    processes: tuple[ProcessStats, ...]


@dataclass(frozen=True, slots=True)
class EpochChange:
    at_s: float
    epoch: int
    cause: str


@dataclass(frozen=True, slots=True)
class RunSettings:
    members: int
    partitions: int
    rate: int
    duration_s: float
    session_timeout_ms: int
    max_records_per_trigger: int
    log: str
    topic: str


@dataclass(frozen=True, slots=True)
class DemoResult(JsonResult):
    """Everything the demo checked and measured. ``lost`` must be 0 (the CLI exits 1 otherwise)."""

    produced: int
    in_log: int
    processed: int
    reads: int
    lost: int
    duplicates: int
    totals_match: bool
    totals_mismatched_customers: int
    output_matches_reads: bool
    incomplete_batches: int
    gapped_ranges: int
    drained: bool
    static_roll_epoch_unchanged: bool | None
    events: tuple[EventResult, ...]
    duplicate_spans: tuple[DuplicateSpan, ...]
    lost_spans: tuple[OffsetSpan, ...]  # the first 20
    group_epochs: tuple[EpochChange, ...]
    members: Mapping[str, MemberStats]
    config: RunSettings
    data_dir: str | None  # None once removed (without --keep)
    timings_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    wall_time_s: float = 0.0
    report: Mapping[str, str] = dataclasses.field(default_factory=dict)  # png, html, json: paths


def analyse(*, cfg: DemoConfig, workload: Workload, procs: Sequence[Proc], events: Sequence[Event],
            t0: float, end: float, ends: Mapping[int, int], ranges: Sequence[ReadRange],
            totals: Mapping[str, list[int]], incomplete: int, drained: bool,
            history: Sequence[EpochChange], log_spec: str, topic: str, data_dir: str) -> DemoResult:
    """Count every record, measure every event and every member: the demo's verdict."""
    w = workload
    cov = count_coverage(ranges, ends)
    members = released_by_name(procs)
    event_results = []
    for ev in events:
        ev_pauses = pauses(members, ev, end)
        touched, others = stalls(ranges, ev, cfg.partitions)
        event_results.append(EventResult(
            event=ev.kind, label=EVENT_LABELS[ev.kind], member=ev.member,
            at_s=round(ev.at - t0, 1),
            stable_after_s=round(ev.stable_at - ev.at, 1) if ev.stable_at else None,
            resumed_after_s=round(ev.resumed_at - ev.at, 1) if ev.resumed_at else None,
            touched_partitions=tuple(ev.touched),
            group_epoch_before=ev.epoch_before, group_epoch_after=ev.epoch_after,
            partitions_moved=tuple(moved_partitions(ev.owners_before, ev.owners_after)),
            pauses_s=ev_pauses,
            max_pause_uninvolved_s=max((v for k, v in ev_pauses.items() if k != ev.member), default=0.0),
            max_stall_touched_partitions_s=touched, max_stall_other_partitions_s=others,
            duplicates=sum(s.records * (s.times - 1) for s in cov.duplicate_spans
                           if attribute(s, events) == ev.kind),
            note=ev.note,
        ))
    roll = next((e for e in event_results if e.event == "static-roll"), None)
    roll_kept_epoch = None if roll is None else roll.group_epoch_before == roll.group_epoch_after
    in_log = sum(ends.values())
    return DemoResult(
        produced=w.produced, in_log=in_log, processed=cov.distinct, reads=cov.reads,
        lost=cov.lost + max(0, w.produced - in_log), duplicates=cov.duplicates,
        totals_match=totals == w.totals,
        totals_mismatched_customers=sum(totals.get(k) != v for k, v in w.totals.items())
        + len(set(totals) - set(w.totals)),
        output_matches_reads=totals == expected_from_reads(ranges, w),
        incomplete_batches=incomplete, gapped_ranges=cov.gapped_ranges, drained=drained,
        static_roll_epoch_unchanged=roll_kept_epoch,
        events=tuple(event_results),
        duplicate_spans=tuple(DuplicateSpan(s.partition, s.first, s.last, s.records, s.times, s.members,
                                            attribute(s, events)) for s in cov.duplicate_spans),
        lost_spans=cov.lost_spans[:20],
        group_epochs=tuple(history),
        members=member_stats(members),
        config=RunSettings(cfg.members, cfg.partitions, cfg.rate, cfg.duration, cfg.session_timeout_ms,
                           MAX_RECORDS_PER_TRIGGER, log_spec, topic),
        data_dir=data_dir,
    )


def member_stats(members: Mapping[str, Sequence[Proc]]) -> dict[str, MemberStats]:
    out: dict[str, MemberStats] = {}
    for name, procs in sorted(members.items()):
        times = sorted(b.t for p in procs for b in p.batches)
        out[name] = MemberStats(
            instance=procs[0].instance, batches=len(times),
            records=sum(b.rows for p in procs for b in p.batches),
            typical_batch_interval_s=round(typical_gap(times), 2),
            processes=tuple(ProcessStats.of(p) for p in procs),
        )
    return out
