"""The chaos soak's faults: what they are, the seeded schedule, and how a store file is damaged.

Rules of this module:

1. The schedule is a pure function of the seed and the settings (the kinds allowed, the session
   timeout, the number of members): a run with the same seed and settings injects the same faults, in
   the same order, with the same targets and durations. How long each takes to recover is the run's
   own; only when a fault starts differs.
2. The first faults are one of each allowed kind, in a seeded order (every soak long enough sees every
   kind); then kinds are drawn with `WEIGHTS`.
3. Every number a fault needs is drawn when the fault is drawn, including a seed of its own for the
   bytes a corruption touches (`corrupt`), so that no draw depends on what happened during the run.
4. A corruption damages ``coordinator.db`` only, in place, in one of `CORRUPT_MODES`, and says what it
   did; the soak keeps a copy of the good files to put back.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KINDS = ("member-kill", "member-pause", "connection-cut", "coordinator-kill", "coordinator-pause",
         "disk-full", "store-corrupt")
WEIGHTS = {"member-kill": 4, "member-pause": 3, "connection-cut": 3, "coordinator-kill": 2,
           "coordinator-pause": 2, "disk-full": 1, "store-corrupt": 1}
#: torn-tail: the file cut inside its last page; torn-page: a page whose last sectors are zeros (a
#: write that tore); truncate: cut at a page boundary; zero-page: a whole page zeroed; garbage-header:
#: the first 100 bytes overwritten; bit-flip: one bit flipped anywhere after the header.
CORRUPT_MODES = ("torn-tail", "torn-page", "truncate", "zero-page", "garbage-header", "bit-flip")


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule (every field drawn up front: rule 3)."""

    index: int
    kind: str
    #: Seconds of steady load before it.
    gap_s: float
    #: Which member (an index into the soak's members; None for the coordinator's faults).
    target: int | None = None
    #: How long the fault lasts: a pause, a cut, the time before a killed process is restarted, how
    #: long the disk stays full after the coordinator stopped.
    duration_s: float = 0.0
    #: disk-full: bytes a file may still grow by (beyond the store's current size).
    free_bytes: int = 0
    #: store-corrupt: one of CORRUPT_MODES, how the coordinator was stopped ("sigterm" or "kill -9"),
    #: and the seed of the corruption's own draws.
    mode: str = ""
    stop: str = ""
    corrupt_seed: int = 0

    def describe(self, names: list[str]) -> str:
        who = f" {names[self.target]}" if self.target is not None else ""
        extra = {"member-kill": f", restarted after {self.duration_s:.1f} s",
                 "coordinator-kill": f", restarted after {self.duration_s:.1f} s",
                 "member-pause": f" for {self.duration_s:.1f} s",
                 "coordinator-pause": f" for {self.duration_s:.1f} s",
                 "connection-cut": f" for {self.duration_s:.1f} s",
                 "disk-full": f", {self.free_bytes:,} bytes free, full for {self.duration_s:.1f} s",
                 "store-corrupt": f" ({self.mode}, stopped by {self.stop})"}[self.kind]
        return f"#{self.index} {self.kind}{who}{extra}"


def schedule(seed: int, kinds: tuple[str, ...], members: int, session_timeout_ms: int) -> Iterator[Fault]:
    """The faults of a run, in order, without end (rules 1-3)."""
    rng = random.Random(seed)
    session_s = session_timeout_ms / 1000
    first = list(kinds)
    rng.shuffle(first)
    weights = [WEIGHTS[k] for k in kinds]
    index = 0
    while True:
        index += 1
        kind = first.pop(0) if first else rng.choices(kinds, weights)[0]
        gap = round(rng.uniform(2.0, 6.0), 2)
        if kind == "member-kill":
            yield Fault(index, kind, gap, rng.randrange(members), round(rng.uniform(0.0, 1.2 * session_s), 2))
        elif kind == "member-pause":
            yield Fault(index, kind, gap, rng.randrange(members), round(rng.uniform(1.0, 1.6 * session_s), 2))
        elif kind == "connection-cut":
            yield Fault(index, kind, gap, duration_s=round(rng.uniform(1.0, 1.2 * session_s), 2))
        elif kind == "coordinator-kill":
            yield Fault(index, kind, gap, duration_s=round(rng.uniform(0.0, 4.0), 2))
        elif kind == "coordinator-pause":
            yield Fault(index, kind, gap, duration_s=round(rng.uniform(0.5, 0.7 * session_s), 2))
        elif kind == "disk-full":
            yield Fault(index, kind, gap, duration_s=round(rng.uniform(1.0, 5.0), 2),
                        free_bytes=rng.randrange(0, 64 * 1024))
        else:
            yield Fault(index, kind, gap, mode=rng.choice(CORRUPT_MODES),
                        stop=rng.choice(("sigterm", "kill -9")), corrupt_seed=rng.randrange(2**32))


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """``--faults``: comma-separated kinds (None or "all": every kind)."""
    if text is None or text.strip() == "all":
        return KINDS
    chosen = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in chosen if k not in KINDS]
    if not chosen or bad:
        raise ValueError(f"--faults: choose among {', '.join(KINDS)} (or all), got {text!r}")
    return chosen


def corrupt(db: Path, mode: str, seed: int) -> str:
    """Damage the SQLite file ``db`` in place (rule 4); returns what was done."""
    rng = random.Random(seed)
    data = bytearray(db.read_bytes())
    size = len(data)
    page = int.from_bytes(data[16:18], "big") if size >= 100 else 4096
    page = 65536 if page == 1 else page or 4096
    pages = max(1, size // page)
    if mode == "torn-tail":
        cut = size - rng.randrange(1, page)
        del data[max(0, cut):]
        what = f"cut from {size:,} to {len(data):,} bytes, inside its last page"
    elif mode == "torn-page":
        k = rng.randrange(1, pages) if pages > 1 else 0
        sector = rng.randrange(1, page // 512) * 512
        data[k * page + sector:(k + 1) * page] = bytes(page - sector)
        what = f"page {k + 1} of {pages}: bytes {sector}..{page} zeroed (a torn write)"
    elif mode == "truncate":
        keep = rng.randrange(1, pages) if pages > 1 else 0
        del data[keep * page:]
        what = f"cut from {size:,} to {len(data):,} bytes ({keep} of {pages} pages kept)"
    elif mode == "zero-page":
        k = rng.randrange(pages)
        data[k * page:(k + 1) * page] = bytes(min(page, size - k * page))
        what = f"page {k + 1} of {pages} zeroed"
    elif mode == "garbage-header":
        data[:100] = rng.randbytes(100)
        what = "the first 100 bytes (the SQLite header) overwritten with random bytes"
    elif mode == "bit-flip":
        at = rng.randrange(100, size) if size > 100 else 0
        bit = rng.randrange(8)
        data[at] ^= 1 << bit
        what = f"bit {bit} of byte {at:,} (page {at // page + 1} of {pages}) flipped"
    else:
        raise ValueError(f"unknown corruption mode {mode!r}; one of {CORRUPT_MODES}")
    db.write_bytes(bytes(data))
    return what
