"""The member side of the protocol: one group member as a pure, sans-I/O state machine.

Everything that decides what a member sends to the coordinator and what it asks its driver to do
lives here. The module does no I/O and keeps no clock: the driver (the Python consumer, the PySpark
source, the simulator, a test) passes the time in milliseconds (non-negative integers) to every call
and performs the actions it gets back. It does not know which shell drives it.

Driver loop::

    m = MemberStateMachine(group_id="g", member_id=new_uuid(), subscribed_topics=("orders",))
    while m.state not in (MemberState.LEFT, MemberState.FATAL):
        handle(m.tick(now()))                       # session awareness
        if (req := m.next_request(now())) is not None:
            try:
                handle(m.on_response(send(req), now()))
            except TransportError:
                handle(m.request_failed(now()))
        # handle(Revoke(s)):  on_revoke(s) + commit  -> m.revocation_done(s, now())
        # handle(Assign(s)):  on_assign(s) + seek    -> m.assignment_done(s, now())
        # handle(Lost(s)):    on_lost(s), no commit  (nothing to acknowledge)
        # sleep until min(m.next_heartbeat_at(), m.session_deadline()) or until work arrives

How every shell carries out Revoke, Assign, Lost and Fatal — commit then release, where a new shard
starts, an Assign whose offsets cannot be read yet — is decided once, in `regroup.protocol.driver`.

States::

    UNSUBSCRIBED --update_subscription--> JOINING <------------------------------------+
                                             |                                         |
                                             | join answered                           |
                                             v                                         |
                 +-- new target -------> RECONCILING   (one Revoke or Assign out)      |
                 |                        |        |                                   |
                 |         nothing to do  |        | driver acknowledged               |
                 |                        v        v                                   |
               STABLE <-----------------------  ACKNOWLEDGING  (owned changed, or an Assign
                      coordinator confirmed owned      waits for an answer: send now)  |
                                                                                       |
    JOINING / RECONCILING / ACKNOWLEDGING / STABLE -- fenced, unknown member, group ---+
        gone, session expired: Lost(held), epoch 0, owned empty (UNSUBSCRIBED if no subscription)

    in the group --leave()--> PREPARE_LEAVING --all revoked--> LEAVING --answer or failure--> LEFT
    any state --fatal error--> FATAL            any state --close()--> LEFT

Rules:

1. One request in flight at a time. Every request the driver sends must be answered by exactly one
   `on_response` or `request_failed`. Requests are never produced in UNSUBSCRIBED, LEFT or FATAL.
2. Timing. A request is due immediately when joining, when owned changed (after an acknowledged
   revocation or assignment: the coordinator advances the epoch only once it hears about it) and
   after a subscription change; otherwise one heartbeat interval (the coordinator's, from the last
   successful response) after the last response; after a transport failure after a capped
   exponential backoff (no jitter here: the module draws no random numbers; a driver may add it).
3. Full or delta. A request is FULL (subscription, rebalance timeout, owned, instance id, rack,
   assignors all set; regex "" when there is none) on a join, and on the first request after any
   error response or transport failure: the coordinator may have missed what we sent, so "unchanged"
   would be ambiguous. Otherwise it is a DELTA: subscription and owned are set only when they differ
   from the last request the coordinator answered successfully; the other fields are None. A join
   carries epoch 0 and owned = empty; every other heartbeat carries the current epoch. After a
   transport failure the member keeps its epoch and owned set: if the lost response had moved it to
   a newer epoch, the coordinator accepts the previous epoch with owned a subset of what it assigned.
4. Reconciliation. A response's assignment (None = unchanged) becomes the target. With no action
   outstanding the member emits ``Revoke(owned - target)`` if non-empty, else
   ``Assign(target - owned)`` if non-empty. At most one Revoke/Assign is outstanding; so a Revoke is
   always acknowledged (``revocation_done``) before any Assign is emitted, and no shard is being
   revoked and assigned at once. The next step is computed against the *latest* target when the
   driver acknowledges, so targets that change mid-reconciliation are followed — but an Assign
   only from a target the coordinator has confirmed: none while a request is in flight, nor after
   a lost answer (transport failure or error) until the next successful one. The request reported
   what the member holds, and a shard of its target it has not taken yet is the coordinator's to
   take back (and give away) without a revocation; the answer saying so may be the one in flight,
   or the one lost. The Assign then waits for that answer (ACKNOWLEDGING, the request due now); a
   Revoke never waits. Assignment is acknowledged too (``assignment_done``): the shell's on_assign
   may have to seek or restore state first; a driver for which assigning is immediate simply
   acknowledges at once. ``owned`` changes only on those acknowledgements (and becomes empty on
   Lost). The epoch is always taken from the response: it stays unchanged while the coordinator
   waits for a revocation.
5. Losing the membership. FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND, and no
   successful response for a whole session timeout (measured from the send time of the last
   successfully answered request, the earliest moment the coordinator's timer could have started)
   emit ``Lost(held)``: the driver drops those shards WITHOUT committing (someone else may own them
   already). ``held`` is owned plus the shards of an outstanding, now cancelled, Assign. Then epoch
   0, owned empty, and a full join with the same member id (Kafka's behaviour), right away, or after
   the retry backoff if the failed request was itself a join. The session is checked by `tick`
   and at every acknowledgement, so a late acknowledgement never starts the next step of a
   reconciliation the coordinator has since given away. Late acknowledgements of cancelled
   actions are ignored. A response to a request sent before the reset is ignored too.
6. Other errors. UNRELEASED_INSTANCE_ID: another process still holds our instance id; retry the
   join after ``unreleased_instance_backoff_ms``. FENCED_INSTANCE_ID (another process took our
   instance id), UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, INVALID_REQUEST,
   GROUP_MAX_SIZE_REACHED, and any code that has no business in a heartbeat response: ``Lost(held)``
   if anything is held, then ``Fatal(code, message)``; state FATAL, no more requests.
   STALE_MEMBER_EPOCH (meant for commits) is retried like a transport failure.
7. Leaving. ``leave()`` waits for an outstanding Revoke/Assign, then emits ``Revoke(owned)`` so the
   driver commits and stops, then sends one leave request: epoch -1, or -2 for a static member
   (temporary leave: the coordinator keeps its assigned shards for the instance id until the session
   timeout, so a restarted process with the same instance id gets them back without a rebalance —
   the Revoke is then only local — and hands out at once those it was revoking, which is why the
   driver must have committed them first). ``leave(permanent=True)`` makes a static member leave
   for good (-1). Whatever answers the leave request (or its failure) ends in LEFT. Heartbeats
   continue while the driver revokes, so the session does not expire. A member the coordinator never
   heard of goes to LEFT at once. ``close()`` abandons the membership without a word to the
   coordinator (it fences the member after the session timeout) and returns ``Lost(held)``.
8. Delegated assignment. ``should_compute_assignment`` in a response surfaces as
   ``ComputeAssignment()`` every time it is set; the driver ignores it while a computation runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    HeartbeatRequest,
    HeartbeatResponse,
)
from regroup.protocol.shard import EMPTY, ShardSet, format_shards

# ---------------------------------------------------------------------------------------------------
# Actions for the driver


@dataclass(frozen=True, slots=True)
class Revoke:
    """Stop processing ``shards``, commit their offsets, then call `revocation_done` with them."""

    shards: ShardSet


@dataclass(frozen=True, slots=True)
class Assign:
    """Start processing ``shards`` (seek to committed offsets), then call `assignment_done`."""

    shards: ShardSet


@dataclass(frozen=True, slots=True)
class Lost:
    """The membership is gone: drop ``shards`` WITHOUT committing. Nothing to acknowledge."""

    shards: ShardSet
    reason: str


@dataclass(frozen=True, slots=True)
class Fatal:
    """The member cannot continue (state FATAL): report ``error`` and ``message`` to the user."""

    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class ComputeAssignment:
    """The coordinator delegated the assignment to this member: fetch the group spec and install one."""


Action: TypeAlias = Revoke | Assign | Lost | Fatal | ComputeAssignment


class MemberUsageError(RuntimeError):
    """The driver called the state machine out of order (a bug in the driver, not a protocol event)."""


class MemberState(Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"  # nothing to subscribe to: not in the group, no requests
    JOINING = "JOINING"  # next request is a join (epoch 0, full, owned empty)
    RECONCILING = "RECONCILING"  # a Revoke or Assign awaits the driver's acknowledgement
    #: Owned changed and the coordinator has not confirmed it yet, or an Assign waits for an answer
    #: that confirms the target (rule 4).
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"  # owned == target and the coordinator knows it
    PREPARE_LEAVING = "PREPARE_LEAVING"  # leave() called: the driver revokes everything first
    LEAVING = "LEAVING"  # next request is the leave (epoch -1 / -2)
    LEFT = "LEFT"  # terminal
    FATAL = "FATAL"  # terminal


_IN_GROUP = frozenset({MemberState.RECONCILING, MemberState.ACKNOWLEDGING, MemberState.STABLE})
_LEAVING = frozenset({MemberState.PREPARE_LEAVING, MemberState.LEAVING})
_TERMINAL = frozenset({MemberState.LEFT, MemberState.FATAL})
_SILENT = _TERMINAL | {MemberState.UNSUBSCRIBED}

# Errors that mean "the coordinator no longer counts us as a member": lose everything and rejoin.
_REJOIN_ERRORS = frozenset(
    {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND}
)
# Errors a member cannot fix by retrying: the user has to change something.
_FATAL_ERRORS = frozenset(
    {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
    }
)

#: "Due immediately": times are non-negative, so 0 is never in the future.
_NOW = 0


@dataclass(frozen=True, slots=True)
class _Sent:
    """The delta-tracked fields as the coordinator last acknowledged them."""

    topics: tuple[str, ...] | None
    regex: str | None
    owned: ShardSet | None


@dataclass(slots=True)
class _InFlight:
    request: HeartbeatRequest
    sent_at: int
    #: Sent before the membership was reset (or the machine closed): its answer is void.
    stale: bool = False


class MemberStateMachine:
    """One member of one group. See the module docstring for the rules."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        subscribed_topics: Collection[str] = (),
        subscribed_regex: str | None = None,
        assignor: str | None = None,
        client_assignors: tuple[str, ...] = (),
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        unreleased_instance_backoff_ms: int = 1_000,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        if not member_id:
            raise ValueError("member_id must be a non-empty string (generate a UUID in the driver)")
        if instance_id == "":
            raise ValueError("instance_id must be None (dynamic member) or a non-empty string")
        for name, value in (
            ("rebalance_timeout_ms", rebalance_timeout_ms),
            ("session_timeout_ms", session_timeout_ms),
            ("heartbeat_interval_ms", heartbeat_interval_ms),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name, value in (
            ("retry_backoff_ms", retry_backoff_ms),
            ("retry_backoff_max_ms", retry_backoff_max_ms),
            ("unreleased_instance_backoff_ms", unreleased_instance_backoff_ms),
        ):
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")

        self._group_id = group_id
        self._member_id = member_id
        self._instance_id = instance_id
        self._rack_id = rack_id
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._topics = _normalize_topics(subscribed_topics)
        self._regex = subscribed_regex or ""  # "" = no regex, as on the wire
        self._assignor = assignor
        self._client_assignors = tuple(client_assignors)
        self._session_timeout_ms = session_timeout_ms
        self._interval_ms = heartbeat_interval_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self._unreleased_backoff_ms = unreleased_instance_backoff_ms

        self._state = MemberState.JOINING if self._subscribed() else MemberState.UNSUBSCRIBED
        self._epoch = JOIN_EPOCH
        self._owned: ShardSet = EMPTY
        self._target: ShardSet | None = None
        #: A nudge came while a request was in flight: the next one goes right after its answer.
        self._nudged_in_flight = False
        self._pending: Revoke | Assign | None = None
        # Cancelled actions whose late acknowledgement must be ignored rather than rejected.
        self._cancelled: deque[Revoke | Assign] = deque(maxlen=8)
        # Owned as the coordinator last confirmed it (drives ACKNOWLEDGING); survives transport errors.
        self._reported: ShardSet = EMPTY
        # What the coordinator has of the delta fields; None = unknown, so the next request is full.
        self._acked: _Sent | None = None
        self._inflight: _InFlight | None = None
        self._next_at = _NOW
        self._last_ok_sent_at: int | None = None
        self._failures = 0
        # Whether the coordinator may know this member id since the last reset (a request went out).
        self._known = False
        self._leave_epoch = LEAVE_EPOCH

    # -----------------------------------------------------------------------------------------------
    # Properties

    @property
    def state(self) -> MemberState:
        return self._state

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def instance_id(self) -> str | None:
        return self._instance_id

    @property
    def epoch(self) -> int:
        """The member epoch (0 while joining); use it for offset commits."""
        return self._epoch

    @property
    def owned(self) -> ShardSet:
        """The shards the driver has acknowledged taking and not yet given back."""
        return self._owned

    @property
    def target(self) -> ShardSet | None:
        """The last assignment received from the coordinator (None before the first one)."""
        return self._target

    @property
    def pending(self) -> Revoke | Assign | None:
        """The Revoke or Assign awaiting the driver's acknowledgement, if any."""
        return self._pending

    @property
    def subscription(self) -> tuple[tuple[str, ...], str | None]:
        """``(topics, regex)``; regex None when there is none."""
        return self._topics, self._regex or None

    @property
    def in_flight(self) -> bool:
        return self._inflight is not None

    # -----------------------------------------------------------------------------------------------
    # Timing

    def next_heartbeat_at(self) -> int | None:
        """When `next_request` will produce a request; None while one is in flight or none will come."""
        if self._state in _SILENT or self._inflight is not None:
            return None
        return self._next_at

    def heartbeat_due(self, now_ms: int) -> bool:
        at = self.next_heartbeat_at()
        return at is not None and now_ms >= at

    def nudge(self, now_ms: int) -> None:
        """The coordinator says there is work for us (a revocation, or released shards we wait
        for): make the next heartbeat due now instead of at the end of the interval. A nudge that
        arrives while a request is in flight is kept for right after its answer: that answer may
        predate the news (the service nudges at once but answers once its records are durable).
        Ignored when no request would be sent."""
        if self._state in _SILENT:
            return
        if self._inflight is not None:
            self._nudged_in_flight = True
        elif self._next_at > now_ms:
            self._next_at = now_ms

    def session_deadline(self) -> int | None:
        """When `tick` will declare the membership lost if no request succeeds until then."""
        if self._state in _SILENT or self._last_ok_sent_at is None:
            return None
        return self._last_ok_sent_at + self._session_timeout_ms

    def tick(self, now_ms: int) -> list[Action]:
        """Check the session. Call it regularly (at least by `session_deadline`)."""
        deadline = self.session_deadline()
        if deadline is None or now_ms < deadline:
            return []
        reason = (
            f"no successful heartbeat for {now_ms - (deadline - self._session_timeout_ms)} ms "
            f"(session timeout {self._session_timeout_ms} ms): the coordinator has fenced this member"
        )
        leaving = self._state in _LEAVING
        actions = self._reset(reason, now_ms)
        if leaving:
            self._state = MemberState.LEFT
        return actions

    # -----------------------------------------------------------------------------------------------
    # Requests and responses

    def next_request(self, now_ms: int) -> HeartbeatRequest | None:
        """The request to send now, or None. The driver must answer it with exactly one
        `on_response` or `request_failed`."""
        if not self.heartbeat_due(now_ms):
            return None
        if self._state is MemberState.LEAVING:
            req = HeartbeatRequest(
                group_id=self._group_id,
                member_id=self._member_id,
                member_epoch=self._leave_epoch,
                instance_id=self._instance_id,
            )
        elif self._state is MemberState.JOINING:
            req = self._full_request(JOIN_EPOCH, EMPTY)
        elif self._acked is None:
            req = self._full_request(self._epoch, self._held())
        else:
            req = self._delta_request(self._acked)
        self._inflight = _InFlight(req, now_ms)
        self._known = True
        return req

    def on_response(self, resp: HeartbeatResponse, now_ms: int) -> list[Action]:
        """Digest the coordinator's answer to the request in flight."""
        flight = self._take_inflight("on_response")
        if flight.stale or self._state in _TERMINAL:
            return []
        req = flight.request
        if req.member_epoch < 0:
            # Whatever the answer to a leave, this member is out of the group.
            self._state = MemberState.LEFT
            return []
        if resp.error is ErrorCode.NONE:
            actions = self._on_success(resp, req, flight.sent_at, now_ms)
            if self._nudged_in_flight and self._state not in _SILENT:
                self._next_at = min(self._next_at, now_ms)
            self._nudged_in_flight = False
            return actions
        self._nudged_in_flight = False
        return self._on_error(resp, req, now_ms)

    def request_failed(self, now_ms: int) -> list[Action]:
        """The request in flight got no answer (transport error, timeout)."""
        flight = self._take_inflight("request_failed")
        if flight.stale or self._state in _TERMINAL:
            return []
        if flight.request.member_epoch < 0:
            # The leave may or may not have arrived; the session timeout cleans up if it did not.
            self._state = MemberState.LEFT
            return []
        self._acked = None  # the response may have been lost: resend everything
        self._schedule_retry(now_ms)
        return self.tick(now_ms)

    # -----------------------------------------------------------------------------------------------
    # Driver acknowledgements and commands

    def revocation_done(self, shards: ShardSet, now_ms: int) -> list[Action]:
        """The driver stopped processing ``shards`` and committed them (the pending Revoke)."""
        if not self._accept_ack(Revoke(frozenset(shards))):
            return []
        self._owned = self._owned - shards
        self._next_at = min(self._next_at, now_ms)  # tell the coordinator now: it holds the epoch
        return self._advance(now_ms)

    def assignment_done(self, shards: ShardSet, now_ms: int) -> list[Action]:
        """The driver took ``shards`` (the pending Assign)."""
        if not self._accept_ack(Assign(frozenset(shards))):
            return []
        self._owned = self._owned | shards
        self._next_at = min(self._next_at, now_ms)
        return self._advance(now_ms)

    def update_subscription(
        self, topics: Collection[str] | None = None, regex: str | None = None
    ) -> None:
        """Replace the topic list and/or the regex (None = keep; ``()`` / ``""`` = drop).

        The change goes out with the next request, which becomes due at once. An empty subscription
        keeps the member in the group with nothing assigned; call `leave` to leave.
        """
        if self._state in _TERMINAL:
            raise MemberUsageError(f"cannot change the subscription of a member in state {self._state.value}")
        if topics is not None:
            self._topics = _normalize_topics(topics)
        if regex is not None:
            self._regex = regex
        if self._state is MemberState.UNSUBSCRIBED and self._subscribed():
            self._state = MemberState.JOINING
        self._next_at = _NOW

    def leave(self, now_ms: int, *, permanent: bool = False) -> list[Action]:
        """Leave the group gracefully (see rule 7). Idempotent."""
        if self._state in _TERMINAL or self._state in _LEAVING:
            return []
        static = self._instance_id is not None and not permanent
        self._leave_epoch = STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH
        self._state = MemberState.PREPARE_LEAVING
        return self._continue_leaving(now_ms)

    def close(self) -> list[Action]:
        """Stop at once without telling the coordinator. Returns Lost for whatever is held."""
        if self._state in _TERMINAL:
            return []
        actions = self._drop_everything("member closed without leaving the group")
        self._state = MemberState.LEFT
        return actions

    # -----------------------------------------------------------------------------------------------
    # Internals

    def _held(self) -> ShardSet:
        """What we report as owned: acknowledged shards plus those of an Assign in progress (the
        driver may already be reading them, so the coordinator must not think them free)."""
        if isinstance(self._pending, Assign):
            return self._owned | self._pending.shards
        return self._owned

    def _subscribed(self) -> bool:
        return bool(self._topics) or bool(self._regex)

    def _full_request(self, epoch: int, owned: ShardSet) -> HeartbeatRequest:
        return HeartbeatRequest(
            group_id=self._group_id,
            member_id=self._member_id,
            member_epoch=epoch,
            instance_id=self._instance_id,
            rack_id=self._rack_id,
            rebalance_timeout_ms=self._rebalance_timeout_ms,
            subscribed_topics=self._topics,
            subscribed_regex=self._regex,
            assignor=self._assignor,
            client_assignors=self._client_assignors,
            owned=owned,
        )

    def _delta_request(self, acked: _Sent) -> HeartbeatRequest:
        held = self._held()
        # The coordinator reads an absent owned as "holds everything it was given": true only once
        # the member holds its target. Until then, shards given and then taken back before the
        # member ever took them would count as still held, and their revocation would wait for a
        # report that never comes (until the revocation timeout fenced the member).
        unchanged = acked.owned == held and held == self._target
        return HeartbeatRequest(
            group_id=self._group_id,
            member_id=self._member_id,
            member_epoch=self._epoch,
            subscribed_topics=None if acked.topics == self._topics else self._topics,
            subscribed_regex=None if acked.regex == self._regex else self._regex,
            owned=None if unchanged else held,
        )

    def _delta_outstanding(self) -> bool:
        """Something the coordinator has not confirmed yet: the next heartbeat should go now."""
        acked = self._acked
        if acked is None:
            return self._held() != self._reported
        return (acked.topics, acked.regex, acked.owned) != (self._topics, self._regex, self._held())

    def _take_inflight(self, caller: str) -> _InFlight:
        flight = self._inflight
        if flight is None:
            raise MemberUsageError(f"{caller}() called with no request in flight")
        self._inflight = None
        return flight

    def _on_success(
        self, resp: HeartbeatResponse, req: HeartbeatRequest, sent_at: int, now_ms: int
    ) -> list[Action]:
        self._failures = 0
        self._last_ok_sent_at = sent_at
        if resp.member_id:
            self._member_id = resp.member_id
        self._epoch = resp.member_epoch
        if resp.heartbeat_interval_ms > 0:
            self._interval_ms = resp.heartbeat_interval_ms
        if resp.session_timeout_ms > 0:  # the server decides; the constructor's value is a guess
            self._session_timeout_ms = resp.session_timeout_ms
        # Merge what this request set into what the coordinator already had (None = unchanged).
        # `_acked` cannot have changed since the request was built: only this answer touches it.
        prev = self._acked or _Sent(None, None, None)
        self._acked = _Sent(
            topics=prev.topics if req.subscribed_topics is None else req.subscribed_topics,
            regex=prev.regex if req.subscribed_regex is None else req.subscribed_regex,
            # A join's "owns nothing" is not taken as a report by a coordinator that already knew
            # us (it cannot tell a retry from a stale duplicate), so owned goes out again next time.
            owned=None if req.member_epoch == JOIN_EPOCH else (
                prev.owned if req.owned is None else req.owned),
        )
        if req.owned is not None:
            self._reported = req.owned
        if self._target is None:
            self._target = EMPTY  # joined: "no assignment in the response" means nothing yet
        if resp.assignment is not None:
            self._target = resp.assignment

        actions: list[Action] = []
        if self._state is MemberState.JOINING:
            self._state = MemberState.STABLE  # refined by _reconcile below
        if self._state in _LEAVING:
            # Keep the target for the record, but a leaving member takes nothing new.
            self._next_at = now_ms if self._state is MemberState.LEAVING else now_ms + self._interval_ms
            return actions
        actions.extend(self._reconcile())
        if resp.should_compute_assignment:
            actions.append(ComputeAssignment())
        self._next_at = now_ms if self._delta_outstanding() else now_ms + self._interval_ms
        return actions

    def _on_error(self, resp: HeartbeatResponse, req: HeartbeatRequest, now_ms: int) -> list[Action]:
        code = resp.error
        self._acked = None  # rule 3: the first request after an error is full
        reason = f"{code.value}: {resp.message}" if resp.message else code.value
        if code in _FATAL_ERRORS:
            return self._fatal(code, resp.message or code.value)
        if code in _REJOIN_ERRORS or code is ErrorCode.UNRELEASED_INSTANCE_ID:
            leaving = self._state in _LEAVING
            actions = self._reset(reason, now_ms)
            if leaving:
                self._state = MemberState.LEFT  # out of the group already: nothing left to leave
            elif code is ErrorCode.UNRELEASED_INSTANCE_ID:
                # The previous holder of our instance id is still alive (or its session has not
                # expired yet): wait for it rather than hammer the coordinator.
                self._next_at = now_ms + self._unreleased_backoff_ms
            elif req.member_epoch == JOIN_EPOCH:
                self._schedule_retry(now_ms)  # a join refused this way: do not spin
            return actions
        if code is ErrorCode.STALE_MEMBER_EPOCH:
            self._schedule_retry(now_ms)
            return []
        return self._fatal(code, f"unexpected error in a heartbeat response: {reason}")

    def _schedule_retry(self, now_ms: int) -> None:
        self._failures += 1
        backoff = self._retry_backoff_ms * (1 << min(self._failures - 1, 30))
        self._next_at = now_ms + min(backoff, self._retry_backoff_max_ms)

    def _reconcile(self) -> list[Action]:
        """Start the next step towards the target, if none is outstanding (rule 4)."""
        if self._pending is None and self._target is not None:
            revoke = self._owned - self._target
            add = self._target - self._owned
            if revoke:
                self._pending = Revoke(revoke)
            elif add and self._target_confirmed():
                self._pending = Assign(add)
            if self._pending is not None:
                self._state = MemberState.RECONCILING
                return [self._pending]
        self._settle()
        return []

    def _target_confirmed(self) -> bool:
        """Rule 4: the last request was answered successfully and none is in flight, so the target is
        the coordinator's current assignment (which moves only on our own heartbeats)."""
        return self._inflight is None and self._acked is not None

    def _settle(self) -> None:
        if self._pending is not None:
            self._state = MemberState.RECONCILING
        elif self._held() != self._reported or (self._target is not None and self._owned != self._target):
            self._state = MemberState.ACKNOWLEDGING
        else:
            self._state = MemberState.STABLE

    def _advance(self, now_ms: int) -> list[Action]:
        """After an acknowledgement: continue leaving or reconciling -- unless the session ran out
        meanwhile (rule 5). A slow driver may acknowledge long after the last answer; the next step
        of a reconciliation from before the coordinator fenced us must not be handed out."""
        deadline = self.session_deadline()
        if deadline is not None and now_ms >= deadline:
            return self.tick(now_ms)
        if self._state is MemberState.PREPARE_LEAVING:
            return self._continue_leaving(now_ms)
        if self._state in _IN_GROUP:
            return self._reconcile()
        return []

    def _accept_ack(self, ack: Revoke | Assign) -> bool:
        if self._pending == ack:
            self._pending = None
            return True
        if self._state in _TERMINAL or ack in self._cancelled:
            return False  # late acknowledgement of an action cancelled by Lost/close/fatal
        kind = "revocation_done" if isinstance(ack, Revoke) else "assignment_done"
        raise MemberUsageError(
            f"{kind}({format_shards(ack.shards)}) does not match the pending action {self._pending!r}"
        )

    def _continue_leaving(self, now_ms: int) -> list[Action]:
        if self._pending is not None:
            return []  # let the outstanding Revoke/Assign finish first
        if self._owned:
            self._pending = Revoke(self._owned)
            return [self._pending]
        if self._known:
            self._state = MemberState.LEAVING
            self._next_at = min(self._next_at, now_ms)
        else:
            self._state = MemberState.LEFT  # the coordinator never heard of us
        return []

    def _drop_everything(self, reason: str) -> list[Action]:
        held = self._owned
        if isinstance(self._pending, Assign):
            held = held | self._pending.shards  # the driver may already be taking them
        if self._pending is not None:
            self._cancelled.append(self._pending)
            self._pending = None
        self._owned = EMPTY
        if self._inflight is not None:
            self._inflight.stale = True
        return [Lost(held, reason)] if held else []

    def _reset(self, reason: str, now_ms: int) -> list[Action]:
        """The coordinator no longer counts us: lose everything, rejoin from epoch 0 (rule 5)."""
        actions = self._drop_everything(reason)
        self._epoch = JOIN_EPOCH
        self._target = None
        self._reported = EMPTY
        self._acked = None
        self._last_ok_sent_at = None
        self._known = False
        self._state = MemberState.JOINING if self._subscribed() else MemberState.UNSUBSCRIBED
        self._next_at = now_ms
        return actions

    def _fatal(self, code: ErrorCode, message: str) -> list[Action]:
        actions = self._drop_everything(f"fatal error {code.value}: {message}")
        self._state = MemberState.FATAL
        actions.append(Fatal(code, message))
        return actions

    def __repr__(self) -> str:
        return (
            f"MemberStateMachine(group={self._group_id!r}, member={self._member_id!r}, "
            f"state={self._state.value}, epoch={self._epoch}, owned={format_shards(self._owned)}, "
            f"pending={self._pending!r})"
        )


def _normalize_topics(topics: Collection[str]) -> tuple[str, ...]:
    if isinstance(topics, str):
        raise TypeError("subscribed topics must be a collection of names, not a single string")
    # Sorted and deduplicated so that "unchanged" is a plain comparison and requests are reproducible.
    return tuple(sorted(set(topics)))

