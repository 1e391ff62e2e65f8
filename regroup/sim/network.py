"""The simulated network between members and the coordinator: latency and faults.

Each message draws a latency from a shifted log-normal distribution (a floor plus a long tail). While
faults are on (until the scenario's quiet time) a message may also be:

* dropped — a request (the member's call times out and it calls ``request_failed``), a response (the
  coordinator applied the request but the member never hears of it), or a nudge;
* duplicated — a request delivered twice in a row: the coordinator applies it twice and both
  answers travel back on the call's connection, in order (the member takes the first, as correlation
  ids do; if one is lost, the connection is, and so are the answers after it);
* held up — an extra delay of up to ``delay_max_ms`` for a response or a nudge (it reorders them
  behind later messages) and, only with ``stale_requests``, for a request too: such a request may
  reach the coordinator after its sender timed out and moved on (a *stale* request);
* cut off — a partition between one member and the coordinator drops everything in both directions
  for a while.

A server that is down answers nothing: its handler returns None.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from regroup.sim.engine import Engine

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Latency distribution and fault probabilities (per message)."""

    latency_min_ms: int = 1
    #: Median of the log-normal part added to the floor.
    latency_median_ms: float = 2.0
    latency_sigma: float = 0.6
    latency_max_ms: int = 1_000
    drop_request: float = 0.0
    drop_response: float = 0.0
    duplicate_request: float = 0.0
    delay_probability: float = 0.0
    delay_max_ms: int = 0
    drop_nudge: float = 0.0
    #: Hold-ups apply to requests too, so a request can arrive after its sender gave up on it.
    stale_requests: bool = False


class _Call:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


class Network:
    """Delivers requests, responses and one-way messages between named endpoints and a server."""

    def __init__(self, engine: Engine, rng: random.Random, config: NetworkConfig,
                 faults_until: int | None = None) -> None:
        self.engine = engine
        self.rng = rng
        self.config = config
        #: Faults stop at this time (the scenario's quiet time); None = never.
        self.faults_until = faults_until
        self._cuts: dict[str, list[tuple[int, int]]] = {}
        self._mu = math.log(max(config.latency_median_ms, 0.001))
        self.messages = 0
        self.lost = 0

    # ---------------------------------------------------------------- faults
    def faulty(self) -> bool:
        return self.faults_until is None or self.engine.now < self.faults_until

    def cut(self, endpoint: str, start: int, end: int) -> None:
        """Partition ``endpoint`` from the coordinator during ``[start, end)``."""
        self._cuts.setdefault(endpoint, []).append((start, end))

    def is_cut(self, endpoint: str, t: int) -> bool:
        spans = self._cuts.get(endpoint)
        return spans is not None and any(s <= t < e for s, e in spans)

    def latency(self, request: bool = False) -> int:
        c = self.config
        tail = self.rng.lognormvariate(self._mu, c.latency_sigma) if c.latency_sigma > 0 else \
            c.latency_median_ms
        ms = c.latency_min_ms + int(tail)
        may_hold = not request or c.stale_requests
        if may_hold and self.faulty() and c.delay_probability and self.rng.random() < c.delay_probability:
            ms += self.rng.randint(0, c.delay_max_ms)
            return ms
        return min(ms, c.latency_max_ms)

    def _chance(self, p: float) -> bool:
        return p > 0.0 and self.faulty() and self.rng.random() < p

    def _lose(self, what: str) -> None:
        self.lost += 1
        if self.engine.verbose:
            self.engine.trace(f"net: lost {what}")

    # ---------------------------------------------------------------- messages
    def send(self, endpoint: str, label: str, deliver: Callable[[], None], *, nudge: bool = False) -> None:
        """A one-way message between ``endpoint`` and the coordinator (either direction)."""
        self.messages += 1
        now = self.engine.now
        if self.is_cut(endpoint, now) or self._chance(self.config.drop_nudge if nudge else 0.0):
            self._lose(label)
            return

        def arrive() -> None:
            if self.is_cut(endpoint, self.engine.now):
                self._lose(label)
                return
            deliver()

        self.engine.after(self.latency(), label, arrive)

    def call(self, endpoint: str, label: str, handler: Callable[[], R | None],
             on_reply: Callable[[R], None], on_timeout: Callable[[], None], timeout_ms: int) -> None:
        """A request from ``endpoint`` answered by ``handler`` on the server.

        Exactly one of ``on_reply`` (the first answer to arrive) or ``on_timeout`` is called.
        """
        call = _Call()

        def expire() -> None:
            if not call.done:
                call.done = True
                self.engine.trace(f"net: timeout {label}")
                on_timeout()

        self.engine.after(timeout_ms, "", expire)
        self.messages += 1
        if self.is_cut(endpoint, self.engine.now) or self._chance(self.config.drop_request):
            self._lose(label)
            return
        copies = 2 if self._chance(self.config.duplicate_request) else 1

        def at_server() -> None:
            if self.is_cut(endpoint, self.engine.now):
                self._lose(label)
                return
            after = 0
            for copy in range(copies):
                if copy:
                    self.engine.trace(f"net: {label} delivered again")
                if call.done:
                    self.engine.trace(f"net: stale {label} delivered")
                # Answers to one call share a connection: they arrive in order, the first one wins,
                # and once one is lost the connection is gone and so are the ones after it.
                after = self._answer(endpoint, label, handler(), on_reply, call, after)
                if after < 0:
                    break

        self.engine.after(self.latency(request=True), label, at_server)

    def _answer(self, endpoint: str, label: str, response: R | None, on_reply: Callable[[R], None],
                call: _Call, not_before: int) -> int:
        """Send an answer back; returns its delay, or -1 if it was lost."""
        if response is None:
            self._lose(label + " (server down)")
            return -1
        self.messages += 1
        if self._chance(self.config.drop_response):
            self._lose("reply to " + label)
            return -1
        resp: R = response

        def at_client() -> None:
            if self.is_cut(endpoint, self.engine.now):
                self._lose("reply to " + label)
                return
            if not call.done:
                call.done = True
                on_reply(resp)

        delay = max(self.latency(), not_before + 1)
        self.engine.after(delay, "reply " + label, at_client)
        return delay
