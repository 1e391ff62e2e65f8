"""A group running the real protocol core: one `CoordinatorNode` and `SimMember` processes.

With ``nudges=True`` this is regroup: the coordinator's ``wake`` set becomes nudge messages (which
the network may lose) and a nudged member heartbeats at once. With ``nudges=False`` it is KIP-848
as Kafka ships it: members learn of a new target on their next heartbeat.

With ``keys`` (a key-range run, regroup/sim/keyranges.py) the members process key ranges record by
record, and `set_parallelism` changes how many ranges the group cuts a topic's partitions into, as an
operator would, while the group runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from regroup.protocol.causes import Fence
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.keyrange import range_shards
from regroup.protocol.member import Revoke
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard, format_shards
from regroup.protocol.state import Group, GroupState
from regroup.sim.coordinator_node import CoordinatorNode
from regroup.sim.engine import Engine
from regroup.sim.invariants import PROTOCOL, InvariantChecker
from regroup.sim.keyranges import RecordKeys
from regroup.sim.member_node import MemberSettings, MemberWorld, SimMember
from regroup.sim.metrics import Recorder
from regroup.sim.network import Network
from regroup.sim.observers import Fanout, NullObserver, ShardObserver
from regroup.sim.system import PollModel
from regroup.sim.workload import Cadence, Processor, ProducedLog


class Kip848System:
    """Implements `GroupSystem` over `regroup.protocol` (coordinator and member state machines)."""

    def __init__(self, engine: Engine, rng: random.Random, network: Network, log: ProducedLog, *,
                 nudges: bool, settings: MemberSettings | None = None,
                 config: CoordinatorConfig | None = None, poll: PollModel | None = None,
                 checker: InvariantChecker | None = None, recorder: Recorder | None = None,
                 keys: RecordKeys | None = None,
                 make_processor: Callable[[str, Cadence, MemberWorld], Processor] | None = None) -> None:
        self.engine = engine
        self.rng = rng
        self.network = network
        self.log = log
        self.nudges = nudges
        self.settings = settings or MemberSettings()
        self.poll = poll or PollModel()
        self.checker = checker
        self.recorder = recorder
        listeners: list[ShardObserver] = [x for x in (checker, recorder) if x is not None]
        observer: ShardObserver = Fanout(*listeners) if listeners else NullObserver()
        self.coordinator = CoordinatorNode(
            engine, rng, config or CoordinatorConfig(), log, checker,
            self._wake if nudges else None, recorder, self._fenced)
        self.members: dict[str, SimMember] = {}
        self._by_member_id: dict[str, SimMember] = {}
        self._world = MemberWorld(engine, network, self.coordinator, log, observer, checker, self.settings,
                                  self._register, keys, make_processor)
        #: Parallelism changes the coordinator accepted.
        self.parallelism_changes = 0

    # ---------------------------------------------------------------- GroupSystem
    def add_member(self, slot: str, static: bool = False) -> None:
        if slot in self.members:
            self.restart(slot)
            return
        member = SimMember(slot, static, self.poll.cadence(self.rng), self._world)
        self.members[slot] = member
        member.start()

    def crash(self, slot: str) -> None:
        m = self.members.get(slot)
        if m is not None:
            m.crash()

    def restart(self, slot: str) -> None:
        m = self.members.get(slot)
        if m is not None and not m.alive:
            m.start()

    def shutdown(self, slot: str, restart_after: int | None = None) -> None:
        m = self.members.get(slot)
        if m is not None:
            m.shutdown(restart_after)

    def stall(self, slot: str, duration: int, end_by: int | None = None) -> None:
        m = self.members.get(slot)
        if m is not None and m.alive:
            m.stall(duration, end_by)

    def grow_topic(self, topic: str, partitions: int) -> None:
        self.log.grow(topic, partitions, self.engine.now)
        self.engine.trace(f"topics: {topic} has {partitions} partitions")
        self.coordinator.update_topics()

    def set_parallelism(self, topic: str, parallelism: int) -> None:
        """An operator sets the group's parallelism of ``topic`` (refused while the coordinator is
        down: the event then does nothing, as a failed admin call would)."""
        group = self.coordinator.coordinator.groups.get(self.settings.group_id)
        before = 1 if group is None else group.parallelism.get(topic, 1)
        ack = self.coordinator.set_parallelism(self.settings.group_id, topic, parallelism)
        if ack is None:
            self.engine.trace(f"admin: parallelism of {topic} to {parallelism}: coordinator down")
        elif not ack.ok:
            self.engine.trace(f"admin: parallelism of {topic} to {parallelism}: {ack.error.value}")
            if self.checker is not None:
                self.checker.fail(self.engine.now, PROTOCOL, f"set_parallelism({topic}, {parallelism}) "
                                                             f"refused: {ack.error.value} {ack.message}")
        elif parallelism != before:
            self.parallelism_changes += 1
            self.engine.trace(f"admin: parallelism of {topic} set to {parallelism} (was {before})")

    def slots(self) -> list[str]:
        return sorted(self.members)

    # ---------------------------------------------------------------- faults of this protocol
    def cut(self, slot: str, duration: int) -> None:
        """Partition the slot's process from the coordinator for ``duration`` ms."""
        now = self.engine.now
        self.network.cut(slot, now, now + duration)
        self.engine.trace(f"net: {slot} cut off until {now + duration}")

    def restart_coordinator(self, down_ms: int) -> None:
        self.coordinator.crash(down_ms)

    # ---------------------------------------------------------------- state
    def churn_pending(self) -> bool:
        """A graceful shutdown still under way, or a restart still to come."""
        return any(m.leaving or m.restart_pending for m in self.members.values())

    def live_members(self) -> list[SimMember]:
        return [m for _, m in sorted(self.members.items()) if m.alive and not m.leaving]

    def settled(self) -> bool:
        node = self.coordinator
        if not node.up:
            return False
        live = self.live_members()
        group = node.coordinator.groups.get(self.settings.group_id)
        wanted = self._wanted(group)
        if group is None:
            return not live and not wanted
        if group.state is not GroupState.STABLE:
            return False
        ids = {m.sm.member_id for m in live if m.sm is not None}
        if set(group.members) != ids:
            return False
        if any(not m.settled() for m in live):
            return False
        assigned = [s for c in group.current.values() for s in c.assigned]
        if len(assigned) != len(wanted) or set(assigned) != wanted:
            return False
        return all(group.current[m.sm.member_id].assigned == m.sm.owned for m in live if m.sm is not None)

    def _wanted(self, group: Group | None) -> set[Shard]:
        """The shards a settled group assigns: every partition of the subscribed topics, cut into the
        group's key ranges where it has a parallelism."""
        shards = self.log.shards(self.settings.topics)
        if group is None or not group.parallelism:
            return set(shards)
        cut = group.parallelism
        return {r for s in shards for r in range_shards(s.topic, s.partition, cut.get(s.topic, 1))}

    def describe(self) -> str:
        node = self.coordinator
        parts = [f"coordinator {'up' if node.up else 'DOWN'}"]
        group = node.coordinator.groups.get(self.settings.group_id)
        if group is not None:
            parts.append(f"group {group.state.value} epoch {group.epoch} target {group.target_epoch}"
                         + "".join(f", {t} in {n} key ranges" for t, n in sorted(group.parallelism.items())))
            for mid, c in sorted(group.current.items()):
                status = c.status.value if c.status is not MemberStatus.STABLE else "stable"
                parts.append(f"{mid}: e{c.epoch} {status} {format_shards(c.assigned)}"
                             + (f" pending {format_shards(c.pending_revocation)}" if c.pending_revocation
                                else ""))
        for slot, m in sorted(self.members.items()):
            if m.alive and m.sm is not None and m.processor is not None:
                parts.append(f"{m.owner}: {m.sm.state.value} e{m.sm.epoch} owned "
                             f"{format_shards(m.sm.owned)} active {format_shards(m.processor.active())}"
                             f" op {m.op!r}")
            else:
                parts.append(f"{slot}: down")
        return "; ".join(parts)

    # ---------------------------------------------------------------- internals
    def _register(self, member_id: str, member: SimMember) -> None:
        self._by_member_id[member_id] = member

    def _fenced(self, fence: Fence) -> None:
        member_id, revoking = fence.member_id, fence.revoking
        m = self._by_member_id.get(member_id)
        if m is None or not m.alive or m.sm is None or m.sm.member_id != member_id:
            return
        if self.checker is None:
            return
        now = self.engine.now
        self.checker.on_fenced(now, m.owner)
        target = m.sm.target
        if revoking and target is not None and not revoking.isdisjoint(target) \
                and not isinstance(m.op, Revoke) and not self.network.is_cut(m.slot, now):
            never_told = format_shards(revoking & target)
            self.checker.fail(now, PROTOCOL, f"{member_id} was fenced ({fence.reason.value}) while revoking, "
                              f"but it was never told to revoke {never_told} (its target still has them)")

    def _wake(self, group_id: str, member_id: str) -> None:
        m = self._by_member_id.get(member_id)
        if m is None or not m.alive:
            return
        self.network.send(m.slot, f"nudge {member_id}", lambda: m.nudged(member_id), nudge=True)
