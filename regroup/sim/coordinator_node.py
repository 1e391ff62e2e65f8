"""The coordinator process in the simulator: the production runtime over an in-memory store.

Every request goes through `regroup.coordinator.runtime.Runtime`, the same door the gRPC service
uses: the core decides, the runtime appends the step's records to the store *before* the answer
leaves, names the members to nudge (never the requester) and the next deadline, and carries the
core's own account of who was fenced and why. This node only plays the network and the clock: it
answers in virtual time, calls ``expire`` when the deadline falls due, passes topic changes on, and
sends the nudges (when nudges are on). It can crash and restart: while it is down requests go
unanswered, and it comes back with ``Coordinator.recover(records, now)`` — sometimes after compacting
its store to ``snapshot()`` — and the checker verifies the rebuilt state is the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from regroup.coordinator.memory_store import MemoryStore
from regroup.coordinator.runtime import Effects, Runtime
from regroup.protocol.causes import Fence
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
from regroup.protocol.records import OffsetRecord
from regroup.protocol.timers import MemberKey
from regroup.sim.engine import Engine
from regroup.sim.invariants import InvariantChecker
from regroup.sim.metrics import Recorder
from regroup.sim.workload import ProducedLog

R = TypeVar("R")

#: Called with (group id, member id) for each member the core wants nudged.
WakeHandler = Callable[[str, str], None]
#: Called with each fence: who, which deadline it missed, and what it was told to revoke.
FenceHandler = Callable[[Fence], None]


class CoordinatorNode:
    def __init__(self, engine: Engine, rng: random.Random, config: CoordinatorConfig, log: ProducedLog,
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
        #: The simulated disk: survives crashes.
        self.store = MemoryStore()
        self.runtime = self._runtime(Coordinator(config, topics=log.metadata()))
        self.up = True
        self.restarts = 0
        self.requests = 0
        self._timer_at: int | None = None
        self._timer_token = 0

    @property
    def coordinator(self) -> Coordinator:
        return self.runtime.coord

    # ---------------------------------------------------------------- requests
    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse | None:
        if not self.up:
            return None
        self._count()
        resp = self._step(lambda c: c.heartbeat(req, self.engine.now), (req.group_id, req.member_id))
        if self.engine.verbose:
            got = "-" if resp.assignment is None else f"{len(resp.assignment)} shards"
            self.engine.trace(f"coord: hb {req.member_id} e={req.member_epoch} -> {resp.error.value} "
                              f"e={resp.member_epoch} assignment={got}")
        return resp

    def commit(self, req: OffsetCommitRequest) -> Ack | None:
        if not self.up:
            return None
        self._count()
        ack = self._step(lambda c: c.commit_offsets(req, self.engine.now))
        if self.engine.verbose and not ack.ok:
            self.engine.trace(f"coord: commit {req.member_id} e={req.member_epoch} -> {ack.error.value}")
        return ack

    def fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse | None:
        if not self.up:
            return None
        self._count()
        return self.runtime.read(lambda c: c.fetch_offsets(req)).response

    def set_parallelism(self, group_id: str, topic: str, parallelism: int) -> Ack | None:
        """An operator cuts ``topic``'s partitions into ``parallelism`` key ranges for the group (None:
        the coordinator is down and the operator's request goes unanswered)."""
        if not self.up:
            return None
        return self._step(lambda c: c.set_parallelism(group_id, topic, parallelism, self.engine.now))

    def update_topics(self) -> None:
        """The log's topics changed; a coordinator that is down catches up when it recovers."""
        if self.up:
            self._step(lambda c: c.update_topics(self.log.metadata(), self.engine.now))

    # ---------------------------------------------------------------- crash and recovery
    def crash(self, down_ms: int) -> None:
        if not self.up:
            return
        self.up = False
        self.restarts += 1
        self._timer_token += 1
        self._timer_at = None
        self.engine.trace(f"coord: CRASH (down {down_ms} ms, {len(self.store.records)} records on disk)")
        self.engine.after(down_ms, "coord: recover", self._recover)

    def _recover(self) -> None:
        now = self.engine.now
        before = self.coordinator.groups
        rebuilt = Coordinator.recover(self.store.records, now, self.config)
        if self.checker is not None:
            self.checker.recovered(now, before, rebuilt.groups, "from its records")
        if self.rng.random() < 0.5:
            snapshot = rebuilt.snapshot()
            if self.checker is not None:
                again = Coordinator.recover(snapshot, now, self.config)
                self.checker.recovered(now, before, again.groups, "from a snapshot")
            self.store.compact(snapshot)
        self.runtime = self._runtime(rebuilt)
        self.up = True
        self.engine.trace(f"coord: RECOVERED from {len(self.store.records)} records")
        # Recovered with the topics its groups recorded, then told the current ones: a change made
        # while it was down is seen as a change, as on a real restart.
        self._step(lambda c: c.update_topics(self.log.metadata(), now))
        self._step(lambda c: c.serving(now))  # members that do not show up soon are fenced

    # ---------------------------------------------------------------- internals
    def _runtime(self, coord: Coordinator) -> Runtime:
        return Runtime(coord, self.store, lambda: self.engine.now)

    def _count(self) -> None:
        self.requests += 1
        if self.recorder is not None:
            self.recorder.request(self.engine.now)

    def _step(self, decide: Callable[[Coordinator], Outcome[R]], requester: MemberKey | None = None) -> R:
        eff = self.runtime.step(decide, requester)
        self._perform(eff)
        return eff.response

    def _perform(self, eff: Effects[Any]) -> None:
        now = self.engine.now
        if eff.records:
            if self.checker is not None:
                self.checker.records(now, eff.records)
            if self.recorder is not None and any(not isinstance(r, OffsetRecord) for r in eff.records):
                self.recorder.protocol_change(now)
        for f in sorted(eff.fences, key=lambda f: (f.group_id, f.member_id)):
            self.engine.trace(f"coord: fenced {f.member_id} of {f.group_id} ({f.reason.value})")
            if self.on_fenced is not None:
                self.on_fenced(f)
        if self.on_wake is not None:
            for gid, mid in sorted(eff.nudges):
                self.on_wake(gid, mid)
        for note in eff.notes:
            self.engine.trace(f"coord: note {note}")
        self._arm_timer(eff.next_deadline)

    def _arm_timer(self, deadline: int | None) -> None:
        if not self.up:
            return
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
        self._step(lambda c: c.expire(self.engine.now))
