"""The I/O around a member's state machine: heartbeats, nudges, commits — shared by every kind of member.

`Session` runs two daemon threads: one sends the heartbeats the state machine asks for, the other
listens to the coordinator's nudge stream so that a hand-off takes a round trip instead of a heartbeat
interval. The actions the machine produces are queued; the owner — the `Consumer`'s poll loop, the
PySpark source at a micro-batch boundary, a streams application between batches — takes them when it
is safe to act, and reports back to the machine. Nothing here decides anything.

`Session` is generic over the machine: a consumer's `MemberStateMachine` (`regroup.client.membership`)
or a streams member's `StreamsMemberStateMachine` (`regroup.streams.membership`); each subclass adds
how its kind of heartbeat travels and what its owner reports.

It also keeps the member's `Contact` (`regroup.protocol.failover`): it reports when the nudge stream
opens and ends and which heartbeats were answered with what grace, heartbeats when the contact rule
asks for one, and answers `cut_off()` — whether the owner must stop processing because the
coordinator may have given its work away after its connection broke or after a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

from regroup.client.errors import CommitFailedError, ConsumerError, OffsetFetchError
from regroup.protocol.errors import ErrorCode
from regroup.protocol.failover import Contact
from regroup.protocol.messages import Ack, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable

log = logging.getLogger("regroup.session")


#: What the coordinator answers to a commit or an offset fetch.
_Answer = TypeVar("_Answer", Ack, OffsetFetchResponse)


#: How long a commit or offset fetch refused with STALE_MEMBER_EPOCH waits for the heartbeat answer
#: that brings the member's newer epoch (the heartbeat request's own deadline is 10 s).
STALE_EPOCH_WAIT_S = 15.0


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Machine(Protocol):
    """What a `Session` needs of a member state machine (both kinds have it)."""

    @property
    def group_id(self) -> str: ...
    @property
    def member_id(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def state(self) -> Enum: ...
    def tick(self, now_ms: int) -> Sequence[Any]: ...
    def next_request(self, now_ms: int) -> Any: ...
    def on_response(self, resp: Any, now_ms: int) -> Sequence[Any]: ...
    def request_failed(self, now_ms: int) -> Sequence[Any]: ...
    def nudge(self, now_ms: int) -> None: ...
    def next_heartbeat_at(self) -> int | None: ...
    def session_deadline(self) -> int | None: ...
    def leave(self, now_ms: int, *, permanent: bool = False) -> Sequence[Any]: ...


M = TypeVar("M", bound=Machine)


def _finished(machine: Machine) -> bool:
    # Both kinds of state machine name their terminal states LEFT and FATAL.
    return machine.state.name in ("LEFT", "FATAL")


class Session(Generic[M]):
    """One member's session with the coordinator: join at construction, `leave()` to go."""

    def __init__(self, client: CoordinatorClient, machine: M) -> None:
        self.client = client
        self._machine = machine
        self._lock = threading.RLock()  # guards the state machine and the action queue
        self._wake = threading.Event()
        self._actions: deque[Any] = deque()
        self._changed = threading.Condition(self._lock)
        self._contact = Contact()
        #: How often the member went from a real epoch back to joining or leaving (lost its
        #: membership); a commit refused as stale is only sent again if this did not move meanwhile.
        self._resets = 0
        self._last_epoch = machine.epoch
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
    def state(self) -> Any:
        with self._lock:
            return self._machine.state

    def take_actions(self) -> list[Any]:
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

    def cut_off(self) -> bool:
        """Must the owner stop processing? True while the coordinator may have fenced this member
        because its connection broke, or because it restarted, and it has not heard from it since
        (failover rules 7 and 12)."""
        with self._lock:
            return self._contact.cut_off(now_ms())

    @property
    def failover_grace_ms(self) -> int:
        """The grace the coordinator last said applies to this member (0: none)."""
        with self._lock:
            return self._contact.grace_ms

    # ------------------------------------------------------------------ offsets
    def fetch_committed(self, shards: Collection[Shard]) -> dict[Shard, int]:
        """The group's committed offsets of ``shards`` (those with none are absent).

        Raises `OffsetFetchError` when they cannot be read; the caller retries later.
        """
        return {s: o for s, (o, _) in self.fetch_committed_with_metadata(shards).items()}

    def fetch_committed_with_metadata(self, shards: Collection[Shard]) -> dict[Shard, tuple[int, str]]:
        """The same, with each commit's metadata (a streams member keeps its changelog position there)."""
        if not shards:
            return {}
        wanted = tuple(sorted(shards))
        resp = self._with_fresh_epoch(
            lambda epoch: self.client.fetch_offsets(
                OffsetFetchRequest(self.group_id, self.member_id, epoch, wanted)),
            OffsetFetchError)
        return {s: (c.offset, c.metadata) for s, c in resp.offsets.items()}

    def commit(self, offsets: dict[Shard, int], metadata: str = "") -> None:
        """Commit ``offsets`` under the current member epoch; `CommitFailedError` if refused."""
        if not offsets:
            return
        self._with_fresh_epoch(
            lambda epoch: self.client.commit_offsets(
                OffsetCommitRequest(self.group_id, self.member_id, epoch, offsets, metadata)),
            CommitFailedError)

    def _with_fresh_epoch(self, send: Callable[[int], _Answer], refused: type[ConsumerError]) -> _Answer:
        """``send(current epoch)``; again after each STALE_MEMBER_EPOCH once the heartbeat answer
        carrying the member's newer epoch has arrived, for at most `STALE_EPOCH_WAIT_S`.

        STALE_MEMBER_EPOCH means the coordinator moved this member to a newer epoch in a heartbeat
        whose answer is still on its way (or was lost): a heartbeat is asked for at once, and the
        request is sent again at the epoch it brings — but only while the member stayed in the group
        (an answer that fenced it means its partitions may belong to another member now). Any other
        error, no newer epoch in time, or the coordinator out of reach, raises ``refused``. (A single
        retry after 50 ms was not enough on a loaded machine: the heartbeat answer took longer, the
        commit failed although the member owned every partition it committed.)
        """
        deadline = time.monotonic() + STALE_EPOCH_WAIT_S
        while True:
            with self._lock:
                epoch, resets = self._machine.epoch, self._resets
            try:
                answer = send(epoch)
            except CoordinatorUnavailable as e:
                raise refused(f"coordinator unavailable: {e}") from e
            if answer.error is ErrorCode.NONE:
                return answer
            stale = answer.error is ErrorCode.STALE_MEMBER_EPOCH
            if not stale or not self._newer_epoch(epoch, resets, deadline):
                raise refused(answer.message, answer.error)

    def _newer_epoch(self, sent: int, resets: int, deadline: float) -> bool:
        """Ask for a heartbeat now and wait (until ``deadline``) for the member's epoch to move past
        ``sent`` without the member having lost its membership since; whether it did."""
        with self._lock:
            if self._machine.epoch == sent:
                self._machine.nudge(now_ms())
        self._wake.set()

        def moved() -> bool:
            return self._resets != resets or self._machine.epoch != sent or _finished(self._machine)

        self.wait(moved, max(0.0, deadline - time.monotonic()))
        with self._lock:
            return self._resets == resets and self._machine.epoch > sent and not _finished(self._machine)

    # ------------------------------------------------------------------ leaving
    def leave(self, timeout: float, on_actions: Callable[[list[Any]], None] | None = None,
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
                if _finished(self._machine):
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
    def _exchange(self, req: Any) -> Any:
        """One heartbeat round trip, of the subclass's kind."""
        raise NotImplementedError

    def _enqueue(self, actions: Sequence[Any]) -> None:
        """Queue the machine's ``actions`` (called under the lock after every call into the machine)."""
        if actions:
            self._actions.extend(actions)
        epoch = self._machine.epoch
        if epoch <= 0 < self._last_epoch:  # fenced, session lost or left: a rejoin starts over
            self._resets += 1
        self._last_epoch = epoch
        self._changed.notify_all()

    def _heartbeat_loop(self) -> None:
        while not self._closed:
            now = now_ms()
            with self._lock:
                self._enqueue(self._machine.tick(now))
                due = self._contact.heartbeat_due_at()
                if due is not None and due <= now:  # failover rule 9: stay in contact
                    self._contact.asked(now)
                    self._machine.nudge(now)
                req = self._machine.next_request(now)
                if _finished(self._machine) and req is None:
                    return
            if req is not None:
                try:
                    resp = self._exchange(req)
                except CoordinatorUnavailable as e:
                    log.info("heartbeat failed: %s", e)
                    with self._lock:
                        self._enqueue(self._machine.request_failed(now_ms()))
                else:
                    with self._lock:
                        if resp.error is ErrorCode.NONE:  # sent at ``now``: rules 7, 12 count from there
                            self._contact.answered(now, resp.failover_grace_ms, resp.heartbeat_interval_ms)
                        self._enqueue(self._machine.on_response(resp, now_ms()))
                continue
            with self._lock:
                at = self._machine.next_heartbeat_at()
                deadline = self._machine.session_deadline()
                due = self._contact.heartbeat_due_at()
            wait_ms = min(x for x in (at, deadline, due, now + 1000) if x is not None) - now
            self._wake.wait(max(0, wait_ms) / 1000)
            self._wake.clear()

    def _watch_loop(self) -> None:
        backoff = 0.1
        while not self._closed:
            ended_by_coordinator = False
            try:
                self._stream = self.client.watch(self.group_id, self.member_id)
                self._contact_changed(opened=True)
                for _ in self._stream:
                    backoff = 0.1
                    with self._lock:
                        self._machine.nudge(now_ms())
                    self._wake.set()
                    if self._closed:
                        return
                ended_by_coordinator = self._stream.ended_by_coordinator
            except CoordinatorUnavailable:
                pass
            except Exception as e:  # the nudge stream is an optimisation: never let it kill us
                if self._closed:
                    return
                log.debug("nudge stream ended: %s", e)
            self._contact_changed(opened=False, ended_by_coordinator=ended_by_coordinator)
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def _contact_changed(self, *, opened: bool, ended_by_coordinator: bool = False) -> None:
        """The nudge stream opened or ended: the contact rule may want a heartbeat now, and the owner
        may be waiting on `cut_off()`."""
        with self._lock:
            if opened:
                self._contact.stream_opened(now_ms())
            else:
                self._contact.stream_closed(now_ms(), ended_by_coordinator=ended_by_coordinator)
            self._changed.notify_all()
        self._wake.set()
