"""A compact model of Kafka's classic consumer (``ConsumerCoordinator``), eager or cooperative.

* A background thread heartbeats every ``heartbeat.interval.ms``; REBALANCE_IN_PROGRESS (or an
  unknown member / stale generation) means "rejoin".
* Rejoining happens inside ``poll()``, i.e. at the consumer's next poll boundary — a member busy with
  a long batch keeps the whole group waiting at the barrier.
* **Eager**: before JoinGroup it commits and revokes *everything* it owns, and processes nothing
  until SyncGroup hands out the new assignment.
* **Cooperative** (KIP-429): JoinGroup carries the owned partitions and processing goes on; the
  leader's assignment withholds partitions that still have another owner; a member that has to give
  some up revokes them at its next poll and rejoins at once, so a second round hands them over.
* Only the leader watches metadata (``ConsumerCoordinator.rejoinNeededOrPending``): partitions added
  to a topic are noticed at the leader's next metadata refresh (``metadata.max.age.ms``).
* Assignments are computed by the leader with the same uniform, sticky assignor as the new protocol
  (Kafka's StickyAssignor / CooperativeStickyAssignor play that role), so partitions moved compare
  like for like.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from regroup.protocol.assignors import UniformAssignor
from regroup.protocol.assignors.base import GroupSpec, MemberSpec
from regroup.protocol.shard import EMPTY, Shard, ShardSet, format_shards
from regroup.protocol.topics import TopicMetadata
from regroup.sim.classic_coordinator import (
    ClassicConfig,
    ClassicCoordinator,
    JoinMeta,
    JoinResponse,
    SyncResponse,
)
from regroup.sim.engine import Engine
from regroup.sim.network import Network
from regroup.sim.observers import ShardObserver
from regroup.sim.workload import Cadence, Processor, ProducedLog


@dataclass
class ClassicWorld:
    engine: Engine
    rng: random.Random
    network: Network
    coordinator: ClassicCoordinator
    log: ProducedLog
    observer: ShardObserver
    config: ClassicConfig
    topics: tuple[str, ...]


class ClassicMember:
    """One classic consumer process (one slot) across restarts."""

    def __init__(self, slot: str, static: bool, cadence: Cadence, world: ClassicWorld) -> None:
        self.slot = slot
        self.static = static
        self.cadence = cadence
        self.w = world
        self.incarnation = 0
        self.alive = False
        self.owner = slot
        self.member_id: str | None = None
        self.generation = -1
        #: idle (needs to join), joining, syncing, stable
        self.phase = "idle"
        self.owned: ShardSet = EMPTY
        self.previous: ShardSet = EMPTY
        self.processor: Processor | None = None
        self._rejoin_scheduled = False
        self._metadata: TopicMetadata = world.log.metadata()
        self._assignment_snapshot: TopicMetadata | None = None
        self._applying = False

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self.alive:
            return
        self.incarnation += 1
        self.owner = f"{self.slot}#{self.incarnation}"
        self.alive = True
        self.member_id = None
        self.generation = -1
        self.phase = "idle"
        self.owned = EMPTY
        self._assignment_snapshot = None
        self._rejoin_scheduled = False
        self._applying = False
        self._metadata = self.w.log.metadata()
        self.processor = Processor(self.owner, self.w.log, self.cadence, self.w.observer)
        inc = self.incarnation
        self.w.engine.trace(f"{self.owner}: START (classic)")
        self._request_rejoin()
        hb = self.w.config.heartbeat_interval_ms
        self.w.engine.after(self.w.rng.randint(1, hb), "", lambda: self._heartbeat(inc))
        age = self.w.config.metadata_max_age_ms
        self.w.engine.after(self.w.rng.randint(1, age), "", lambda: self._refresh_metadata(inc))
        self._schedule_autocommit(inc)

    def crash(self) -> None:
        if not self.alive or self.processor is None:
            return
        self.processor.drop_all(self.w.engine.now)
        self.w.engine.trace(f"{self.owner}: CRASH")
        self.alive = False

    def shutdown(self, restart_after: int | None) -> None:
        """close(): commit and revoke everything, LeaveGroup unless static, stop."""
        if not self.alive or self.processor is None:
            return
        inc = self.incarnation
        self.w.engine.trace(f"{self.owner}: SHUTDOWN")

        def left() -> None:
            if not self._live(inc):
                return
            if not self.static and self.member_id is not None:
                mid = self.member_id
                self.w.network.send(self.slot, "LeaveGroup", lambda: self.w.coordinator.leave(mid))
            self.alive = False
            self.w.engine.trace(f"{self.owner}: STOPPED")
            if restart_after is not None:
                self.w.engine.after(restart_after, f"{self.slot}: restart", self.start)

        self._revoke(self.owned, left)

    def stall(self, duration: int) -> None:
        start, end = self.cadence.stall(self.w.engine.now, duration)
        self.w.engine.trace(f"{self.slot}: STALL {start}..{end}")

    def settled(self, assignment: ShardSet | None) -> bool:
        p = self.processor
        return (self.alive and p is not None and self.phase == "stable" and not self._rejoin_scheduled
                and not self._applying and not p.busy() and assignment == self.owned
                and p.active() == self.owned)

    def _live(self, inc: int) -> bool:
        return self.alive and inc == self.incarnation

    # ---------------------------------------------------------------- background thread
    def _heartbeat(self, inc: int) -> None:
        if not self._live(inc):
            return
        self.w.engine.after(self.w.config.heartbeat_interval_ms, "", lambda: self._heartbeat(inc))
        mid, gen = self.member_id, self.generation
        if mid is None or self.phase == "joining":
            return
        coord = self.w.coordinator

        def at_coordinator() -> None:
            error = coord.heartbeat(mid, gen)
            self.w.network.send(self.slot, "", lambda: self._on_heartbeat(inc, mid, error))

        self.w.network.send(self.slot, "", at_coordinator)

    def _on_heartbeat(self, inc: int, mid: str, error: str) -> None:
        if not self._live(inc) or mid != self.member_id or error == "NONE":
            return
        if error == "UNKNOWN_MEMBER_ID":
            self._lose_membership()
        if self.phase == "stable":
            self._request_rejoin()

    def _refresh_metadata(self, inc: int) -> None:
        if not self._live(inc):
            return
        self.w.engine.after(self.w.config.metadata_max_age_ms, "", lambda: self._refresh_metadata(inc))
        self._metadata = self.w.log.metadata()
        snapshot = self._assignment_snapshot
        if snapshot is not None and self._subscribed(snapshot) != self._subscribed(self._metadata):
            self.w.engine.trace(f"{self.owner}: leader sees new metadata, rejoins")
            self._assignment_snapshot = None
            self._request_rejoin()

    # ---------------------------------------------------------------- the poll loop
    def _request_rejoin(self) -> None:
        if self._rejoin_scheduled:
            return
        self._rejoin_scheduled = True
        inc = self.incarnation
        at = self.cadence.next_at_or_after(self.w.engine.now)
        self.w.engine.at(at, f"{self.slot}: poll (rejoin)", lambda: self._rejoin(inc))

    def _rejoin(self, inc: int) -> None:
        if not self._live(inc):
            return
        self._rejoin_scheduled = False
        if self.phase in ("joining", "syncing") or self._applying:
            return
        if self.w.config.cooperative:
            self._send_join(inc)
        else:  # eager: commit and give up everything before joining
            self._revoke(self.owned, lambda: self._send_join(inc))

    def _send_join(self, inc: int) -> None:
        if not self._live(inc):
            return
        self.phase = "joining"
        coop = self.w.config.cooperative
        meta = JoinMeta(self.owned if coop else EMPTY, self.previous)
        mid, instance = self.member_id, self.slot if self.static else None
        coord = self.w.coordinator

        def at_coordinator() -> None:
            coord.join(mid, instance, meta, lambda resp: self.w.network.send(
                self.slot, f"JoinGroup reply {self.owner}", lambda: self._on_join(inc, resp)))

        self.w.network.send(self.slot, f"JoinGroup {self.owner}", at_coordinator)

    def _on_join(self, inc: int, resp: JoinResponse) -> None:
        if not self._live(inc):
            return
        if resp.error == "MEMBER_ID_REQUIRED":
            self.member_id = resp.member_id
            self._send_join(inc)
            return
        if resp.error != "NONE":
            self._lose_membership()
            self.phase = "idle"
            self._request_rejoin()
            return
        self.member_id, self.generation = resp.member_id, resp.generation
        self.phase = "syncing"
        assignment = None
        if resp.leader == resp.member_id and not resp.skip_assignment:
            assignment = self._assign(resp.members)
            self._assignment_snapshot = self._metadata
        elif resp.leader == resp.member_id:
            self._assignment_snapshot = self._metadata
        mid, gen, coord = resp.member_id, resp.generation, self.w.coordinator

        def at_coordinator() -> None:
            coord.sync(mid, gen, assignment, lambda r: self.w.network.send(
                self.slot, f"SyncGroup reply {self.owner}", lambda: self._on_sync(inc, r)))

        self.w.network.send(self.slot, f"SyncGroup {self.owner}", at_coordinator)

    def _on_sync(self, inc: int, resp: SyncResponse) -> None:
        if not self._live(inc):
            return
        if resp.error != "NONE":
            if resp.error == "UNKNOWN_MEMBER_ID":
                self._lose_membership()
            self.phase = "idle"
            self._request_rejoin()
            return
        self.phase = "stable"
        if self.w.config.cooperative:
            # onJoinComplete runs in the application thread: at the next poll boundary.
            self._applying = True
            at = self.cadence.next_at_or_after(self.w.engine.now)
            gen = self.generation
            self.w.engine.at(at, f"{self.slot}: poll (assignment)",
                             lambda: self._apply(inc, gen, resp.assignment))
        else:
            self._apply(inc, self.generation, resp.assignment)  # eager: blocked in poll until now

    def _apply(self, inc: int, generation: int, assigned: ShardSet) -> None:
        if not self._live(inc):
            return
        if generation != self.generation:
            self._applying = False
            return
        revoked, added = self.owned - assigned, assigned - self.owned
        self.previous = assigned
        if self.w.engine.verbose:
            self.w.engine.trace(f"{self.owner}: assignment gen {generation}: +{format_shards(added)} "
                                f"-{format_shards(revoked)}")

        def then() -> None:
            if not self._live(inc):
                return
            self._applying = False
            self._take(inc, added)
            if revoked and self.w.config.cooperative:
                self._send_join(inc)  # rejoin within the same poll: the second round

        self._revoke(revoked, then)

    # ---------------------------------------------------------------- partitions
    def _revoke(self, shards: ShardSet, then: Callable[[], None]) -> None:
        """Stop, commit (synchronously), release; then continue."""
        p = self.processor
        assert p is not None
        if not shards:
            then()
            return
        now = self.w.engine.now
        positions = {s: p.stop(s, now) for s in sorted(shards)}
        self.owned = self.owned - shards
        inc, mid, coord = self.incarnation, self.member_id, self.w.coordinator

        def committed(ok: bool) -> None:
            if not self._live(inc):
                return
            for s in sorted(shards):
                p.release(s, self.w.engine.now, clean=ok)
            then()

        def at_coordinator() -> None:
            ok = coord.commit(mid, positions) if mid is not None else False
            self.w.network.send(self.slot, "", lambda: committed(ok))

        self.w.network.send(self.slot, f"OffsetCommit {self.owner}", at_coordinator)

    def _take(self, inc: int, shards: ShardSet) -> None:
        p = self.processor
        assert p is not None
        if not shards:
            return
        now = self.w.engine.now
        for s in sorted(shards):
            p.acquire(s, now)
        self.owned = self.owned | shards
        coord = self.w.coordinator

        def fetched(offsets: dict[Shard, int]) -> None:
            if not self._live(inc):
                return
            for s in sorted(shards):
                if s in self.owned and s in p.work:
                    p.activate(s, offsets.get(s, 0), self.w.engine.now)

        def at_coordinator() -> None:
            offsets = coord.fetch(shards)
            self.w.network.send(self.slot, "", lambda: fetched(offsets))

        self.w.network.send(self.slot, f"OffsetFetch {self.owner}", at_coordinator)

    def _lose_membership(self) -> None:
        """Unknown to the coordinator: partitions are lost (no commit), rejoin as new."""
        p = self.processor
        if p is not None and self.owned:
            p.drop_all(self.w.engine.now)
        self.owned = EMPTY
        self.member_id = None
        self.generation = -1

    def _assign(self, members: dict[str, JoinMeta]) -> dict[str, ShardSet]:
        topics = self._subscribed(self._metadata)
        spec = GroupSpec({mid: MemberSpec(mid, frozenset(topics), m.previous)
                          for mid, m in sorted(members.items())}, TopicMetadata(topics))
        target = UniformAssignor().assign(spec)
        if not self.w.config.cooperative:
            return target
        owner_of = {s: mid for mid, m in members.items() for s in m.owned}
        # KIP-429: a partition that still has another owner is withheld for one round.
        return {mid: frozenset(s for s in shards if owner_of.get(s, mid) == mid)
                for mid, shards in target.items()}

    def _subscribed(self, meta: TopicMetadata) -> dict[str, int]:
        return {t: meta[t] for t in sorted(self.w.topics) if t in meta}

    def _schedule_autocommit(self, inc: int) -> None:
        at = self.cadence.next_at_or_after(self.w.engine.now + self.w.config.auto_commit_interval_ms)
        self.w.engine.at(at, "", lambda: self._autocommit(inc))

    def _autocommit(self, inc: int) -> None:
        if not self._live(inc) or self.processor is None:
            return
        self._schedule_autocommit(inc)
        positions = self.processor.commit_positions(self.w.engine.now)
        mid, coord = self.member_id, self.w.coordinator
        if positions and mid is not None:

            def at_coordinator() -> None:
                coord.commit(mid, positions)

            self.w.network.send(self.slot, "", at_coordinator)

