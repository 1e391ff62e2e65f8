"""The member side of a streams group: one member as a pure, sans-I/O state machine.

It is to streams groups what `regroup.protocol.member.MemberStateMachine` is to consumer groups,
and keeps its rules wherever they apply: it decides every `StreamsHeartbeatRequest` the member
sends and what it asks its driver to do; the driver (a streams runtime, the simulator, a test)
passes the time in milliseconds to every call and carries out the actions it gets back. The timing
(one request in flight, backoff, session) is `regroup.protocol.heartbeat_timing`'s.

Driver loop::

    m = StreamsMemberStateMachine("g", new_uuid(), process_id=state_dir_id, topology=topology)
    m.report_offsets(offsets_of_every_local_copy(), now())       # before the join, if any on disk
    while m.state not in (StreamsMemberState.LEFT, StreamsMemberState.FATAL):
        handle(m.tick(now()))                       # session awareness
        if (req := m.next_request(now())) is not None:
            try:
                handle(m.on_response(send(req), now()))
            except TransportError:
                handle(m.request_failed(now()))
        # handle(StopTasks(t)):  actives finish the batch and commit, every copy stops
        #                        (the state stays on disk)        -> m.tasks_stopped(t, now())
        # handle(StartTasks(t)): actives restore then process; standbys / warm-ups restore
        #                        and keep following the changelog -> m.tasks_started(t, now())
        # handle(LostTasks(t)):  drop without committing (nothing to acknowledge)
        # m.report_offsets(...) now and then; urgent=True when a warm-up has caught up
        # sleep until min(m.next_heartbeat_at(), m.session_deadline()) or until work arrives

States (the consumer member's, without UNSUBSCRIBED: a streams member always has its topology)::

    JOINING --join answered--> STABLE | RECONCILING (one Stop/Start out) | ACKNOWLEDGING (owned
    changed, not yet confirmed; or a Start waits for an answer to confirm the target: rule 4);
    fenced, unknown, group gone, session expired: back to JOINING
    in the group --leave()--> PREPARE_LEAVING --all stopped--> LEAVING --answer or failure--> LEFT
    any state --fatal error--> FATAL            any state --close()--> LEFT

Rules:

1. One request in flight at a time: each is answered by exactly one `on_response` or
   `request_failed`. No requests in LEFT or FATAL.
2. Timing. A request is due at once when joining, when owned changed (a Stop or Start was
   acknowledged: the coordinator moves on only once it hears of it), and when the driver reports
   offsets as urgent (like a nudge, this overrides a retry backoff); otherwise one heartbeat
   interval (the coordinator's) after the last response, or a capped exponential backoff after a
   transport failure. Offsets that merely changed never make a request due: that would be a
   heartbeat per record.
3. Full or delta. A request is FULL (instance id, process id, rebalance timeout, owned, and the
   latest task offsets if any were reported) on a join and on the first request after any error
   or transport failure: the coordinator may have missed what we sent. Only a join (epoch 0, owned
   empty) carries the topology: the coordinator takes any topology it is sent as the group's, so a
   member resending its own after a failure could undo a newer one from a rolling upgrade.
   Otherwise a request is a DELTA: task offsets only when they differ from what the coordinator
   last answered; owned likewise, and also while it differs from the target, because the
   coordinator reads an absent owned as "holds everything it was given" (an assignment that grew
   while a Start was out would otherwise be taken as started, and its revocation would wait for
   a report that never comes). A transport failure keeps the epoch and owned (the coordinator's
   lost-response rule).
4. Reconciliation by role. A response's assignment (None = unchanged) is the target, followed
   exactly as the coordinator's `reconcile` gives it: while it waits for a revocation it answers
   with what the member may keep; an active it cannot grant yet (the previous owner has not
   released it) comes back as the copy the member already holds, or not at all, until a later
   answer grants it. With nothing outstanding the member emits ``StopTasks(owned - target)`` (role
   by role) if non-empty, else ``StartTasks(target - owned)`` if non-empty; at most one is
   outstanding, so every Stop is acknowledged before any Start, and each acknowledgement computes
   the next step against the latest target -- but a Start only from a target the coordinator has
   confirmed: none while a request is in flight, nor after a lost answer (transport failure or
   error) until the next successful one. Each request reported what the member holds, and a task of
   its assignment it did not report in any role (not started yet) is the coordinator's to take back
   without waiting for a revocation -- and to give away: the active to another member, the task in
   any role to another member of the same process (one state directory). The answer saying so may
   be the one in flight or the one lost, so the Start waits for the next answer (ACKNOWLEDGING, the
   request due at once); a Stop never waits. A task changing role here (warm-up -> active on
   promotion, active -> standby) is a Stop of the old role, then a Start of the new one. That is
   safe: the local state directory stays, only the role's processing stops and starts; an active
   commits before it stops, and once stopped the member reports not holding the task, which is
   what the coordinator waits for before it lets another member take the active. ``owned`` changes
   only on acknowledgements; reported as owned are also the copies of an outstanding Start (the
   driver may be restoring them). The epoch is always the response's. An assignment giving one
   task two roles is Fatal (INVALID_ASSIGNMENT): one state directory cannot serve both.
5. Task offsets. `report_offsets` replaces the view of every local copy (active, standby, warm-up
   or dormant on disk) and the source offsets its state has reached. It is sent whole, on full
   requests and whenever it differs from what the coordinator last answered; ``urgent=True`` (a
   warm-up caught up: promotion is by event) makes a request due at once, or right after the
   answer to the one in flight. Losing the membership keeps the view: the disk is still there.
6. Losing the membership. FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND, and no
   successful response for a session timeout (from the send time of the last answered request)
   emit ``LostTasks(held)``: drop them WITHOUT committing (another member may run them already);
   ``held`` is owned plus the copies of an outstanding, now cancelled, Start. Then epoch 0, owned
   empty, and a full join with the same member id, at once (after the retry backoff if a join was
   refused). The session is checked by `tick` and at every acknowledgement, so a slow driver that
   acknowledges after its session ran out is never handed the next step of a reconciliation the
   coordinator has since given away. Late acknowledgements of cancelled actions are ignored, and so
   is the answer to a request sent before the reset. The streams response does not carry the
   server's session timeout: the constructor's must not be longer than the coordinator's.
7. Other errors. UNRELEASED_INSTANCE_ID: another process still holds our instance id; retry the
   join after ``unreleased_instance_backoff_ms``. STALE_MEMBER_EPOCH: retried like a transport
   failure. FENCED_INSTANCE_ID, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED and any code with no
   business in a heartbeat response: ``LostTasks(held)`` if anything is held, then
   ``Fatal(code, message)``; state FATAL, no more requests.
8. Leaving. `leave` waits for an outstanding Stop/Start, emits ``StopTasks(owned)`` (actives
   commit), then sends one leave: epoch -1, or -2 for a static member (the coordinator keeps its
   tasks for the instance id until the session times out, so a restart with that instance id gets
   them back without a rebalance; the Stop is then only local); ``permanent=True`` makes a static
   member leave for good. Whatever answers the leave (or its failure) ends in LEFT; heartbeats go
   on while the driver stops tasks; a member the coordinator never heard of is LEFT at once.
   `close` abandons the membership without a word (the coordinator fences it after the session
   timeout) and returns ``LostTasks(held)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TypeAlias

from regroup.protocol.errors import ErrorCode
from regroup.protocol.heartbeat_timing import HeartbeatTiming, check_ms
from regroup.protocol.member import Fatal, MemberUsageError
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.messages import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    GroupStatus,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
    TaskOffsets,
)
from regroup.protocol.streams.topology import TaskId, Topology

__all__ = ["Fatal", "LostTasks", "MemberUsageError", "StartTasks", "StopTasks", "StreamsAction",
           "StreamsMemberState", "StreamsMemberStateMachine", "format_tasks"]

# ---------------------------------------------------------------------------------------------------
# Actions for the driver


@dataclass(frozen=True, slots=True)
class StopTasks:
    """Stop running these copies in these roles (an active finishes its batch and commits first),
    keeping their local state; then call `tasks_stopped` with them."""

    tasks: MemberTasks


@dataclass(frozen=True, slots=True)
class StartTasks:
    """Start these copies in these roles (an active restores, then processes; a standby or warm-up
    restores and keeps following the changelog); then call `tasks_started` with them."""

    tasks: MemberTasks


@dataclass(frozen=True, slots=True)
class LostTasks:
    """The membership is gone: drop ``tasks`` WITHOUT committing. Nothing to acknowledge."""

    tasks: MemberTasks
    reason: str


#: `Fatal` is the consumer member's own: a shell reports it the same way for both kinds of group.
StreamsAction: TypeAlias = StopTasks | StartTasks | LostTasks | Fatal


class StreamsMemberState(Enum):
    JOINING = "JOINING"  # next request is a join (epoch 0, full, owned empty, topology)
    RECONCILING = "RECONCILING"  # a Stop or Start awaits the driver's acknowledgement
    #: Owned changed and the coordinator has not confirmed it yet, or a Start waits for an answer
    #: that confirms the target (rule 4).
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"  # owned == target and the coordinator knows it
    PREPARE_LEAVING = "PREPARE_LEAVING"  # leave() called: the driver stops everything first
    LEAVING = "LEAVING"  # next request is the leave (epoch -1 / -2)
    LEFT = "LEFT"  # terminal
    FATAL = "FATAL"  # terminal


_IN_GROUP = frozenset({StreamsMemberState.RECONCILING, StreamsMemberState.ACKNOWLEDGING,
                       StreamsMemberState.STABLE})
_LEAVING = frozenset({StreamsMemberState.PREPARE_LEAVING, StreamsMemberState.LEAVING})
_TERMINAL = frozenset({StreamsMemberState.LEFT, StreamsMemberState.FATAL})

# Errors that mean "the coordinator no longer counts us as a member": lose everything and rejoin.
_REJOIN_ERRORS = frozenset(
    {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND})
# Errors a member cannot fix by retrying: the user has to change something.
_FATAL_ERRORS = frozenset(
    {ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_MAX_SIZE_REACHED})


@dataclass(frozen=True, slots=True)
class _Sent:
    """The delta-tracked fields as the coordinator last acknowledged them (None: it has none)."""

    owned: MemberTasks | None
    offsets: TaskOffsets | None


class StreamsMemberStateMachine:
    """One member of one streams group. See the module docstring for the rules."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        process_id: str,
        topology: Topology,
        *,
        instance_id: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        unreleased_instance_backoff_ms: int = 1_000,
    ) -> None:
        hints = {"member_id": " (generate a UUID in the driver)",
                 "process_id": " (the id kept beside the local state)"}
        for name, value in (("group_id", group_id), ("member_id", member_id), ("process_id", process_id)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string{hints.get(name, '')}, got {value!r}")
        if not isinstance(topology, Topology):
            raise TypeError(f"topology must be a regroup.protocol.streams.topology.Topology, "
                            f"got {type(topology).__name__}")
        if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
            raise ValueError(f"instance_id must be None (dynamic member) or a non-empty string, "
                             f"got {instance_id!r}")
        check_ms("rebalance_timeout_ms", rebalance_timeout_ms, positive=True)
        check_ms("unreleased_instance_backoff_ms", unreleased_instance_backoff_ms, positive=False)
        self._timing: HeartbeatTiming[StreamsHeartbeatRequest] = HeartbeatTiming(
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            retry_backoff_ms=retry_backoff_ms, retry_backoff_max_ms=retry_backoff_max_ms)

        self._group_id = group_id
        self._member_id = member_id
        self._process_id = process_id
        self._topology = topology
        self._instance_id = instance_id
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._unreleased_backoff_ms = unreleased_instance_backoff_ms

        self._state = StreamsMemberState.JOINING
        self._epoch = JOIN_EPOCH
        self._owned: MemberTasks = NO_TASKS
        self._target: MemberTasks | None = None
        self._status: GroupStatus | None = None
        self._pending: StopTasks | StartTasks | None = None
        # Cancelled actions whose late acknowledgement must be ignored rather than rejected.
        self._cancelled: deque[StopTasks | StartTasks] = deque(maxlen=8)
        # Owned as the coordinator last confirmed it (drives ACKNOWLEDGING); survives transport errors.
        self._reported: MemberTasks = NO_TASKS
        # What the coordinator has of the delta fields; None = unknown, so the next request is full.
        self._acked: _Sent | None = None
        self._offsets: TaskOffsets | None = None
        # An urgent offsets report that no request has carried yet.
        self._urgent = False
        # Whether the coordinator may know this member id since the last reset (a request went out).
        self._known = False
        self._leave_epoch = LEAVE_EPOCH

    # -----------------------------------------------------------------------------------------------
    # Properties

    @property
    def state(self) -> StreamsMemberState:
        return self._state

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def process_id(self) -> str:
        return self._process_id

    @property
    def instance_id(self) -> str | None:
        return self._instance_id

    @property
    def topology(self) -> Topology:
        return self._topology

    @property
    def epoch(self) -> int:
        """The member epoch (0 while joining); the actives commit with it."""
        return self._epoch

    @property
    def owned(self) -> MemberTasks:
        """The copies the driver has acknowledged starting, by role, and not yet stopped."""
        return self._owned

    @property
    def target(self) -> MemberTasks | None:
        """The last assignment received from the coordinator (None before the first one)."""
        return self._target

    @property
    def pending(self) -> StopTasks | StartTasks | None:
        """The Stop or Start awaiting the driver's acknowledgement, if any."""
        return self._pending

    @property
    def task_offsets(self) -> TaskOffsets | None:
        """The driver's latest report of its local copies (None before the first)."""
        return self._offsets

    @property
    def group_status(self) -> GroupStatus | None:
        """Whether the group's topology can run, as the last successful response said."""
        return self._status

    @property
    def status_message(self) -> str | None:
        """Why the group assigns nothing (naming the topics), or None when it is ready or unknown."""
        if self._status is None or self._status.ready:
            return None
        return self._status.message

    @property
    def in_flight(self) -> bool:
        return self._timing.in_flight is not None

    # -----------------------------------------------------------------------------------------------
    # Timing

    def next_heartbeat_at(self) -> int | None:
        """When `next_request` will produce a request; None while one is in flight or none will come."""
        return None if self._state in _TERMINAL else self._timing.next_at()

    def heartbeat_due(self, now_ms: int) -> bool:
        at = self.next_heartbeat_at()
        return at is not None and now_ms >= at

    def nudge(self, now_ms: int) -> None:
        """The coordinator says there is work for us (a revocation, or a task released for us): make
        the next heartbeat due now. Ignored while a request is in flight (its answer carries the
        news) or when no request would be sent."""
        if self._state not in _TERMINAL:
            self._timing.nudge(now_ms)

    def session_deadline(self) -> int | None:
        """When `tick` will declare the membership lost if no request succeeds until then."""
        return None if self._state in _TERMINAL else self._timing.session_deadline()

    def tick(self, now_ms: int) -> list[StreamsAction]:
        """Check the session. Call it regularly (at least by `session_deadline`)."""
        if self._state in _TERMINAL:
            return []
        reason = self._timing.session_expired(now_ms)
        if reason is None:
            return []
        leaving = self._state in _LEAVING
        actions = self._reset(reason, now_ms)
        if leaving:
            self._state = StreamsMemberState.LEFT
        return actions

    # -----------------------------------------------------------------------------------------------
    # Requests and responses

    def next_request(self, now_ms: int) -> StreamsHeartbeatRequest | None:
        """The request to send now, or None. The driver must answer it with exactly one
        `on_response` or `request_failed`."""
        if not self.heartbeat_due(now_ms):
            return None
        if self._state is StreamsMemberState.LEAVING:
            req = StreamsHeartbeatRequest(self._group_id, self._member_id, self._leave_epoch,
                                          instance_id=self._instance_id)
        else:
            if self._state is StreamsMemberState.JOINING:
                req = self._full_request(JOIN_EPOCH, NO_TASKS, self._topology)
            elif self._acked is None:
                req = self._full_request(self._epoch, self._held(), None)
            else:
                req = self._delta_request(self._acked)
            # This request carries the latest offsets, or the coordinator has them already.
            self._urgent = False
        self._timing.sent(req, now_ms)
        self._known = True
        return req

    def on_response(self, resp: StreamsHeartbeatResponse, now_ms: int) -> list[StreamsAction]:
        """Digest the coordinator's answer to the request in flight."""
        flight = self._timing.take()
        if flight is None:
            raise MemberUsageError("on_response() called with no request in flight")
        if flight.void or self._state in _TERMINAL:
            return []
        req = flight.request
        if req.member_epoch < 0:
            # Whatever the answer to a leave, this member is out of the group.
            self._state = StreamsMemberState.LEFT
            return []
        if resp.error is ErrorCode.NONE:
            self._timing.answered(flight, interval_ms=resp.heartbeat_interval_ms,
                                  session_timeout_ms=resp.session_timeout_ms)
            actions = self._on_success(resp, req, now_ms)
            if self._state not in _TERMINAL:
                self._timing.after_answer(now_ms)
            return actions
        return self._on_error(resp, req, now_ms)

    def request_failed(self, now_ms: int) -> list[StreamsAction]:
        """The request in flight got no answer (transport error, timeout)."""
        flight = self._timing.take()
        if flight is None:
            raise MemberUsageError("request_failed() called with no request in flight")
        if flight.void or self._state in _TERMINAL:
            return []
        if flight.request.member_epoch < 0:
            # The leave may or may not have arrived; the session timeout cleans up if it did not.
            self._state = StreamsMemberState.LEFT
            return []
        self._acked = None  # the response may have been lost: resend everything
        self._timing.retry(now_ms)
        return self.tick(now_ms)

    # -----------------------------------------------------------------------------------------------
    # The driver's acknowledgements and reports, and commands

    def tasks_stopped(self, tasks: MemberTasks, now_ms: int) -> list[StreamsAction]:
        """The driver stopped these copies in these roles (the pending Stop)."""
        stopped = _frozen(tasks, "tasks_stopped")
        if not self._accept_ack(StopTasks(stopped)):
            return []
        self._owned = _minus(self._owned, stopped)
        self._timing.due_now(now_ms)  # tell the coordinator now: it holds the next step for this
        return self._advance(now_ms)

    def tasks_started(self, tasks: MemberTasks, now_ms: int) -> list[StreamsAction]:
        """The driver started these copies in these roles (the pending Start)."""
        started = _frozen(tasks, "tasks_started")
        if not self._accept_ack(StartTasks(started)):
            return []
        self._owned = _union(self._owned, started)
        self._timing.due_now(now_ms)
        return self._advance(now_ms)

    def report_offsets(self, offsets: TaskOffsets, now_ms: int, *, urgent: bool = False) -> None:
        """Every local copy and the source offsets its state has reached, complete (rule 5).

        Ignored once the member is LEFT or FATAL: there is nobody left to tell.
        """
        checked = _checked_offsets(offsets)
        if self._state in _TERMINAL:
            return
        self._offsets = checked
        if urgent:
            self._urgent = True
            self._timing.nudge(now_ms)

    def leave(self, now_ms: int, *, permanent: bool = False) -> list[StreamsAction]:
        """Leave the group gracefully (rule 8). Idempotent."""
        if self._state in _TERMINAL or self._state in _LEAVING:
            return []
        static = self._instance_id is not None and not permanent
        self._leave_epoch = STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH
        self._state = StreamsMemberState.PREPARE_LEAVING
        return self._continue_leaving(now_ms)

    def close(self) -> list[StreamsAction]:
        """Stop at once without telling the coordinator. Returns LostTasks for whatever is held."""
        if self._state in _TERMINAL:
            return []
        actions = self._drop_everything("member closed without leaving the group")
        self._state = StreamsMemberState.LEFT
        return actions

    # -----------------------------------------------------------------------------------------------
    # Internals

    def _held(self) -> MemberTasks:
        """What we report as owned: acknowledged copies plus those of a Start in progress."""
        if isinstance(self._pending, StartTasks):
            return _union(self._owned, self._pending.tasks)
        return self._owned

    def _full_request(self, epoch: int, owned: MemberTasks,
                      topology: Topology | None) -> StreamsHeartbeatRequest:
        return StreamsHeartbeatRequest(
            group_id=self._group_id, member_id=self._member_id, member_epoch=epoch,
            instance_id=self._instance_id, process_id=self._process_id,
            rebalance_timeout_ms=self._rebalance_timeout_ms, topology=topology, owned=owned,
            task_offsets=self._offsets)

    def _delta_request(self, acked: _Sent) -> StreamsHeartbeatRequest:
        held = self._held()
        offsets = self._offsets
        # The coordinator reads an absent owned as "holds everything it was given": true only once
        # the member holds its target. Until then an assignment that grew while a Start was out
        # would be taken as started, and revoking it would wait for a report that never comes.
        unchanged = acked.owned == held and held == self._target
        return StreamsHeartbeatRequest(
            group_id=self._group_id, member_id=self._member_id, member_epoch=self._epoch,
            owned=None if unchanged else held,
            task_offsets=None if offsets is None or acked.offsets == offsets else offsets)

    def _delta_outstanding(self) -> bool:
        """Something the coordinator must hear now (not merely changed offsets: rule 2)."""
        if self._urgent:
            return True
        acked = self._acked
        return self._held() != (self._reported if acked is None else acked.owned)

    def _on_success(self, resp: StreamsHeartbeatResponse, req: StreamsHeartbeatRequest,
                    now_ms: int) -> list[StreamsAction]:
        if resp.member_id:
            self._member_id = resp.member_id
        self._epoch = resp.member_epoch
        self._status = resp.status
        joined = req.member_epoch == JOIN_EPOCH
        # Merge what this request set into what the coordinator already had (None = unchanged).
        prev = self._acked or _Sent(None, None)
        self._acked = _Sent(
            # A join's "owns nothing" is not taken as a report by a coordinator that already knew
            # us (it cannot tell a retry from a stale duplicate), so owned goes out again next time.
            owned=None if joined else (prev.owned if req.owned is None else req.owned),
            # A join replaces the coordinator's view of our copies with what it carried, even none.
            offsets=req.task_offsets if joined or req.task_offsets is not None else prev.offsets,
        )
        if req.owned is not None:
            self._reported = req.owned
        if self._target is None:
            self._target = NO_TASKS  # joined: "no assignment in the response" means nothing yet
        if resp.assignment is not None:
            doubled = _two_roles(resp.assignment)
            if doubled:
                return self._fatal(ErrorCode.INVALID_ASSIGNMENT,
                                   f"the coordinator assigned {doubled} to member {self._member_id!r} in "
                                   "two roles; one state directory cannot serve both")
            self._target = resp.assignment

        actions: list[StreamsAction] = []
        if self._state is StreamsMemberState.JOINING:
            self._state = StreamsMemberState.STABLE  # refined by _reconcile below
        if self._state in _LEAVING:
            # Keep the target for the record, but a leaving member takes nothing new.
            self._next_after_answer(now_ms, now=self._state is StreamsMemberState.LEAVING)
            return actions
        actions.extend(self._reconcile())
        self._next_after_answer(now_ms, now=self._delta_outstanding())
        return actions

    def _next_after_answer(self, now_ms: int, *, now: bool) -> None:
        if now:
            self._timing.due_after(now_ms, 0)
        else:
            self._timing.due_in_interval(now_ms)

    def _on_error(self, resp: StreamsHeartbeatResponse, req: StreamsHeartbeatRequest,
                  now_ms: int) -> list[StreamsAction]:
        code = resp.error
        self._acked = None  # rule 3: the first request after an error is full
        reason = f"{code.value}: {resp.message}" if resp.message else code.value
        if code in _FATAL_ERRORS:
            return self._fatal(code, resp.message or code.value)
        if code in _REJOIN_ERRORS or code is ErrorCode.UNRELEASED_INSTANCE_ID:
            leaving = self._state in _LEAVING
            actions = self._reset(reason, now_ms)
            if leaving:
                self._state = StreamsMemberState.LEFT  # out of the group already: nothing to leave
            elif code is ErrorCode.UNRELEASED_INSTANCE_ID:
                # The previous holder of our instance id is still alive (or its session has not
                # expired yet): wait for it rather than hammer the coordinator.
                self._timing.due_after(now_ms, self._unreleased_backoff_ms)
            elif req.member_epoch == JOIN_EPOCH:
                self._timing.retry(now_ms)  # a join refused this way: do not spin
            return actions
        if code is ErrorCode.STALE_MEMBER_EPOCH:
            self._timing.retry(now_ms)
            return []
        return self._fatal(code, f"unexpected error in a streams heartbeat response: {reason}")

    def _reconcile(self) -> list[StreamsAction]:
        """Start the next step towards the target, if none is outstanding (rule 4)."""
        if self._pending is None and self._target is not None:
            stop = _minus(self._owned, self._target)
            start = _minus(self._target, self._owned)
            if stop != NO_TASKS:
                self._pending = StopTasks(stop)
            elif start != NO_TASKS and self._target_confirmed():
                self._pending = StartTasks(start)
            if self._pending is not None:
                self._state = StreamsMemberState.RECONCILING
                return [self._pending]
        self._settle()
        return []

    def _target_confirmed(self) -> bool:
        """Rule 4: the last request was answered successfully and none is in flight, so the target is
        the coordinator's current assignment (which moves only on our own heartbeats)."""
        return self._timing.in_flight is None and self._acked is not None

    def _settle(self) -> None:
        if self._pending is not None:
            self._state = StreamsMemberState.RECONCILING
        elif self._held() != self._reported or (self._target is not None and self._owned != self._target):
            self._state = StreamsMemberState.ACKNOWLEDGING
        else:
            self._state = StreamsMemberState.STABLE

    def _advance(self, now_ms: int) -> list[StreamsAction]:
        """After an acknowledgement: continue leaving or reconciling -- unless the session ran out
        meanwhile (rule 6). A slow driver may acknowledge long after the last answer; the next step
        of a reconciliation from before the coordinator fenced us must not be handed out."""
        if self._timing.session_expired(now_ms) is not None:
            return self.tick(now_ms)
        if self._state is StreamsMemberState.PREPARE_LEAVING:
            return self._continue_leaving(now_ms)
        if self._state in _IN_GROUP:
            return self._reconcile()
        return []

    def _accept_ack(self, ack: StopTasks | StartTasks) -> bool:
        if self._pending == ack:
            self._pending = None
            return True
        if self._state in _TERMINAL or ack in self._cancelled:
            return False  # late acknowledgement of an action cancelled by Lost/close/fatal
        kind = "tasks_stopped" if isinstance(ack, StopTasks) else "tasks_started"
        raise MemberUsageError(f"{kind}({format_tasks(ack.tasks)}) does not match the pending action "
                               f"{_describe(self._pending)}")

    def _continue_leaving(self, now_ms: int) -> list[StreamsAction]:
        if self._pending is not None:
            return []  # let the outstanding Stop/Start finish first
        if self._owned != NO_TASKS:
            self._pending = StopTasks(self._owned)
            return [self._pending]
        if self._known:
            self._state = StreamsMemberState.LEAVING
            self._timing.due_now(now_ms)
        else:
            self._state = StreamsMemberState.LEFT  # the coordinator never heard of us
        return []

    def _drop_everything(self, reason: str) -> list[StreamsAction]:
        held = self._held()
        if self._pending is not None:
            self._cancelled.append(self._pending)
            self._pending = None
        self._owned = NO_TASKS
        self._timing.void()
        return [LostTasks(held, reason)] if held != NO_TASKS else []

    def _reset(self, reason: str, now_ms: int) -> list[StreamsAction]:
        """The coordinator no longer counts us: lose everything, rejoin from epoch 0 (rule 6)."""
        actions = self._drop_everything(reason)
        self._epoch = JOIN_EPOCH
        self._target = None
        self._reported = NO_TASKS
        self._acked = None
        self._timing.forget_session()
        self._known = False
        self._state = StreamsMemberState.JOINING
        self._timing.due_now(now_ms)
        return actions

    def _fatal(self, code: ErrorCode, message: str) -> list[StreamsAction]:
        actions = self._drop_everything(f"fatal error {code.value}: {message}")
        self._state = StreamsMemberState.FATAL
        actions.append(Fatal(code, message))
        return actions

    def __repr__(self) -> str:
        return (f"StreamsMemberStateMachine(group={self._group_id!r}, member={self._member_id!r}, "
                f"process={self._process_id!r}, state={self._state.value}, epoch={self._epoch}, "
                f"owned={format_tasks(self._owned)}, pending={_describe(self._pending)})")


# ---------------------------------------------------------------------------------------------------
# Tasks by role


def format_tasks(tasks: MemberTasks) -> str:
    """``active s_0, s_1; warm-up s_2`` (roles with no task left out; ``nothing`` when empty)."""
    parts = [f"{role} {', '.join(str(t) for t in sorted(ts))}" for role, ts in tasks.roles() if ts]
    return "; ".join(parts) or "nothing"


def _describe(action: StopTasks | StartTasks | None) -> str:
    if action is None:
        return "(none)"
    kind = "StopTasks" if isinstance(action, StopTasks) else "StartTasks"
    return f"{kind}({format_tasks(action.tasks)})"


def _union(a: MemberTasks, b: MemberTasks) -> MemberTasks:
    return MemberTasks(a.active | b.active, a.standby | b.standby, a.warmup | b.warmup)


def _minus(a: MemberTasks, b: MemberTasks) -> MemberTasks:
    """Role by role: what ``a`` has in a role that ``b`` has not in that same role."""
    return MemberTasks(a.active - b.active, a.standby - b.standby, a.warmup - b.warmup)


def _two_roles(tasks: MemberTasks) -> str:
    """The tasks ``tasks`` names in more than one role (``""`` when none)."""
    doubled = (tasks.active & tasks.standby) | (tasks.active & tasks.warmup) | (tasks.standby & tasks.warmup)
    return ", ".join(str(t) for t in sorted(doubled))


def _frozen(tasks: MemberTasks, caller: str) -> MemberTasks:
    if not isinstance(tasks, MemberTasks):
        raise TypeError(f"{caller}() takes the MemberTasks of the action it acknowledges, got {tasks!r}")
    return MemberTasks(frozenset(tasks.active), frozenset(tasks.standby), frozenset(tasks.warmup))


def _checked_offsets(offsets: TaskOffsets) -> TaskOffsets:
    """A read-only copy of a driver's report, after checking every entry (rule 5)."""
    if not isinstance(offsets, Mapping):
        raise TypeError(f"report_offsets() takes a mapping of task id to {{shard: offset}}, got {offsets!r}")
    out: dict[TaskId, Mapping[Shard, int]] = {}
    for task, reached in offsets.items():
        if not isinstance(task, TaskId):
            raise TypeError(f"report_offsets() names {task!r}, which is not a TaskId")
        if not isinstance(reached, Mapping):
            raise TypeError(f"report_offsets(): task {task} maps to {reached!r}, not to {{shard: offset}}")
        for shard, offset in reached.items():
            if not isinstance(shard, Shard):
                raise TypeError(f"report_offsets(): task {task} reports {shard!r}, which is not a Shard")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"report_offsets(): task {task} reports offset {offset!r} for {shard}; "
                                 "offsets are non-negative integers")
        out[task] = MappingProxyType(dict(reached))
    return MappingProxyType(out)
