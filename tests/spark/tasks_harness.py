"""Shared by the task-mode tests and their member process: pipelines, sinks, and the batch-job check.

A sink keeps each batch's rows under the batch's key (the task and the offsets it covers), the way
an idempotent sink would: a batch run again after a crash or a move overwrites the same key. The
checks then read the sink as a user would: the batches of each task must tile its offsets with no
gap and no overlap, and the output must equal the same pipeline run as a batch job over every
record.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from regroup.log.base import LogRecord, PartitionedLog

TOPIC = "orders"
KEYS = 7
BASE_MS = 1_700_000_000_000

#: The pipelines under test, by name: (build, output mode).
PIPELINES = ("count", "window", "dedup")


def record(partition: int, i: int) -> LogRecord:
    """The i-th record of a partition: keys cycle, values repeat (for deduplication), event time
    moves forward 100 ms per record (nothing is late for a one-hour watermark)."""
    return LogRecord(f"k{(i * 3 + partition) % KEYS}".encode(), str(i % 5).encode(), BASE_MS + i * 100)


class Producer:
    def __init__(self, log: PartitionedLog, partitions: int) -> None:
        self.log, self.partitions = log, partitions
        self.produced = [0] * partitions

    def produce(self, n: int) -> None:
        for p in range(self.partitions):
            start = self.produced[p]
            self.log.produce(TOPIC, p, [record(p, i) for i in range(start, start + n)])
            self.produced[p] += n

    @property
    def total(self) -> int:
        return sum(self.produced)


def build(kind: str) -> tuple[Callable[[Any, Any], Any], str]:
    from pyspark.sql import functions as F

    def keyed(df: Any) -> Any:
        return df.select(F.col("key").cast("string").alias("key"),
                         F.col("value").cast("string").alias("value"), "timestamp")

    if kind == "count":
        return (lambda df, task: keyed(df).groupBy("key").count()), "update"
    if kind == "window":
        return (lambda df, task: keyed(df).withWatermark("timestamp", "1 hour")
                .groupBy(F.window("timestamp", "10 seconds").start.alias("window"), "key").count()), "update"
    if kind == "dedup":
        return (lambda df, task: keyed(df).dropDuplicates(["key", "value"]).select("key", "value")), "append"
    raise ValueError(kind)


def row_key(kind: str, row: dict[str, Any]) -> tuple[Any, ...]:
    if kind == "count":
        return (row["key"],)
    if kind == "window":
        return (row["window"], row["key"])
    return (row["key"], row["value"])


def expected(kind: str, produced: list[int]) -> dict[tuple[Any, ...], Any]:
    """The batch job over every record, per (partition, row key): what the final output must be."""
    out: dict[tuple[Any, ...], Any] = defaultdict(int)
    for p, n in enumerate(produced):
        for i in range(n):
            r = record(p, i)
            key = r.key.decode() if r.key else ""
            if kind == "count":
                out[(p, key)] += 1
            elif kind == "window":
                start = (r.timestamp_ms // 10_000) * 10_000
                window = datetime.fromtimestamp(start / 1000, tz=UTC).replace(tzinfo=None)
                out[(p, _iso(window), key)] += 1
            else:
                out[(p, key, r.value.decode() if r.value else "")] = 1
    return dict(out)


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


_RANGE = re.compile(r"^(?P<task>[^:]+):(?P<topic>[^/]+)/(?P<p>\d+)@(?P<a>\d+)-(?P<b>\d+)$")


def parse_key(key: str) -> tuple[str, int, int, int]:
    m = _RANGE.match(key)
    assert m, f"unexpected batch key {key!r}"
    return m.group("task"), int(m.group("p")), int(m.group("a")), int(m.group("b"))


class Sink:
    """An idempotent sink: rows per batch key (a repeated key overwrites)."""

    def __init__(self, kind: str, directory: Path | None = None) -> None:
        self.kind = kind
        self.directory = directory
        self.batches: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch: Any) -> None:
        rows = [{k: _iso(v) for k, v in r.asDict().items()} for r in df.collect()]
        if self.directory is not None:  # a member process: one file per key, atomically
            # One temporary name per thread: a member runs its tasks' batches in parallel, and a
            # name shared by the process let one batch's rows land under another batch's key
            # (the intermittent failure of test_a_paused_member_is_fenced_when_it_wakes).
            tmp = self.directory / f".{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(rows))
            os.replace(tmp, self.directory / f"{batch.key.replace('/', '~')}.json")
        with self.lock:
            self.batches[batch.key] = rows

    def load(self) -> None:
        assert self.directory is not None
        for f in self.directory.glob("*.json"):
            self.batches[f.name[:-len(".json")].replace("~", "/")] = json.loads(f.read_text())

    def processed(self) -> int:
        with self.lock:
            return sum(b - a for _, _, a, b in map(parse_key, self.batches))

    def covers(self, produced: list[int]) -> bool:
        """Whether the batches tile every partition's produced records (orphans aside)."""
        with self.lock:
            keys = list(self.batches)
        per_partition: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        for key in keys:
            _, p, a, b = parse_key(key)
            if a < b:
                per_partition[p].append((a, b, key))
        return all(_tiling(sorted(per_partition[p]), n) is not None for p, n in enumerate(produced))

    def check(self, produced: list[int], *, orphans: int = 0) -> list[str]:
        """Every partition's batches tile [0, produced) exactly, and the output is the batch job's.

        ``orphans``: how many batches may lie off the tiling — batches a killed or fenced member
        produced and never committed, which its successor ran again with other boundaries (at least
        once across unclean ends). Each must start where a committed batch ended. Returns them."""
        with self.lock:
            batches = dict(self.batches)
        per_partition: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        for key in batches:
            _, p, a, b = parse_key(key)
            if a < b:  # a batch without records (a watermark's) is keyed by its position
                per_partition[p].append((a, b, key))
        final: dict[tuple[Any, ...], Any] = {}
        off: list[str] = []
        for p, n in enumerate(produced):
            chain = _tiling(sorted(per_partition[p]), n)
            assert chain is not None, f"partition {p}: the batches do not tile [0, {n}): {per_partition[p]}"
            on = {key for _, _, key in chain}
            extra = [(a, b, key) for a, b, key in per_partition[p] if key not in on]
            starts = {a for a, _, _ in chain}
            assert all(a in starts for a, _, _ in extra), f"partition {p}: stray batches {extra}"
            off += [key for _, _, key in extra]
            for _a, _b, key in chain:
                for row in batches[key]:
                    rk = (p, *row_key(self.kind, row))
                    if self.kind == "dedup":
                        assert rk not in final, f"duplicate row {rk} in batch {key}"
                        final[rk] = 1
                    else:
                        final[rk] = row["count"]
        want = expected(self.kind, produced)
        if final != want:
            bad = sorted({k[0] for k in set(final) | set(want) if final.get(k) != want.get(k)})
            detail = {p: [(key, sorted(map(str, batches[key]))) for _, _, key in sorted(per_partition[p])]
                      for p in bad}
            got = {k: final.get(k) for k in want if final.get(k) != want[k]}
            raise AssertionError(f"{_diff(final, want)}; got {got}; batches of those partitions: {detail}")
        assert len(off) <= orphans, f"{len(off)} batches off the tiling (allowed {orphans}): {off}"
        return off


def _tiling(ranges: list[tuple[int, int, str]], n: int) -> list[tuple[int, int, str]] | None:
    """A chain of ranges from 0 to n (depth first; few ranges start at one offset)."""
    by_start: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for r in ranges:
        by_start[r[0]].append(r)

    def walk(at: int) -> list[tuple[int, int, str]] | None:
        if at == n:
            return []
        for r in sorted(by_start.get(at, []), key=lambda r: -r[1]):
            rest = walk(r[1])
            if rest is not None:
                return [r, *rest]
        return None

    return walk(0)


def _diff(got: dict[Any, Any], want: dict[Any, Any]) -> str:
    missing = [(k, v) for k, v in want.items() if got.get(k) != v][:5]
    extra = [(k, v) for k, v in got.items() if k not in want][:5]
    return f"output differs from the batch job: wrong/missing {missing}, extra {extra}"


def wait_for(cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def roles(pipelines: Iterable[Any]) -> list[dict[str, str]]:
    return [{str(t): r for t, r in p.tasks.items()} for p in pipelines]
