"""When a member's next heartbeat goes out: the one request in flight, the retry backoff, the session.

The timing rules every kind of group member follows, kept apart from what the member sends and
what it asks its driver to do. `regroup.protocol.streams.member` is built on it;
`regroup.protocol.member` keeps its own copy of the same rules for now (its behaviour is pinned by
many tests) and could adopt this class without a change of behaviour. Pure: no clock, no random
numbers; the time in milliseconds (a non-negative integer) is passed to every call.

Rules:

1. One request in flight at a time. `sent` records it with its send time; exactly one `take`
   ends it, for its answer or its failure. A request made `void` (sent before the member reset its
   membership, or closed) is still taken, but whatever answers it must be ignored: it speaks of a
   membership that no longer exists.
2. The next request is due at `next_at`: at once (`due_now`), one heartbeat interval from now
   (`due_in_interval`), after a capped exponential backoff (`retry`: ``retry_backoff_ms`` doubled
   per consecutive failure, at most ``retry_backoff_max_ms``; no jitter, a driver may add it), or
   after a fixed delay (`due_after`). Nothing is due while a request is in flight. A success (`answered`)
   resets the backoff and adopts the interval (and session timeout) the coordinator sent, when it
   sent one.
3. `nudge` (the coordinator has news for us) makes the request due now, unless one is in flight:
   its answer carries the news.
4. The session is measured from the send time of the last successfully answered request: the
   earliest moment the coordinator's session timer can have been restarted, so the member gives up
   no later than the coordinator does (if its session timeout is not longer than the
   coordinator's). Before the first success, and after `forget_session`, there is no deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["HeartbeatTiming", "InFlight", "check_ms"]

R = TypeVar("R")


@dataclass(slots=True)
class InFlight(Generic[R]):
    request: R
    sent_at: int
    #: Sent before the membership was reset (or the member closed): its answer is void.
    void: bool = False


def check_ms(name: str, value: object, *, positive: bool) -> int:
    """``value`` if it is a usable duration in ms, else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer number of milliseconds, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


class HeartbeatTiming(Generic[R]):
    """The timing of one member's heartbeats (see the module docstring for the rules)."""

    def __init__(self, *, session_timeout_ms: int, heartbeat_interval_ms: int, retry_backoff_ms: int,
                 retry_backoff_max_ms: int) -> None:
        self._session_timeout_ms = check_ms("session_timeout_ms", session_timeout_ms, positive=True)
        self._interval_ms = check_ms("heartbeat_interval_ms", heartbeat_interval_ms, positive=True)
        self._backoff_ms = check_ms("retry_backoff_ms", retry_backoff_ms, positive=False)
        # A maximum below the first backoff would shorten it; the first backoff wins.
        self._backoff_max_ms = max(self._backoff_ms,
                                   check_ms("retry_backoff_max_ms", retry_backoff_max_ms, positive=False))
        self._next_at = 0  # times are non-negative, so 0 is "due at once"
        self._in_flight: InFlight[R] | None = None
        self._nudged_in_flight = False
        self._failures = 0
        self._last_ok_sent_at: int | None = None

    @property
    def session_timeout_ms(self) -> int:
        return self._session_timeout_ms

    @property
    def interval_ms(self) -> int:
        return self._interval_ms

    @property
    def in_flight(self) -> InFlight[R] | None:
        return self._in_flight

    # -- rule 1 --------------------------------------------------------------------------------
    def sent(self, request: R, now_ms: int) -> None:
        if self._in_flight is not None:
            raise RuntimeError("a heartbeat is already in flight; answer it before sending another")
        self._in_flight = InFlight(request, now_ms)

    def take(self) -> InFlight[R] | None:
        """End the request in flight (None when there is none: the caller's usage error)."""
        flight, self._in_flight = self._in_flight, None
        return flight

    def void(self) -> None:
        if self._in_flight is not None:
            self._in_flight.void = True

    # -- rule 2 --------------------------------------------------------------------------------
    def next_at(self) -> int | None:
        return None if self._in_flight is not None else self._next_at

    def due(self, now_ms: int) -> bool:
        at = self.next_at()
        return at is not None and now_ms >= at

    def due_now(self, now_ms: int) -> None:
        self._next_at = min(self._next_at, now_ms)

    def due_in_interval(self, now_ms: int) -> None:
        self._next_at = now_ms + self._interval_ms

    def retry(self, now_ms: int) -> None:
        self._failures += 1
        backoff = self._backoff_ms * (1 << min(self._failures - 1, 30))
        self._next_at = now_ms + min(backoff, self._backoff_max_ms)

    def due_after(self, now_ms: int, delay_ms: int) -> None:
        self._next_at = now_ms + delay_ms

    def answered(self, flight: InFlight[R], *, interval_ms: int = 0, session_timeout_ms: int = 0) -> None:
        """A successful answer to ``flight``: reset the backoff, restart the session (rule 4)."""
        self._failures = 0
        self._last_ok_sent_at = flight.sent_at
        if interval_ms > 0:
            self._interval_ms = interval_ms
        if session_timeout_ms > 0:  # the server decides; the constructor's value is a guess
            self._session_timeout_ms = session_timeout_ms

    # -- rule 3 --------------------------------------------------------------------------------
    def nudge(self, now_ms: int) -> None:
        """Make the next request due now. A nudge that arrives while a request is in flight is kept
        for after its answer (`after_answer`): that answer may predate the news (the coordinator
        answers once its records are durable, but nudges at once)."""
        if self._in_flight is not None:
            self._nudged_in_flight = True
        elif self._next_at > now_ms:
            self._next_at = now_ms

    def after_answer(self, now_ms: int) -> None:
        """Once an answer has set the next request's time: a nudge that came meanwhile wins."""
        if self._nudged_in_flight:
            self._nudged_in_flight = False
            self._next_at = min(self._next_at, now_ms)

    # -- rule 4 --------------------------------------------------------------------------------
    def session_deadline(self) -> int | None:
        if self._last_ok_sent_at is None:
            return None
        return self._last_ok_sent_at + self._session_timeout_ms

    def session_expired(self, now_ms: int) -> str | None:
        """Why the session is over at ``now_ms`` (None while it lasts)."""
        deadline = self.session_deadline()
        if deadline is None or now_ms < deadline:
            return None
        return (f"no successful heartbeat for {now_ms - (deadline - self._session_timeout_ms)} ms "
                f"(session timeout {self._session_timeout_ms} ms): the coordinator has fenced this member")

    def forget_session(self) -> None:
        self._last_ok_sent_at = None
