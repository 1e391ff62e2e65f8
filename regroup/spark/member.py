"""`QueryMember`: one streaming query's membership, acted on at micro-batch boundaries (driver side).

It lives in the process where Spark runs the source's driver-side reader, for the whole query. The
`Membership` threads heartbeat and listen for nudges all the time; what the coordinator asks for is
done only at a batch boundary — when Spark asks for the next offset, the previous batch has finished:

* the finished batch's positions are committed (so a revoked shard's next owner starts exactly where
  this query stopped — a clean hand-off), then revoked shards are released;
* newly assigned shards begin at the group's committed offsets (``startingOffsets`` when none);
* after fencing (lost), everything is dropped without committing; the member rejoins by itself.

The planning decisions themselves are pure functions in `regroup.protocol.microbatch`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Collection
from types import FrameType

from regroup.client.errors import CommitFailedError, OffsetFetchError
from regroup.client.membership import Membership
from regroup.log import open_log
from regroup.log.base import PartitionedLog
from regroup.protocol.member import (
    Action,
    Assign,
    Fatal,
    Lost,
    MemberState,
    MemberStateMachine,
    Revoke,
    from_last_lost,
)
from regroup.protocol.microbatch import BatchOffset, ShardRange, batch_ranges, finished_positions, plan_next
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.spark.options import SourceOptions

log = logging.getLogger("regroup.spark")


def client_id() -> str:
    """How `regroup groups describe` names this query's process: host and pid of the reader."""
    return f"spark-query@{socket.gethostname()}:{os.getpid()}"


class SourceFatalError(RuntimeError):
    """The coordinator refused this query for good (e.g. its static instance id is in use)."""


class QueryMember:
    """The group member behind one streaming query (see the module docstring)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.log: PartitionedLog = open_log(opts.log)
        machine = MemberStateMachine(
            opts.group, uuid.uuid4().hex, instance_id=opts.instance_id,
            rebalance_timeout_ms=opts.rebalance_timeout_ms, subscribed_topics=opts.topics,
            subscribed_regex=opts.pattern, assignor=opts.assignor)
        client = CoordinatorClient(opts.coordinator, token=opts.token, tls_ca=opts.tls_ca,
                                   client_id=client_id())
        self.membership = Membership(client, machine)
        self.owned: set[Shard] = set()
        self.beginnings: dict[Shard, int] = {}  # newly owned shards not yet in a planned batch
        self.floors: dict[Shard, int] = {}  # committed offset when this process took the shard
        self.committed: dict[Shard, int] = {}
        self._deferred: list[Action] = []  # actions to retry at the next boundary
        self._lock = threading.Lock()  # Spark calls the reader from one thread; SIGTERM may interleave
        self._left = False
        self._started = False

    # ------------------------------------------------------------------ Spark's calls
    def plan(self, finished: BatchOffset, limit: int | None) -> BatchOffset:
        """The next batch's end offset; the batch ending at ``finished`` is done."""
        with self._lock:
            self._first_contact()
            self._sync(finished)
            ends = self._log_ends(self.owned)
            end = plan_next(finished, self.owned, self.beginnings, ends, limit, self.membership.epoch)
            for s in self.owned:
                self.beginnings.pop(s, None)  # used now (or superseded by a position further on)
            return end

    def ranges(self, start: BatchOffset, end: BatchOffset) -> list[ShardRange]:
        """What the batch (start, end) reads: only shards owned now (a replay skips moved shards)."""
        with self._lock:
            self._first_contact()
            self._sync(start)
            return batch_ranges(start, end, self.owned, self.floors)

    def batch_committed(self, end: BatchOffset) -> None:
        """Spark's late commit of a finished batch (usually committed already at the boundary)."""
        with self._lock:
            self._commit(finished_positions(end, self.owned))

    def leave(self, timeout: float = 5.0) -> None:
        """Leave the group (temporarily for a static member): on query stop."""
        # No self._lock here: the SIGTERM handler runs on the main thread, maybe while it holds it.
        if self._left:
            return
        self._left = True
        self.membership.leave(timeout, self._release_at_once)
        self.membership.close()
        self.log.close()

    def _release_at_once(self, actions: list[Action]) -> None:
        """While leaving: give up revoked shards without committing — a running batch has not
        finished, and every finished batch was committed at its boundary."""
        for action in actions:
            if isinstance(action, Revoke):
                self.membership.revocation_done(action.shards)

    def install_sigterm_handler(self) -> None:
        """query.stop() ends the reader's process with SIGTERM and never calls stop(): leave then."""
        try:
            previous = signal.getsignal(signal.SIGTERM)

            def on_term(signum: int, frame: FrameType | None) -> None:
                if self._left:
                    return  # a second SIGTERM while the first is leaving: let that one finish
                log.info("query stopping (SIGTERM): leaving group %s", self.opts.group)
                self.leave()
                if callable(previous):
                    previous(signum, frame)
                else:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    signal.raise_signal(signal.SIGTERM)

            signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread: Spark's runner calls us from it, but be safe
            log.warning("cannot install a SIGTERM handler here; the member leaves by session timeout")

    # ------------------------------------------------------------------ boundary work
    def _first_contact(self) -> None:
        """On the first call, wait (bounded) until the member has its first assignment, so that the
        first batch — or a batch replayed from the checkpoint — knows what this member owns."""
        if self._started:
            return
        self._started = True
        deadline = time.monotonic() + self.opts.startup_timeout_ms / 1000
        while time.monotonic() < deadline:
            self._sync(BatchOffset())
            state = self.membership.state
            if state is MemberState.STABLE:
                return
            self.membership.wait(
                lambda: self.membership.has_actions() or self.membership.state is MemberState.STABLE,
                max(0.0, deadline - time.monotonic()))
        log.warning("no stable assignment after %d ms; starting with %d partitions",
                    self.opts.startup_timeout_ms, len(self.owned))

    def _sync(self, finished: BatchOffset) -> None:
        """Commit what ``finished`` says is done, then do what the coordinator asked."""
        self._commit(finished_positions(finished, self.owned))
        queue, self._deferred = [*self._deferred, *self.membership.take_actions()], []
        while queue:
            action = queue.pop(0)
            if isinstance(action, Revoke):
                shards = set(action.shards)
                self._commit(finished_positions(finished, shards & self.owned))
                self._drop(shards)
                self.membership.revocation_done(action.shards)
            elif isinstance(action, Assign):
                try:
                    self._take(action.shards)
                except OffsetFetchError as e:  # where to begin is unknown: try at the next boundary
                    later = from_last_lost(queue)
                    if later is not None:
                        queue = later
                        continue
                    log.warning("cannot read committed offsets yet (%s); taking the partitions later", e)
                    self._deferred = [action, *queue]
                    return
                self.membership.assignment_done(action.shards)
            elif isinstance(action, Lost):
                log.warning("membership lost (%s): dropping %d partitions without committing",
                            action.reason, len(self.owned))
                self._drop(set(self.owned) | set(action.shards))
            elif isinstance(action, Fatal):
                raise SourceFatalError(f"regroup source, group {self.opts.group!r}: {action.message}")

    def _take(self, shards: Collection[Shard]) -> None:
        committed = self.membership.fetch_committed(shards)
        latest: dict[str, dict[int, int]] = {}
        for s in sorted(shards):
            if s in committed:
                pos = committed[s]
                self.committed[s] = pos
            elif self.opts.starting_offsets == "latest":
                if s.topic not in latest:
                    latest[s.topic] = self.log.end_offsets(s.topic)
                pos = latest[s.topic].get(s.partition, 0)
            else:
                pos = 0
            self.beginnings[s] = pos
            self.floors[s] = pos
            self.owned.add(s)

    def _drop(self, shards: set[Shard]) -> None:
        for s in shards:
            self.owned.discard(s)
            self.beginnings.pop(s, None)
            self.floors.pop(s, None)
            self.committed.pop(s, None)

    def _commit(self, positions: dict[Shard, int]) -> None:
        todo = {s: o for s, o in positions.items() if self.committed.get(s, -1) < o}
        if not todo:
            return
        try:
            self.membership.commit(todo)
        except CommitFailedError as e:  # fenced or moved: the coordinator decides, we carry on
            log.warning("commit of %d partitions refused: %s", len(todo), e)
            return
        self.committed.update(todo)

    def _log_ends(self, shards: Collection[Shard]) -> dict[Shard, int]:
        out: dict[Shard, int] = {}
        for topic in sorted({s.topic for s in shards}):
            ends = self.log.end_offsets(topic)
            for s in shards:
                if s.topic == topic:
                    out[s] = ends.get(s.partition, 0)
        return out
