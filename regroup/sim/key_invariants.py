"""The invariants of a key-range run, checked key by key.

In a key-range run (``regroup sim check --key-ranges``) the group cuts partitions into key ranges
and changes how many while it runs, so shards of one partition overlap (ranges of two parallelisms,
a range and its whole partition) and a range processes a scattered subset of its partition's
offsets. `InvariantChecker`'s per-shard rules (a shard's processed offsets form one prefix; a shard
is held by one process) do not fit that. They fit *keys*: a key of a partition lies in exactly one
range at any parallelism, so its records form one stream, processed in order by whoever owns the key
(regroup/sim/keyranges.py says which key each record carries). `KeyRangeChecker` states the rules for
keys and for overlapping shards, keeping the checker's structure (its coordinator-side rules, epochs
and replay are unchanged):

``single-owner``
    as before for equal shards, and also: no two processes hold *overlapping* shards at once
    (acquire .. release);
``revoke-before-assign``
    the coordinator gives a member a shard only when no other member holds (assigned or pending
    revocation) a shard overlapping it;
``at-least-once``
    a range never moves past a record of one of its keys that nobody processed: for each key its scan
    begins — past what its `Resume` skips — at or below where that key's records are done; and by the
    end every record of every key is processed;
``exactly-once``
    a record is processed twice only if an *unclean* hand-off (crash, fencing, lost membership, failed
    final commit) of a shard holding its key happened after it was first processed; a zombie's
    processing is wasted, counted and not held against the rules, as before;
``key-order``
    a record is never processed for the first time after a later record of its key was. With the two
    rules above this is per-key order: a key's records are processed in offset order whoever owns the
    key, except that a replay allowed by ``exactly-once`` processes a suffix again, in order. (A record
    processed again without such a replay breaks ``exactly-once``; a record moved past breaks
    ``at-least-once`` at once, and ``key-order`` too if it is processed later.)
``offsets-monotonic``
    the committed offset of every key (that of the fragment holding its point) never goes back, and
    never runs ahead of that key's processed records.

State, per key (``(topic, partition, key index)``): ``done`` — every record of the key below this
offset has been processed (the key's ``processed_hw``); ``unclean`` — records below it may be
processed again; ``skipped`` — records a range moved past unprocessed (only after a violation);
``committed``; ``first`` — how many of its records were processed for the first time. The records
below ``done`` are exactly those processed once and those skipped (``first + |skipped|``): at the end
a key with fewer got records *below* where its readers were — which only a log that puts a key's new
records below its old ones does (a producer-side layout breaking its rule 2, regroup/sim/pieces.py) —
and nobody processed them (``at-least-once``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

from regroup.protocol.records import CurrentAssignmentRecord, OffsetRecord
from regroup.protocol.shard import Shard, overlaps
from regroup.sim.invariants import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    KEY_ORDER,
    OFFSETS_MONOTONIC,
    REVOKE_BEFORE_ASSIGN,
    SINGLE_OWNER,
    InvariantChecker,
    _GroupView,
    offset_went_back,
)
from regroup.sim.keyranges import RecordKeys, Run, run_records

#: One key of one partition: ``(topic, partition, key index)``.
KeyId = tuple[str, int, int]


def _span(offsets: Sequence[int]) -> str:
    """A list of record offsets, briefly."""
    if len(offsets) == 1:
        return f"{offsets[0]}"
    return f"{offsets[0]}..{offsets[-1]} ({len(offsets)} records)"


def overlapping_held(shard: Shard, holders: Mapping[Shard, set[str]],
                     me: str) -> list[tuple[Shard, list[str]]]:
    """The shards other than ``shard`` that overlap it and that someone other than ``me`` holds."""
    out: list[tuple[Shard, list[str]]] = []
    for other in sorted(s for s in holders if s != shard and overlaps(s, shard)):
        others = sorted(holders[other] - {me})
        if others:
            out.append((other, others))
    return out


class KeyRangeChecker(InvariantChecker):
    """`InvariantChecker` for key-range runs: the processing rules per key (see the module)."""

    def __init__(self, keys: RecordKeys, max_violations: int = 50) -> None:
        super().__init__(max_violations)
        self.keys = keys
        self.done: dict[KeyId, int] = {}
        self.unclean: dict[KeyId, int] = {}
        self.skipped: dict[KeyId, set[int]] = {}
        self.committed: dict[KeyId, int] = {}
        self.first: dict[KeyId, int] = {}
        #: Records processed (first times and again), zombies' excluded.
        self.records_processed = 0

    # ---------------------------------------------------------------- consumers
    def on_acquire(self, t: int, owner: str, shard: Shard) -> None:
        super().on_acquire(t, owner, shard)
        for other, others in overlapping_held(shard, self.holders, owner):
            self.fail(t, SINGLE_OWNER, f"{owner} takes {shard} while {', '.join(others)} still holds "
                                       f"{other}, which overlaps it", shard)

    def on_activate(self, t: int, owner: str, shard: Shard, offset: int) -> None:
        # Where a range starts proves nothing by itself: its keys may begin further on (`Resume`).
        # Whether it skipped a record is judged key by key when it reports what it processed.
        if owner not in self.holders.get(shard, ()):
            self.fail(t, SINGLE_OWNER, f"{owner} starts {shard} without holding it", shard)

    def on_processed(self, t: int, owner: str, shard: Shard, lo: int, hi: int) -> None:
        # These are scan positions, which pass other ranges' records: only who scans matters here.
        if hi <= lo or self._zombie(owner, shard):
            return
        if owner not in self.holders.get(shard, ()):
            self.fail(t, SINGLE_OWNER, f"{owner} processed {shard} [{lo}, {hi}) without holding it "
                                       f"(holder: {self.holder(shard)})", shard)

    def on_records(self, t: int, owner: str, shard: Shard, runs: Sequence[Run]) -> None:
        if self._zombie(owner, shard):
            n = run_records(self.keys, shard, runs)
            self.zombie_records += n
            self.duplicates += n
            return
        for run in runs:
            self._run(t, owner, shard, run)

    def _run(self, t: int, owner: str, shard: Shard, run: Run) -> None:
        kid = (shard.topic, shard.partition, run.key)
        offs = self.keys.offsets(shard.topic, shard.partition, run.key, run.hi)
        first, end = bisect_left(offs, run.lo), bisect_left(offs, run.hi)
        self.records_processed += end - first
        done = self.done.get(kid, 0)
        todo = bisect_left(offs, done)  # the key's first record not processed yet
        if todo < first:
            self.fail(t, AT_LEAST_ONCE, f"{owner} processed key {run.key} of {shard} from offset {run.lo}, "
                                        f"but its records {_span(offs[todo:first])} were never processed: "
                                        "skipped",
                      shard)
            self.skipped.setdefault(kid, set()).update(offs[todo:first])
        if first < min(end, todo):
            self._again(t, owner, shard, kid, offs[first:min(end, todo)])
        if end > max(first, todo):
            self.first[kid] = self.first.get(kid, 0) + end - max(first, todo)
        if run.hi > done:
            self.done[kid] = run.hi

    def _again(self, t: int, owner: str, shard: Shard, kid: KeyId, again: list[int]) -> None:
        """Records of ``kid`` below where it is done: a late first time (skipped before), or again."""
        skipped = self.skipped.get(kid)
        if skipped:
            late = [o for o in again if o in skipped]
            if late:
                skipped.difference_update(late)
                if not skipped:
                    del self.skipped[kid]
                self.fail(t, KEY_ORDER, f"{owner} processed records {_span(late)} of key {kid[2]} of {shard} "
                                        "after later records of that key", shard)
                self.first[kid] = self.first.get(kid, 0) + len(late)
                gone = set(late)
                again = [o for o in again if o not in gone]
                if not again:
                    return
        self.duplicates += len(again)
        allowed = self.unclean.get(kid, 0)
        bad = again[bisect_left(again, allowed):]
        if bad:
            self.fail(t, EXACTLY_ONCE,
                      f"{owner} processed records {_span(bad)} of key {kid[2]} of {shard} again, though no "
                      f"unclean hand-off of a shard holding that key happened after they were processed "
                      f"(duplicates allowed below {allowed})", shard)

    def on_release(self, t: int, owner: str, shard: Shard, clean: bool) -> None:
        zombie = self._zombie(owner, shard)  # a zombie's shards were marked unclean when it was fenced
        super().on_release(t, owner, shard, clean)
        if not clean and not zombie:
            self._unclean(shard)

    def on_fenced(self, t: int, owner: str) -> None:
        held = sorted(s for s, hs in self.holders.items() if owner in hs)
        super().on_fenced(t, owner)
        for s in held:
            self._unclean(s)

    def _unclean(self, shard: Shard) -> None:
        """An unclean hand-off of ``shard``: what its keys processed so far may be processed again."""
        for k in self.keys.keys_in(shard):
            kid = (shard.topic, shard.partition, k)
            done = self.done.get(kid, 0)
            if done > self.unclean.get(kid, 0):
                self.unclean[kid] = done

    def all_processed(self, t: int, ends: Mapping[Shard, int]) -> None:
        """End of run: every record below ``ends[shard]`` of every key of the shard (a partition, or a
        key range of it: the open pieces of a partition split on the producer side) must have been
        processed."""
        for shard, end in sorted(ends.items()):
            topic, p = shard.topic, shard.partition
            for k in range(self.keys.keys_per_partition) if shard.whole else self.keys.keys_in(shard):
                kid = (topic, p, k)
                offs = self.keys.offsets(topic, p, k, end)
                skipped = self.skipped.get(kid, set())
                missing = sorted(o for o in skipped if o < end)
                done = self.done.get(kid, 0)
                missing += offs[bisect_left(offs, done):bisect_left(offs, end)]
                if missing:
                    self.fail(t, AT_LEAST_ONCE, f"{shard}: records {_span(missing)} of key {k} were never "
                                                "processed", shard)
                below = bisect_left(offs, done) - len(skipped) - self.first.get(kid, 0)
                if below > 0:
                    self.fail(t, AT_LEAST_ONCE, f"{shard}: {below} record(s) of key {k} below offset {done}, "
                                                "where its readers had got before they were produced, were "
                                                "never processed", shard)

    # ---------------------------------------------------------------- coordinator
    def _current(self, t: int, r: CurrentAssignmentRecord, view: _GroupView) -> set[Shard]:
        old = view.current.get(r.member_id)
        touched = super()._current(t, r, view)
        new = r.current
        if new is None:
            return touched
        gained = new.assigned - old.assigned if old is not None else new.assigned
        for s in sorted(gained):
            for other, others in overlapping_held(s, view.holders, r.member_id):
                self.fail(t, REVOKE_BEFORE_ASSIGN, f"group {r.group_id}: {r.member_id} is given {s} while "
                                                   f"{others} still hold {other}, which overlaps it", s)
        return touched

    def _offset(self, t: int, r: OffsetRecord, view: _GroupView) -> None:
        if r.offset is None:  # a fragment rewritten or cut: its keys' offsets come in the same step
            view.offsets.pop(r.shard, None)
            return
        if (broken := offset_went_back(r.group_id, r.shard, view.offsets.get(r.shard), r.offset)) is not None:
            self.fail(t, OFFSETS_MONOTONIC, broken, r.shard)
        view.offsets[r.shard] = r.offset
        topic, p = r.shard.topic, r.shard.partition
        for k in self.keys.keys_in(r.shard):
            kid = (topic, p, k)
            old = self.committed.get(kid)
            if old is not None and r.offset < old:
                self.fail(t, OFFSETS_MONOTONIC, f"group {r.group_id}: the committed offset of key {k} of "
                                                f"{topic}:{p} went back from {old} to {r.offset} ({r.shard})",
                          r.shard)
            else:
                self.committed[kid] = r.offset
            offs = self.keys.offsets(topic, p, k, r.offset)
            ahead = offs[bisect_left(offs, self.done.get(kid, 0)):bisect_left(offs, r.offset)]
            if ahead:
                self.fail(t, OFFSETS_MONOTONIC, f"group {r.group_id}: offset {r.offset} committed for "
                                                f"{r.shard}, but records {_span(ahead)} of key {k} were not "
                                                "processed",
                          r.shard)
