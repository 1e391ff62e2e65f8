"""Code run in separate processes by the multi-process tests (spawned, so it must be importable)."""

from __future__ import annotations

import random
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from regroup.log.base import ConsumedRecord, LogRecord
from regroup.log.embedded import EmbeddedLog


def expected_record(offset: int) -> LogRecord:
    """The record the writer puts at ``offset``: every field derived from the offset, sizes varying."""
    value = bytes([offset % 251]) * (offset % 997) + b"|%d" % offset
    headers = (("n", b"%d" % offset), ("k", b"x" * (offset % 5))) if offset % 3 == 0 else ()
    key = None if offset % 7 == 0 else b"key-%d" % offset
    return LogRecord(key, value, 1_700_000_000_000 + offset, headers)


def matches(r: ConsumedRecord, offset: int) -> bool:
    e = expected_record(offset)
    return (r.offset, r.key, r.value, r.timestamp_ms, r.headers) == (
        offset, e.key, e.value, e.timestamp_ms, e.headers
    )


def writer_main(directory: str, topic: str, total: int, seed: int) -> None:
    """Produce ``total`` records to partition 0 in batches of random sizes (a few big, many small)."""
    rng = random.Random(seed)
    ready = Path(directory) / "reader-ready"
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:  # start together with the reader
        time.sleep(0.01)
    with EmbeddedLog(directory, fsync="never") as log:
        offset = 0
        while offset < total:
            n = min(total - offset, rng.choice((1, 2, 5, 17, 100, 600, 5000)))
            first = log.produce(topic, 0, [expected_record(o) for o in range(offset, offset + n)])
            assert first == offset, (first, offset)
            offset += n


def reader_main(directory: str, topic: str, total: int, deadline_s: float) -> tuple[int, int, str]:
    """Read partition 0 while it is written; returns (records verified, distinct ends seen, error)."""
    log = EmbeddedLog(directory)
    (Path(directory) / "reader-ready").touch()
    pos = 0
    ends_seen: set[int] = set()
    deadline = time.monotonic() + deadline_s
    turn = 0
    try:
        while pos < total:
            if time.monotonic() > deadline:
                return pos, len(ends_seen), f"timed out at offset {pos}"
            ends_seen.add(log.end_offsets(topic)[0])
            turn += 1
            if pos == log.end_offsets(topic)[0]:
                time.sleep(0.0005)  # caught up: let the writer have the CPU
                continue
            if turn % 2:
                batch = log.read(topic, 0, pos, 700)
                for r in batch:
                    if not matches(r, pos):
                        return pos, len(ends_seen), f"record at {pos} differs: {r!r:.200}"
                    pos += 1
            else:
                arrow = log.read_arrow(topic, 0, pos, 3000).to_pylist()
                for row in arrow:
                    e = expected_record(pos)
                    got = (row["offset"], row["key"], row["value"],
                           tuple((h["key"], h["value"]) for h in row["headers"]))
                    if got != (pos, e.key, e.value, e.headers):
                        return pos, len(ends_seen), f"arrow row at {pos} differs: {row!r:.200}"
                    pos += 1
        return pos, len(ends_seen), ""
    except Exception as e:  # reported to the test rather than lost in the child
        return pos, len(ends_seen), f"{type(e).__name__}: {e}"
    finally:
        log.close()


def hold_writer_lock(directory: str, topic: str, locked: Event, release: Event) -> None:
    """Become the writer of partition 0, say so, and hold it until told to stop."""
    with EmbeddedLog(directory) as log:
        log.produce(topic, 0, [LogRecord(b"k", b"v", 1)])
        locked.set()
        release.wait(30)
