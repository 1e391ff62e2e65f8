"""Simulated consumers reading partitions split on the producer side, as the real consumer does.

`regroup.client.consumer` reads an owned shard whose keys lie in several open pieces of the log
(`regroup.log.embedded.layout`) as *lanes*, one per piece (`regroup.protocol.microbatch.lanes_of`), each with
its own position, each committed on its own. `LaneProcessor` is `workload.Processor` with lanes, for
``regroup sim check --splits`` (the log's layout: regroup/sim/pieces.py). The rules, the consumer's:

1. **Lanes at assignment.** A newly assigned shard that resumes at ``r`` (`driver.resumes`) is cut at
   the open pieces' boundaries with the consumer's own `lanes_of`; every lane begins where ``r``
   says for its own keys (`microbatch.clip`: ``r.start``, or higher when skips cover all its keys)
   and skips what ``r`` says there.
2. **A lane's position** is lazy, as a shard's (`workload.Processor`): the batch fetched at one poll
   boundary is processed by the next. A fetch reads the lane's keys from the sealed pieces at or
   above its position, in offset order, then from the open piece holding them to its end (layout
   rule 3), so the lane moves to that open piece's end at the fetch (`PieceLog.end_at`), and it has
   processed, per key of its range, every record in between minus its skips: one `Run` per key
   (`keyranges.scanned`), records never enumerated. A lane reads the piece holding its first key: a
   lane that spanned two open pieces would process the keys of that piece only.
3. **A split cuts lanes** (`cut_at_split`). The consumer notices a new layout when it next reads: at
   the first poll boundary at or after a split, each active lane that spans several open pieces is
   cut into one lane per piece, each from where the lane was (the batch fetched before is done by
   then) or further where its own keys resume, with the lane's skips for its keys (`_begun`, as at
   assignment: the consumer's `_cut_lanes` clips the same way).
4. **One read per piece** (`read_from`). A member reads each open piece once for all its lanes in it,
   from the lowest of their positions, and each lane keeps the records at or above its own position.
   Positions in one piece differ only at a lane's first fetch: after an assignment, a cut, or a merge
   (lanes from pieces with different ends now share one). At each such boundary the member runs a
   *sync* (one event) that applies rules 3 and 4; otherwise a member costs no events, as before.
5. **Commits per lane.** Auto-commits and a revocation's commit carry every lane's position (the
   coordinator takes a member's commit of a key range inside a shard it owns); a shard in one piece
   is its own single lane, so its commits are exactly those of a key-range run.

Lanes report what they process as their owned shard (`ShardObserver`): ownership is the shard's; the
runs carry the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from regroup.protocol.keyrange import Resume
from regroup.protocol.microbatch import lane_begin, lanes_of
from regroup.protocol.shard import Shard
from regroup.sim.invariants import KEY_ORDER
from regroup.sim.keyranges import RecordKeys, scanned
from regroup.sim.kip848 import Kip848System
from regroup.sim.member_node import MemberWorld
from regroup.sim.observers import ShardObserver
from regroup.sim.pieces import LayoutChange, PieceLog
from regroup.sim.workload import Cadence, Processor, WorkState, _Work

Schedule = Callable[[int, str, Callable[[], None]], None]


def cut_at_split(lane: Shard, pieces: Sequence[tuple[int, int]]) -> tuple[Shard, ...]:
    """Rule 3: the parts of ``lane`` at the open pieces' boundaries (itself when it lies in one)."""
    return lanes_of(lane, pieces)


def read_from(positions: Sequence[int]) -> int:
    """Rule 4: where one read of a piece begins for lanes at ``positions`` (the consumer's
    `_fill_ranges`: the lowest; each lane then drops what lies below its own position)."""
    return min(positions)


@dataclass(slots=True)
class _Lane:
    start: int
    first_fetch: int
    reported: int
    #: What the lane still skips (None: nothing), as the shard's `Resume`.
    resume: Resume | None


def _begun(resume: Resume, lane: Shard, at: int, first_fetch: int) -> _Lane:
    """A new lane from ``at``, or further where its own keys resume (`microbatch.lane_begin`, the
    consumer's rule)."""
    start, left = lane_begin(resume, lane, at)
    return _Lane(start, first_fetch, start, left if left.skip else None)


class LaneProcessor(Processor):
    """`Processor` whose shards are read in lanes, one per open piece of their partition."""

    def __init__(self, owner: str, log: PieceLog, cadence: Cadence, observer: ShardObserver,
                 keys: RecordKeys | None, schedule: Schedule) -> None:
        super().__init__(owner, log, cadence, observer, keys)
        self.pieces = log
        self.schedule = schedule
        #: Each active or stopped shard's lanes, by lane shard.
        self.lanes: dict[Shard, dict[Shard, _Lane]] = {}
        self._syncs: set[int] = set()

    # ---------------------------------------------------------------- views
    def lane_positions(self, shard: Shard) -> dict[Shard, int]:
        return {s: lane.reported for s, lane in sorted(self.lanes.get(shard, {}).items())}

    # ---------------------------------------------------------------- transitions
    def activate(self, shard: Shard, offset: int, t: int, resume: Resume | None = None) -> None:
        super().activate(shard, offset, t, resume)
        w = self.work[shard]
        cut = lanes_of(shard, self.pieces.open_ranges(shard.topic, shard.partition))
        self.lanes[shard] = {s: _begun(w.resume or Resume(offset), s, offset, w.first_fetch) for s in cut}
        self._sync_at(w.first_fetch)

    def release(self, shard: Shard, t: int, clean: bool) -> None:
        super().release(shard, t, clean)
        self.lanes.pop(shard, None)

    def revoke_offsets(self, shards: Collection[Shard], t: int) -> dict[Shard, int]:
        out: dict[Shard, int] = {}
        for s in sorted(shards):
            self.stop(s, t)
            out.update(self.lane_positions(s))
        return out

    def commit_positions(self, t: int) -> dict[Shard, int]:
        out: dict[Shard, int] = {}
        for s, w in sorted(self.work.items()):
            if w.state is WorkState.ACTIVE:
                self._report(s, w, t)
                out.update(self.lane_positions(s))
        return out

    def layout_changed(self, t: int) -> None:
        """A split or merge at ``t``: rules 3 and 4 apply at the next poll boundary."""
        if any(w.state is WorkState.ACTIVE for w in self.work.values()):
            self._sync_at(self.cadence.next_at_or_after(t))

    # ---------------------------------------------------------------- positions
    def _report(self, shard: Shard, w: _Work, t: int) -> int:
        last = self.cadence.last_at_or_before(t)
        fetched = None if last is None else self.cadence.last_at_or_before(last - 1)
        for s, lane in sorted(self.lanes[shard].items()):
            self._report_lane(shard, s, lane, t, last, fetched)
        low = min(lane.reported for lane in self.lanes[shard].values())
        w.reported = w.position = low
        return low

    def _position(self, s: Shard, lane: _Lane, last: int | None, fetched: int | None) -> tuple[int, Shard]:
        """Rule 2: where the lane got to with the batch fetched at ``fetched`` (processed by
        ``last``), and the keys it read: its own, unless it spans open pieces."""
        if last is None or last <= lane.first_fetch or fetched is None or fetched < lane.first_fetch:
            return lane.start, s
        lo, hi, end = self.pieces.piece_at(s.topic, s.partition, s.lo, fetched)
        read = s if lo <= s.lo and s.hi <= hi else Shard(s.topic, s.partition, max(lo, s.lo), min(hi, s.hi))
        return max(lane.start, end), read

    def _report_lane(self, shard: Shard, s: Shard, lane: _Lane, t: int, last: int | None,
                     fetched: int | None) -> None:
        pos, read = self._position(s, lane, last, fetched)
        if pos <= lane.reported:
            return
        self.observer.on_processed(t, self.owner, shard, lane.reported, pos)
        if self.keys is not None:
            runs = scanned(self.keys, read, lane.resume or Resume(lane.start), lane.reported, pos)
            self.observer.on_records(t, self.owner, shard, runs)
            if lane.resume is not None:
                left = lane.resume.passed(pos)
                lane.resume = left if left.skip else None
        lane.reported = pos

    # ---------------------------------------------------------------- rules 3 and 4
    def _sync_at(self, at: int) -> None:
        if at not in self._syncs:
            self._syncs.add(at)
            self.schedule(at, f"{self.owner}: sync", lambda: self.sync(at))

    def sync(self, at: int) -> None:
        """At a poll boundary (the read about to happen): cut lanes that span open pieces, then read
        each piece's lanes together."""
        self._syncs.discard(at)
        t = at
        last = self.cadence.last_at_or_before(t)
        fetched = None if last is None else self.cadence.last_at_or_before(last - 1)
        active = [s for s, w in sorted(self.work.items()) if w.state is WorkState.ACTIVE]
        for shard in active:
            held = self.lanes[shard]
            pieces = self.pieces.open_ranges(shard.topic, shard.partition)
            for s in sorted(held):
                parts = cut_at_split(s, pieces)
                if len(parts) == 1:
                    continue
                lane = held.pop(s)
                self._report_lane(shard, s, lane, t, last, fetched)
                for part in parts:
                    held[part] = _begun(lane.resume or Resume(lane.reported), part, lane.reported,
                                        max(t, lane.first_fetch))
                self.pieces.cuts += 1
        groups: dict[tuple[str, int, int], list[tuple[Shard, Shard, _Lane, int]]] = {}
        for shard in active:
            for s, lane in sorted(self.lanes[shard].items()):
                if lane.first_fetch > t:
                    continue
                pos, _ = self._position(s, lane, last, fetched)
                lo, _, _ = self.pieces.piece_at(s.topic, s.partition, s.lo, t)
                groups.setdefault((s.topic, s.partition, lo), []).append((shard, s, lane, pos))
        for members in groups.values():
            if len(members) < 2:
                continue
            start = read_from([pos for *_, pos in members])
            for shard, s, lane, pos in members:
                if pos < start:  # records below the read's start are never seen by this lane
                    self._report_lane(shard, s, lane, t, last, fetched)
                    lane.start = lane.reported = start
                    lane.first_fetch = t


def lane_processor(owner: str, cadence: Cadence, world: MemberWorld) -> Processor:
    """`MemberWorld.make_processor` for a run whose log is a `PieceLog`."""
    if not isinstance(world.log, PieceLog):
        raise TypeError("lanes need a PieceLog")
    return LaneProcessor(owner, world.log, cadence, world.observer, world.keys, world.engine.at)


def change_layout(system: Kip848System, kind: str, topic: str, partition: int, piece: int,
                  value: int) -> None:
    """A planned ``split`` (of the ``piece``-th open piece, into ``value``) or ``merge`` (of the
    ``piece``-th open piece and the next, or of every open piece when ``value`` is 0) of a partition;
    the members then cut and share lanes at their next poll boundary."""
    log = system.log
    if not isinstance(log, PieceLog):
        raise TypeError("split and merge need a PieceLog")
    engine = system.engine
    if partition >= log.partitions.get(topic, 0):
        engine.trace(f"log: {kind} of {topic}:{partition}: no such partition")
        return
    change: LayoutChange | None
    if kind == "split":
        change = log.split(topic, partition, piece, value, engine.now)
        log.splits += 1
    else:
        change = log.merge(topic, partition, piece, value == 0, engine.now)
        if change is None:
            engine.trace(f"log: merge of {topic}:{partition}: one open piece, nothing to merge")
            return
        log.merges += 1
    engine.trace(f"log: {kind} {change}")
    if change.behind and system.checker is not None:
        shown = ", ".join(f"key {k} from {start} (it has a record at {last})"
                          for k, last, start in change.behind[:3])
        system.checker.fail(engine.now, KEY_ORDER,
                            f"{topic}:{partition}: the {kind} opened pieces below records their keys already "
                            f"have ({shown}; layout rule 2): a reader past those records never reads the "
                            "new ones", Shard(topic, partition))
    for _, m in sorted(system.members.items()):
        if m.alive and isinstance(m.processor, LaneProcessor):
            m.processor.layout_changed(engine.now)
