"""The I/O around a `MemberStateMachine`: heartbeats, nudges, commits — shared by every kind of member.

`Membership` runs two daemon threads: one sends the heartbeats the state machine asks for, the other
listens to the coordinator's nudge stream so that a hand-off takes a round trip instead of a heartbeat
interval. The actions the machine produces (revoke, assign, lost, fatal) are queued; the owner — the
`Consumer`'s poll loop, or the PySpark source at a micro-batch boundary — takes them when it is safe to
act, and reports back with `revocation_done` / `assignment_done`. Nothing here decides anything:
`where_to_begin` does the I/O (committed offsets, the log's ends) for the member driver's rule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from regroup.client.errors import CommitFailedError, ConsumerError, OffsetFetchError
from regroup.log.base import PartitionedLog
from regroup.protocol.driver import OffsetReset, start_positions, topics_to_look_up
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import Action, MemberState, MemberStateMachine
from regroup.protocol.messages import Ack, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse
from regroup.protocol.shard import Shard, ShardSet
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable

log = logging.getLogger("regroup.membership")

_DONE = frozenset({MemberState.LEFT, MemberState.FATAL})

#: What the coordinator answers to a commit or an offset fetch.
_Answer = TypeVar("_Answer", Ack, OffsetFetchResponse)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Membership:
    """One member's session with the coordinator: join at construction, `leave()` to go."""

    def __init__(self, client: CoordinatorClient, machine: MemberStateMachine) -> None:
        self.client = client
        self._machine = machine
        self._lock = threading.RLock()  # guards the state machine and the action queue
        self._wake = threading.Event()
        self._actions: deque[Action] = deque()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._stream: Any = None  # the open nudge stream, cancelled on close
        self._heartbeater = threading.Thread(target=self._heartbeat_loop, name="regroup-heartbeat",
                                             daemon=True)
        self._watcher = threading.Thread(target=self._watch_loop, name="regroup-nudges", daemon=True)
        self._heartbeater.start()
        self._watcher.start()

    # ------------------------------------------------------------------ what the owner sees
    @property
    def group_id(self) -> str:
        return self._machine.group_id

    @property
    def member_id(self) -> str:
        return self._machine.member_id

    @property
    def epoch(self) -> int:
        with self._lock:
            return self._machine.epoch

    @property
    def state(self) -> MemberState:
        with self._lock:
            return self._machine.state

    def take_actions(self) -> list[Action]:
        """Every action queued since the last call, oldest first."""
        with self._lock:
            out = list(self._actions)
            self._actions.clear()
            return out

    def wait(self, until: Callable[[], bool], timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until ``until()`` holds; it is evaluated under the lock
        whenever the queue or the machine changed."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not until():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def has_actions(self) -> bool:
        with self._lock:
            return bool(self._actions)

    # ------------------------------------------------------------------ what the owner reports
    def revocation_done(self, shards: ShardSet) -> None:
        with self._lock:
            self._enqueue(self._machine.revocation_done(shards, now_ms()))
        self._wake.set()

    def assignment_done(self, shards: ShardSet) -> None:
        with self._lock:
            self._enqueue(self._machine.assignment_done(shards, now_ms()))
        self._wake.set()

    # ------------------------------------------------------------------ offsets
    def fetch_committed(self, shards: Collection[Shard]) -> dict[Shard, int]:
        """The group's committed offsets of ``shards`` (those with none are absent).

        Raises `OffsetFetchError` when they cannot be read; the caller retries later.
        """
        if not shards:
            return {}
        wanted = tuple(sorted(shards))
        resp = self._with_fresh_epoch(
            lambda epoch: self.client.fetch_offsets(
                OffsetFetchRequest(self.group_id, self.member_id, epoch, wanted)),
            OffsetFetchError)
        return {s: c.offset for s, c in resp.offsets.items()}

    def where_to_begin(self, shards: Collection[Shard], reset: OffsetReset,
                       log: PartitionedLog) -> tuple[dict[Shard, int], dict[Shard, int]]:
        """The committed offsets of newly assigned ``shards`` and where each begins (the member
        driver's rule 3), asking ``log`` where it ends only when the reset policy needs it.

        Raises `OffsetFetchError` when the committed offsets cannot be read (rule 4).
        """
        committed = self.fetch_committed(shards)
        ends: dict[Shard, int] = {}
        for topic in topics_to_look_up(shards, committed, reset):
            ends.update((Shard(topic, p), end) for p, end in log.end_offsets(topic).items())
        return committed, start_positions(shards, committed, reset, ends)

    def commit(self, offsets: dict[Shard, int]) -> None:
        """Commit ``offsets`` under the current member epoch; `CommitFailedError` if refused."""
        if not offsets:
            return
        self._with_fresh_epoch(
            lambda epoch: self.client.commit_offsets(
                OffsetCommitRequest(self.group_id, self.member_id, epoch, offsets)),
            CommitFailedError)

    def _with_fresh_epoch(self, send: Callable[[int], _Answer], refused: type[ConsumerError]) -> _Answer:
        """``send(current epoch)``; once more after STALE_MEMBER_EPOCH, which only means that the
        heartbeat response carrying the new epoch has not arrived yet. Any other error, or the
        coordinator out of reach, raises ``refused``."""
        for attempt in range(2):
            try:
                answer = send(self.epoch)
            except CoordinatorUnavailable as e:
                raise refused(f"coordinator unavailable: {e}") from e
            if answer.error is ErrorCode.NONE:
                return answer
            if answer.error is ErrorCode.STALE_MEMBER_EPOCH and attempt == 0:
                time.sleep(0.05)  # a new epoch is on its way in a heartbeat response
                continue
            raise refused(answer.message, answer.error)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ leaving
    def leave(self, timeout: float, on_actions: Callable[[list[Action]], None] | None = None,
              *, permanent: bool = False) -> bool:
        """Give the partitions up and leave (a static member leaves temporarily unless ``permanent``).

        ``on_actions`` runs the actions that arrive meanwhile (e.g. commit-then-release). Returns True
        once the coordinator confirmed the leave, False after ``timeout`` seconds.
        """
        with self._lock:
            self._enqueue(self._machine.leave(now_ms(), permanent=permanent))
        self._wake.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if on_actions is not None:
                on_actions(self.take_actions())
            with self._lock:
                if self._machine.state in _DONE:
                    return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        """Stop the threads (after `leave`, or to vanish like a crashed process)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._stream is not None:
            self._stream.cancel()
        self.client.close()
        self._heartbeater.join(timeout=2)

    # ------------------------------------------------------------------ background threads
    def _enqueue(self, actions: list[Action]) -> None:
        if actions:
            self._actions.extend(actions)
        self._changed.notify_all()

    def _heartbeat_loop(self) -> None:
        while not self._closed:
            now = now_ms()
            with self._lock:
                self._enqueue(self._machine.tick(now))
                req = self._machine.next_request(now)
                if self._machine.state in _DONE and req is None:
                    return
            if req is not None:
                try:
                    resp = self.client.heartbeat(req)
                except CoordinatorUnavailable as e:
                    log.info("heartbeat failed: %s", e)
                    with self._lock:
                        self._enqueue(self._machine.request_failed(now_ms()))
                else:
                    with self._lock:
                        self._enqueue(self._machine.on_response(resp, now_ms()))
                continue
            with self._lock:
                at = self._machine.next_heartbeat_at()
                deadline = self._machine.session_deadline()
            wait_ms = min(x for x in (at, deadline, now + 1000) if x is not None) - now
            self._wake.wait(max(0, wait_ms) / 1000)
            self._wake.clear()

    def _watch_loop(self) -> None:
        backoff = 0.1
        while not self._closed:
            try:
                self._stream = self.client.watch(self.group_id, self.member_id)
                for _ in self._stream:
                    backoff = 0.1
                    with self._lock:
                        self._machine.nudge(now_ms())
                    self._wake.set()
                    if self._closed:
                        return
            except CoordinatorUnavailable:
                pass
            except Exception as e:  # the nudge stream is an optimisation: never let it kill us
                if self._closed:
                    return
                log.debug("nudge stream ended: %s", e)
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
