"""A group on the classic protocol (the baselines): `ClassicCoordinator` and `ClassicMember`s.

``ClassicSystem`` implements `GroupSystem`, eager or cooperative, with Kafka's defaults
(`ClassicConfig`). It has no fault injection: it is there to be compared, not checked.
"""

from __future__ import annotations

import random

from regroup.protocol.shard import format_shards
from regroup.sim.classic_coordinator import ClassicConfig, ClassicCoordinator, ClassicState
from regroup.sim.classic_member import ClassicMember, ClassicWorld
from regroup.sim.engine import Engine
from regroup.sim.invariants import InvariantChecker
from regroup.sim.metrics import Recorder
from regroup.sim.network import Network
from regroup.sim.observers import Fanout, NullObserver, ShardObserver
from regroup.sim.system import PollModel
from regroup.sim.workload import ProducedLog


class ClassicSystem:
    def __init__(self, engine: Engine, rng: random.Random, network: Network, log: ProducedLog, *,
                 config: ClassicConfig, topics: tuple[str, ...] = ("orders",), poll: PollModel | None = None,
                 checker: InvariantChecker | None = None, recorder: Recorder | None = None) -> None:
        self.engine = engine
        self.rng = rng
        self.log = log
        self.config = config
        self.topics = topics
        self.poll = poll or PollModel()
        self.recorder = recorder
        listeners: list[ShardObserver] = [x for x in (checker, recorder) if x is not None]
        observer: ShardObserver = Fanout(*listeners) if listeners else NullObserver()
        self.coordinator = ClassicCoordinator(engine, config, recorder)
        self._world = ClassicWorld(engine, rng, network, self.coordinator, log, observer, config, topics)
        self.members: dict[str, ClassicMember] = {}

    def add_member(self, slot: str, static: bool = False) -> None:
        if slot in self.members:
            self.restart(slot)
            return
        m = ClassicMember(slot, static, self.poll.cadence(self.rng), self._world)
        self.members[slot] = m
        m.start()

    def crash(self, slot: str) -> None:
        m = self.members.get(slot)
        if m is not None:
            m.crash()

    def restart(self, slot: str) -> None:
        m = self.members.get(slot)
        if m is not None:
            m.start()

    def shutdown(self, slot: str, restart_after: int | None = None) -> None:
        m = self.members.get(slot)
        if m is not None:
            m.shutdown(restart_after)

    def stall(self, slot: str, duration: int) -> None:
        m = self.members.get(slot)
        if m is not None and m.alive:
            m.stall(duration)

    def grow_topic(self, topic: str, partitions: int) -> None:
        # The classic coordinator does not watch metadata: the leader notices on its next refresh.
        self.log.grow(topic, partitions, self.engine.now)
        self.engine.trace(f"topics: {topic} has {partitions} partitions")

    def slots(self) -> list[str]:
        return sorted(self.members)

    def settled(self) -> bool:
        c = self.coordinator
        live = [m for _, m in sorted(self.members.items()) if m.alive]
        if c.state is not ClassicState.STABLE:
            return not live and c.state is ClassicState.EMPTY
        ids = {m.member_id for m in live}
        if ids != set(c.members):
            return False
        if not all(m.settled(c.assignments.get(m.member_id or "")) for m in live):
            return False
        owned = [s for m in live for s in m.owned]
        return len(owned) == len(set(owned)) and set(owned) == set(self.log.shards(self.topics))

    def describe(self) -> str:
        c = self.coordinator
        parts = [f"classic {c.state.value} generation {c.generation} leader {c.leader}"]
        for _, m in sorted(self.members.items()):
            parts.append(f"{m.owner}: {m.phase if m.alive else 'down'} {m.member_id} "
                         f"owned {format_shards(m.owned)}")
        return "; ".join(parts)
