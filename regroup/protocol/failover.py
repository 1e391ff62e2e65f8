"""Failover in seconds: what a broken connection means for a member's session, on both sides.

When a process dies, its kernel closes its sockets, so the coordinator sees the member's nudge
stream (Watch) end at once — long before a session timeout. The coordinator's shell only reports
that fact (and that a stream was opened again); the rules below, and only they, decide what it
means. All times are milliseconds, passed in.

Coordinator side (`ConsumerGroups` and `StreamsGroups` apply `grace_deadline`; the shorter deadline
is a `TimerKind.GRACE` timer of `regroup.protocol.timers`):

1. ``connection_lost(member, now)`` — the member's last open stream to the coordinator ended, and
   not because the coordinator ended it — gives a *dynamic* member (no instance id) the deadline
   ``min(its session deadline, now + grace)``. If that passes first, the member is fenced exactly as
   at a session timeout (reason "connection lost"): its shards are freed, the group epoch moves.
2. A *static* member (with an instance id) keeps its session timeout: its shards wait for a restart
   under the same instance id, as they always did.
3. A broken connection only ever shortens a deadline, and only until the member shows it is alive:
   any heartbeat re-arms the normal session deadline and forgets the grace, and
   ``connection_restored(member, now)`` (the member opened a stream again) forgets it too — back to
   the deadline its last heartbeat set. A live member whose stream broke keeps everything if it
   heartbeats, or reconnects, within the grace.
4. A grace of 0 turns the rule off. Like every timer, a grace is not durable, and a restarted
   coordinator knows nothing of the connections its predecessor had: it recovers every member with a
   fresh full session. When it starts serving (``serving(now)``), a *dynamic* member gets the deadline
   ``min(its session deadline, now + heartbeat interval + grace)`` (`restart_deadline`): a live
   member heartbeats at least once per interval whatever happened to its stream (and reopens the
   stream sooner, which forgets the deadline as rule 3 says), so only a member that died while the
   coordinator was down, or with it, misses it — and is fenced seconds after the restart, not a
   session timeout later. The interval is in the bound so that a live member that never opens a
   stream (rule 5) is not fenced by a restart; a static member keeps its session timeout (rule 2).
   A live member whose heartbeats do not get through (and whose stream is down) is fenced too:
   rule 12 has it stop working by then.
5. A member that never opened a stream gives no early signal: it is fenced at its session timeout
   (or under rule 4, after a restart).
6. Every successful heartbeat answer tells the member the grace that applies to it (`member_grace`:
   0 for a static member, or when the rule is off); error answers say 0.

Member side (`Contact`, kept by `regroup.client.session.Session` and asked by the member's owner):

7. Once the member's nudge stream has been open, the coordinator may apply rule 1 to it whenever
   the stream is not open. It cannot fence the member before ``grace`` after the *send time* of the
   member's last successfully answered heartbeat: that heartbeat re-armed the full session, and a
   loss reported after it gives no earlier deadline than its processing time plus the grace. From
   that moment on, while the stream is not open, the member is **cut off**: its owner stops
   processing (hands out no records, runs no tasks) until a heartbeat answer moves the moment
   forward. Commits stay fenced by epoch regardless; this keeps an alive-but-unreachable member
   from working on shards the coordinator may have given away.
8. A stream opened again ends a cut-off only if it opened before that moment (the coordinator then
   restored the member before it could fence it, rule 3); one opened after it does not — the member
   may already be fenced — and the member stays cut off until a heartbeat sent since is answered.
9. While its stream is not open (or it is cut off), the member asks for a heartbeat by half the
   grace after its last answered one, or at once after a stream reopened late (rule 8); once per
   such moment: retries after a failure follow the member's own backoff. A reachable coordinator
   thus keeps a member whose stream is down in contact, and never fences it under rule 1. A member
   under rule 12 alone (no stream has been open) asks for one a heartbeat interval (at least half
   the grace) after the *send* time of its last answered one, so that each answer has the whole
   grace to come back before rule 12 would cut the member off.
10. A grace of 0 (static member, rule off, a coordinator that does not say) never cuts a member off.
11. A stream the coordinator ended itself (it ends them all when it shuts down, and reports no loss
    for them) is not a broken connection: the member is not cut off for it, until a stream it
    opens later breaks (rule 12 still applies). So a coordinator's clean restart that is back
    within a heartbeat interval plus the grace pauses nobody; a coordinator that crashed does pause
    its members once the grace has passed — they cannot tell it from one that is alive but out of
    their reach — until it answers again.
12. A restarted coordinator may fence any dynamic member under rule 4, stream or no stream: no
    earlier than ``serving + interval + grace``, and not at all once it processed a heartbeat of the
    member after ``serving`` (or registered a stream of it, rule 3). A member whose last
    successfully answered heartbeat was sent at ``last_ok_sent`` therefore knows nothing that rules
    out a restart after it, and is safe only until ``last_ok_sent + interval + grace`` (``interval``:
    the ``heartbeat_interval_ms`` of that answer; 0 when unknown, which only pauses sooner). From
    then on it is **cut off**, as in rule 7, until a heartbeat sent later is answered, or — as in
    rule 8 — while a stream opened before that moment is open (the new coordinator registered it,
    which disarmed the deadline; one that predates the restart broke with the old process). Once a
    stream has been open, rule 7's moment comes first and this rule adds nothing; it is what
    protects a member with no stream (rule 5, or after rule 11). Under load: a member heartbeats an
    interval after the send of its last answered heartbeat (rule 9) and is cut off only if that
    answer takes longer than the grace — it then pauses until the answer arrives, and is never
    fenced while working. The price: a coordinator out of every member's reach for longer than an
    interval plus the grace (a crash, a slow restart, a partition) pauses all dynamic members until
    they hear from it again. (A restart with a *shorter* interval or grace than its predecessor
    told the members can fence before they pause: lower them in two steps.)

What the rules cannot see: a connection that breaks on one side only. A member whose stream looks
open to it while the coordinator saw it end works on until its next heartbeat answer (within a
heartbeat interval) says it was fenced; its commits are refused by epoch meanwhile.
"""

from __future__ import annotations

from regroup.protocol.timers import TimerKind, Timers

__all__ = [
    "Contact", "arm_grace", "arm_restart_grace", "check_grace", "disarm_grace", "grace_deadline",
    "member_grace", "restart_deadline",
]


def check_grace(grace_ms: int) -> int:
    """``grace_ms`` if it is a usable grace (0: off), else ValueError."""
    if isinstance(grace_ms, bool) or not isinstance(grace_ms, int) or grace_ms < 0:
        raise ValueError(f"failover_grace_ms must be a non-negative integer (0: off), got {grace_ms!r}")
    return grace_ms


def member_grace(grace_ms: int, instance_id: str | None) -> int:
    """Rule 6: the grace a member is told (and that rule 1 applies to it): 0 for a static member."""
    return 0 if instance_id is not None else grace_ms


def grace_deadline(grace_ms: int, instance_id: str | None, session_deadline: int | None, now: int,
                   ) -> int | None:
    """Rules 1, 2 and 4: the earlier deadline a broken connection gives a member, or None when it
    keeps the one it has (static, rule off, or its session ends first anyway)."""
    grace = member_grace(grace_ms, instance_id)
    if grace <= 0 or session_deadline is None:
        return None
    deadline = now + grace
    return deadline if deadline < session_deadline else None


def arm_grace(timers: Timers, grace_ms: int, group_id: str, member_id: str, instance_id: str | None,
              epoch: int, now: int) -> None:
    """Rule 1 on a group kind's timers: the member's broken connection arms its grace timer when
    that ends its session earlier (both group kinds call this)."""
    deadline = grace_deadline(grace_ms, instance_id, timers.session_deadline(group_id, member_id), now)
    if deadline is not None:
        timers.arm(TimerKind.GRACE, group_id, member_id, deadline, epoch)


def restart_deadline(grace_ms: int, interval_ms: int, instance_id: str | None, session_deadline: int | None,
                     now: int) -> int | None:
    """Rule 4: the earlier deadline a coordinator that starts serving at ``now`` gives a member it
    recovered, or None when the member keeps its session (static, rule off, or the session ends first)."""
    if member_grace(grace_ms, instance_id) <= 0:
        return None
    return grace_deadline(grace_ms + max(0, interval_ms), instance_id, session_deadline, now)


def arm_restart_grace(timers: Timers, grace_ms: int, interval_ms: int, group_id: str, member_id: str,
                      instance_id: str | None, epoch: int, now: int) -> None:
    """Rule 4 on a group kind's timers, for one recovered member (both group kinds call this)."""
    session = timers.session_deadline(group_id, member_id)
    deadline = restart_deadline(grace_ms, interval_ms, instance_id, session, now)
    if deadline is not None:
        timers.arm(TimerKind.GRACE, group_id, member_id, deadline, epoch)


def disarm_grace(timers: Timers, group_id: str, member_id: str) -> None:
    """Rule 3: a restored connection puts the member back on the deadline its last heartbeat set."""
    timers.disarm(TimerKind.GRACE, group_id, member_id)


class Contact:
    """The member side (rules 7-12): is the member cut off from the coordinator, and when must it
    heartbeat to stay in contact? Pure: the shell reports what happened, with the time."""

    def __init__(self) -> None:
        self._grace_ms = 0
        self._interval_ms = 0  # the coordinator's heartbeat interval (rule 12)
        self._watched = False  # a stream has been open: rule 1 may apply to us from now on
        self._opened_at: int | None = None  # when the current stream opened (None: not open)
        self._last_ok_sent: int | None = None  # send time of the last successfully answered heartbeat
        self._asked_at: int | None = None  # the last time rule 9 asked for a heartbeat

    @property
    def grace_ms(self) -> int:
        return self._grace_ms

    def stream_opened(self, now: int) -> None:
        """The nudge stream is open (the coordinator registered it)."""
        self._watched = True
        self._opened_at = now

    def stream_closed(self, now: int, *, ended_by_coordinator: bool = False) -> None:
        """The nudge stream ended or failed (or could not be opened); ``ended_by_coordinator``: the
        coordinator ended it itself (rule 11)."""
        if ended_by_coordinator and not self.cut_off(now):  # a cut-off stands: we may be fenced already
            self._watched = False
        self._opened_at = None

    def answered(self, sent_at: int, grace_ms: int, interval_ms: int = 0) -> None:
        """A heartbeat sent at ``sent_at`` was answered without error, with this grace (rule 6) and
        heartbeat interval (rule 12; 0, when the answer does not say, only cuts the member off sooner)."""
        if self._last_ok_sent is None or sent_at > self._last_ok_sent:
            self._last_ok_sent = sent_at
        self._grace_ms = max(0, grace_ms)
        self._interval_ms = max(0, interval_ms)

    def asked(self, now: int) -> None:
        """The shell asked for a heartbeat because `heartbeat_due_at` said so."""
        self._asked_at = now

    def _safe_until(self) -> int | None:
        """Until when the member certainly cannot have been fenced under rule 1 or 4 (None: while
        nothing changes)."""
        if self._grace_ms <= 0 or self._last_ok_sent is None:
            return None  # rule 10; not a member yet: nothing to lose
        # Rule 7 once a stream has been open (rule 12's moment is later, with the same exception);
        # rule 12 alone otherwise.
        until = self._last_ok_sent + self._grace_ms + (0 if self._watched else self._interval_ms)
        if self._opened_at is not None and self._opened_at < until:
            return None  # open since before the coordinator could fence us (rules 8 and 12)
        return until

    def cut_off(self, now: int) -> bool:
        """Rules 7 and 12: must the owner stop processing now?"""
        until = self._safe_until()
        return until is not None and now >= until

    def cut_off_at(self) -> int | None:
        """When the member is (or was) cut off if nothing changes meanwhile — no answer, no stream
        opened (None: not while nothing changes). A shell that cannot poll `cut_off` wakes then."""
        return self._safe_until()

    def heartbeat_due_at(self) -> int | None:
        """Rule 9: when the member should heartbeat to stay in contact (None: its normal schedule)."""
        until = self._safe_until()
        if until is None or self._last_ok_sent is None:
            return None
        if self._watched:
            due = self._last_ok_sent + self._grace_ms // 2
        else:  # rule 12 alone: the answer gets the whole grace
            due = self._last_ok_sent + max(self._interval_ms, self._grace_ms // 2)
        if self._opened_at is not None:
            due = max(due, self._opened_at)  # reopened late: make sure of it at once (rule 8)
        if self._asked_at is not None and self._asked_at >= due:
            return None
        return due
