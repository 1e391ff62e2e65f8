"""A consumer process in the simulator, driving the real `MemberStateMachine`.

It is the shell of docs/protocol.md's member side, in virtual time:

* heartbeats when the state machine says one is due (it wakes for ``next_heartbeat_at`` and for
  ``session_deadline``), answers every request with exactly one ``on_response`` or
  ``request_failed`` (after ``request_timeout_ms``), and heartbeats at once when nudged;
* runs ``Revoke`` and ``Assign`` at its next poll boundary, as Kafka's consumers run rebalance
  callbacks inside ``poll()``, by the member driver's rules (`regroup.protocol.driver`, shared with
  the Python consumer and the PySpark source): a revocation stops the shards, commits their positions
  (retrying), releases them and acknowledges; an assignment acquires the shards, fetches their
  committed offsets (retrying: unknown is never "none"), starts processing where ``driver.resumes``
  says — for a key range, at the lowest committed fragment it overlaps, skipping what the others say
  is done — and acknowledges;
  ``Lost`` drops everything without a commit, and cancels the Revoke or Assign under way;
* commits the positions of its active shards every ``commit_interval_ms`` (auto-commit);
* can crash (no goodbye), shut down gracefully (``leave``: -1, or -2 for a static member), restart
  (a new member id; a static member keeps its instance id) and stall (one very long batch).

Every callback carries the incarnation it was made for, so nothing of a dead process runs after a
crash or restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from regroup.protocol.driver import OffsetReset, resumes
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import (
    Action,
    Assign,
    ComputeAssignment,
    Fatal,
    Lost,
    MemberState,
    MemberStateMachine,
    Revoke,
)
from regroup.protocol.messages import (
    Ack,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from regroup.protocol.shard import Shard, format_shards
from regroup.sim.coordinator_node import CoordinatorNode
from regroup.sim.engine import Engine
from regroup.sim.invariants import PROTOCOL, InvariantChecker
from regroup.sim.keyranges import RecordKeys
from regroup.sim.network import Network
from regroup.sim.observers import ShardObserver
from regroup.sim.workload import Cadence, Processor, ProducedLog

_DONE = frozenset({MemberState.LEFT, MemberState.FATAL})


@dataclass(frozen=True, slots=True)
class MemberSettings:
    """Client-side settings of the simulated consumers (Kafka's defaults unless noted)."""

    group_id: str = "g"
    topics: tuple[str, ...] = ("orders",)
    #: max.poll.interval.ms doubles as the rebalance timeout in Kafka; 60 s here (Kafka: 300 s).
    rebalance_timeout_ms: int = 60_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    #: request.timeout.ms is 30 s in Kafka; 10 s here so dropped replies are noticed sooner.
    request_timeout_ms: int = 10_000
    commit_interval_ms: int = 5_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    #: Give up a revocation commit after this long (then the hand-off is unclean).
    commit_deadline_ms: int = 20_000
    #: A graceful shutdown that has not finished after this long becomes a crash.
    shutdown_timeout_ms: int = 30_000


@dataclass
class MemberWorld:
    """What a member process talks to."""

    engine: Engine
    network: Network
    coordinator: CoordinatorNode
    log: ProducedLog
    observer: ShardObserver
    checker: InvariantChecker | None
    settings: MemberSettings
    register: Callable[[str, SimMember], None]
    #: The records' keys in a key-range run (None: whole partitions only).
    keys: RecordKeys | None = None
    #: Makes a process's `Processor` (None: the plain one); a run with producer-side splits reads
    #: in lanes (regroup/sim/lanes.py).
    make_processor: Callable[[str, Cadence, MemberWorld], Processor] | None = None


class SimMember:
    """One consumer process (one ``slot``) across its crashes and restarts."""

    def __init__(self, slot: str, static: bool, cadence: Cadence, world: MemberWorld) -> None:
        self.slot = slot
        self.static = static
        self.cadence = cadence
        self.w = world
        self.incarnation = 0
        self.alive = False
        self.leaving = False
        self.sm: MemberStateMachine | None = None
        self.processor: Processor | None = None
        self.owner = slot
        self.op: Revoke | Assign | None = None
        self._wake_at: int | None = None
        self._wake_token = 0
        self._epoch = 0
        self._committing = False
        #: When a shut-down process starts again (counted from the shutdown request).
        self._restart_at: int | None = None
        self.heartbeats = 0
        #: Commits refused (not for a stale epoch), by error code.
        self.refused: dict[str, int] = {}

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start a new process in this slot (a new member id; the same instance id if static)."""
        if self.alive:
            return
        s = self.w.settings
        self.incarnation += 1
        self.owner = f"{self.slot}#{self.incarnation}"
        member_id = f"{self.slot}-{self.incarnation}"
        self.sm = MemberStateMachine(
            s.group_id, member_id, instance_id=self.slot if self.static else None,
            rebalance_timeout_ms=s.rebalance_timeout_ms, subscribed_topics=s.topics,
            session_timeout_ms=s.session_timeout_ms, heartbeat_interval_ms=s.heartbeat_interval_ms,
            retry_backoff_ms=s.retry_backoff_ms, retry_backoff_max_ms=s.retry_backoff_max_ms)
        make = self.w.make_processor
        self.processor = (Processor(self.owner, self.w.log, self.cadence, self.w.observer, self.w.keys)
                          if make is None else make(self.owner, self.cadence, self.w))
        self.alive, self.leaving, self.op, self._epoch, self._committing = True, False, None, 0, False
        self._restart_at = None
        self._wake_at = None
        self.w.register(member_id, self)
        self.w.engine.trace(f"{self.owner}: START as {member_id}" + (" (static)" if self.static else ""))
        self._reschedule()
        self._schedule_autocommit(self.incarnation)

    def crash(self) -> None:
        """The process dies: it says nothing, holds nothing, and runs no more callbacks."""
        if not self.alive or self.sm is None or self.processor is None:
            return
        now = self.w.engine.now
        dropped = self.processor.drop_all(now)
        self.sm.close()
        self.w.engine.trace(f"{self.owner}: CRASH (drops {format_shards(dropped)})")
        was_leaving = self.leaving
        self._down()
        if was_leaving:
            self._restart_if_planned()  # the operator restarting it does not know it crashed

    def shutdown(self, restart_after: int | None = None) -> None:
        """Leave gracefully (commit and revoke everything first); optionally start again later."""
        if not self.alive or self.leaving or self.sm is None:
            return
        self.leaving = True
        self._restart_at = None if restart_after is None else self.w.engine.now + restart_after
        inc = self.incarnation
        self.w.engine.trace(f"{self.owner}: SHUTDOWN")
        self.w.engine.after(self.w.settings.shutdown_timeout_ms, "", lambda: self._shutdown_timeout(inc))
        self._act(self.sm.leave(self.w.engine.now))
        self._after()

    def stall(self, duration: int, end_by: int | None = None) -> None:
        """The next batch takes ``duration`` ms (and ends by ``end_by``): callbacks and commits
        wait for it."""
        now = self.w.engine.now
        start = self.cadence.next_at_or_after(now)
        if end_by is not None:
            duration = min(duration, end_by - start)
        if duration <= 0:
            return
        start, end = self.cadence.stall(now, duration)
        self.w.engine.trace(f"{self.slot}: STALL {start}..{end}")

    def nudged(self, member_id: str) -> None:
        if self.alive and self.sm is not None and self.sm.member_id == member_id:
            self.sm.nudge(self.w.engine.now)
            self._reschedule()

    def settled(self) -> bool:
        """In the group, stable, processing exactly what it owns, nothing in progress, and heard
        from the coordinator lately (not drifting towards a session timeout)."""
        sm, p = self.sm, self.processor
        if not (self.alive and not self.leaving and sm is not None and p is not None and self.op is None
                and sm.state is MemberState.STABLE and not p.busy() and p.active() == sm.owned):
            return False
        s = self.w.settings
        deadline = sm.session_deadline()
        recent = self.w.engine.now - s.heartbeat_interval_ms - s.request_timeout_ms
        return deadline is not None and deadline - s.session_timeout_ms >= recent

    def _shutdown_timeout(self, inc: int) -> None:
        if self.incarnation == inc and self.alive and self.leaving:
            self.w.engine.trace(f"{self.owner}: shutdown took too long")
            self.crash()

    def _down(self) -> None:
        self.alive = False
        self.leaving = False
        self.sm = None
        self.op = None
        self._wake_at = None

    def _stopped(self) -> None:
        """The state machine reached LEFT after a graceful shutdown."""
        assert self.processor is not None
        leftovers = self.processor.drop_all(self.w.engine.now)
        if leftovers and self.w.checker is not None:
            self.w.checker.fail(self.w.engine.now, PROTOCOL,
                                f"{self.owner} left the group still holding {format_shards(leftovers)}")
        self.w.engine.trace(f"{self.owner}: STOPPED")
        self._down()
        self._restart_if_planned()

    def _restart_if_planned(self) -> None:
        at = self._restart_at
        if at is not None:
            self.w.engine.at(at, f"{self.slot}: restart", self._planned_restart)

    def _planned_restart(self) -> None:
        self._restart_at = None
        self.start()

    @property
    def restart_pending(self) -> bool:
        return self._restart_at is not None

    def _live(self, inc: int) -> bool:
        return self.alive and inc == self.incarnation and self.sm is not None

    # ---------------------------------------------------------------- the heartbeat loop
    def _reschedule(self) -> None:
        sm = self.sm
        if not self.alive or sm is None:
            return
        due = [t for t in (sm.next_heartbeat_at(), sm.session_deadline()) if t is not None]
        if not due:
            return
        at = max(min(due), self.w.engine.now)
        if self._wake_at is not None and self._wake_at <= at:
            return
        self._wake_at = at
        self._wake_token += 1
        token, inc = self._wake_token, self.incarnation
        self.w.engine.at(at, f"{self.slot}: wake", lambda: self._wake(inc, token))

    def _wake(self, inc: int, token: int) -> None:
        if not self._live(inc) or token != self._wake_token:
            return
        self._wake_at = None
        assert self.sm is not None
        now = self.w.engine.now
        self._act(self.sm.tick(now))
        if self._live(inc) and self.sm.heartbeat_due(now):
            self._heartbeat()
        self._after()

    def _heartbeat(self) -> None:
        sm = self.sm
        assert sm is not None
        req = sm.next_request(self.w.engine.now)
        if req is None:
            return
        self.heartbeats += 1
        inc = self.incarnation
        if self.w.engine.verbose:
            owned = "-" if req.owned is None else format_shards(req.owned)
            self.w.engine.trace(f"{self.owner}: send hb e={req.member_epoch} owned={owned}")
        coord = self.w.coordinator
        self.w.network.call(self.slot, f"hb {req.member_id}", lambda: coord.heartbeat(req),
                            lambda resp: self._on_reply(inc, resp), lambda: self._on_fail(inc),
                            self.w.settings.request_timeout_ms)

    def _on_reply(self, inc: int, resp: HeartbeatResponse) -> None:
        if not self._live(inc):
            return
        assert self.sm is not None
        self._act(self.sm.on_response(resp, self.w.engine.now))
        self._after()

    def _on_fail(self, inc: int) -> None:
        if not self._live(inc):
            return
        assert self.sm is not None
        self.w.engine.trace(f"{self.owner}: hb timed out")
        self._act(self.sm.request_failed(self.w.engine.now))
        self._after()

    def _after(self) -> None:
        """After any call into the state machine: check its epoch, finish leaving, reschedule."""
        sm = self.sm
        if not self.alive or sm is None:
            return
        if sm.epoch != self._epoch:
            if self.w.checker is not None:
                self.w.checker.member_epoch(self.w.engine.now, self.owner, self._epoch, sm.epoch)
            self._epoch = sm.epoch
        if sm.state in _DONE and (self.leaving or sm.state is MemberState.FATAL):
            self._stopped()
            return
        self._reschedule()

    # ---------------------------------------------------------------- actions
    def _act(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, (Revoke, Assign)):
                self._begin(a)
            elif isinstance(a, Lost):
                self._lose(a)
            elif isinstance(a, Fatal):
                self.w.engine.trace(f"{self.owner}: FATAL {a.error.value}")
                if self.w.checker is not None:
                    self.w.checker.fail(self.w.engine.now, PROTOCOL,
                                        f"{self.owner}: fatal {a.error.value}: {a.message}")
            elif isinstance(a, ComputeAssignment):
                pass  # no client-side assignors in the simulation

    def _begin(self, a: Revoke | Assign) -> None:
        self.op = a
        inc = self.incarnation
        at = self.cadence.next_at_or_after(self.w.engine.now)
        kind = "revoke" if isinstance(a, Revoke) else "assign"
        if self.w.engine.verbose:
            self.w.engine.trace(f"{self.owner}: {kind} {format_shards(a.shards)} at boundary {at}")
        self.w.engine.at(at, f"{self.slot}: {kind}", lambda: self._run(inc, a))

    def _run(self, inc: int, a: Revoke | Assign) -> None:
        if not self._live(inc) or self.op is not a:
            return
        assert self.processor is not None
        now = self.w.engine.now
        if isinstance(a, Revoke):
            # The simulated consumer keeps no record of its commits: it commits every position.
            offsets = self.processor.revoke_offsets(a.shards, now)
            self._commit(inc, offsets, lambda ok: self._revoked(inc, a, ok))
        else:
            for s in sorted(a.shards):
                self.processor.acquire(s, now)
            self._fetch(inc, a)

    def _revoked(self, inc: int, a: Revoke, clean: bool) -> None:
        if not self._live(inc) or self.op is not a:
            return  # cancelled by Lost: the shards were dropped already
        assert self.sm is not None and self.processor is not None
        now = self.w.engine.now
        for s in sorted(a.shards):
            self.processor.release(s, now, clean)
        self.op = None
        self._act(self.sm.revocation_done(a.shards, now))
        self._after()

    def _fetch(self, inc: int, a: Assign) -> None:
        if not self._live(inc) or self.op is not a:
            return
        sm = self.sm
        assert sm is not None
        req = OffsetFetchRequest(sm.group_id, sm.member_id, sm.epoch, tuple(sorted(a.shards)))
        coord = self.w.coordinator
        self.w.network.call(self.slot, f"fetch {sm.member_id}", lambda: coord.fetch(req),
                            lambda resp: self._fetched(inc, a, resp), lambda: self._retry_fetch(inc, a),
                            self.w.settings.request_timeout_ms)

    def _retry_fetch(self, inc: int, a: Assign) -> None:
        self.w.engine.after(self.w.settings.retry_backoff_ms * 2, f"{self.slot}: refetch",
                            lambda: self._fetch(inc, a))

    def _fetched(self, inc: int, a: Assign, resp: OffsetFetchResponse) -> None:
        if not self._live(inc) or self.op is not a:
            return
        if resp.error is not ErrorCode.NONE:
            # A stale epoch (our heartbeat answer is still on its way) or a fenced member (Lost is
            # coming): unknown offsets are not "none", so try again — until a Lost supersedes the
            # Assign (`_lose` cancels it; the driver's rule 4).
            self._retry_fetch(inc, a)
            return
        assert self.sm is not None and self.processor is not None
        now = self.w.engine.now
        committed = {s: c.offset for s, c in resp.offsets.items()}
        # `resumes`, not `start_positions`: a merged range must know which records its other parts'
        # former owners did already (the answer holds every fragment overlapping the shards).
        for s, r in resumes(a.shards, committed, OffsetReset.EARLIEST, {}).items():
            self.processor.activate(s, r.start, now, r)
        self.op = None
        self._act(self.sm.assignment_done(a.shards, now))
        self._after()

    def _lose(self, a: Lost) -> None:
        assert self.processor is not None
        dropped = self.processor.drop_all(self.w.engine.now)
        self.op = None
        self.w.engine.trace(f"{self.owner}: LOST {format_shards(dropped)} ({a.reason[:60]})")

    # ---------------------------------------------------------------- commits
    def _commit(self, inc: int, offsets: dict[Shard, int], done: Callable[[bool], None]) -> None:
        """Commit with retries until accepted (True), refused for good or out of time (False)."""
        deadline = self.w.engine.now + self.w.settings.commit_deadline_ms
        finished = False

        def finish(ok: bool) -> None:
            nonlocal finished
            if not finished:
                finished = True
                done(ok)

        def send() -> None:
            if not self._live(inc):
                return
            sm = self.sm
            assert sm is not None
            req = OffsetCommitRequest(sm.group_id, sm.member_id, sm.epoch, offsets)
            coord = self.w.coordinator
            self.w.network.call(self.slot, f"commit {sm.member_id}", lambda: coord.commit(req), reply,
                                retry, self.w.settings.request_timeout_ms)

        def reply(ack: Ack) -> None:
            if ack.ok:
                finish(True)
            elif ack.error is ErrorCode.STALE_MEMBER_EPOCH:
                retry()
            else:
                self.refused[ack.error.value] = self.refused.get(ack.error.value, 0) + 1
                finish(False)

        def retry() -> None:
            backoff = self.w.settings.retry_backoff_ms * 2
            if self.w.engine.now + backoff >= deadline:
                finish(False)
            else:
                self.w.engine.after(backoff, f"{self.slot}: recommit", send)

        if offsets:
            send()
        else:
            finish(True)

    def _schedule_autocommit(self, inc: int) -> None:
        # Auto-commit runs inside poll(): at the first boundary once the interval has passed.
        at = self.cadence.next_at_or_after(self.w.engine.now + self.w.settings.commit_interval_ms)
        self.w.engine.at(at, f"{self.slot}: autocommit", lambda: self._autocommit(inc))

    def _autocommit(self, inc: int) -> None:
        if not self._live(inc):
            return
        self._schedule_autocommit(inc)
        if self._committing or self.processor is None:
            return
        positions = self.processor.commit_positions(self.w.engine.now)
        if positions:
            self._committing = True

            def done(ok: bool) -> None:
                if self._live(inc):
                    self._committing = False

            self._commit(inc, positions, done)
