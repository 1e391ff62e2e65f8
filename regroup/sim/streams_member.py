"""A streams process in the simulator: the real `StreamsMemberStateMachine` over a model of task state.

The state model (all sizes in records, all rates in records per second of virtual time):

1. Every task reads one source partition, which holds ``state_records`` records at t = 0 and grows
   by ``produce_per_s``. A task's state *is* its changelog, one record per source record processed,
   never compacted: a copy whose state reflects source offset ``x`` must replay ``C - x`` records to
   reach the task's committed offset ``C``, and the lag it reports (``C - x``, `lags` rule 2) is
   exactly that work. The committed offsets are pre-set to ``state_records`` before anyone joins.
2. A process keeps its copies on its own disk (``ProcessDisk``), which outlives its members: a
   restart in the same slot is the same process (same process id, same copies).
3. A standby or warm-up copy *follows*: it replays the changelog at ``restore_per_s`` towards the
   task's committed offset and then stays there (each accepted commit moves the goal). Copies
   restore independently of each other (no shared restore bandwidth per process).
4. An active starts from its local copy (none: from nothing): it fetches the committed offset ``C``,
   replays ``C - x`` records at ``restore_per_s`` — the task is *unavailable* meanwhile — and then
   processes from ``C`` at ``process_per_s`` until it has caught up with the source, then follows it.
   It acknowledges the Start once the offsets are fetched (restoring is the process's business, as in
   Kafka Streams), commits its position every ``commit_interval_ms``, and on a Stop stops processing
   at once, commits, and keeps its state on disk.
5. A copy that is stopped, lost or left behind by a crash stays on disk, *dormant*, at the position
   it had (a lost active's at most the committed offset: what it processed after its last accepted
   commit is voided, as `regroup.streams.changelog` does), and is reported like any other copy.
6. A process *cut off* from the coordinator (`regroup.protocol.failover`, the real `Contact`; the
   simulated members open no nudge stream, so rule 12 is the one that applies: an interval plus the
   grace after the send of its last answered heartbeat) pauses its actives, as the real streams
   member does between batches: they neither restore nor process (their state stays where it was),
   do not count as running for the one-active invariant, and commit nothing, until a heartbeat sent
   later is answered; then they go on from where they stopped. Standbys and warm-ups go on
   following: they run nothing the coordinator could have given away.

What the member reports (`StreamsMemberStateMachine.report_offsets`), by promotion policy:

* ``regroup``: every local copy's position, fresh before every heartbeat; a warm-up that reaches
  the committed offset reports at once as urgent (promotion by event).
* ``kip441``: actives and dormant copies fresh, but a standby or warm-up reports the *lag* it had at
  the last probing rebalance (or when it started), as a position that far behind the committed
  offset now: the coordinator learns that a copy caught up only at a probe (`StreamsSystem`
  schedules them), and nothing is urgent except the probe. A copy's lag only shrinks while it
  follows (restoring outruns producing), so the position reported is never one it has not reached.
* ``cold``: fresh, and every task of the topology, at offset 0 where there is no copy: with the
  group's acceptable lag set beyond any lag, every process looks caught up on every task, so the
  assignor moves actives at once and the new owner restores after the move.

The process shell itself follows `member_node`'s: it wakes for ``next_heartbeat_at`` and
``session_deadline`` (and for the contact rule's heartbeat and cut-off moments), answers every request
with exactly one ``on_response`` or ``request_failed``, heartbeats at once when nudged, and every
callback carries the incarnation it was made for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from regroup.protocol.errors import ErrorCode
from regroup.protocol.failover import Contact
from regroup.protocol.member import Fatal
from regroup.protocol.messages import Ack, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.member import (
    LostTasks,
    StartTasks,
    StopTasks,
    StreamsAction,
    StreamsMemberState,
    StreamsMemberStateMachine,
    format_tasks,
)
from regroup.protocol.streams.messages import StreamsHeartbeatResponse
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.sim.engine import Engine

if TYPE_CHECKING:
    from regroup.sim.streams_system import StreamsSystem

_DONE = frozenset({StreamsMemberState.LEFT, StreamsMemberState.FATAL})


class Policy(Enum):
    """How warm-ups and promotion work (see the module docstring)."""

    COLD = "cold"
    KIP441 = "kip441"
    REGROUP = "regroup"


@dataclass(frozen=True, slots=True)
class StreamsSimSettings:
    """The group, the state model and the clients' settings (regroup's defaults unless noted)."""

    group_id: str = "app"
    topic: str = "events"
    subtopology: str = "count"
    tasks: int = 12
    standby_replicas: int = 0
    acceptable_recovery_lag: int = 10_000
    max_warmups: int = 2
    #: Kafka Streams' probing.rebalance.interval.ms (the kip441 policy only).
    probing_interval_ms: int = 600_000
    #: Records in each task's changelog (= its committed source offset) at t = 0.
    state_records: int = 1_200_000
    produce_per_s: int = 50
    restore_per_s: int = 5_000
    process_per_s: int = 2_000
    commit_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    rebalance_timeout_ms: int = 60_000
    request_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    #: Give up committing a stopping active after this long (its hand-off is then unclean).
    commit_deadline_ms: int = 20_000
    #: A graceful shutdown that has not finished after this long becomes a crash.
    shutdown_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in ("tasks", "restore_per_s", "process_per_s", "commit_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.process_per_s <= self.produce_per_s:
            raise ValueError("process_per_s must exceed produce_per_s, or an active never catches up")

    def end_offset(self, t: int) -> int:
        """Where every source partition ends at ``t`` (rule 1)."""
        return self.state_records + self.produce_per_s * t // 1000

    def shard(self, task: TaskId) -> Shard:
        return Shard(self.topic, task.partition)

    def task_ids(self) -> list[TaskId]:
        return [TaskId(self.subtopology, p) for p in range(self.tasks)]

    def topology(self) -> Topology:
        return Topology.of({self.subtopology: [self.topic]})


# ------------------------------------------------------------------------------------------ state

ACTIVE, STANDBY, WARMUP, DORMANT = "active", "standby", "warm-up", "dormant"
FOLLOWING = frozenset({STANDBY, WARMUP})


def _ceil_ms(records: int, per_s: int) -> int:
    return -(-records * 1000 // per_s)


@dataclass(slots=True)
class Copy:
    """One task's local state on one process (rules 3-5), evaluated lazily in virtual time.

    ``pos`` is the source offset the state reflected at ``at``; ``goal`` is where it is heading (the
    committed offset it follows, or an active's start offset). An active is ready (processing) from
    ``ready_at``. A *paused* active (rule 6) stays at ``pos``; it resumes restoring towards ``goal``,
    or processing from ``pos`` once ``pos`` reached it.
    """

    task: TaskId
    role: str
    pos: int
    at: int
    goal: int = 0
    ready_at: int = 0
    #: The lag the kip441 policy reports for a following copy (measured at probes and at its start).
    probed_lag: int = 0
    #: A warm-up that has reported itself caught up (once per start, as the Python member does).
    caught: bool = False
    token: int = 0
    #: Restore records of an active already accounted (its ``pos``/``at`` stay its restore's start).
    accounted: int = 0
    #: An active whose process is cut off from the coordinator (rule 6).
    paused: bool = False

    def state(self, t: int, s: StreamsSimSettings) -> int:
        """The source offset the local state reflects at ``t``."""
        if self.role == ACTIVE and self.paused:
            return self.pos
        if self.role == ACTIVE:
            if t < self.ready_at:
                return min(self.goal, self.pos + s.restore_per_s * (t - self.at) // 1000)
            return min(s.end_offset(t), self.goal + s.process_per_s * (t - self.ready_at) // 1000)
        if self.role in FOLLOWING and self.pos < self.goal:
            return min(self.goal, self.pos + s.restore_per_s * max(0, t - self.at) // 1000)
        return self.pos

    def ready(self, t: int) -> bool:
        """An active whose state is restored at ``t``: it processes (or did, until it paused)."""
        return self.pos >= self.goal if self.paused else t >= self.ready_at

    def restored(self, t: int, s: StreamsSimSettings) -> int:
        """Changelog records replayed since ``at`` (restore work, not processing)."""
        if self.role == ACTIVE and self.paused:
            return 0
        if self.role == ACTIVE:
            return min(self.goal, self.pos + s.restore_per_s * (min(t, self.ready_at) - self.at) // 1000) \
                - self.pos
        if self.role in FOLLOWING:
            return self.state(t, s) - self.pos
        return 0


@dataclass
class ProcessDisk:
    """A process's state directory: its id and its copies (rule 2)."""

    process_id: str
    copies: dict[TaskId, Copy] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ process


class SimStreamsMember:
    """One streams process (one ``slot``) across its crashes and restarts."""

    def __init__(self, slot: str, static: bool, system: StreamsSystem) -> None:
        self.slot = slot
        self.static = static
        self.sys = system
        self.s = system.settings
        self.disk = ProcessDisk(f"process-{slot}")
        self.incarnation = 0
        self.alive = False
        self.leaving = False
        self.sm: StreamsMemberStateMachine | None = None
        self.op: StopTasks | StartTasks | None = None
        self._wake_at: int | None = None
        self._wake_token = 0
        self._restart_at: int | None = None
        self._committed: dict[TaskId, int] = {}
        #: Failover rules 7-12, the member side (rule 6): when the process is cut off.
        self.contact = Contact()
        self._cut_off = False

    @property
    def member_id(self) -> str | None:
        return None if self.sm is None else self.sm.member_id

    @property
    def engine(self) -> Engine:
        return self.sys.engine

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """A new run of this process: a new member id, the same process id, copies and instance id."""
        if self.alive:
            return
        s = self.s
        self.incarnation += 1
        member_id = f"{self.slot}-{self.incarnation}"
        self.sm = StreamsMemberStateMachine(
            s.group_id, member_id, self.disk.process_id, s.topology(),
            instance_id=self.slot if self.static else None, rebalance_timeout_ms=s.rebalance_timeout_ms,
            session_timeout_ms=s.session_timeout_ms, heartbeat_interval_ms=s.heartbeat_interval_ms,
            retry_backoff_ms=s.retry_backoff_ms, retry_backoff_max_ms=s.retry_backoff_max_ms)
        self.alive, self.leaving, self.op, self._restart_at, self._wake_at = True, False, None, None, None
        self._committed = {}
        self.contact, self._cut_off = Contact(), False
        now = self.engine.now
        self.sm.report_offsets(self.view(now), now)  # the copies on disk go with the join
        self.sys.register(member_id, self)
        self.engine.trace(f"{member_id}: START on {self.disk.process_id}"
                          + (" (static)" if self.static else ""))
        self._reschedule()
        self._schedule_commit(self.incarnation)

    def crash(self) -> None:
        """The process dies silently: nothing more runs, its copies stay on disk (rule 5)."""
        if not self.alive or self.sm is None:
            return
        self.sm.close()
        self.engine.trace(f"{self.sm.member_id}: CRASH")
        self._drop(self._all_roles(), "crash")
        was_leaving = self.leaving
        self._down()
        if was_leaving:
            self._restart_if_planned()

    def shutdown(self, restart_after: int | None = None) -> None:
        """Leave gracefully (stop everything, actives commit; a static member leaves with -2)."""
        if not self.alive or self.leaving or self.sm is None:
            return
        self.leaving = True
        now = self.engine.now
        self._restart_at = None if restart_after is None else now + restart_after
        inc = self.incarnation
        self.engine.trace(f"{self.sm.member_id}: SHUTDOWN")
        self.engine.after(self.s.shutdown_timeout_ms, "", lambda: self._shutdown_timeout(inc))
        self._act(self.sm.leave(now))
        self._after()

    def nudged(self, member_id: str) -> None:
        if self.alive and self.sm is not None and self.sm.member_id == member_id:
            if self.engine.verbose:
                self.engine.trace(f"{member_id}: nudged" + (" (request in flight: after its answer)"
                                                           if self.sm.in_flight else ""))
            self.sm.nudge(self.engine.now)
            self._reschedule()

    def probe(self) -> None:
        """A probing rebalance (kip441): the coordinator now learns where every copy is."""
        if not self.alive or self.sm is None:
            return
        now = self.engine.now
        for t, c in sorted(self.disk.copies.items()):
            c.probed_lag = max(0, self.sys.committed(t) - c.state(now, self.s))
        self.sm.report_offsets(self.view(now), now, urgent=True)
        self._reschedule()

    def settled(self) -> bool:
        """In the group, stable, running exactly its target, nothing under way, heard lately."""
        sm = self.sm
        if not (self.alive and not self.leaving and sm is not None and self.op is None
                and sm.state is StreamsMemberState.STABLE and sm.owned == sm.target):
            return False
        deadline = sm.session_deadline()
        recent = self.engine.now - self.s.heartbeat_interval_ms - self.s.request_timeout_ms
        return deadline is not None and deadline - self.s.session_timeout_ms >= recent

    @property
    def restart_pending(self) -> bool:
        return self._restart_at is not None

    def _shutdown_timeout(self, inc: int) -> None:
        if self.incarnation == inc and self.alive and self.leaving:
            self.engine.trace(f"{self.slot}: shutdown took too long")
            self.crash()

    def _down(self) -> None:
        self.alive = False
        self.leaving = False
        self.sm = None
        self.op = None
        self._wake_at = None

    def _restart_if_planned(self) -> None:
        at = self._restart_at
        if at is not None:
            self.engine.at(at, f"{self.slot}: restart", self._planned_restart)

    def _planned_restart(self) -> None:
        self._restart_at = None
        self.start()

    def _live(self, inc: int) -> bool:
        return self.alive and inc == self.incarnation and self.sm is not None

    # ---------------------------------------------------------------- reports
    def view(self, t: int) -> dict[TaskId, dict[Shard, int]]:
        """Every local copy and the source offset its state reached, as the policy reports it."""
        s, policy = self.s, self.sys.policy
        out: dict[TaskId, dict[Shard, int]] = {}
        for task, c in sorted(self.disk.copies.items()):
            pos = c.state(t, s)
            if policy is Policy.KIP441 and c.role in FOLLOWING:
                pos = min(pos, max(0, self.sys.committed(task) - c.probed_lag))
            out[task] = {s.shard(task): pos}
        if policy is Policy.COLD:
            for task in s.task_ids():
                out.setdefault(task, {s.shard(task): 0})
        return out

    # ---------------------------------------------------------------- the heartbeat loop
    def _reschedule(self) -> None:
        sm = self.sm
        if not self.alive or sm is None:
            return
        now = self.engine.now
        cut_at = None if self._cut_off else self.contact.cut_off_at()
        wakes = (sm.next_heartbeat_at(), sm.session_deadline(), self.contact.heartbeat_due_at(), cut_at)
        due = [t for t in wakes if t is not None]
        if not due:
            return
        at = max(min(due), now)
        if self._wake_at is not None and self._wake_at <= at:
            return
        self._wake_at = at
        self._wake_token += 1
        token, inc = self._wake_token, self.incarnation
        self.engine.at(at, "", lambda: self._wake(inc, token))

    def _wake(self, inc: int, token: int) -> None:
        if not self._live(inc) or token != self._wake_token:
            return
        self._wake_at = None
        assert self.sm is not None
        now = self.engine.now
        self._act(self.sm.tick(now))
        self._keep_contact()
        due = self.contact.heartbeat_due_at()
        if self._live(inc) and due is not None and due <= now:  # failover rule 9: stay in contact
            self.contact.asked(now)
            self.sm.nudge(now)
        if self._live(inc) and self.sm.heartbeat_due(now):
            self._heartbeat()
        self._after()

    def _heartbeat(self) -> None:
        sm = self.sm
        assert sm is not None
        now = self.engine.now
        if sm.state not in (StreamsMemberState.LEAVING, StreamsMemberState.PREPARE_LEAVING):
            sm.report_offsets(self.view(now), now)
        req = sm.next_request(now)
        if req is None:
            return
        inc = self.incarnation
        node = self.sys.node
        self.sys.network.call(self.slot, f"shb {req.member_id} e={req.member_epoch}",
                              lambda: node.streams_heartbeat(req),
                              lambda resp: self._on_reply(inc, now, resp), lambda: self._on_fail(inc),
                              self.s.request_timeout_ms)

    def _on_reply(self, inc: int, sent: int, resp: StreamsHeartbeatResponse) -> None:
        if not self._live(inc):
            return
        assert self.sm is not None
        if resp.error is ErrorCode.NONE:  # the contact rule counts from the send
            self.contact.answered(sent, resp.failover_grace_ms, resp.heartbeat_interval_ms)
        self._act(self.sm.on_response(resp, self.engine.now))
        self._after()

    def _on_fail(self, inc: int) -> None:
        if not self._live(inc):
            return
        assert self.sm is not None
        self._act(self.sm.request_failed(self.engine.now))
        self._after()

    def _after(self) -> None:
        sm = self.sm
        if not self.alive or sm is None:
            return
        if sm.state in _DONE and (self.leaving or sm.state is StreamsMemberState.FATAL):
            self._stopped()
            return
        self._keep_contact()
        self._reschedule()

    # ---------------------------------------------------------------- the contact rule (rule 6)
    def _keep_contact(self) -> None:
        """Pause the actives when the process is cut off from the coordinator, resume them when it
        is back in contact."""
        now = self.engine.now
        cut = self.contact.cut_off(now)
        if cut != self._cut_off:
            self._cut_off = cut
            what = "CUT OFF: pauses its actives" if cut else "in contact again"
            self.engine.trace(f"{self.member_id}: {what}")
        for _, c in sorted(self.disk.copies.items()):
            if c.role != ACTIVE:
                continue
            if cut and not c.paused:
                self._pause(c, now)
            elif not cut and c.paused:
                self._run_active(c, now)

    def _pause(self, c: Copy, now: int) -> None:
        self.settle(c, now)
        x = c.state(now, self.s)
        self.sys.ledger.end(c.task, self.member_id or "", now)
        c.pos, c.goal, c.at, c.accounted, c.paused = x, max(c.goal, x), now, 0, True
        c.token += 1

    def _run_active(self, c: Copy, now: int) -> None:
        """Start (or resume) an active: restore from ``pos`` to ``goal``, then process (rule 4)."""
        c.paused, c.at, c.accounted = False, now, 0
        c.ready_at = now + _ceil_ms(c.goal - c.pos, self.s.restore_per_s)
        c.token += 1
        self.sys.ledger.begin(c.task, self.member_id or "", self.disk.process_id, now, c.ready_at)

    def _stopped(self) -> None:
        assert self.sm is not None
        left = [t for t, c in sorted(self.disk.copies.items()) if c.role != DORMANT]
        if left:
            self.sys.violation(f"{self.sm.member_id} left the group still running {left}")
            self._drop(self._all_roles(), "left")
        self.engine.trace(f"{self.sm.member_id}: STOPPED")
        self._down()
        self._restart_if_planned()

    # ---------------------------------------------------------------- actions
    def _act(self, actions: list[StreamsAction]) -> None:
        for a in actions:
            if isinstance(a, (StopTasks, StartTasks)):
                if self.engine.verbose:
                    kind = "stop" if isinstance(a, StopTasks) else "start"
                    self.engine.trace(f"{self.member_id}: {kind} {format_tasks(a.tasks)}")
                self.op = a
                self.engine.after(0, "", self._runner(self.incarnation, a))
            elif isinstance(a, LostTasks):
                self.op = None
                self.engine.trace(f"{self.member_id}: LOST {format_tasks(a.tasks)} ({a.reason[:60]})")
                self._drop(a.tasks, "lost")
            elif isinstance(a, Fatal):
                self.sys.violation(f"{self.member_id}: fatal {a.error.value}: {a.message}")

    def _runner(self, inc: int, a: StopTasks | StartTasks) -> Callable[[], None]:
        return lambda: self._run(inc, a)

    def _run(self, inc: int, a: StopTasks | StartTasks) -> None:
        if not self._live(inc) or self.op is not a:
            return
        if isinstance(a, StopTasks):
            self._stop(inc, a)
        else:
            self._start(inc, a)

    def _all_roles(self) -> MemberTasks:
        by: dict[str, set[TaskId]] = {ACTIVE: set(), STANDBY: set(), WARMUP: set()}
        for t, c in self.disk.copies.items():
            if c.role in by:
                by[c.role].add(t)
        return MemberTasks(frozenset(by[ACTIVE]), frozenset(by[STANDBY]), frozenset(by[WARMUP]))

    def _stop(self, inc: int, a: StopTasks) -> None:
        now = self.engine.now
        offsets: dict[Shard, int] = {}
        positions: dict[TaskId, int] = {}
        for t in sorted(a.tasks.active):
            c = self.disk.copies.get(t)
            if c is None or c.role != ACTIVE:
                continue
            pos, ready = c.state(now, self.s), c.ready(now)
            self._to_dormant(c, now)
            self.sys.ledger.end(t, self.member_id or "", now)
            positions[t] = pos
            if ready:
                offsets[self.s.shard(t)] = pos
        for t in sorted(a.tasks.standby | a.tasks.warmup):
            c = self.disk.copies.get(t)
            if c is not None and c.role in FOLLOWING:
                self._to_dormant(c, now)

        def done(ok: bool) -> None:
            if not self._live(inc) or self.op is not a:
                return
            if not ok:  # what was processed after the last accepted commit is void (rule 5)
                for t in positions:
                    c = self.disk.copies[t]
                    c.pos = min(c.pos, self.sys.committed(t))
            self.op = None
            assert self.sm is not None
            self._act(self.sm.tasks_stopped(a.tasks, self.engine.now))
            self._after()

        self._commit(inc, offsets, done)

    def _start(self, inc: int, a: StartTasks) -> None:
        now = self.engine.now
        for t in sorted(a.tasks.standby):
            self._follow(t, STANDBY, now)
        for t in sorted(a.tasks.warmup):
            self._follow(t, WARMUP, now)
        if not a.tasks.active:
            self._started(inc, a)
            return
        self._fetch(inc, a)

    def _started(self, inc: int, a: StartTasks) -> None:
        self.op = None
        assert self.sm is not None
        self._act(self.sm.tasks_started(a.tasks, self.engine.now))
        self._after()

    def _follow(self, task: TaskId, role: str, now: int) -> None:
        c = self.disk.copies.get(task)
        if c is None:
            c = self.disk.copies[task] = Copy(task, DORMANT, 0, now)
        self.settle(c, now)
        c.role, c.caught = role, False
        c.pos = min(c.pos, self.sys.committed(task))
        c.probed_lag = self.sys.committed(task) - c.pos
        self.rebase(c, now, self.sys.committed(task))

    def _fetch(self, inc: int, a: StartTasks) -> None:
        if not self._live(inc) or self.op is not a:
            return
        sm = self.sm
        assert sm is not None
        shards = tuple(self.s.shard(t) for t in sorted(a.tasks.active))
        req = OffsetFetchRequest(sm.group_id, sm.member_id, sm.epoch, shards)
        node = self.sys.node
        self.sys.network.call(self.slot, f"fetch {sm.member_id}", lambda: node.fetch(req),
                              lambda resp: self._fetched(inc, a, resp), lambda: self._refetch(inc, a),
                              self.s.request_timeout_ms)

    def _refetch(self, inc: int, a: StartTasks) -> None:
        self.engine.after(self.s.retry_backoff_ms * 2, "", lambda: self._fetch(inc, a))

    def _fetched(self, inc: int, a: StartTasks, resp: OffsetFetchResponse) -> None:
        if not self._live(inc) or self.op is not a:
            return
        if resp.error is not ErrorCode.NONE:
            self._refetch(inc, a)  # unknown offsets are not "none": try again (or a Lost cancels us)
            return
        now = self.engine.now
        for t in sorted(a.tasks.active):
            got = resp.offsets.get(self.s.shard(t))
            start = 0 if got is None else got.offset
            c = self.disk.copies.get(t)
            if c is None:
                c = self.disk.copies[t] = Copy(t, DORMANT, 0, now)
            self.settle(c, now)
            local = min(c.pos, start)  # anything past the accepted commit is void
            c.role, c.pos, c.goal, c.caught = ACTIVE, local, start, False
            self._committed[t] = start
            if self.contact.cut_off(now):  # it starts paused (rule 6)
                c.at, c.accounted, c.paused = now, 0, True
                c.token += 1
            else:
                self._run_active(c, now)
        self._started(inc, a)

    def _drop(self, tasks: MemberTasks, why: str) -> None:
        """Lost or crashed: no commit; actives keep only what was committed (rule 5)."""
        now = self.engine.now
        for t in sorted(tasks.active | tasks.standby | tasks.warmup):
            c = self.disk.copies.get(t)
            if c is None or c.role == DORMANT:
                continue
            if c.role == ACTIVE:
                self.sys.ledger.end(t, self.member_id or "", now)
                self._to_dormant(c, now)
                c.pos = min(c.pos, self.sys.committed(t))
            else:
                self._to_dormant(c, now)

    # ---------------------------------------------------------------- copies
    def settle(self, c: Copy, now: int) -> None:
        """Account the restore work done so far; a copy's position is then frozen at ``now`` (an
        active's restore start is kept: its processing position is computed from it)."""
        done = c.restored(now, self.s) - c.accounted
        self.sys.restored(done, now)
        if c.role == ACTIVE:
            c.accounted += done
        else:
            c.pos, c.at, c.accounted = c.state(now, self.s), now, 0

    def _to_dormant(self, c: Copy, now: int) -> None:
        self.settle(c, now)
        c.pos, c.at, c.accounted = c.state(now, self.s), now, 0
        c.role, c.caught, c.paused = DORMANT, False, False
        c.token += 1

    def rebase(self, c: Copy, now: int, goal: int) -> None:
        """A following copy's goal moved (a commit was accepted, or it just started)."""
        if c.role not in FOLLOWING:
            return
        self.settle(c, now)
        c.goal = max(goal, c.pos)
        c.token += 1
        if c.role == WARMUP and self.sys.policy is Policy.REGROUP and not c.caught:
            at = now + _ceil_ms(c.goal - c.pos, self.s.restore_per_s)
            token, inc = c.token, self.incarnation
            self.engine.at(at, "", lambda: self._caught_up(inc, c, token))

    def _caught_up(self, inc: int, c: Copy, token: int) -> None:
        """A warm-up reached the committed offset: report it now (promotion by event)."""
        if not self._live(inc) or c.token != token or c.role != WARMUP or c.caught:
            return
        now = self.engine.now
        if c.state(now, self.s) < c.goal:
            return
        c.caught = True
        assert self.sm is not None
        self.engine.trace(f"{self.sm.member_id}: warm-up {c.task} caught up")
        self.sm.report_offsets(self.view(now), now, urgent=True)
        self._reschedule()

    # ---------------------------------------------------------------- commits
    def _commit(self, inc: int, offsets: Mapping[Shard, int], done: Callable[[bool], None]) -> None:
        """Commit with retries until accepted (True), refused for good or out of time (False)."""
        if not offsets:
            done(True)
            return
        deadline = self.engine.now + self.s.commit_deadline_ms
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
            req = OffsetCommitRequest(sm.group_id, sm.member_id, sm.epoch, dict(offsets))
            node = self.sys.node
            self.sys.network.call(self.slot, f"commit {sm.member_id}", lambda: node.commit(req), reply, retry,
                                  self.s.request_timeout_ms)

        def reply(ack: Ack) -> None:
            if ack.ok:
                finish(True)
            elif ack.error is ErrorCode.STALE_MEMBER_EPOCH:
                retry()
            else:
                finish(False)

        def retry() -> None:
            backoff = self.s.retry_backoff_ms * 2
            if self.engine.now + backoff >= deadline:
                finish(False)
            else:
                self.engine.after(backoff, "", send)

        send()

    def _schedule_commit(self, inc: int) -> None:
        self.engine.after(self.s.commit_interval_ms, "", lambda: self._periodic_commit(inc))

    def _periodic_commit(self, inc: int) -> None:
        if not self._live(inc):
            return
        self._schedule_commit(inc)
        now = self.engine.now
        offsets: dict[Shard, int] = {}
        for t, c in sorted(self.disk.copies.items()):
            if c.role == ACTIVE and not c.paused and now >= c.ready_at:
                pos = c.state(now, self.s)
                if pos > self._committed.get(t, -1):
                    offsets[self.s.shard(t)] = pos
                    self._committed[t] = pos
        if offsets and not self.leaving:
            self._commit(inc, offsets, lambda ok: None)


__all__ = ["ACTIVE", "DORMANT", "FOLLOWING", "STANDBY", "WARMUP", "Copy", "Policy", "ProcessDisk",
           "SimStreamsMember", "StreamsSimSettings"]
