"""Several workers in one process: run N single-worker consumers in threads, each handing its batches
to the user's handler (`Consumer(workers=N)` and `Consumer.run`).

The rules:

1. A worker is a group member of its own: a single-worker `regroup.Consumer` with its own member id
   (and instance id, for a static consumer), positions, commits and heartbeat threads. The coordinator
   sees N members and hands key ranges (or partitions) to each as to any member.
2. A worker's loop — consume a batch, hand it to the handler, commit what it handed out — runs in the
   worker's own thread, and nothing else uses that worker's consumer while the loop runs (a `Consumer`
   is not thread-safe). So a key range belongs to one worker at a time, and a range moving between two
   workers is handed off as between two processes: its owner commits, then releases it, and only then
   is it granted to the next (per-key order kept, exactly once across the hand-off).
3. At least once: a batch is committed only after the handler returned. A handler that raises stops
   every worker: the failed worker forgets what it was handed since its last commit (its positions are
   past records the handler did not finish, and committing them when leaving would lose those), the
   others finish the batch in hand and commit it; then every worker leaves and `run()` re-raises the
   first error. The next owner of the failed worker's ranges reads its last batch again.
4. A run ends when its stop event is set or when `close()` is called from another thread: each loop
   finishes the batch in hand (handled and committed) first. Closing closes every worker, all at once:
   each commits and leaves (a static worker leaves temporarily). The loops never close a worker
   themselves: `close()` does, or `run()` after an error (rule 3), once every loop has ended.
5. Threads, not processes. The workers' own work — reading the log, routing records to key ranges,
   heartbeats — is light; what the handler does decides. Handlers that wait on I/O (network calls,
   database writes) or spend their time in code that releases the GIL (pyarrow, numpy) run in
   parallel in threads. A CPU-bound pure-Python handler holds the GIL, so its workers take turns:
   run several processes with ``workers=1`` each instead — to the group they are the same members.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from regroup.client.errors import CommitFailedError, ConsumerClosedError
from regroup.client.partition import TopicPartition, offsets_by_partition, shard_of
from regroup.log.base import ConsumedRecord
from regroup.protocol.shard import ShardSet

log = logging.getLogger("regroup.workers")


class Member(Protocol):
    """What a worker needs of its single-worker consumer (a `regroup.Consumer` with workers=1)."""

    member_id: str

    def consume(self, num_messages: int, timeout: float) -> list[ConsumedRecord]: ...
    def commit(self) -> None: ...
    def shards(self) -> ShardSet: ...
    def assignment(self) -> set[TopicPartition]: ...
    def committed(self) -> dict[TopicPartition, int]: ...
    def close(self, timeout: float) -> None: ...
    def _drop_uncommitted(self) -> None: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def paused(self) -> bool: ...


class Worker:
    """One worker as its handler sees it: which one (``index``, from 0), its group member id, and what
    it owns at the moment."""

    __slots__ = ("_member", "index", "member_id")

    def __init__(self, index: int, member: Member) -> None:
        self.index = index
        self.member_id = member.member_id
        self._member = member

    def shards(self) -> ShardSet:
        """What this worker reads now, key ranges included (`Shard.lo`/`hi`)."""
        return self._member.shards()

    def assignment(self) -> set[TopicPartition]:
        """The partitions this worker reads now (wholly, or key ranges of them)."""
        return self._member.assignment()

    def __repr__(self) -> str:
        return f"Worker({self.index}, member_id={self.member_id!r})"


#: Called in a worker's thread with the worker and a batch of its records, in offset order per
#: partition. Several workers call it at the same time: what it shares between calls must be
#: thread-safe.
Handler = Callable[[Worker, list[ConsumedRecord]], None]


class Workers:
    """N single-worker consumers, each run in its own thread by `run`."""

    def __init__(self, members: Sequence[Member]) -> None:
        self.workers = tuple(Worker(i, m) for i, m in enumerate(members))
        self._lock = threading.Lock()  # guards the fields below
        self._ended = threading.Condition(self._lock)  # a run's loops have all ended
        self._loops: list[threading.Thread] = []  # the threads of the run in progress, if any
        self._halt = threading.Event()  # every loop of the run in progress must end (rule 4)
        self._failure: BaseException | None = None  # the first error of the run in progress
        self._closed = False  # no more runs: the consumer is closing or closed
        self._members_closed = False  # a close() has begun closing the members
        self._members_gone = threading.Event()  # ...and it has finished

    @classmethod
    def join(cls, count: int, make: Callable[[int], Member]) -> Workers:
        """``count`` workers, worker ``i``'s consumer made by ``make(i)`` (which joins the group).
        If one cannot be made, those already made leave again: no member is left behind."""
        members: list[Member] = []
        try:
            for i in range(count):
                members.append(make(i))
        except BaseException:
            for m in members:
                m.close(10.0)
            raise
        return cls(members)

    # ------------------------------------------------------------------ the union over workers
    def assignment(self) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for w in self.workers:
            out |= w.assignment()
        return out

    def shards(self) -> ShardSet:
        return frozenset(s for w in self.workers for s in w.shards())

    def committed(self) -> dict[TopicPartition, int]:
        """Per partition, the lowest offset any worker knows committed (where the partition as a
        whole would have to resume, as for the ranges of one consumer)."""
        return offsets_by_partition((shard_of(tp), o) for w in self.workers
                                    for tp, o in w._member.committed().items())

    @property
    def member_epoch(self) -> int:
        """The lowest of the workers' member epochs: every worker has reached at least this one."""
        return min(w._member.member_epoch for w in self.workers)

    @property
    def paused(self) -> bool:
        """Whether any worker is cut off from the coordinator (and hands out no records)."""
        return any(w._member.paused for w in self.workers)

    # ------------------------------------------------------------------ running
    def run(self, handler: Handler, *, stop: threading.Event | None, batch: int, timeout: float) -> None:
        """Each worker's loop in its own thread until ``stop`` is set, `halt` is called, or a loop
        fails; then the first failure is raised, after every worker left (rule 3)."""
        with self._lock:
            if self._closed:
                raise ConsumerClosedError("the consumer is closed")
            if self._loops:
                raise RuntimeError("run() is already running")
            self._halt.clear()
            self._failure = None
            self._loops = [threading.Thread(target=self._loop, args=(w, handler, stop, batch, timeout),
                                            name=f"regroup-worker-{w.index}", daemon=True)
                           for w in self.workers]
            loops = list(self._loops)
        try:
            for t in loops:
                t.start()
            for t in loops:
                t.join()
        except BaseException:  # e.g. Ctrl-C while waiting: the loops still end on a committed batch
            self._halt.set()
            for t in loops:
                if t.is_alive():
                    t.join()
            raise
        finally:
            with self._lock:
                self._loops = []
                self._ended.notify_all()
        failure = self._failure
        if failure is not None:
            self.close()
            raise failure

    def _loop(self, worker: Worker, handler: Handler, stop: threading.Event | None, batch: int,
              timeout: float) -> None:
        member = worker._member
        try:
            while not self._halt.is_set() and not (stop is not None and stop.is_set()):
                records = member.consume(batch, timeout)
                if not records:
                    continue
                handler(worker, records)
                try:
                    member.commit()
                except CommitFailedError as e:  # the range moved on or this worker was fenced
                    log.warning("worker %d (%s): commit refused (%s); whoever owns the records now reads "
                                "them again", worker.index, worker.member_id, e)
        except BaseException as e:
            member._drop_uncommitted()  # rule 3: leaving must not commit what the handler did not finish
            e.add_note(f"raised in worker {worker.index} (member {worker.member_id})")
            with self._lock:
                if self._failure is None:
                    self._failure = e
            self._halt.set()

    def halt(self, *, for_good: bool = False) -> None:
        """End the run in progress, if any, and wait until its loops have ended (each after
        committing the batch in hand); ``for_good``: and refuse any later run (the consumer closes)."""
        with self._lock:
            if threading.current_thread() in self._loops:  # it would wait for itself
                raise RuntimeError("close() was called from a handler: set run()'s stop event instead")
            self._closed = self._closed or for_good
            self._halt.set()
            while self._loops:
                self._ended.wait()

    def close(self, timeout: float = 10.0) -> None:
        """End the run in progress, then close every worker at once (each commits and leaves)."""
        self.halt(for_good=True)
        with self._lock:
            first = not self._members_closed
            self._members_closed = True
        if not first:  # another close() is closing them: return once it has, as a single close would
            self._members_gone.wait()
            return
        errors: list[BaseException] = []

        def close(member: Member) -> None:
            try:
                member.close(timeout)
            except Exception as e:
                errors.append(e)

        # At once rather than one after the other: a worker that left first would see its ranges
        # granted to the others, which are leaving too — a rebalance per worker for nothing.
        closing = [threading.Thread(target=close, args=(w._member,), name=f"regroup-worker-{w.index}-close")
                   for w in self.workers]
        try:
            for t in closing:
                t.start()
            for t in closing:
                t.join()
        finally:
            self._members_gone.set()
        if errors:
            raise errors[0]
