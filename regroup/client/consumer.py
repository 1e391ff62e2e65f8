"""`regroup.Consumer`: a consumer-group member with the shape of confluent-kafka's consumer.

The protocol lives in `MemberStateMachine`; this shell does the I/O around it:

* a background thread heartbeats when the state machine says so, and a second one listens to the
  coordinator's nudges so that hand-offs take a round trip instead of a heartbeat interval;
* the user's thread runs the rebalance callbacks inside `poll()`/`consume()`, as confluent-kafka does:
  on a revocation it calls ``on_revoke``, commits the positions of the revoked partitions, and only then
  acknowledges, so the next owner starts exactly where this one stopped (a clean hand-off);
* ``on_lost`` is called when the membership was lost (fenced): nothing is committed then, because
  another member may already own the partitions;
* records come straight from the log (embedded directory or Kafka) at explicit offsets; a member
  given key ranges of a partition (a group setting, `regroup groups parallelism`) reads the partition
  once and keeps the records of its ranges, in offset order (`regroup.client.ranges`);
* while the member is cut off from the coordinator (its connection broke and no heartbeat has been
  answered for the failover grace the coordinator gave it, `regroup.protocol.failover`), `poll()`
  and `consume()` hand out no records and read nothing: the coordinator may already have given the
  partitions to another member. They resume as soon as a heartbeat is answered again.

A consumer that does not call `poll()` for longer than its rebalance timeout while it must give up
partitions is fenced by the coordinator, like Kafka's ``max.poll.interval.ms``.

``Consumer(workers=N)`` is N such members in one process, each run in its own thread by `run(handler)`
(`regroup.client.workers`); this class is then a front for them and reads nothing itself.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Mapping

from regroup.client.errors import (
    CommitFailedError,
    ConsumerClosedError,
    FatalConsumerError,
    OffsetFetchError,
)
from regroup.client.membership import Membership
from regroup.client.partition import TopicPartition, offsets_by_partition, offsets_by_shard, partitions_of
from regroup.client.ranges import KeyRanges, Ranged, Scanned, piece_of
from regroup.client.workers import Handler, Workers
from regroup.log import open_log
from regroup.log.base import ConsumedRecord, PartitionedLog
from regroup.log.embedded.layout import SpansOpenPieces
from regroup.log.errors import LogTimeoutError
from regroup.protocol.driver import Backlog, OffsetReset, commit_before_release, held_when_lost
from regroup.protocol.keyrange import Resume
from regroup.protocol.member import Action, Assign, Fatal, Lost, MemberStateMachine, Revoke
from regroup.protocol.microbatch import lane_begin, lanes_of
from regroup.protocol.shard import Shard, ShardSet
from regroup.rpc.client import CoordinatorClient

log = logging.getLogger("regroup.consumer")

Callback = Callable[["Consumer", set[TopicPartition]], None]


class Consumer:
    """Join ``group_id`` and read the partitions the coordinator assigns.

    ``topics`` or ``pattern`` (an RE2 regular expression matched against whole topic names) say what
    to read; ``coordinator`` is ``HOST:PORT``; ``log`` is a directory of the embedded log,
    ``kafka://HOST:PORT``, or a log object. ``instance_id`` makes the member static: a restart with the
    same id gets the same partitions back without a rebalance.

    ``workers=N`` (N > 1) runs N group members in this process, each in its own thread, handing their
    records to `run(handler)`: worker ``i`` is member ``f"{member_id}-w{i}"`` (and, static, instance
    ``f"{instance_id}-w{i}"``, so a static restart gives each worker its ranges back). The callbacks are
    then called in a worker's thread with that worker's own single-worker `Consumer`. A ``log`` given
    as a string is opened by each worker; a log object is shared by the workers and must allow reads
    from several threads at once (the embedded log does; the Kafka log serialises its reads).
    Threads or processes, and the guarantees: docs/key-ranges.md, "Several workers in one process".
    """

    def __init__(
        self,
        group_id: str,
        *,
        coordinator: str,
        log: str | PartitionedLog,
        topics: Collection[str] = (),
        pattern: str | None = None,
        instance_id: str | None = None,
        rack_id: str | None = None,
        assignor: str | None = None,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        on_lost: Callback | None = None,
        rebalance_timeout_ms: int = 300_000,
        auto_offset_reset: str = "earliest",
        max_batch_records: int = 500,
        token: str | None = None,
        tls_ca: str | None = None,
        member_id: str | None = None,
        workers: int = 1,
    ) -> None:
        if not topics and not pattern:
            raise ValueError("give the consumer topics=[...] or pattern='...' to subscribe to")
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(f"auto_offset_reset must be 'earliest' or 'latest', got {auto_offset_reset!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1 (members run in this process), got {workers!r}")
        self.group_id = group_id
        self.member_id = member_id or uuid.uuid4().hex
        self._closed = False
        self._many = workers > 1
        if self._many:  # a front for N single-worker consumers: none of the state below is used
            self._workers = Workers.join(workers, lambda i: Consumer(
                group_id, coordinator=coordinator, log=log, topics=topics, pattern=pattern,
                instance_id=None if instance_id is None else f"{instance_id}-w{i}", rack_id=rack_id,
                assignor=assignor, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost,
                rebalance_timeout_ms=rebalance_timeout_ms, auto_offset_reset=auto_offset_reset,
                max_batch_records=max_batch_records, token=token, tls_ca=tls_ca,
                member_id=f"{self.member_id}-w{i}"))
            return
        self._log = open_log(log) if isinstance(log, str) else log
        self._owns_log = isinstance(log, str)
        machine = MemberStateMachine(
            group_id, self.member_id, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topics=tuple(topics),
            subscribed_regex=pattern, assignor=assignor)
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._reset = OffsetReset(auto_offset_reset)
        self._max_batch = max_batch_records
        self._positions: dict[Shard, int] = {}  # next offset to read, per owned shard
        self._committed: dict[Shard, int] = {}
        self._buffer: deque[ConsumedRecord | Ranged | Scanned] = deque()
        self._ranges = KeyRanges()  # owned key ranges (and whole partitions with records to skip)
        # An owned shard of a partition split on the producer side, read as one lane per piece
        # (`regroup.client.ranges`), and each lane's shard; shards read as themselves are in neither.
        self._lanes: dict[Shard, tuple[Shard, ...]] = {}
        self._lane_owner: dict[Shard, Shard] = {}
        self._rr: deque[Shard] = deque()  # round-robin order of owned shards
        self._fatal: FatalConsumerError | None = None
        self._backlog = Backlog()  # the member's actions not carried out yet (some wait for the next poll)
        self._paused = False  # cut off from the coordinator (failover rule 7): no records out
        self._membership = Membership(CoordinatorClient(coordinator, token=token, tls_ca=tls_ca), machine)
        self._workers = Workers([self])  # what run(handler) runs: this consumer as its one worker

    # ------------------------------------------------------------------ public API
    def poll(self, timeout: float = 1.0) -> ConsumedRecord | None:
        """The next record, or None after ``timeout`` seconds. Runs pending rebalance callbacks."""
        batch = self.consume(1, timeout)
        return batch[0] if batch else None

    def consume(self, num_messages: int = 100, timeout: float = 1.0) -> list[ConsumedRecord]:
        """Up to ``num_messages`` records, waiting at most ``timeout`` seconds for the first."""
        self._only_one_worker("poll()/consume()")
        self._check_usable()
        deadline = time.monotonic() + max(0.0, timeout)
        out: list[ConsumedRecord] = []
        while True:
            self._run_actions()
            self._check_usable()
            paused = self._cut_off()
            while not paused and self._buffer and len(out) < num_messages:
                item = self._buffer.popleft()
                if isinstance(item, ConsumedRecord):
                    shard = Shard(item.topic, item.partition)
                    if self._positions.get(shard) != item.offset:
                        continue  # the shard was revoked or lost since it was buffered
                    self._positions[shard] = item.offset + 1
                    out.append(item)
                elif isinstance(item, Ranged):
                    at = self._positions.get(item.shard)
                    if at is None or item.record.offset < at:
                        continue  # revoked or lost since it was buffered
                    self._positions[item.shard] = item.record.offset + 1
                    out.append(item.record)
                else:
                    self._scanned(item)
            if out or time.monotonic() >= deadline:
                return out
            if paused or not self._fill():
                time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (next offset to read, per partition) or, by default, the current positions.

        Raises `CommitFailedError` when the coordinator refuses (e.g. the partition moved to another
        member, or this member was fenced): the records since the last commit will be read again by
        whoever owns the partition now — at-least-once.
        """
        self._only_one_worker("commit()")
        self._check_usable()
        self._commit(self._by_shard(offsets) if offsets is not None else dict(self._positions))

    def run(self, handler: Handler, *, stop: threading.Event | None = None, batch: int = 100,
            timeout: float = 1.0) -> None:
        """Hand every record to ``handler(worker, records)`` until ``stop`` is set or `close()` is
        called from another thread.

        Each worker loops in its own thread (with ``workers=1`` too; the calling thread waits):
        `consume` up to ``batch`` records, waiting at most ``timeout`` seconds, hand them to the handler,
        then commit them — at least once: a batch is committed only after its handler returned. If a
        handler raises, every worker stops (the others after committing the batch in hand), leaves
        the group without committing the failed batch — its next owner reads it again — and the first
        error is raised here, noting the worker. The consumer is closed then.
        """
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {batch!r}")
        self._workers.run(handler, stop=stop, batch=batch, timeout=timeout)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer currently reads (wholly, or key ranges of them); with
        workers, those of every worker."""
        if self._many:
            return self._workers.assignment()
        # A snapshot first, taken in one C call: with workers this is read from another thread
        # while the worker's thread adds and drops shards.
        return partitions_of(frozenset(self._positions))

    def shards(self) -> ShardSet:
        """What this consumer currently reads, key ranges included (`Shard.lo`/`hi`); with workers,
        what every worker reads."""
        if self._many:
            return self._workers.shards()
        owner = self._lane_owner.copy()
        return frozenset(owner.get(s, s) for s in frozenset(self._positions))

    def committed(self) -> dict[TopicPartition, int]:
        """The committed offsets this consumer knows of its partitions (read at assignment, or its own);
        with workers, the lowest any worker knows per partition."""
        if self._many:
            return self._workers.committed()
        return offsets_by_partition(self._committed.copy())  # a snapshot, as in assignment()

    def close(self, timeout: float = 10.0) -> None:
        """Commit, give the partitions up and leave the group (a static member leaves temporarily).

        A `run()` in progress ends first, each worker committing the batch in hand; with workers,
        every worker then commits and leaves, all at once.
        """
        if self._closed:
            return
        if self._many:
            self._closed = True
            self._workers.close(timeout)
            return
        self._workers.halt(for_good=True)
        self._membership.leave(timeout, self._perform_all)
        self._closed = True
        self._membership.close()
        if self._owns_log:
            self._log.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def member_epoch(self) -> int:
        """The member's epoch; with workers, the lowest of theirs (every worker has reached it)."""
        if self._many:
            return self._workers.member_epoch
        return self._membership.epoch

    @property
    def paused(self) -> bool:
        """Whether the consumer is cut off from the coordinator and hands out no records (as of the
        last `poll()`/`consume()`); with workers, whether any worker is."""
        if self._many:
            return self._workers.paused
        return self._paused

    def _cut_off(self) -> bool:
        paused = self._membership.cut_off()
        if paused != self._paused:
            self._paused = paused
            if paused:
                log.warning("cut off from the coordinator: no answer for longer than the failover grace "
                            "(%d ms) allows, with the connection broken or the coordinator restarted; it "
                            "may have given the partitions away: pausing until it answers again",
                            self._membership.failover_grace_ms)
            else:
                log.info("the coordinator answers again: resuming")
        return paused

    # ------------------------------------------------------------------ actions (user thread)
    def _run_actions(self) -> None:
        self._perform_all(self._membership.take_actions())

    def _perform_all(self, actions: list[Action]) -> None:
        """Carry out the member's actions as `regroup.protocol.driver` says, in order."""
        self._backlog.add(actions)
        while (action := self._backlog.next()) is not None:
            if isinstance(action, Revoke):
                self._revoke(action)
            elif isinstance(action, Assign):
                try:
                    self._assign(action)
                except OffsetFetchError as e:  # where to begin is unknown: retry on the next poll
                    if self._backlog.defer(action):
                        log.warning("cannot read committed offsets yet (%s); taking the partitions later", e)
                        return
            elif isinstance(action, Lost):
                shards = set(held_when_lost(action, self._positions))
                self._forget(shards)
                log.warning("membership lost (%s): dropping %d partitions without committing",
                            action.reason, len(shards))
                if self._on_lost is not None:
                    self._on_lost(self, partitions_of(shards))
            elif isinstance(action, Fatal):
                self._fatal = FatalConsumerError(action.message, action.error)

    def _revoke(self, action: Revoke) -> None:
        shards = set(action.shards)
        if self._on_revoke is not None:
            self._on_revoke(self, partitions_of(shards))
        try:
            self._commit(commit_before_release(self._positions, self._committed, self._with_lanes(shards)))
        except CommitFailedError as e:  # still release: the coordinator decides what is safe
            log.warning("commit before revoking %s failed: %s", sorted(map(str, shards)), e)
        self._forget(shards)
        self._membership.revocation_done(action.shards)

    def _assign(self, action: Assign) -> None:
        """Position new shards at the group's committed offsets (or per auto_offset_reset); a key
        range where its committed fragments say, skipping what a former owner did."""
        committed, resumes = self._membership.where_to_resume(action.shards, self._reset, self._log)
        self._committed.update(committed)
        for s, r in resumes.items():
            cut = lanes_of(s, self._log.key_pieces(s.topic, s.partition))
            if len(cut) > 1:
                self._lanes[s] = cut
                self._lane_owner.update(dict.fromkeys(cut, s))
            for lane in cut:
                # Each lane where the Resume says for its own keys: a piece that ends higher than
                # another (`latest` on a split partition) is not read below its end.
                start, lr = (r.start, r) if lane == s else lane_begin(r, lane)
                self._positions[lane] = start
                if len(cut) > 1 or KeyRanges.reads(s, lr):
                    self._ranges.add(lane, lr)
            self._rr.extend(cut)
        if self._on_assign is not None:
            self._on_assign(self, partitions_of(action.shards))
        self._membership.assignment_done(action.shards)

    def _with_lanes(self, shards: Collection[Shard]) -> set[Shard]:
        """``shards`` and the lanes they are read as."""
        out = set(shards)
        for s in shards:
            out.update(self._lanes.get(s, ()))
        return out

    def _forget(self, shards: set[Shard]) -> None:
        shards = self._with_lanes(shards)
        for s in shards:
            for lane in self._lanes.pop(s, ()):
                self._lane_owner.pop(lane, None)
            self._positions.pop(s, None)
            self._committed.pop(s, None)
        self._ranges.remove(shards)
        self._rr = deque(s for s in self._rr if s not in shards)
        kept: deque[ConsumedRecord | Ranged | Scanned] = deque()
        for item in self._buffer:
            if isinstance(item, ConsumedRecord):
                if Shard(item.topic, item.partition) not in shards:
                    kept.append(item)
            elif isinstance(item, Ranged):
                if item.shard not in shards:
                    kept.append(item)
            elif item.shards - shards:  # a shard given back and taken again must not move on
                kept.append(Scanned(item.shards - shards, item.end))
        self._buffer = kept

    def _fill(self) -> bool:
        """Read the next batch from one owned shard with data; False when everything is caught up."""
        for _ in range(len(self._rr)):
            shard = self._rr[0]
            self._rr.rotate(-1)
            pos = self._positions.get(shard)
            if pos is None:
                continue
            try:
                if shard in self._ranges:
                    if self._fill_ranges(shard):
                        return True
                    continue
                recs = self._log.read(shard.topic, shard.partition, pos, self._max_batch)
            except SpansOpenPieces:  # split on the producer side since it was assigned: read by piece
                self._ranges.add(shard, Resume(pos))
                if self._fill_ranges(shard):
                    return True
                continue
            except LogTimeoutError as e:  # a slow broker is no reason to end the user's poll loop
                log.warning("reading %s from offset %d: %s; trying again on a later poll", shard, pos, e)
                continue
            if recs:
                self._buffer.extend(recs)
                return True
        return False

    def _fill_ranges(self, shard: Shard) -> bool:
        """Read ``shard``'s partition once for every range of it this consumer owns — once per piece
        of the log that holds them, if the partition is split on the producer side."""
        pieces = self._log.key_pieces(shard.topic, shard.partition)
        if len(pieces) > 1:
            shard = self._cut_lanes(shard, pieces)
        lo, hi = piece_of(shard, pieces)
        owned = [s for s in self._ranges.of_partition(shard) if lo <= s.lo and s.hi <= hi]
        start = min(self._positions[s] for s in owned)
        got = self._log.read_keys(shard.topic, shard.partition, lo, hi, start, self._max_batch)
        if not got.records and got.next_offset == start:
            return False
        self._buffer.extend(self._ranges.route(owned, got.records, self._positions))
        self._buffer.append(Scanned(frozenset(owned), got.next_offset))
        return True

    def _cut_lanes(self, shard: Shard, pieces: tuple[tuple[int, int], ...]) -> Shard:
        """The partition was split while its ranges were owned: cut each range that now spans open
        pieces into one lane per piece, each from where the range was or further where the part's own
        keys resume (`microbatch.clip` of what the range still skips), and skipping what it says there
        (records of it buffered but not handed out are read again by its lanes). Returns the lane
        holding ``shard``'s first key."""
        first = shard
        for x in list(self._ranges.of_partition(shard)):
            parts = lanes_of(x, pieces)
            if len(parts) == 1:
                continue
            at = self._positions.pop(x)
            skip = self._ranges.skips_of(x) or Resume(at)
            self._ranges.remove([x])
            owner = self._lane_owner.pop(x, x)
            siblings = [s for s in self._lanes.get(owner, ()) if s != x]
            self._lanes[owner] = tuple(sorted([*siblings, *parts], key=lambda s: s.lo))
            for part in parts:
                # Where its own keys resume, as at assignment: a part whose keys a former owner all did
                # beyond ``at`` would sit below the shard's floor once the other lanes' commits raised
                # the rest of it, and every commit of the shard would be refused (offsets rule 2).
                start, own = lane_begin(skip, part, at)
                self._positions[part] = start
                self._ranges.add(part, own)
                self._lane_owner[part] = owner
            self._rr = deque(s for s in self._rr if s != x)
            self._rr.extend(parts)
            self._buffer = deque(
                item for item in (i if not isinstance(i, Scanned) or x not in i.shards
                                  else Scanned(i.shards - {x}, i.end) for i in self._buffer)
                if not (isinstance(item, Ranged) and item.shard == x))
            if x == shard:
                first = parts[0]
        return first

    def _scanned(self, mark: Scanned) -> None:
        """Every record read before ``mark`` is handed out: its ranges move past what was read."""
        for s in mark.shards:
            at = self._positions.get(s)
            if at is not None and at < mark.end:
                self._positions[s] = mark.end
                self._ranges.passed(s, mark.end)

    def _by_shard(self, offsets: Mapping[TopicPartition, int]) -> dict[Shard, int]:
        """A user's offsets by partition, as shards: a partition this consumer reads in key ranges
        stands for each of its ranges here."""
        out: dict[Shard, int] = {}
        for s, o in offsets_by_shard(offsets).items():
            ranges = self._ranges.of_partition(s)
            out.update(dict.fromkeys(ranges, o) if ranges else {s: o})
        return out

    def _commit(self, offsets: dict[Shard, int]) -> None:
        if not offsets:
            return
        self._membership.commit(offsets)
        self._committed.update(offsets)

    def _drop_uncommitted(self) -> None:
        """Forget every position: a handler failed on what was read since the last commit, so leaving
        must commit none of it; the next owner reads it again (`regroup.client.workers`, rule 3)."""
        self._forget(set(self._positions) | set(self._lanes))

    def _only_one_worker(self, what: str) -> None:
        if self._many:
            raise RuntimeError(f"{what} is not for a Consumer with workers={len(self._workers.workers)}: "
                               "its records go to the workers, each committing its own; call "
                               "run(handler) to handle them")

    def _check_usable(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._fatal is not None:
            raise self._fatal
