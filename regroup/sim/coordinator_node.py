"""The coordinator process in the simulator: the real protocol core behind a simulated shell.

It does what the service shell does, in virtual time: answers heartbeats, commits and fetches with
`regroup.protocol.coordinator.Coordinator`; appends every record to its durable log *before* the
answer leaves; calls ``expire`` when ``next_deadline`` falls due; passes topic changes on; sends the
nudges the core asks for (when nudges are on). It can crash and restart: while it is down requests go
unanswered, and it comes back with ``Coordinator.recover(records, now)`` — sometimes after
compacting its log to ``snapshot()`` — and the checker verifies the rebuilt state is the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.messages import (
    Ack,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from regroup.protocol.records import MemberStatus, OffsetRecord, Record
from regroup.protocol.shard import ShardSet
from regroup.sim.engine import Engine
from regroup.sim.invariants import InvariantChecker
from regroup.sim.metrics import Recorder
from regroup.sim.workload import PartitionedLog

#: Called with (group id, member id) for each member the core wants nudged.
WakeHandler = Callable[[str, str], None]
#: Called with (group id, member id, shards it was told to revoke or None) for each fenced member.
FenceHandler = Callable[[str, str, ShardSet | None], None]


class CoordinatorNode:
    def __init__(self, engine: Engine, rng: random.Random, config: CoordinatorConfig, log: PartitionedLog,
                 checker: InvariantChecker | None, on_wake: WakeHandler | None,
                 recorder: Recorder | None = None, on_fenced: FenceHandler | None = None) -> None:
        self.engine = engine
        self.rng = rng
        self.config = config
        self.log = log
        self.checker = checker
        #: Nudges are sent through this (None: heartbeat polling only, as Kafka ships KIP-848).
        self.on_wake = on_wake
        #: Told of every request and of every step that changed more than offsets.
        self.recorder = recorder
        self.on_fenced = on_fenced
        self._revoking: dict[tuple[str, str], ShardSet] = {}
        self.coordinator = Coordinator(config, topics=log.metadata())
        self.durable: list[Record] = []
        self.up = True
        self.restarts = 0
        self.requests = 0
        self._timer_at: int | None = None
        self._timer_token = 0

    # ---------------------------------------------------------------- requests
    def heartbeat(self, req: HeartbeatRequest, stale: bool = False) -> HeartbeatResponse | None:
        """Answer a heartbeat. ``stale``: its sender already gave up on it (a late delivery); a shell
        cannot know that, but the simulator can, to arm a known issue's precondition."""
        if not self.up:
            return None
        self._count()
        out = self.coordinator.heartbeat(req, self.engine.now)
        self._keep(out)
        resp = out.response
        if self.engine.verbose:
            got = "-" if resp.assignment is None else f"{len(resp.assignment)} shards"
            self.engine.trace(f"coord: hb {req.member_id} e={req.member_epoch} -> {resp.error.value} "
                              f"e={resp.member_epoch} assignment={got}")
        return resp

    def commit(self, req: OffsetCommitRequest) -> Ack | None:
        if not self.up:
            return None
        self._count()
        out = self.coordinator.commit_offsets(req, self.engine.now)
        self._keep(out)
        if self.engine.verbose and not out.response.ok:
            self.engine.trace(f"coord: commit {req.member_id} e={req.member_epoch} -> "
                              f"{out.response.error.value}")
        return out.response

    def fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse | None:
        if not self.up:
            return None
        self._count()
        return self.coordinator.fetch_offsets(req)

    def update_topics(self) -> None:
        """The log's topics changed; a coordinator that is down catches up when it recovers."""
        if self.up:
            self._keep(self.coordinator.update_topics(self.log.metadata(), self.engine.now))

    # ---------------------------------------------------------------- crash and recovery
    def crash(self, down_ms: int) -> None:
        if not self.up:
            return
        self.up = False
        self.restarts += 1
        self._timer_token += 1
        self._timer_at = None
        self.engine.trace(f"coord: CRASH (down {down_ms} ms, {len(self.durable)} records on disk)")
        self.engine.after(down_ms, "coord: recover", self._recover)

    def _recover(self) -> None:
        now = self.engine.now
        before = self.coordinator.groups
        rebuilt = Coordinator.recover(self.durable, now, self.config)
        if self.checker is not None:
            self.checker.recovered(now, before, rebuilt.groups, "from its records")
        if self.rng.random() < 0.5:
            snapshot = rebuilt.snapshot()
            if self.checker is not None:
                again = Coordinator.recover(snapshot, now, self.config)
                self.checker.recovered(now, before, again.groups, "from a snapshot")
            self.durable = snapshot
        self.coordinator = rebuilt
        self.up = True
        self.engine.trace(f"coord: RECOVERED from {len(self.durable)} records")
        # Recovered without topics, then told the current ones: a change made while it was down is
        # seen as a change (recover(topics=current) would not bump the epoch for it).
        self._keep(rebuilt.update_topics(self.log.metadata(), now))
        self._arm_timer()

    # ---------------------------------------------------------------- internals
    def _count(self) -> None:
        self.requests += 1
        if self.recorder is not None:
            self.recorder.request(self.engine.now)

    def _keep(self, out: Outcome[object]) -> None:
        now = self.engine.now
        if out.records:
            self.durable.extend(out.records)  # durable before the response is released
            if self.checker is not None:
                self.checker.records(now, out.records)
            if self.recorder is not None and any(not isinstance(r, OffsetRecord) for r in out.records):
                self.recorder.protocol_change(now)
        for gid, mid in sorted(out.fenced):
            self.engine.trace(f"coord: fenced {mid} of {gid}")
            if self.on_fenced is not None:
                self.on_fenced(gid, mid, self._revoking.get((gid, mid)))
        if self.on_wake is not None:
            for gid, mid in sorted(out.wake):
                self.on_wake(gid, mid)
        for note in out.notes:
            self.engine.trace(f"coord: note {note}")
        self._arm_timer()

    def _arm_timer(self) -> None:
        if not self.up:
            return
        deadline = self.coordinator.next_deadline()
        if deadline is None or (self._timer_at is not None and self._timer_at <= deadline):
            return
        self._timer_at = max(deadline, self.engine.now)
        self._timer_token += 1
        token = self._timer_token
        self.engine.at(self._timer_at, "coord: timers", lambda: self._fire(token))

    def _fire(self, token: int) -> None:
        if token != self._timer_token or not self.up:
            return
        self._timer_at = None
        # Who was still revoking, to tell a revocation-timeout fence from a session one.
        self._revoking = {(gid, mid): c.pending_revocation
                          for gid, g in self.coordinator.groups.items()
                          for mid, c in g.current.items() if c.status is MemberStatus.UNREVOKED}
        self._keep(self.coordinator.expire(self.engine.now))
        self._revoking = {}
        self._arm_timer()
