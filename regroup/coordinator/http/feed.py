"""The dashboard's live feed: each group's timeline of member steps, and coalesced change events.

Rules:
1. The service hands over every step that wrote records (`Feed.on_step`), nothing else: heartbeats
   that change nothing never reach the feed. What it does per step is bounded by the step's records
   and builds no JSON; events for browsers are built only when some are connected, at most once per
   `min_interval_s` for all groups together (so at most ~4 per second per group).
2. The timeline is derived from what the core reported, never guessed: joined/left from the causes
   of a group epoch bump, fenced from the step's fences, revoking/released/granted from each
   member's current-assignment record compared with the previous one kept here. A streams group's
   timeline has the first three only (its epoch history, with causes such as a warm-up caught up,
   comes from the service's history like a consumer group's): task hand-offs are not followed here.
3. Hand-off durations: a "released" step measures from the revocation request of its partitions to
   their release; a "granted" step from the release by the previous owner (or its fence or leave) to
   the grant. A step that moves several partitions at once reports the slowest of them.
4. Everything here is in memory and bounded per group: a restarted coordinator starts with empty
   timelines (seeded with who holds what, so nothing reads as newly granted).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from regroup.coordinator.runtime import Effects
from regroup.protocol.causes import (
    GroupCreated,
    GroupDeleted,
    GroupEpochBumped,
    MemberJoined,
    MemberLeft,
    StaticTakeOver,
)
from regroup.protocol.describe import GroupDescription
from regroup.protocol.records import CurrentAssignment, CurrentAssignmentRecord
from regroup.protocol.shard import EMPTY, Shard, ShardSet

#: Steps kept per group.
DEFAULT_TIMELINE_LIMIT = 500
#: Events queued for one browser before it is dropped (its EventSource reconnects and re-fetches).
CLIENT_QUEUE_LIMIT = 256


@dataclass(frozen=True, slots=True)
class TimelineStep:
    at_unix_ms: int
    member_id: str
    #: joined, left, fenced, revoking, released or granted.
    step: str
    partitions: tuple[str, ...]
    epoch: int
    handoff_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at_unix_ms": self.at_unix_ms, "member_id": self.member_id, "step": self.step,
                "partitions": list(self.partitions), "epoch": self.epoch, "handoff_ms": self.handoff_ms}


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One server-sent event: ``group`` (data: the group's epochs) or ``groups`` (the list changed)."""

    kind: str
    data: dict[str, Any]


#: Put in a client's queue when the feed closes it.
CLOSED = FeedEvent("closed", {})


@dataclass
class _Trail:
    steps: deque[TimelineStep]
    #: Per member: (assigned, pending revocation), as its last record said.
    held: dict[str, tuple[ShardSet, ShardSet]] = field(default_factory=dict)
    #: When each partition's revocation was requested, until it is released.
    revoked_at: dict[Shard, int] = field(default_factory=dict)
    #: When each partition was given up, until someone is granted it.
    released_at: dict[Shard, int] = field(default_factory=dict)


class FeedClient:
    """One connected browser: the events waiting to be sent to it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[FeedEvent] = asyncio.Queue(CLIENT_QUEUE_LIMIT + 1)

    def offer(self, event: FeedEvent) -> bool:
        """Queue an event; False (and the client closed) when it is too far behind."""
        if self.queue.qsize() >= CLIENT_QUEUE_LIMIT:
            self.close()
            return False
        self.queue.put_nowait(event)
        return True

    def close(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(CLOSED)


def _names(shards: Iterable[Shard]) -> tuple[str, ...]:
    return tuple(sorted(map(str, shards)))


class Feed:
    def __init__(
        self,
        epochs_of: Callable[[str], tuple[int, int] | None],
        *,
        unix_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        monotonic: Callable[[], float] = time.monotonic,
        schedule: Callable[[float, Callable[[], None]], object] | None = None,
        limit: int = DEFAULT_TIMELINE_LIMIT,
        min_interval_s: float = 0.25,
    ) -> None:
        #: (group epoch, target epoch) of a group, None when it does not exist.
        self.epochs_of = epochs_of
        self.unix_ms = unix_ms
        self.monotonic = monotonic
        self._schedule = schedule
        self.limit = limit
        self.min_interval_s = min_interval_s
        self.clients: set[FeedClient] = set()
        self._trails: dict[str, _Trail] = {}
        self._dirty: set[str] = set()
        self._groups_changed = False
        self._flush_pending = False
        self._last_flush = float("-inf")

    # ------------------------------------------------------------------ what the service tells
    def seed(self, groups: Iterable[GroupDescription]) -> None:
        """Who holds what at start-up, so that the first records after a restart are not news."""
        for d in groups:
            trail = self._trail(d.group_id)
            for m in d.members:
                trail.held[m.member_id] = (m.assigned, m.pending_revocation)

    def on_step(self, eff: Effects[Any]) -> None:
        """A step that wrote records (rule 1)."""
        now = self.unix_ms()
        watched = bool(self.clients)
        deleted: set[str] = set()
        for e in eff.epoch_events:
            if isinstance(e, GroupCreated | GroupDeleted):
                self._groups_changed = True
                if isinstance(e, GroupDeleted):
                    deleted.add(e.group_id)
                    self._trails.pop(e.group_id, None)
                    self._dirty.discard(e.group_id)
            elif isinstance(e, GroupEpochBumped):
                self._bumped(e, now)
        for f in eff.fences:
            trail = self._trail(f.group_id)
            held = trail.held.get(f.member_id, (EMPTY, EMPTY))
            self._add(trail, TimelineStep(now, f.member_id, "fenced", _names(held[0] | held[1]),
                                          self._epoch(f.group_id)))
        for r in eff.records:
            if isinstance(r, CurrentAssignmentRecord) and r.group_id not in deleted:
                self._assignment(self._trail(r.group_id), r.member_id, r.current, now)
            if watched:
                gid = getattr(r, "group_id", None)
                if isinstance(gid, str):
                    self._dirty.add(gid)
        if watched and (self._dirty or self._groups_changed):
            self._request_flush()

    # ------------------------------------------------------------------ what the dashboard reads
    def timeline(self, group_id: str) -> list[dict[str, Any]]:
        """The group's recent steps, oldest first, as the API shows them."""
        trail = self._trails.get(group_id)
        return [s.to_json() for s in trail.steps] if trail is not None else []

    def steps(self, group_id: str) -> tuple[TimelineStep, ...]:
        trail = self._trails.get(group_id)
        return tuple(trail.steps) if trail is not None else ()

    def subscribe(self) -> FeedClient:
        client = FeedClient()
        self.clients.add(client)
        return client

    def unsubscribe(self, client: FeedClient) -> None:
        self.clients.discard(client)

    def close(self) -> None:
        """At shutdown: end every event stream."""
        for c in list(self.clients):
            c.close()
        self.clients.clear()

    def flush(self) -> None:
        """Send one event per changed group (and one ``groups`` if groups came or went)."""
        self._flush_pending = False
        self._last_flush = self.monotonic()
        events = []
        if self._groups_changed:
            events.append(FeedEvent("groups", {}))
        now = self.unix_ms()
        for gid in sorted(self._dirty):
            epochs = self.epochs_of(gid)
            if epochs is not None:
                events.append(FeedEvent("group", {"group": gid, "epoch": epochs[0], "target_epoch": epochs[1],
                                                  "at_unix_ms": now}))
        self._dirty.clear()
        self._groups_changed = False
        for client in list(self.clients):
            for ev in events:
                if not client.offer(ev):
                    self.clients.discard(client)
                    break

    # ------------------------------------------------------------------ inside
    def _request_flush(self) -> None:
        if self._flush_pending:
            return
        self._flush_pending = True
        delay = max(0.0, self._last_flush + self.min_interval_s - self.monotonic())
        schedule = self._schedule or (lambda d, fn: asyncio.get_running_loop().call_later(d, fn))
        schedule(delay, self.flush)

    def _trail(self, group_id: str) -> _Trail:
        trail = self._trails.get(group_id)
        if trail is None:
            trail = self._trails[group_id] = _Trail(deque(maxlen=self.limit))
        return trail

    def _epoch(self, group_id: str) -> int:
        epochs = self.epochs_of(group_id)
        return epochs[0] if epochs is not None else -1

    @staticmethod
    def _add(trail: _Trail, step: TimelineStep) -> None:
        trail.steps.append(step)

    def _bumped(self, e: GroupEpochBumped, now: int) -> None:
        trail = self._trail(e.group_id)
        for c in e.causes:
            if isinstance(c, MemberJoined):
                self._add(trail, TimelineStep(now, c.member_id, "joined", (), e.epoch))
            elif isinstance(c, MemberLeft):
                held = trail.held.get(c.member_id, (EMPTY, EMPTY))
                self._add(trail, TimelineStep(now, c.member_id, "left", _names(held[0] | held[1]), e.epoch))
            elif isinstance(c, StaticTakeOver):
                held = trail.held.get(c.old_member_id, (EMPTY, EMPTY))
                self._add(trail, TimelineStep(now, c.old_member_id, "left", _names(held[0] | held[1]),
                                              e.epoch))
                self._add(trail, TimelineStep(now, c.new_member_id, "joined", (), e.epoch))

    def _assignment(self, trail: _Trail, member_id: str, cur: CurrentAssignment | None, now: int) -> None:
        prev_assigned, prev_pending = trail.held.get(member_id, (EMPTY, EMPTY))
        if cur is None:  # left or fenced (its step is already in the timeline): what it held is free
            trail.held.pop(member_id, None)
            for s in prev_assigned | prev_pending:
                trail.revoked_at.pop(s, None)
                trail.released_at[s] = now
            return
        assigned, pending = cur.assigned, cur.pending_revocation
        trail.held[member_id] = (assigned, pending)
        revoking = pending - prev_pending
        released = (prev_assigned | prev_pending) - (assigned | pending)
        granted = assigned - prev_assigned - prev_pending
        if revoking:
            for s in revoking:
                trail.revoked_at[s] = now
            self._add(trail, TimelineStep(now, member_id, "revoking", _names(revoking), cur.epoch))
        if released:
            waited = [now - t for s in released if (t := trail.revoked_at.pop(s, None)) is not None]
            for s in released:
                trail.released_at[s] = now
            self._add(trail, TimelineStep(now, member_id, "released", _names(released), cur.epoch,
                                          max(waited) if waited else None))
        if granted:
            waited = [now - t for s in granted if (t := trail.released_at.pop(s, None)) is not None]
            self._add(trail, TimelineStep(now, member_id, "granted", _names(granted), cur.epoch,
                                          max(waited) if waited else None))
