"""A compact model of Kafka's classic group coordinator (JoinGroup / SyncGroup / Heartbeat).

What it keeps from Kafka's classic coordinator (``GroupMetadataManager``, classic groups):

* states EMPTY → PREPARING_REBALANCE → COMPLETING_REBALANCE → STABLE;
* a rebalance is prepared when a member joins, a known member rejoins (a leader that saw new
  partitions, a cooperative member that revoked), a member leaves (LeaveGroup) or its session times
  out; heartbeats then answer REBALANCE_IN_PROGRESS so members rejoin;
* the join phase is a *barrier*: it completes when every member has rejoined, or at the rebalance
  timeout (``max.poll.interval.ms``), which removes the laggards; on an empty group it waits
  ``group.initial.rebalance.delay.ms``, extended while new members keep arriving;
* a new dynamic member's first JoinGroup gets MEMBER_ID_REQUIRED (KIP-394): one more round trip;
* a static member (KIP-345) rejoining with a known instance id while the group is STABLE takes over
  its old assignment without a rebalance; a static member does not send LeaveGroup when it stops;
* the leader computes the assignment and sends it with its SyncGroup; the others get theirs when it
  arrives.

Offsets are kept per partition; commits are accepted from known members.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from regroup.protocol.shard import EMPTY, Shard, ShardSet
from regroup.sim.engine import Engine
from regroup.sim.metrics import Recorder


class ClassicState(Enum):
    EMPTY = "empty"
    PREPARING = "preparing-rebalance"
    COMPLETING = "completing-rebalance"
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class ClassicConfig:
    """Kafka's defaults for the classic protocol (docs/simulation.md: calibration)."""

    session_timeout_ms: int = 45_000  # session.timeout.ms (consumer, since Kafka 3.0)
    heartbeat_interval_ms: int = 3_000  # heartbeat.interval.ms
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms, sent as the rebalance timeout
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms (broker)
    metadata_max_age_ms: int = 300_000  # metadata.max.age.ms: how often the leader sees new partitions
    auto_commit_interval_ms: int = 5_000  # auto.commit.interval.ms
    cooperative: bool = False  # partition.assignment.strategy: eager, or cooperative (KIP-429)


@dataclass(frozen=True, slots=True)
class JoinMeta:
    """What a member says in JoinGroup: its owned partitions (cooperative) and last assignment."""

    owned: ShardSet = EMPTY
    previous: ShardSet = EMPTY


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: str
    member_id: str
    generation: int = -1
    leader: str = ""
    #: Every member's JoinMeta — only in the leader's response.
    members: dict[str, JoinMeta] = field(default_factory=dict)
    #: A static leader that rejoined a stable group keeps the current assignment.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: str
    assignment: ShardSet = EMPTY


JoinReply = Callable[[JoinResponse], None]
SyncReply = Callable[[SyncResponse], None]


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    meta: JoinMeta = JoinMeta()
    join_reply: JoinReply | None = None
    sync_reply: SyncReply | None = None
    last_heard: int = 0


class ClassicCoordinator:
    def __init__(self, engine: Engine, config: ClassicConfig, recorder: Recorder | None) -> None:
        self.engine = engine
        self.config = config
        self.recorder = recorder
        self.state = ClassicState.EMPTY
        self.generation = 0
        self.leader: str | None = None
        self.members: dict[str, _Member] = {}
        self.static: dict[str, str] = {}
        self.assignments: dict[str, ShardSet] = {}
        self.offsets: dict[Shard, int] = {}
        self.rounds = 0
        self._pending_ids: set[str] = set()
        self._ids = 0
        self._join_token = 0
        self._new_member_added = False
        self._initial = False

    # ---------------------------------------------------------------- requests
    def join(self, member_id: str | None, instance_id: str | None, meta: JoinMeta, reply: JoinReply) -> None:
        self._count()
        if member_id is None and instance_id is None:
            mid = self._new_id()
            self._pending_ids.add(mid)
            reply(JoinResponse("MEMBER_ID_REQUIRED", mid))
            return
        if member_id is None:
            assert instance_id is not None
            if self._static_rejoin(instance_id, meta, reply):
                return
            member_id = self._new_id()
        member = self.members.get(member_id)
        if member is None:
            if instance_id is None and member_id not in self._pending_ids:
                reply(JoinResponse("UNKNOWN_MEMBER_ID", ""))
                return
            self._pending_ids.discard(member_id)
            member = self.members[member_id] = _Member(member_id, instance_id)
            if instance_id is not None:
                self.static[instance_id] = member_id
            self._new_member_added = True
            self._trace(f"new member {member_id}")
        member.meta = meta
        member.join_reply = reply
        self._touch(member)
        if self.state is ClassicState.PREPARING:
            self._maybe_complete_join()
        else:
            self._prepare_rebalance(f"{member_id} joins")

    def sync(self, member_id: str, generation: int, assignment: dict[str, ShardSet] | None,
             reply: SyncReply) -> None:
        self._count()
        member = self.members.get(member_id)
        if member is None:
            reply(SyncResponse("UNKNOWN_MEMBER_ID"))
            return
        self._touch(member)
        if self.state is ClassicState.PREPARING:
            reply(SyncResponse("REBALANCE_IN_PROGRESS"))
            return
        if generation != self.generation:
            reply(SyncResponse("ILLEGAL_GENERATION"))
            return
        if self.state is ClassicState.STABLE:
            reply(SyncResponse("NONE", self.assignments.get(member_id, EMPTY)))
            return
        member.sync_reply = reply
        if member_id == self.leader and assignment is not None:
            self.assignments = dict(assignment)
            self.state = ClassicState.STABLE
            self._changed()
            self._trace(f"generation {self.generation} STABLE (leader {member_id} synced)")
            for m in self._sorted_members():
                if m.sync_reply is not None:
                    r, m.sync_reply = m.sync_reply, None
                    r(SyncResponse("NONE", self.assignments.get(m.member_id, EMPTY)))

    def heartbeat(self, member_id: str, generation: int) -> str:
        self._count()
        member = self.members.get(member_id)
        if member is None:
            return "UNKNOWN_MEMBER_ID"
        self._touch(member)
        if self.state is ClassicState.PREPARING:
            return "REBALANCE_IN_PROGRESS"
        if generation != self.generation:
            return "ILLEGAL_GENERATION"
        return "NONE"

    def leave(self, member_id: str) -> None:
        self._count()
        if member_id in self.members:
            self._remove(member_id, "leaves")

    def commit(self, member_id: str, offsets: dict[Shard, int]) -> bool:
        self._count()
        if member_id not in self.members:
            return False
        self.offsets.update(offsets)
        return True

    def fetch(self, shards: ShardSet) -> dict[Shard, int]:
        self._count()
        return {s: self.offsets[s] for s in shards if s in self.offsets}

    # ---------------------------------------------------------------- the barrier
    def _static_rejoin(self, instance_id: str, meta: JoinMeta, reply: JoinReply) -> bool:
        old = self.static.get(instance_id)
        if old is None or old not in self.members:
            return False
        new = self._new_id()
        member = self.members.pop(old)
        member.member_id = new
        self.members[new] = member
        self.static[instance_id] = new
        if old in self.assignments:
            self.assignments[new] = self.assignments.pop(old)
        if self.leader == old:
            self.leader = new
        self._touch(member)
        self._trace(f"static {instance_id}: {old} replaced by {new}")
        if self.state is ClassicState.STABLE:
            reply(JoinResponse("NONE", new, self.generation, self.leader or "",
                               skip_assignment=self.leader == new))
        else:
            member.meta = meta
            member.join_reply = reply
            if self.state is ClassicState.PREPARING:
                self._maybe_complete_join()
            else:
                self._prepare_rebalance(f"static {instance_id} rejoins during a rebalance")
        return True

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state is ClassicState.COMPLETING:
            for m in self._sorted_members():
                if m.sync_reply is not None:
                    r, m.sync_reply = m.sync_reply, None
                    r(SyncResponse("REBALANCE_IN_PROGRESS"))
        initial = self.state is ClassicState.EMPTY
        self._initial = initial
        self.state = ClassicState.PREPARING
        self._changed()
        self._trace(f"PREPARING rebalance ({reason})")
        self._join_token += 1
        token = self._join_token
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(self.config.rebalance_timeout_ms - delay, 0)
            self._new_member_added = False
            self.engine.after(delay, "classic: initial delay",
                              lambda: self._initial_delay_over(token, delay, remaining))
        elif not self._maybe_complete_join():
            self.engine.after(self.config.rebalance_timeout_ms, "classic: rebalance timeout",
                              lambda: self._complete_join(token))

    def _initial_delay_over(self, token: int, delay: int, remaining: int) -> None:
        if token != self._join_token or self.state is not ClassicState.PREPARING:
            return
        if self._new_member_added and remaining > 0:
            self._new_member_added = False
            nxt = min(self.config.initial_rebalance_delay_ms, remaining)
            self.engine.after(nxt, "classic: initial delay",
                              lambda: self._initial_delay_over(token, nxt, max(remaining - delay, 0)))
            return
        self._initial = False
        self._complete_join(token)

    def _maybe_complete_join(self) -> bool:
        if self.state is ClassicState.PREPARING and self.members \
                and all(m.join_reply is not None for m in self.members.values()):
            if self._initial:
                return False  # an empty group waits out the initial delay
            self._complete_join(self._join_token)
            return True
        return False

    def _complete_join(self, token: int) -> None:
        if token != self._join_token or self.state is not ClassicState.PREPARING:
            return
        for mid in sorted(m.member_id for m in self.members.values() if m.join_reply is None):
            self._drop(mid)  # did not rejoin within the rebalance timeout
        if not self.members:
            self.state = ClassicState.EMPTY
            return
        self._join_token += 1
        self.generation += 1
        self.rounds += 1
        self.state = ClassicState.COMPLETING
        if self.leader not in self.members:
            self.leader = min(self.members)
        if self.recorder is not None:
            self.recorder.barrier_round(self.engine.now)
        self._changed()
        self._trace(f"generation {self.generation}: join barrier complete, {len(self.members)} members, "
                    f"leader {self.leader}")
        metas = {m.member_id: m.meta for m in self._sorted_members()}
        for m in self._sorted_members():
            reply, m.join_reply = m.join_reply, None
            assert reply is not None
            reply(JoinResponse("NONE", m.member_id, self.generation, self.leader,
                               metas if m.member_id == self.leader else {}))

    # ---------------------------------------------------------------- sessions
    def _touch(self, member: _Member) -> None:
        member.last_heard = self.engine.now
        mid = member.member_id
        self.engine.after(self.config.session_timeout_ms, "", lambda: self._check_session(mid))

    def _check_session(self, member_id: str) -> None:
        m = self.members.get(member_id)
        if m is None or m.last_heard + self.config.session_timeout_ms > self.engine.now:
            return
        if m.join_reply is not None or m.sync_reply is not None:
            self._touch(m)  # awaiting join or sync: kept alive, as Kafka's shouldKeepAlive does
            return
        self._remove(member_id, "session timed out")

    def _remove(self, member_id: str, why: str) -> None:
        self._drop(member_id)
        self._trace(f"{member_id} {why}")
        if not self.members:
            self.state = ClassicState.EMPTY
            self._changed()
        elif self.state is ClassicState.PREPARING:
            self._maybe_complete_join()
        else:
            self._prepare_rebalance(f"{member_id} {why}")

    def _drop(self, member_id: str) -> None:
        m = self.members.pop(member_id)
        self.assignments.pop(member_id, None)
        if m.instance_id is not None and self.static.get(m.instance_id) == member_id:
            del self.static[m.instance_id]

    # ---------------------------------------------------------------- helpers
    def _sorted_members(self) -> list[_Member]:
        return [self.members[k] for k in sorted(self.members)]

    def _new_id(self) -> str:
        self._ids += 1
        return f"c{self._ids}"

    def _count(self) -> None:
        if self.recorder is not None:
            self.recorder.request(self.engine.now)

    def _changed(self) -> None:
        if self.recorder is not None:
            self.recorder.protocol_change(self.engine.now)

    def _trace(self, line: str) -> None:
        self.engine.trace("classic: " + line)
