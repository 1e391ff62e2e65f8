"""The discrete-event engine: virtual time in milliseconds, one event queue, one event log.

Everything the simulator does happens in an event run by `Engine.run`. Events are ordered by
``(time, seq)`` where ``seq`` is the order in which they were scheduled, so two runs that schedule
the same events in the same order run them in the same order: with one seeded ``random.Random``
passed around and no iteration over unordered collections of strings, a seed reproduces a run event
for event. The engine keeps a running SHA-256 of every executed event's label and of every trace
line, so "same run" can be checked by comparing digests, and (when asked) the full log to replay.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable

Action = Callable[[], None]


class LivelockError(RuntimeError):
    """Too many events at one instant: something reschedules itself without letting time pass."""


class Engine:
    """A virtual clock and an event queue. Times are integers (ms)."""

    def __init__(self, *, record: bool = False, verbose: bool = True,
                 max_events_per_instant: int = 200_000) -> None:
        self.now = 0
        #: Detailed trace lines are worth building (False in large benchmark runs).
        self.verbose = verbose
        self.events = 0
        self._queue: list[tuple[int, int, str, Action]] = []
        self._seq = 0
        self._record = record
        self._log: list[str] = []
        self._hash = hashlib.sha256()
        self._instant = -1
        self._at_instant = 0
        self._max_per_instant = max_events_per_instant
        self._stopped = False

    # ---------------------------------------------------------------- scheduling
    def at(self, time: int, label: str, action: Action) -> None:
        """Run ``action`` at virtual ``time`` (not before now); a non-empty ``label`` is logged."""
        if time < self.now:
            time = self.now
        self._seq += 1
        heapq.heappush(self._queue, (time, self._seq, label, action))

    def after(self, delay: int, label: str, action: Action) -> None:
        self.at(self.now + max(0, delay), label, action)

    # ---------------------------------------------------------------- the log
    def trace(self, line: str) -> None:
        """Add a line to the event log (and to the digest) at the current time."""
        entry = f"{self.now:>10} | {line}"
        self._hash.update(entry.encode())
        self._hash.update(b"\n")
        if self._record:
            self._log.append(entry)

    @property
    def log(self) -> list[str]:
        """Every executed event and trace line, in order (empty unless ``record=True``)."""
        return self._log

    def digest(self) -> str:
        """SHA-256 of the run so far: equal digests mean the same events in the same order."""
        return self._hash.hexdigest()

    # ---------------------------------------------------------------- running
    def stop(self) -> None:
        """Make `run` return after the current event."""
        self._stopped = True

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: int, watch: Action | None = None) -> None:
        """Run every event due at or before ``until``, then set the clock to ``until``.

        ``watch`` is called after each event (for checks that must hold at every event).
        """
        self._stopped = False
        queue = self._queue
        while queue and queue[0][0] <= until and not self._stopped:
            time, _, label, action = heapq.heappop(queue)
            if time != self._instant:
                self._instant, self._at_instant = time, 0
            self._at_instant += 1
            if self._at_instant > self._max_per_instant:
                raise LivelockError(f"more than {self._max_per_instant} events at t={time} ms "
                                    f"(last: {label!r}): a livelock")
            self.now = time
            self.events += 1
            if label:
                self.trace(label)
            action()
            if watch is not None:
                watch()
        if not self._stopped:
            self.now = max(self.now, until)
