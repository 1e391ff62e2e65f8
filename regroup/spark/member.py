"""`QueryMember`: one streaming query's membership, acted on at micro-batch boundaries (driver side).

It lives in the process where Spark runs the source's driver-side reader, for the whole query. The
`Membership` threads heartbeat and listen for nudges all the time; what the coordinator asks for is
done only at a batch boundary — when Spark asks for the next offset, the previous batch has finished:

* the finished batch's positions are committed (so a revoked shard's next owner starts exactly where
  this query stopped — a clean hand-off), then revoked shards are released;
* newly assigned shards begin at the group's committed offsets (``startingOffsets`` when none);
* after fencing (lost), everything is dropped without committing; the member rejoins by itself;
* while cut off from the coordinator (its connection broke and nothing was answered for the failover
  grace: the coordinator may have given the shards away), no batch is planned until it answers.

Key ranges (``regroup groups parallelism GROUP TOPIC N``, docs/key-ranges.md) are shards like whole
partitions here. A newly assigned range begins where `Membership.where_to_resume` says — at its own
committed fragment after a split, at the laggard fragment after a merge — with the *skip pieces* of
the records its former owners already did; the `Boundary` keeps them and every planned batch carries
those it still needs (in the checkpoint too, `BatchOffset.skips`), until the range's position passes
them. A batch reads each range's slice of its partition on an executor, which keeps the records of
the range (`regroup.spark.read`). A range's committed offset after a batch is the batch's end for it,
as for a whole partition: it read the partition up to there. Revoke-then-assign is overlap-aware in
the coordinator, so a change of parallelism hands ranges off at batch boundaries like partitions.

Partitions split on the producer side (`regroup.log.embedded.layout`: open pieces, each with its own
offsets) are read per piece: the `Boundary` takes a shard as one *lane* per open piece its keys lie in,
cuts lanes again when a later split reaches them and joins them back after a merge (rule 6), and
plans each lane up to the end of its piece. So this class hands it, when a shard is taken, the
partition's pieces (`PartitionedLog.key_pieces`) and, at each boundary, every owned partition's open
pieces with their ends (`EmbeddedLog.piece_ends`; other logs: one piece, the partition's end). A
Revoke commits and releases a shard's lanes; a Lost drops them.

What to do with the coordinator's actions is the member driver's (`regroup.protocol.driver`), shared
with `regroup.Consumer`; what a batch covers is the `Boundary`'s (`regroup.protocol.microbatch`). Both
are pure: this class only does the I/O and keeps the one `Boundary` value. `plan` — Spark's
``latestOffset`` — is where it changes; besides, Spark's late ``commit`` records what the coordinator
accepted, and a query restarted from its checkpoint, whose first call replays a batch, takes its
partitions in that first ``partitions()`` call.
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
from typing import Any

from regroup.client.errors import CommitFailedError, OffsetFetchError
from regroup.client.membership import Membership
from regroup.log import open_log, piece_ends_of
from regroup.log.base import PartitionedLog
from regroup.protocol.driver import Backlog, OffsetReset, held_when_lost
from regroup.protocol.member import Action, Assign, Fatal, Lost, MemberState, MemberStateMachine, Revoke
from regroup.protocol.microbatch import BatchOffset, Boundary, Pieces, ShardRange
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.spark.finished import ENV as FINISHED_ENV
from regroup.spark.finished import STOP_WAIT_S, wait_finished
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
        self.boundary = Boundary()
        self._reset = OffsetReset(opts.starting_offsets)
        self._backlog = Backlog()  # the member's actions not carried out yet (some wait a boundary)
        self._lock = threading.Lock()  # Spark calls the reader from one thread; SIGTERM may interleave
        self._left = False
        self._stopping = False
        self._started = False
        self._paused = False  # cut off from the coordinator: no batch planned (failover rule 7)
        #: This reader's token in the end offsets it plans (see `regroup.spark.finished`).
        self.token = uuid.uuid4().hex[:16]
        #: The end offset (as Spark has it) of the last batch planned or replayed and not known to
        #: be committed: what a stop commits if the driver's listener reports it finished.
        self.unconfirmed: dict[str, Any] | None = None
        self._finished_dir = os.environ.get(FINISHED_ENV) or None

    # ------------------------------------------------------------------ Spark's calls
    @property
    def owned(self) -> frozenset[Shard]:
        """The shards the coordinator assigned to this query (a split partition's are read in lanes)."""
        return self.boundary.assigned

    def plan(self, finished: BatchOffset, limit: int | None) -> BatchOffset:
        """The batch boundary: the batch ending at ``finished`` is done. Commit it, do what the
        coordinator asked, and return the next batch's end offset."""
        with self._lock:
            self._first_contact()
            self._sync(finished)
            if self._cut_off():
                return finished  # the same offset: Spark runs no batch, and asks again next trigger
            pieces = piece_ends_of(self.log, {s.partition_key for s in self.boundary.assigned})
            self.boundary, end = self.boundary.plan_pieces(finished, pieces, limit, self.membership.epoch)
            return end

    @property
    def paused(self) -> bool:
        """Whether the query plans no batch because it is cut off from the coordinator (as of the
        last batch boundary)."""
        return self._paused

    def _cut_off(self) -> bool:
        """Failover rule 7 (`regroup.protocol.failover`): while the coordinator may have fenced this
        member — its connection broke and nothing has been answered since, for the grace — the
        shards may already be someone else's, so the query plans no new batch until it is answered
        again. The finished batch was committed first (a fenced commit is refused by epoch anyway)."""
        paused = self.membership.cut_off()
        if paused != self._paused:
            self._paused = paused
            if paused:
                log.warning("regroup source, group %r: cut off from the coordinator for %d ms since its "
                            "last answer, after the connection broke; it may have given the partitions "
                            "away: planning no batch until it answers again", self.opts.group,
                            self.membership.failover_grace_ms)
            else:
                log.info("regroup source, group %r: the coordinator answers again: resuming",
                         self.opts.group)
        return paused

    def ranges(self, start: BatchOffset, end: BatchOffset) -> list[ShardRange]:
        """What the batch (start, end) reads: only shards owned now (a replay skips moved shards).

        Reads the boundary and changes nothing — except on the first call of a query restarted from
        its checkpoint, which replays a batch before asking for any offset: the member must then
        first learn what it owns, and the boundary remembers which shards the replay skipped, so
        that one taken back next does not begin where the skipped batch said it ends."""
        with self._lock:
            self._first_contact()
            self.boundary = self.boundary.replayed(start, end)
            return self.boundary.ranges(start, end)

    def batch_committed(self, end: BatchOffset) -> None:
        """Spark's late commit of a finished batch (usually committed already at the boundary)."""
        with self._lock:
            self._commit(self.boundary.to_commit(end))

    def stop(self) -> None:
        """On query stop: commit the last batch if it finished (`commit_if_finished`), then leave."""
        if self._stopping or self._left:
            return
        self._stopping = True
        self.commit_if_finished()
        self.leave()

    def commit_if_finished(self, timeout: float = STOP_WAIT_S) -> bool:
        """Commit the last planned batch if the driver's listener reports it finished (waiting at most
        ``timeout`` s for its word); True if committed. A batch not reported finished is never
        committed: its records go to the partitions' next owners (at least once)."""
        end = self.unconfirmed
        if end is None or self._finished_dir is None:
            return False
        if not wait_finished(self._finished_dir, end, timeout):
            log.info("stopping: the last batch is not known to have finished; not committing it")
            return False
        # No self._lock (see leave); the boundary is an immutable value, replaced whole.
        try:
            positions = self.boundary.to_commit(BatchOffset.from_json(end))
            self.membership.commit(positions)
        except Exception as e:  # fenced, unreachable...: the next owners re-read the batch
            log.warning("stopping: commit of the finished last batch failed: %s", e)
            return False
        log.info("stopping: committed the finished last batch (%d partitions)", len(positions))
        return True

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
        """query.stop() ends the reader's process with SIGTERM and never calls the reader's stop():
        commit the last batch if it finished, and leave, then."""
        try:
            previous = signal.getsignal(signal.SIGTERM)

            def on_term(signum: int, frame: FrameType | None) -> None:
                if self._stopping or self._left:
                    return  # a second SIGTERM while the first is stopping: let that one finish
                log.info("query stopping (SIGTERM): leaving group %s", self.opts.group)
                self.stop()
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
        self._commit(self.boundary.to_commit(finished))
        self._backlog.add(self.membership.take_actions())
        while (action := self._backlog.next()) is not None:
            if isinstance(action, Revoke):
                self._commit(self.boundary.to_commit(finished, action.shards))
                self.boundary = self.boundary.released(action.shards)
                self.membership.revocation_done(action.shards)
            elif isinstance(action, Assign):
                try:
                    # Key ranges too: a range (or a whole partition whose progress is kept in
                    # fragments) begins at its laggard fragment, with the pieces it skips.
                    committed, starts = self.membership.where_to_resume(action.shards, self._reset, self.log)
                except OffsetFetchError as e:  # where to begin is unknown: try at the next boundary
                    if self._backlog.defer(action):
                        log.warning("cannot read committed offsets yet (%s); taking the partitions later", e)
                        return
                    continue
                self.boundary = self.boundary.taken(starts, committed, self._key_pieces(action.shards))
                self.membership.assignment_done(action.shards)
            elif isinstance(action, Lost):
                log.warning("membership lost (%s): dropping %d partitions without committing",
                            action.reason, len(self.boundary.assigned))
                self.boundary = self.boundary.released(held_when_lost(action, self.boundary.assigned))
            elif isinstance(action, Fatal):
                raise SourceFatalError(f"regroup source, group {self.opts.group!r}: {action.message}")

    def _commit(self, positions: dict[Shard, int]) -> None:
        if not positions:
            return
        try:
            self.membership.commit(positions)
        except CommitFailedError as e:  # fenced or moved: the coordinator decides, we carry on
            log.warning("commit of %d partitions refused: %s", len(positions), e)
            return
        self.boundary = self.boundary.with_committed(positions)

    def _key_pieces(self, shards: Collection[Shard]) -> dict[tuple[str, int], Pieces]:
        """The open pieces of the partitions of ``shards`` (one, every key, unless split)."""
        return {pk: self.log.key_pieces(*pk) for pk in sorted({s.partition_key for s in shards})}

