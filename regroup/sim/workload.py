"""What the simulated consumers consume, and how long their processing takes.

* `ProducedLog`: topics whose partitions' end offsets grow at a produce rate; a partition created at
  ``c`` has ``floor(rate * (t - c))`` records at time ``t``. Topics can be created and grown. It models
  only how far each partition has been produced, not records: the log that members read is
  `regroup.log.base.PartitionedLog`, which the simulator does not need.
* `Cadence`: a consumer's poll loop. Records are fetched at each *poll boundary* and processed until
  the next one; rebalance callbacks (revoke, assign) run only at a boundary, as in Kafka's consumers,
  where they run inside ``poll()``. Boundaries come every ``period`` ms from ``phase``; a *stall* is
  one batch that takes much longer (a slow member).
* `Processor`: one process's work on its shards — acquire, activate at an offset, stop, release —
  and the offsets it has processed, computed lazily: the batch fetched at one boundary counts as
  processed at the next, so a crash loses the batch in progress. In a key-range run (given the
  records' keys, regroup/sim/keyranges.py) a shard is a key range of a partition: its position is
  still where its scan of the partition got to, and it also reports which records of its range it
  processed (`keyranges.scanned`: its keys' records, minus what its `Resume` says a former owner did).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from regroup.protocol.driver import commit_before_release
from regroup.protocol.keyrange import Resume
from regroup.protocol.shard import Shard, ShardSet
from regroup.protocol.topics import TopicMetadata
from regroup.sim.keyranges import RecordKeys, scanned
from regroup.sim.observers import ShardObserver


class ProducedLog:
    """Per-partition end offsets growing at a produce rate (records per second per partition)."""

    def __init__(self, rate_per_s: float = 20.0) -> None:
        self.rate_per_s = rate_per_s
        self.partitions: dict[str, int] = {}
        self._created: dict[Shard, int] = {}
        self._meta: TopicMetadata | None = None

    def create(self, topic: str, partitions: int, now: int) -> None:
        self.grow(topic, partitions, now)

    def grow(self, topic: str, partitions: int, now: int) -> None:
        """Create ``topic`` or add partitions to it (never removes any)."""
        old = self.partitions.get(topic, 0)
        if partitions <= old:
            return
        for p in range(old, partitions):
            self._created[Shard(topic, p)] = now
        self.partitions[topic] = partitions
        self._meta = None

    def metadata(self) -> TopicMetadata:
        if self._meta is None:
            self._meta = TopicMetadata(dict(sorted(self.partitions.items())))
        return self._meta

    def shards(self, topics: tuple[str, ...]) -> list[Shard]:
        """Every partition of the given topics that exist, in order."""
        return [Shard(t, p) for t in sorted(topics) for p in range(self.partitions.get(t, 0))]

    def created_at(self, shard: Shard) -> int | None:
        return self._created.get(shard)

    def piece_ends(self, topics: tuple[str, ...], t: int) -> dict[Shard, int]:
        """Each partition's end at ``t``, or, split on the producer side, each open piece's."""
        return {s: self.end_offset(s, t) for s in self.shards(topics)}

    def end_offset(self, shard: Shard, t: int) -> int:
        """The partition's end offset at ``t`` (a key range's shard: its partition's)."""
        created = self._created.get(shard if shard.whole else Shard(shard.topic, shard.partition))
        if created is None or t <= created:
            return 0
        return int(self.rate_per_s * (t - created) / 1000)


class Cadence:
    """The poll boundaries of one consumer process."""

    def __init__(self, phase: int, period: int) -> None:
        if period <= 0:
            raise ValueError("period must be positive")
        self.phase = phase
        self.period = period
        self._stalls: list[tuple[int, int]] = []

    def stall(self, t: int, duration: int) -> tuple[int, int]:
        """The batch fetched at the next boundary takes ``duration`` ms. Returns (start, end)."""
        start = self.next_at_or_after(t)
        end = start + max(1, duration)
        for i, (s, e) in enumerate(self._stalls):
            if s == start:  # that batch is already a long one: it becomes the longer of the two
                end = max(e, end)
                self._stalls[i] = (start, end)
                return start, end
        self._stalls.append((start, end))
        return start, end

    @property
    def stalls(self) -> tuple[tuple[int, int], ...]:
        """The long batches, as ``(start, end)`` boundaries."""
        return tuple(self._stalls)

    def _inside(self, b: int) -> int | None:
        for s, e in self._stalls:
            if s < b < e:
                return e
        return None

    def next_at_or_after(self, t: int) -> int:
        if t <= self.phase:
            g = self.phase
        else:
            g = self.phase + -((self.phase - t) // self.period) * self.period
        for _ in range(len(self._stalls) + 1):
            end = self._inside(g)
            if end is None:
                break
            g = end
        for _, e in self._stalls:
            if t <= e < g:
                g = e
        return g

    def last_at_or_before(self, t: int) -> int | None:
        candidates: list[int] = []
        if t >= self.phase:
            g = self.phase + (t - self.phase) // self.period * self.period
            if self._inside(g) is None:
                candidates.append(g)
        for s, e in self._stalls:
            if s <= t:
                candidates.append(s)
            if e <= t:
                candidates.append(e)
        return max(candidates) if candidates else None


class WorkState(Enum):
    ACQUIRING = "acquiring"  # taking it over: reading the committed offset
    ACTIVE = "active"  # processing
    STOPPED = "stopped"  # stopped, committing its last position before releasing


@dataclass(slots=True)
class _Work:
    state: WorkState
    start: int = 0
    first_fetch: int = 0
    reported: int = 0
    position: int = 0
    #: Key-range runs: what the shard still skips on its way (None: nothing, or not a key-range run).
    resume: Resume | None = None


class Processor:
    """One process's shards and the offsets it processed (owner = process identity)."""

    def __init__(self, owner: str, log: ProducedLog, cadence: Cadence, observer: ShardObserver,
                 keys: RecordKeys | None = None) -> None:
        self.owner = owner
        self.log = log
        self.cadence = cadence
        self.observer = observer
        #: The records' keys in a key-range run (None: whole partitions only, no per-record reports).
        self.keys = keys
        self.work: dict[Shard, _Work] = {}

    # ---------------------------------------------------------------- views
    def held(self) -> list[Shard]:
        return sorted(self.work)

    def active(self) -> ShardSet:
        return frozenset(s for s, w in self.work.items() if w.state is WorkState.ACTIVE)

    def busy(self) -> bool:
        """Some shard is being taken over or handed back."""
        return any(w.state is not WorkState.ACTIVE for w in self.work.values())

    def position(self, shard: Shard, t: int) -> int:
        """Offsets below this are processed (the last completed batch)."""
        w = self.work[shard]
        if w.state is not WorkState.ACTIVE:
            return w.position
        last = self.cadence.last_at_or_before(t)
        if last is None or last <= w.first_fetch:
            return w.start
        fetched_at = self.cadence.last_at_or_before(last - 1)
        if fetched_at is None or fetched_at < w.first_fetch:
            return w.start
        return max(w.start, self.log.end_offset(shard, fetched_at))

    # ---------------------------------------------------------------- transitions
    def acquire(self, shard: Shard, t: int) -> None:
        self.work[shard] = _Work(WorkState.ACQUIRING)
        self.observer.on_acquire(t, self.owner, shard)

    def activate(self, shard: Shard, offset: int, t: int, resume: Resume | None = None) -> None:
        """Start processing at ``offset``; ``resume`` (its start is ``offset``) says what to skip."""
        w = self.work[shard]
        w.state = WorkState.ACTIVE
        w.start = w.reported = w.position = offset
        w.resume = resume if resume is not None and resume.skip else None
        w.first_fetch = self.cadence.next_at_or_after(t)
        self.observer.on_activate(t, self.owner, shard, offset)

    def stop(self, shard: Shard, t: int) -> int:
        """Stop processing; returns the position to commit before releasing."""
        w = self.work[shard]
        if w.state is WorkState.ACTIVE:
            w.position = self._report(shard, w, t)
            w.state = WorkState.STOPPED
            self.observer.on_stop(t, self.owner, shard)
        return w.position

    def release(self, shard: Shard, t: int, clean: bool) -> None:
        w = self.work.get(shard)
        if w is None:
            return
        if w.state is WorkState.ACTIVE:
            self.stop(shard, t)
        del self.work[shard]
        self.observer.on_release(t, self.owner, shard, clean)

    def drop_all(self, t: int) -> list[Shard]:
        """Crash or lost membership: stop everything, release without committing."""
        dropped = self.held()
        for s in dropped:
            self.release(s, t, clean=False)
        return dropped

    def revoke_offsets(self, shards: Collection[Shard], t: int) -> dict[Shard, int]:
        """A revocation: stop ``shards`` and return what to commit before releasing them."""
        positions = {s: self.stop(s, t) for s in sorted(shards)}
        return commit_before_release(positions, {}, shards)

    def commit_positions(self, t: int) -> dict[Shard, int]:
        """Positions of the active shards (for a periodic commit), reporting what was processed."""
        return {s: self._report(s, w, t) for s, w in sorted(self.work.items())
                if w.state is WorkState.ACTIVE}

    def report_all(self, t: int) -> None:
        for s, w in sorted(self.work.items()):
            if w.state is WorkState.ACTIVE:
                self._report(s, w, t)

    def _report(self, shard: Shard, w: _Work, t: int) -> int:
        pos = self.position(shard, t)
        if pos > w.reported:
            self.observer.on_processed(t, self.owner, shard, w.reported, pos)
            if self.keys is not None:
                runs = scanned(self.keys, shard, w.resume or Resume(w.start), w.reported, pos)
                self.observer.on_records(t, self.owner, shard, runs)
                if w.resume is not None:  # the skip pieces behind the position are done with
                    left = w.resume.passed(pos)
                    w.resume = left if left.skip else None
            w.reported = pos
        return pos
