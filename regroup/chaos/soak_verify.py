"""The chaos soak's accounting: what every member life processed and committed, and the verdict.

Rules of this module:

1. A record is its ``seq`` (unique: `regroup.chaos.soak_producer`). It is *processed* once per line a
   member life wrote for it (`regroup.chaos.soak_member`, rule 1); the log, read back at the end, says
   which ``seq`` lives at each (partition, offset), and a line that disagrees is a misread.
2. Lost: a ``seq`` the producer acknowledged that no life processed. Any loss fails the soak.
3. A record processed n times has n - 1 duplicates. A processing is *excused* by an unclean end of its
   life after it and before that life committed past it: kill -9, a lost membership, a hand-off whose
   commit was refused, a fatal error, an exit of its own (a refused commit alone is not: the member
   keeps its partitions and commits them later). Of a record's n processings at most one may go
   unexcused (the one that counts); each further unexcused processing is an unexplained duplicate,
   which fails the soak (e.g. two lives that both committed past one record: offsets went back).
4. Each explained duplicate is classified by the fault that caused the excusing end: the fault that
   killed the life, else the fault whose window (start to recovery, plus a margin) holds the moment the
   membership ended; "no fault" when none does (reported: lost memberships nobody caused).
5. Only whole lines are read (`regroup.demo.common.read_new_lines`): a torn last line of a killed
   process was not processed. A Spark life's losses and refusals are logged by the source to the
   life's stderr, without a time: they are timed when the soak reads them (a little late, so a
   Spark processing may be excused by an end that came just before it: looser than for consumers).
"""

from __future__ import annotations

import collections
import json
import re
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup.chaos.soak_procs import Incarnation
from regroup.demo.common import read_new_lines
from regroup.log import open_log

#: What a Spark life's source logs when its membership ends uncleanly (`regroup.spark.member`).
_SPARK_UNCLEAN = re.compile(r"membership lost|commit of \d+ partitions refused|commit of the finished last "
                            r"batch failed")
#: Seconds after a fault's recovery during which a lost membership is still its doing.
WINDOW_MARGIN_S = 15.0


@dataclass
class _Reading:
    """Where the soak is in one life's files."""

    out: int = 0
    events: int = 0
    log: int = 0
    batch_t: float = 0.0


@dataclass
class Window:
    """A fault as the accounting sees it: what it was, when, and whom it killed."""

    index: int
    kind: str
    start: float
    until: float
    killed: tuple[int, ...] = ()


class Ledger:
    """Everything the lives wrote, read as they write it (`tail`)."""

    def __init__(self, partitions: int) -> None:
        self.marks = [bytearray() for _ in range(partitions)]
        self.frontier = [0] * partitions
        self.first_inc, self.first_p = array("i"), array("i")
        self.first_o, self.first_t = array("q"), array("d")
        self.extra: dict[int, list[tuple[int, float]]] = {}
        self.misread: list[str] = []
        self.deliveries = 0
        #: Per life: partition -> [(time, offset)] of its acknowledged commits, in order.
        self.commits: dict[int, dict[int, list[tuple[float, int]]]] = {}
        self.refusals: list[tuple[float, int, str]] = []  # (time, life, reason)
        self._reading: dict[int, _Reading] = {}

    # ------------------------------------------------------------------ reading
    def tail(self, inc: Incarnation) -> None:
        r = self._reading.setdefault(inc.id, _Reading())
        lines, r.out = read_new_lines(inc.out, r.out)
        for raw in lines:
            parts = raw.split()
            if parts and parts[0] == b"b":
                r.batch_t = float(parts[1])
            elif len(parts) == 3:
                self._processed(inc.id, r.batch_t, int(parts[0]), int(parts[1]), int(parts[2]))
        lines, r.events = read_new_lines(inc.events, r.events)
        for raw in lines:
            self._event(inc, raw.decode(errors="replace").split(" ", 2))
        if inc.spark:
            lines, r.log = read_new_lines(inc.log, r.log)
            for raw in lines:
                text = raw.decode(errors="replace")
                if _SPARK_UNCLEAN.search(text):
                    inc.unclean.append((time.time(), "spark: " + text.strip()[:200]))

    def _processed(self, life: int, t: float, seq: int, p: int, o: int) -> None:
        self.deliveries += 1
        if seq < 0:
            self.misread.append(f"{life}: partition {p} offset {o} has no seq in its value")
            return
        if 0 <= p < len(self.marks):
            marks = self.marks[p]
            if o >= len(marks):
                marks.extend(bytes(o + 1 - len(marks) + 4096))
            marks[o] = 1
            f = self.frontier[p]
            while f < len(marks) and marks[f]:
                f += 1
            self.frontier[p] = f
        if seq >= len(self.first_inc):
            grow = seq + 1 - len(self.first_inc) + 4096
            self.first_inc.extend([-1] * grow)
            self.first_p.extend([-1] * grow)
            self.first_o.extend([-1] * grow)
            self.first_t.extend([0.0] * grow)
        if self.first_inc[seq] < 0:
            self.first_inc[seq], self.first_t[seq] = life, t
            self.first_p[seq], self.first_o[seq] = p, o
            return
        if (self.first_p[seq], self.first_o[seq]) != (p, o):
            self.misread.append(f"seq {seq}: read at {p}/{o} by life {life}, at {self.first_p[seq]}/"
                                f"{self.first_o[seq]} before")
        self.extra.setdefault(seq, []).append((life, t))

    def _event(self, inc: Incarnation, fields: list[str]) -> None:
        if len(fields) < 2:
            return
        t, kind, rest = float(fields[0]), fields[1], fields[2] if len(fields) > 2 else ""
        if kind == "commit":
            mine = self.commits.setdefault(inc.id, {})
            for item in rest.split(","):
                p, _, o = item.partition("=")
                mine.setdefault(int(p), []).append((t, int(o)))
        elif kind in ("lost", "revoke-refused", "fatal", "failed"):
            inc.unclean.append((t, f"{kind} {rest}".strip()[:300]))
        if kind in ("refused", "revoke-refused"):
            self.refusals.append((t, inc.id, rest.partition(" ")[2]))

    # ------------------------------------------------------------------ questions during the run
    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.frontier[p] >= end for p, end in ends.items() if p < len(self.frontier))

    def acked(self, before: float) -> dict[int, int]:
        """Per partition, the highest offset a consumer life's commit was acknowledged for before then."""
        out: dict[int, int] = {}
        for per_life in self.commits.values():
            for p, commits in per_life.items():
                for t, o in commits:
                    if t < before and o > out.get(p, -1):
                        out[p] = o
        return out


# ============================================================================ the verdict

@dataclass
class Records:
    produced: int
    in_log: int
    deliveries: int
    distinct: int
    lost: int
    duplicates: int
    explained: int
    unexplained: int
    by_cause: dict[str, int] = field(default_factory=dict)
    lost_seqs: list[int] = field(default_factory=list)
    unexplained_seqs: list[dict[str, Any]] = field(default_factory=list)
    misread: list[str] = field(default_factory=list)


def read_log(log_dir: Path, topic: str) -> dict[int, tuple[int, int]]:
    """seq -> (partition, offset) of every record in the log."""
    log = open_log(str(log_dir))
    out: dict[int, tuple[int, int]] = {}
    try:
        for p, end in sorted(log.end_offsets(topic).items()):
            at = 0
            while at < end:
                batch = log.read(topic, p, at, 5_000)
                if not batch:
                    break
                for rec in batch:
                    out[int(json.loads(rec.value or b"{}").get("seq", -1))] = (p, rec.offset)
                at = batch[-1].offset + 1
    finally:
        log.close()
    return out


def _excuse(inc: Incarnation, commits: dict[int, list[tuple[float, int]]], t: float, p: int, o: int,
            ) -> tuple[float, str] | None:
    """The unclean end that excuses ``inc``'s processing of (p, o) at ``t`` (rule 3), if any."""
    covering = [ct for ct, co in commits.get(p, ()) if co > o and ct >= t]
    committed_at = min(covering) if covering else float("inf")
    for te, cause in sorted(inc.unclean):
        if t <= te < committed_at:
            return te, cause
    return None


def classify(end: tuple[float, str], life: int, windows: list[Window]) -> str:
    """The fault that caused an excusing end (rule 4)."""
    te, cause = end
    if cause.startswith("killed"):
        for w in windows:
            if life in w.killed:
                return w.kind
    for w in sorted(windows, key=lambda w: -w.start):
        if w.start - 1.0 <= te <= w.until + WINDOW_MARGIN_S:
            return w.kind
    return "no fault: " + cause.split(" ", 1)[0].rstrip(":")


def account(ledger: Ledger, lives: dict[int, Incarnation], produced: int, in_log: dict[int, tuple[int, int]],
            windows: list[Window]) -> Records:
    """The verdict on the records (rules 1-4)."""
    misread = list(ledger.misread)
    for seq in range(min(len(ledger.first_inc), max(in_log, default=-1) + 1)):
        at = (ledger.first_p[seq], ledger.first_o[seq])
        if ledger.first_inc[seq] >= 0 and in_log.get(seq) not in (None, at):
            misread.append(f"seq {seq}: processed as {ledger.first_p[seq]}/{ledger.first_o[seq]}, in the log "
                           f"at {in_log[seq]}")
    processed = [seq for seq in range(len(ledger.first_inc)) if ledger.first_inc[seq] >= 0]
    known = set(range(produced)) | set(in_log)
    misread += [f"seq {seq}: processed, never produced" for seq in sorted(set(processed) - known)[:20]]
    lost = sorted(known - set(processed))
    by_cause: collections.Counter[str] = collections.Counter()
    unexplained: list[dict[str, Any]] = []
    duplicates = explained = 0
    for seq, more in sorted(ledger.extra.items()):
        p, o = int(ledger.first_p[seq]), int(ledger.first_o[seq])
        all_ = [(int(ledger.first_inc[seq]), float(ledger.first_t[seq])), *more]
        duplicates += len(all_) - 1
        excused: list[tuple[str, float]] = []
        unexcused = []
        for life, t in sorted(all_, key=lambda x: x[1]):
            inc = lives[life]
            end = _excuse(inc, ledger.commits.get(life, {}), t, p, o)
            if end is None:
                unexcused.append(life)
            else:
                excused.append((classify(end, life, windows), t))
        n_bad = max(0, len(unexcused) - 1)
        for cause, _ in excused[: len(all_) - 1 - n_bad]:
            by_cause[cause] += 1
        explained += len(all_) - 1 - n_bad
        if n_bad:
            who = [{"life": lives[life].label, "at": round(t, 3)}
                   for life, t in sorted(all_, key=lambda x: x[1])]
            unexplained.append({"seq": seq, "partition": p, "offset": o, "lives": who})
    return Records(produced=produced, in_log=len(in_log), deliveries=ledger.deliveries,
                   distinct=len(processed), lost=len(lost), duplicates=duplicates, explained=explained,
                   unexplained=duplicates - explained, by_cause=dict(by_cause.most_common()),
                   lost_seqs=lost[:200], unexplained_seqs=unexplained[:50], misread=misread[:50])


def first_refusal(ledger: Ledger, after: float, saying: str = "") -> str | None:
    """What a member was told by the first refusal of a commit after ``after`` (disk full: the error),
    preferring one that says ``saying``."""
    later = sorted(r for r in ledger.refusals if r[0] >= after)
    return next((r[2] for r in later if saying in r[2]), later[0][2] if later else None)
