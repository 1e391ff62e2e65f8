"""The hypothesis state machines: random churn against the real coordinator, checked at every call.

Rules of this module:

1. Every coordinator call goes through `GroupMachine._step`, the one door: it captures the group
   before and after, keeps the records, replays them, feeds the model and runs every check of
   `checks` — no rule talks to the coordinator any other way.
2. Virtual time is global and moves only through `_advance_to`, which calls ``expire`` at every
   deadline the coordinator reports on the way, as a shell would.
3. Processes send one request at a time; revocations and assignments are acknowledged at once, or
   (slow processes) only when `finish_pending` says so; flaky processes lose messages as
   FLAKY_PATTERN says, deaf ones get no answers until they give up and rejoin; members in
   ``Outcome.wake`` are nudged.
4. Determinism: member ids come from a counter and everything is iterated in sorted order, so a run
   does not depend on PYTHONHASHSEED.
5. At teardown churn stops and the group must settle (liveness) within MAX_CONVERGE_ROUNDS.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import (
    Assign,
    ComputeAssignment,
    Fatal,
    Lost,
    MemberState,
    MemberStateMachine,
    Revoke,
)
from regroup.protocol.messages import (
    JOIN_EPOCH,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetResetRequest,
)
from regroup.protocol.records import MemberStatus, Record, TargetEpochRecord, TargetMemberRecord
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.state import Group, apply
from regroup.protocol.topics import TopicMetadata
from regroup.sim.invariants import rebuilt_differs
from tests.protocol.properties import checks
from tests.protocol.properties.group import CONFIG, GID, INTERVAL_MS, SESSION_MS, View, capture, fmt
from tests.protocol.properties.model import Membership, Sub, all_shards, predecessor, resolve, sub
from tests.protocol.properties.processes import FLAKY_PATTERN, IN_GROUP, Proc

FAST_RTO_MS = 60_000
SLOW_RTO_MS = 12_000  # < session timeout: a slow revocation can outlast it between two heartbeats
#: Rounds the teardown may take: every process-less member's session runs out within
#: ⌈session/interval⌉ + 1 rounds; after the last membership change one round to (re)join, one for
#: revokers to revoke and report, one for receivers to take the released shards, one to confirm.
SETTLE_ROUNDS = 4
MAX_CONVERGE_ROUNDS = math.ceil(SESSION_MS / INTERVAL_MS) + 1 + SETTLE_ROUNDS

PICK = st.integers(0, 63)
#: How a request fares: answered, answer lost (the coordinator acted on it), or never arrived.
MODES = st.sampled_from(["deliver", "deliver", "lose_response", "lose_request"])

F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """Mark the machine broken when a rule or invariant fails, so teardown does not pile on."""
    @functools.wraps(fn)
    def wrapper(self: GroupMachine, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except BaseException:
            self.broken = True
            raise
    return wrapper  # type: ignore[return-value]


def admin_commit_offsets(coord: Coordinator, offsets: Mapping[Shard, int], now: int) -> Outcome[Any]:
    """An operator sets a group's committed offsets (the coordinator's admin entry point)."""
    return coord.reset_offsets(OffsetResetRequest(GID, offsets), now)


class GroupMachine(RuleBasedStateMachine):
    """One group, up to MAX_PROCS simulated processes, one coordinator (restartable)."""

    ASSIGNOR: ClassVar[str | None] = None  # None: the coordinator's default (uniform)
    INITIAL_TOPICS: ClassVar[dict[str, int]] = {"a": 3, "b": 2, "orders-1": 2}
    TOPIC_POOL: ClassVar[tuple[str, ...]] = ("a", "b", "orders-1", "orders-2", "zz")
    #: The first is everyone's in a homogeneous run; "orders-1" resolves like the regex until
    #: orders-2 exists (a subscription change that leaves the assignor's input unchanged).
    SUBS: ClassVar[tuple[Sub, ...]] = (
        sub("a"), sub("a", "b"), sub(regex="orders-.*"), sub("b", regex="orders-.*"), sub("orders-1"))
    INSTANCES: ClassVar[tuple[str, ...]] = ("i0", "i1", "i2")
    MAX_PROCS: ClassVar[int] = 6
    MAX_PARTITIONS: ClassVar[int] = 8

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.topics = TopicMetadata(self.INITIAL_TOPICS)
        self.coord = Coordinator(CONFIG, topics=self.topics)
        self.log: list[Record] = []
        self.shadow: dict[str, Group] = {}
        self.procs: list[Proc] = []
        self.homogeneous = True
        self.converging = False
        self.broken = False
        self.model = Membership()

    # ---------------------------------------------------------------------------------------- rules
    @initialize(homogeneous=st.booleans(), members=st.lists(
        st.tuples(st.integers(0, 4), st.none() | st.integers(0, 2), st.booleans(), st.booleans()),
        min_size=1, max_size=4))
    @guarded
    def setup(self, homogeneous: bool, members: list[tuple[int, int | None, bool, bool]]) -> None:
        """Homogeneous subscriptions or not, and a few members that join and settle first."""
        self.homogeneous = homogeneous
        for sub_i, static, slow, flaky in members:
            self.join(sub_i, static, slow, flaky)
        for _ in range(2):
            self._round()

    def _live_count(self) -> int:
        return sum(p.active for p in self.procs)

    @precondition(lambda self: self._live_count() < self.MAX_PROCS)
    @rule(sub_i=st.integers(0, 4), static=st.none() | st.integers(0, 2), slow=st.booleans(),
          flaky=st.booleans(), mode=MODES)
    @guarded
    def join(self, sub_i: int, static: int | None, slow: bool, flaky: bool, mode: str = "deliver") -> None:
        """A new process (dynamic, or static with one of a few instance ids) sends its join."""
        s = self.SUBS[0] if self.homogeneous else self.SUBS[sub_i % len(self.SUBS)]
        inst = None if static is None else self.INSTANCES[static]
        p = self._spawn(s, inst, slow, flaky)
        self._send(p, mode)

    @precondition(lambda self: any(p.running for p in self.procs))
    @rule(pick=PICK, mode=MODES)
    @guarded
    def heartbeat(self, pick: int, mode: str) -> None:
        """One heartbeat of one process (the clock moves to when it is due); maybe a lost message."""
        p = self._pick(pick, lambda p: p.running and p.sm.next_heartbeat_at() is not None)
        if p is not None:
            self._heartbeat_now(p, mode)

    @precondition(lambda self: any(p.running for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def two_lost_answers(self, pick: int) -> None:
        """The group epoch moves twice and both answers that carried a new epoch to this process
        are lost: its next heartbeat, two epochs behind, must be fenced (one behind is accepted)."""
        p = self._pick(pick, lambda p: p.running and p.sm.state is MemberState.STABLE)
        if p is None:
            return
        for _ in range(2):
            grow = sorted(t for t in resolve(self.model.subs.get(p.mid, p.sub), self.topics)
                          if self.topics[t] < self.MAX_PARTITIONS)
            if not grow:
                return
            self.change_topics("grow", self.topics_index(grow[0]), 1)
            self._heartbeat_now(p, "lose_response")
        self._heartbeat_now(p, "deliver")

    @precondition(lambda self: self._live_count() + 1 < self.MAX_PROCS)
    @rule(sub_i=st.integers(0, 4), slow=st.booleans())
    @guarded
    def lost_join_answer(self, sub_i: int, slow: bool) -> None:
        """A join is processed but its answer is lost; another member joins before the retry, so the
        retry (epoch 0, owning nothing) reaches a coordinator that already knows the member."""
        s = self.SUBS[0] if self.homogeneous else self.SUBS[sub_i % len(self.SUBS)]
        p = self._spawn(s, None, slow)
        self._send(p, "lose_response")
        self._send(self._spawn(s, None, False), "deliver")
        self._heartbeat_now(p, "deliver")

    @precondition(lambda self: any(p.running and p.instance is not None and isinstance(p.sm.pending, Revoke)
                                   for p in self.procs))
    @rule(pick=PICK, failover=st.booleans())
    @guarded
    def static_leave_mid_revocation(self, pick: int, failover: bool) -> None:
        """A static member told to revoke finishes, then steps out (-2) before any heartbeat has
        reported the revocation (and maybe the coordinator fails over right then)."""
        p = self._pick(pick, lambda p: (p.running and p.instance is not None
                                        and isinstance(p.sm.pending, Revoke)))
        if p is None:
            return
        self._finish_all(p)
        self._finish_all(p, p.sm.leave(self.now))
        if p.running and p.sm.heartbeat_due(self.now):
            self._send(p, "deliver")  # the -2: the first request since the revocation
        if failover:
            self.restart_coordinator(from_snapshot=False)

    def _finish_all(self, p: Proc, actions: Iterable[Any] = ()) -> None:
        """Carry out ``actions`` and the pending one, and whatever they lead to, without waiting."""
        queue = list(actions)
        while True:
            for a in queue:
                if isinstance(a, Assign):
                    live = checks.live_procs(self.procs, capture(self.coord))
                    checks.assert_assign_exclusive(p, a.shards, live)
            queue = self._ack(p, p.sm.pending) if p.sm.pending is not None else []
            if not queue and p.sm.pending is None:
                return

    @precondition(lambda self: any(p.running and p.sm.state in IN_GROUP for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def deafen(self, pick: int) -> None:
        """From now on the process's requests reach the coordinator but no answer comes back; after a
        session without answers it gives up (Lost) and rejoins, to a coordinator that still knows it."""
        p = self._pick(pick, lambda p: p.running and p.sm.state in IN_GROUP)
        if p is not None:
            p.deaf = True

    def topics_index(self, topic: str) -> int:
        return sorted(self.topics).index(topic)

    def _heartbeat_now(self, p: Proc, mode: str) -> None:
        """``p``'s next heartbeat, moving the clock to when it is due."""
        due = p.sm.next_heartbeat_at()
        if not p.running or due is None:
            return
        if due > self.now:
            self._advance_to(due)
        if p.running:
            self._handle(p, p.sm.tick(self.now))
        if p.running and p.sm.heartbeat_due(self.now):
            self._send(p, mode)

    @rule()
    @guarded
    def round(self) -> None:
        """One heartbeat interval passes; every running process heartbeats as often as it is due."""
        self._round()

    @rule(ms=st.sampled_from([1_000, SLOW_RTO_MS + 1, SESSION_MS + 1]))
    @guarded
    def advance(self, ms: int) -> None:
        """Time passes with nobody heartbeating (timers fire)."""
        self._advance_to(self.now + ms)

    @precondition(lambda self: any(p.running for p in self.procs))
    @rule(pick=PICK, permanent=st.booleans(), mode=MODES)
    @guarded
    def leave(self, pick: int, permanent: bool, mode: str) -> None:
        """Graceful leave: revoke (slow members wait), then -1, or -2 for a static member (the leave
        request may be lost: the process is gone anyway)."""
        p = self._pick(pick, lambda p: p.running and p.sm.state not in (
            MemberState.PREPARE_LEAVING, MemberState.LEAVING))
        if p is None:
            return
        self._handle(p, p.sm.leave(self.now, permanent=permanent))
        if p.running and p.sm.heartbeat_due(self.now):
            self._send(p, mode)

    @precondition(lambda self: any(p.active for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def crash(self, pick: int) -> None:
        """The process dies without a word; the coordinator fences it when its session expires."""
        p = self._pick(pick, lambda p: p.active)
        if p is None:
            return
        p.sm.close()
        p.dead = True

    @precondition(lambda self: any(p.running for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def pause(self, pick: int) -> None:
        """A GC pause / partition: no heartbeats, no ticks, but it keeps processing (and committing)."""
        p = self._pick(pick, lambda p: p.running)
        if p is not None:
            p.paused = True

    @precondition(lambda self: any(p.active and p.paused for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def resume(self, pick: int) -> None:
        p = self._pick(pick, lambda p: p.active and p.paused)
        if p is None:
            return
        p.paused = False
        self._handle(p, p.sm.tick(self.now))
        self._pump(p)

    @precondition(lambda self: any(p.running and p.sm.pending is not None for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def finish_pending(self, pick: int) -> None:
        """A slow member finally acknowledges its revocation (maybe past its rebalance timeout) or
        its assignment."""
        p = self._pick(pick, lambda p: p.running and p.sm.pending is not None)
        if p is not None:
            self._handle(p, self._ack(p, p.sm.pending))

    @precondition(lambda self: any(p.running and p.instance is not None for p in self.procs))
    @rule(pick=PICK, same_id=st.booleans())
    @guarded
    def static_restart(self, pick: int, same_id: bool) -> None:
        """A static member restarts: leave with -2, then a process with the same instance id and
        subscription joins (new member id, or the same one)."""
        p = self._pick(pick, lambda p: p.running and p.instance is not None and p.sm.pending is None
                       and p.sm.state is MemberState.STABLE)
        if p is None:
            return
        before = capture(self.coord)
        old = before.current.get(p.mid)
        # The exact-restart promise holds when the coordinator has the subscription the new process
        # will send (a subscription change whose request was lost is still on its way).
        stable_before = (old is not None and old.status is MemberStatus.STABLE
                         and old.epoch == before.target_epoch == before.epoch
                         and old.assigned == before.target.get(p.mid) and self.model.subs.get(p.mid) == p.sub)
        for a in p.sm.leave(self.now):
            assert isinstance(a, Revoke), f"leave() produced {a!r}"
            self._handle_ack(p, a)
        if p.sm.heartbeat_due(self.now):
            self._send(p, "deliver")  # the -2 arrives (a lost one is the leave rule's business)
        assert p.sm.state is MemberState.LEFT, f"static leave did not finish: {p!r}"
        mid = p.mid if same_id else None
        q = self._spawn(p.sub, p.instance, p.slow, p.flaky, member_id=mid, rto=p.rto)
        resp = self._send(q, "deliver") if q.sm.heartbeat_due(self.now) else None
        after = capture(self.coord)
        if stable_before and resp is not None and old is not None:
            assert resp.error is ErrorCode.NONE, f"static restart refused: {resp}"
            assert after.epoch == before.epoch, (
                f"static restart with the same subscription bumped the group epoch "
                f"{before.epoch} -> {after.epoch}")
            assert resp.assignment == old.assigned and resp.member_epoch == old.epoch, (
                f"static restart: got epoch {resp.member_epoch} {fmt(resp.assignment or EMPTY)}, "
                f"had epoch {old.epoch} {fmt(old.assigned)}")

    @precondition(lambda self: any(p.active for p in self.procs))
    @rule(pick=PICK)
    @guarded
    def static_crash_rejoin(self, pick: int) -> None:
        """A static member crashes and its replacement joins at once: refused until the old session
        expires (the old holder is still live); the replacement keeps retrying."""
        p = self._pick(pick, lambda p: p.active and p.instance is not None)
        if p is None:
            return
        p.sm.close()
        p.dead = True
        q = self._spawn(p.sub, p.instance, p.slow, p.flaky, rto=p.rto)
        if q.sm.heartbeat_due(self.now):  # (not when its subscription is empty: it does not join)
            self._send(q, "deliver")

    @precondition(lambda self: not self.homogeneous and any(p.running for p in self.procs))
    @rule(pick=PICK, sub_i=st.integers(0, 5))
    @guarded
    def change_subscription(self, pick: int, sub_i: int) -> None:
        """A member changes what it subscribes to (sub_i past the list: to nothing, staying in)."""
        p = self._pick(pick, lambda p: p.running and p.sm.state in IN_GROUP | {MemberState.JOINING})
        if p is None:
            return
        s = self.SUBS[sub_i] if sub_i < len(self.SUBS) else sub()
        p.sm.update_subscription(topics=tuple(sorted(s.topics)), regex=s.regex or "")
        p.sub = s
        self._pump(p, limit=1)

    @rule(op=st.sampled_from(["grow", "create", "delete"]), pick=PICK, n=st.integers(1, 3))
    @guarded
    def change_topics(self, op: str, pick: int, n: int) -> None:
        parts = dict(self.topics.partitions)
        existing = sorted(parts)
        missing = [t for t in self.TOPIC_POOL if t not in parts]
        if op == "grow" and existing:
            t = existing[pick % len(existing)]
            if parts[t] >= self.MAX_PARTITIONS:
                return
            parts[t] = min(self.MAX_PARTITIONS, parts[t] + n)
        elif op == "create" and missing:
            parts[missing[pick % len(missing)]] = n
        elif op == "delete" and existing:
            del parts[existing[pick % len(existing)]]
        else:
            return
        old, new = self.topics, TopicMetadata(parts)
        self.topics = new
        self._step("topics", lambda: self.coord.update_topics(new, self.now), old=old, new=new)

    @precondition(lambda self: any(p.active and p.sm.owned for p in self.procs))
    @rule(pick=PICK, delta=st.sampled_from([1, 5, 0, -1]))
    @guarded
    def commit(self, pick: int, delta: int) -> None:
        """A process (live, paused, or zombie) commits what it processes at offsets moved by delta."""
        self._commit(self._pick(pick, lambda p: p.active and bool(p.sm.owned)), delta)

    def _is_zombie(self, p: Proc) -> bool:
        return p.active and bool(p.sm.owned) and p.mid not in capture(self.coord).current

    @precondition(lambda self: any(self._is_zombie(p) for p in self.procs))
    @rule(pick=PICK, delta=st.sampled_from([1, 5]))
    @guarded
    def zombie_commit(self, pick: int, delta: int) -> None:
        """A process the coordinator removed, still processing its old shards, commits them."""
        self._commit(self._pick(pick, self._is_zombie), delta)

    def _commit(self, p: Proc | None, delta: int) -> None:
        if p is None:
            return
        committed = capture(self.coord).offsets
        offsets = {s: max(0, (committed[s].offset if s in committed else 0) + delta)
                   for s in sorted(p.sm.owned)}
        req = OffsetCommitRequest(GID, p.mid, p.sm.epoch, offsets)
        self._step("commit", lambda: self.coord.commit_offsets(req, self.now), commit=req, proc=p)

    @rule(delta=st.sampled_from([-3, 2]))
    @guarded
    def admin_commit(self, delta: int) -> None:
        """An admin resets offsets: only allowed (and allowed to rewind) on a group with no members."""
        committed = capture(self.coord).offsets
        targets = sorted(committed)[:2] or [Shard("a", 0)]
        offsets = {s: max(0, (committed[s].offset if s in committed else 0) + delta) for s in targets}
        self._step("admin", lambda: admin_commit_offsets(self.coord, offsets, self.now), offsets=offsets)

    @rule(from_snapshot=st.booleans())
    @guarded
    def restart_coordinator(self, from_snapshot: bool) -> None:
        """Fail over: a new coordinator replays the log (or a snapshot of it); members carry on."""
        if from_snapshot:
            self.log = self.coord.snapshot()
        before = capture(self.coord)
        self.coord = Coordinator.recover(list(self.log), self.now, CONFIG, topics=self.topics)
        after = capture(self.coord)
        assert after == before, "recovery changed the group state"
        self.model.restarted(after, self.now)
        checks.assert_next_deadline(self.coord.next_deadline(), self.model)

    # ---------------------------------------------------------------------------------- invariants
    @invariant()
    @guarded
    def replay_of_whole_log_is_equivalent(self) -> None:
        """9: Coordinator.recover(every record so far) rebuilds the coordinator's groups."""
        rebuilt = Coordinator.recover(list(self.log), self.now, CONFIG, topics=self.topics)
        differs = rebuilt_differs(self.coord.groups, rebuilt.groups, "from the whole log")
        assert differs is None, differs

    def teardown(self) -> None:
        event(f"processes spawned: {len(self.procs) // 3 * 3}+; log records: {len(self.log) // 100 * 100}+")
        if not self.broken:
            self._converge()

    # ------------------------------------------------------------------------------------- driving
    def _pick(self, pick: int, ok: Callable[[Proc], bool]) -> Proc | None:
        eligible = [p for p in self.procs if ok(p)]
        return eligible[pick % len(eligible)] if eligible else None

    def _spawn(self, s: Sub, inst: str | None, slow: bool, flaky: bool = False, *,
               member_id: str | None = None, rto: int | None = None) -> Proc:
        pid = len(self.procs)
        rto = rto if rto is not None else (SLOW_RTO_MS if slow else FAST_RTO_MS)
        sm = MemberStateMachine(
            GID, member_id or f"m{pid}", instance_id=inst, rebalance_timeout_ms=rto,
            subscribed_topics=tuple(sorted(s.topics)), subscribed_regex=s.regex,
            assignor=self.ASSIGNOR, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS)
        p = Proc(pid, sm, s, slow, rto, flaky)
        self.procs.append(p)
        return p

    def _advance_to(self, t: int) -> None:
        """Move the clock to ``t``, calling expire at every deadline on the way (as a shell does)."""
        for _ in range(1_000):
            d = self.coord.next_deadline()
            if d is None or d > t:
                break
            assert d >= self.now, f"deadline {d} is in the past (now {self.now}): a timer was missed"
            self.now = d
            self._step("expire", lambda: self.coord.expire(self.now))
        else:
            raise AssertionError("expire() does not clear the due timers")
        self.now = max(self.now, t)

    def _round(self) -> None:
        self._advance_to(self.now + INTERVAL_MS)
        for p in self.procs:
            if p.running:
                self._handle(p, p.sm.tick(self.now))
                self._pump(p)

    def _pump(self, p: Proc, limit: int = 8) -> None:
        """Send while due; a flaky process loses messages following FLAKY_PATTERN."""
        for _ in range(limit):
            if not p.running or not p.sm.heartbeat_due(self.now):
                return
            mode = "deliver"
            if p.flaky and not self.converging:
                mode = FLAKY_PATTERN[p.sent % len(FLAKY_PATTERN)]
            self._send(p, mode)

    def _send(self, p: Proc, mode: str) -> HeartbeatResponse | None:
        req = p.sm.next_request(self.now)
        assert req is not None, f"{p!r} has no request due at {self.now}"
        p.sent += 1
        holding = p.processing
        if p.deaf and req.member_epoch == JOIN_EPOCH:
            p.deaf = False  # it gave up and reconnects: the partition is over
        elif p.deaf and mode == "deliver":
            mode = "lose_response"
        if mode == "lose_request":
            self._handle(p, p.sm.request_failed(self.now))
            return None
        out = self._step("heartbeat", lambda: self.coord.heartbeat(req, self.now), req=req, proc=p)
        resp = out.response
        assert isinstance(resp, HeartbeatResponse)
        if mode == "lose_response":
            self._handle(p, p.sm.request_failed(self.now))
        else:
            self._handle(p, p.sm.on_response(resp, self.now))
            checks.assert_revocation_heard(p, holding, req, resp, capture(self.coord))
        self._check_processes()
        return resp

    def _handle(self, p: Proc, actions: list[Any]) -> None:
        queue = list(actions)
        while queue:
            a = queue.pop(0)
            if isinstance(a, Revoke | Assign):
                if isinstance(a, Assign):
                    live = checks.live_procs(self.procs, capture(self.coord))
                    checks.assert_assign_exclusive(p, a.shards, live)
                if p.slow and not self.converging:
                    continue  # acknowledged later by finish_pending (maybe too late)
                queue.extend(self._ack(p, a))
            elif isinstance(a, Lost):
                pass  # dropped without committing
            elif isinstance(a, Fatal):
                assert a.error is ErrorCode.FENCED_INSTANCE_ID, f"unexpected fatal error for {p!r}: {a}"
                p.fatal.append(a)
            else:
                assert not isinstance(a, ComputeAssignment), "no client-side assignor is configured"
                raise AssertionError(f"unknown action {a!r}")

    def _handle_ack(self, p: Proc, a: Revoke | Assign | None) -> None:
        self._handle(p, self._ack(p, a))

    def _ack(self, p: Proc, a: Revoke | Assign | None) -> list[Any]:
        if isinstance(a, Revoke):
            return p.sm.revocation_done(a.shards, self.now)
        assert isinstance(a, Assign), a
        return p.sm.assignment_done(a.shards, self.now)

    # --------------------------------------------------------------------- the one door: a call
    def _step(self, kind: str, call: Callable[[], Outcome[Any]], *, req: HeartbeatRequest | None = None,
              proc: Proc | None = None, commit: OffsetCommitRequest | None = None,
              offsets: Mapping[Shard, int] | None = None, old: TopicMetadata | None = None,
              new: TopicMetadata | None = None) -> Outcome[Any]:
        """One coordinator call (kind: heartbeat, expire, topics, commit, admin), checked."""
        pre = capture(self.coord)
        expected_fenced = self.model.due(pre, self.now) if kind == "expire" else None
        topics_pre = old if old is not None else self.topics
        eff_pre = self.model.effective(topics_pre)
        out = call()
        self.log.extend(out.records)
        self._replay_step(out.records)
        post = capture(self.coord)

        error = getattr(out.response, "error", ErrorCode.NONE)
        if error is not ErrorCode.NONE:
            assert out.records == (), f"{kind} answered {error} but wrote records {out.records}"
        if expected_fenced is not None:
            fenced = {f.member_id for f in out.fences if f.group_id == GID}
            for mid in sorted(fenced):
                event("fenced: session" if self.model.last_touch[mid] + SESSION_MS <= self.now
                      else "fenced: revocation timeout")
            assert fenced == expected_fenced, (
                f"expire at {self.now} fenced {sorted(fenced)}, the model expected "
                f"{sorted(expected_fenced)} (session / revocation deadlines: "
                f"{ {m: self.model.last_touch.get(m) for m in sorted(pre.members)} } / "
                f"{self.model.unrevoked_since})")
        else:
            assert out.fences == (), f"{kind} fenced members: {out.fences}"
        if kind == "heartbeat":
            assert req is not None
            checks.assert_heartbeat_answer(pre, post, out.response, req, self.model.subs)
        elif kind == "commit":
            assert commit is not None and proc is not None
            checks.assert_commit_result(pre, out.response, commit, proc)
        elif kind == "admin":
            assert offsets is not None
            checks.assert_admin_result(pre, out.response, offsets)

        me = req.member_id if req is not None else commit.member_id if commit is not None else None
        checks.assert_nudged(pre, post, out, me)
        expected, cause = self.model.expected_bump(kind, pre, out, req, old, new)
        checks.assert_bump_matches_causes(pre, post, expected, cause, kind)
        checks.assert_revoke_before_assign(pre, post)
        self.model.update(kind, pre, post, out, req, self.now)
        checks.assert_same_input_same_target(pre, post, eff_pre, self.model.effective(self.topics),
                                             topics_pre, self.topics)
        self._check_state(pre, post, kind, req)
        self._check_processes()
        # The shell nudges the members that have work (ignored by one whose request is in flight).
        for gid, mid in sorted(out.wake):
            for p in self.procs:
                if gid == GID and p.mid == mid and p.running:
                    p.sm.nudge(self.now)
        return out

    def _replay_step(self, records: tuple[Record, ...]) -> None:
        """5 and 9: apply the step's records one by one to the shadow state, then compare."""
        recomputed = any(isinstance(r, TargetEpochRecord) for r in records)
        before = set(self.shadow[GID].members) if GID in self.shadow else set()
        for r in records:
            g = self.shadow.get(r.group_id)
            if isinstance(r, TargetEpochRecord):
                checks.assert_target_only_when_behind(g, r)
            elif isinstance(r, TargetMemberRecord) and r.shards is not None and not recomputed:
                # Outside a recomputation only a static take-over installs a (new) member's target.
                assert r.member_id not in before, (
                    f"target of existing member {r.member_id!r} changed without a new target epoch")
            apply(self.shadow, r)
        differs = rebuilt_differs(self.coord.groups, self.shadow, "record by record")
        assert differs is None, differs
        snap = Coordinator.recover(self.coord.snapshot(), self.now, CONFIG, topics=self.topics)
        differs = rebuilt_differs(self.coord.groups, snap.groups, "from snapshot()")
        assert differs is None, differs

    def _check_state(self, pre: View, post: View, kind: str, req: HeartbeatRequest | None) -> None:
        checks.assert_coordinator_single_owner(post)
        checks.assert_epoch_order(post)
        checks.assert_target_current(post)
        checks.assert_model_matches(post, self.model, self.topics)
        checks.assert_no_overdue_timer(post, self.model, self.now)
        checks.assert_next_deadline(self.coord.next_deadline(), self.model)
        checks.assert_epochs_monotonic(pre, post, self.model.last_epoch)
        self.model.note_epochs(post)
        checks.assert_offsets_monotonic(pre, post, admin_reset=(kind == "admin" and not pre.members))
        if post.members:
            eff = self.model.effective(self.topics)
            checks.assert_target_covers_subscriptions(post, eff, self.topics)
            self.check_assignor(pre, post, eff, req)

    def check_assignor(self, pre: View, post: View, eff: dict[str, frozenset[str]],
                       req: HeartbeatRequest | None) -> None:
        """6: uniform (the default): balanced, and sticky when one member joins."""
        checks.assert_uniform_balanced(post, eff)
        if req is not None:
            joined = (req.member_epoch == JOIN_EPOCH and req.member_id not in pre.members
                      and req.member_id in post.members and predecessor(pre, req) is None)
            if joined and pre.members and pre.epoch == pre.target_epoch and len(set(eff.values())) == 1:
                checks.assert_sticky_join(pre, post, req.member_id)

    def _check_processes(self) -> None:
        v = capture(self.coord)
        checks.assert_processes(self.procs, v)
        checks.forget_heard_revocations(self.procs, v)
        for p in self.procs:
            p.last_epoch = p.sm.epoch

    # -------------------------------------------------------------------------------- 11: liveness
    def _converge(self) -> None:
        self.converging = True
        for p in self.procs:
            p.deaf = False
            if p.active and p.paused:
                p.paused = False
                self._handle(p, p.sm.tick(self.now))
            if p.running and p.sm.pending is not None:
                self._handle_ack(p, p.sm.pending)
        # An operator stops duplicate processes of one instance id (the coordinator's holder stays).
        holders = capture(self.coord).static
        by_instance: dict[str, list[Proc]] = {}
        for p in self.procs:
            if p.active and p.instance is not None:
                by_instance.setdefault(p.instance, []).append(p)
        for inst, ps in sorted(by_instance.items()):
            keep = next((p for p in ps if p.mid == holders.get(inst)), ps[-1])
            for p in ps:
                if p is not keep:
                    p.sm.close()
                    p.dead = True
        last_change = 0
        epoch = capture(self.coord).epoch
        for r in range(1, MAX_CONVERGE_ROUNDS + 1):
            self._round()
            v = capture(self.coord)
            if v.epoch != epoch:
                epoch, last_change = v.epoch, r
            wanted = all_shards(set().union(*self.model.effective(self.topics).values()), self.topics)
            problem = checks.not_converged(v, self.procs, wanted)
            if problem is None:
                event(f"converged in {r} rounds, {r - last_change} after the last epoch change")
                assert r - last_change <= SETTLE_ROUNDS, (
                    f"converged {r - last_change} rounds after the last epoch change (> {SETTLE_ROUNDS})")
                return
        raise AssertionError(f"liveness: not converged after {MAX_CONVERGE_ROUNDS} rounds of "
                             f"{INTERVAL_MS} ms: {problem}; processes {self.procs}")


class RangeGroupMachine(GroupMachine):
    """Smaller: all members ask for ``range``; topics a and b have equal partition counts."""

    ASSIGNOR: ClassVar[str | None] = "range"
    INITIAL_TOPICS: ClassVar[dict[str, int]] = {"a": 4, "b": 4, "c": 3, "orders-1": 2}
    TOPIC_POOL: ClassVar[tuple[str, ...]] = ("a", "b", "c", "orders-1", "orders-2")
    SUBS: ClassVar[tuple[Sub, ...]] = (
        sub("a", "b"), sub("a", "b", "c"), sub(regex="orders-.*"), sub("c", regex="orders-.*"),
        sub("orders-1"))
    MAX_PROCS: ClassVar[int] = 5

    def check_assignor(self, pre: View, post: View, eff: dict[str, frozenset[str]],
                       req: HeartbeatRequest | None) -> None:
        checks.assert_range_target(post, eff, self.model.instances, self.topics)
