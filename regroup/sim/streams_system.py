"""A streams group in the simulator: the real core behind `CoordinatorNode`, simulated streams processes,
the promotion policies, and the invariants checked at every coordinator step.

Policies (`Policy`; all three run regroup's core, with nudges, the same network and members — only
the warm-up and promotion settings and what members report differ; see `streams_member`):

* ``cold`` — *cold moves*: ``max_warmups`` 0 and an acceptable recovery lag beyond any lag, with
  every member reporting a copy of every task. The assignor then sees every process caught up on
  every task and moves actives at once; the new owner restores after the move.
* ``kip441`` — Kafka Streams' KIP-441: warm-ups, promoted only at a *probing rebalance*. The core
  has no switch to hold promotion back (it promotes when a heartbeat shows a copy caught up), so
  the model holds back the *information*: a standby or warm-up copy reports the lag it had at the
  last probe (or at its start). Probes follow Kafka Streams' schedule
  (``probing.rebalance.interval.ms``): one interval after a target that still has movements pending
  (a warm-up, or actives not yet balanced), again every interval while they are pending; at a probe
  every member reports every copy fresh, at once. In Kafka Streams a warm-up's lag reaches the
  assignor only in a rebalance's subscriptions, and the followup probing rebalance is what finds it
  caught up: the same moment.
  One difference: a rebalance that something else causes (a join, a leave) sees fresh lags in
  Kafka Streams and only the last probe's here, so a promotion Kafka would make at such a
  rebalance waits for the next probe in the model.
* ``regroup`` — promotion by event: fresh reports on every heartbeat, an urgent one when a warm-up
  reaches the committed offset, and the core bumps the epoch at once.

Invariants (a violation is recorded with the time; the run goes on):

1. At most one active per task — in the core (no task held active by two members in
   ``group.current``, pending revocations included) and among the processes (no process starts
   an active while another runs or restores it: `Ledger.begin`).
2. Promotion only to a caught-up copy: every ``WarmupCaughtUp`` cause carries a lag within the
   acceptable recovery lag, and an installed target moves an active from a member still in the
   group to another process only if the lag the computation saw for that process's copy is within
   it (``LagBook.seen``).
3. No member action is fatal, and a member that left holds nothing.
4. The records rebuild the state: at the end of a run `Coordinator.recover` of the store equals the
   live streams groups (`check_replay`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import Any

from regroup.coordinator.runtime import Effects
from regroup.protocol.causes import GroupEpochBumped, TargetInstalled, WarmupCaughtUp
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import Ack, OffsetCommitRequest, OffsetResetRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.streams.member import format_tasks
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.state import StreamsGroup, StreamsGroupState, held
from regroup.protocol.streams.topology import TaskId
from regroup.sim.coordinator_node import CoordinatorNode, WakeHandler
from regroup.sim.engine import Engine
from regroup.sim.network import Network
from regroup.sim.streams_member import (
    DORMANT,
    FOLLOWING,
    STANDBY,
    Copy,
    Policy,
    SimStreamsMember,
    StreamsSimSettings,
)
from regroup.sim.workload import ProducedLog

#: An acceptable recovery lag no lag reaches: the cold policy's "every copy is caught up".
UNBOUNDED_LAG = 10**15


class StreamsCoordinatorNode(CoordinatorNode):
    """`CoordinatorNode` with the streams doors, the group's streams settings, and a view of every
    step's effects (for the invariants and the probing schedule)."""

    def __init__(self, engine: Engine, rng: random.Random, config: CoordinatorConfig, streams: StreamsConfig,
                 log: ProducedLog, on_wake: WakeHandler | None, on_effects: Callable[[Effects[Any]], None],
                 on_commit: Callable[[Mapping[Shard, int]], None]) -> None:
        self.streams_config = streams
        self.on_effects = on_effects
        self.on_commit = on_commit
        super().__init__(engine, rng, config, log, None, on_wake)
        self.runtime = self._runtime(Coordinator(config, topics=log.metadata(), streams=streams))

    def streams_heartbeat(self, req: StreamsHeartbeatRequest) -> StreamsHeartbeatResponse | None:
        if not self.up:
            return None
        self._count()
        now = self.engine.now
        resp = self._step(lambda c: c.streams_heartbeat(req, now), (req.group_id, req.member_id))
        if self.engine.verbose:
            got = "-" if resp.assignment is None else _format(resp.assignment)
            self.engine.trace(f"coord: shb {req.member_id} e={req.member_epoch} -> {resp.error.value} "
                              f"e={resp.member_epoch} assignment={got}")
        return resp

    def commit(self, req: OffsetCommitRequest) -> Ack | None:
        ack = super().commit(req)
        if ack is not None and ack.ok:
            self.on_commit(req.offsets)
        return ack

    def reset(self, req: OffsetResetRequest) -> Ack:
        now = self.engine.now
        return self._step(lambda c: c.reset_offsets(req, now))

    def _perform(self, eff: Effects[Any]) -> None:
        super()._perform(eff)
        self.on_effects(eff)

    def _recover(self) -> None:
        now = self.engine.now
        rebuilt = Coordinator.recover(self.store.records, now, self.config, streams=self.streams_config)
        self.runtime = self._runtime(rebuilt)
        self.up = True
        self.engine.trace(f"coord: RECOVERED from {len(self.store.records)} records")
        self._step(lambda c: c.update_topics(self.log.metadata(), now))
        self._step(lambda c: c.serving(now))  # members that do not show up soon are fenced


def _format(tasks: MemberTasks) -> str:
    return format_tasks(tasks)


class Ledger:
    """Who runs each task as active, when it can process, and the invariant of one active per task."""

    def __init__(self, tasks: list[TaskId], violation: Callable[[str], None]) -> None:
        self.violation = violation
        #: task -> (member id, process id, started, ready) of the active, if any.
        self.running: dict[TaskId, tuple[str, str, int, int]] = {}
        #: task -> closed processing spans [from, to).
        self.spans: dict[TaskId, list[tuple[int, int]]] = {t: [] for t in tasks}
        #: task -> every (start time, process id) of an active.
        self.starts: dict[TaskId, list[tuple[int, str]]] = {t: [] for t in tasks}

    def begin(self, task: TaskId, member: str, process: str, now: int, ready: int) -> None:
        other = self.running.get(task)
        if other is not None and other[0] != member:
            self.violation(f"two actives for task {task}: {member} starts it while {other[0]} "
                           f"(since {other[2]}) still runs it")
        self.running[task] = (member, process, now, ready)
        self.starts.setdefault(task, []).append((now, process))

    def end(self, task: TaskId, member: str, now: int) -> None:
        run = self.running.get(task)
        if run is None or run[0] != member:
            return
        del self.running[task]
        if now > run[3]:
            self.spans.setdefault(task, []).append((run[3], now))

    def processing(self, task: TaskId, now: int) -> str | None:
        """The member processing ``task`` at ``now`` (restored and running), or None."""
        run = self.running.get(task)
        return run[0] if run is not None and run[3] <= now else None

    def unavailable_ms(self, task: TaskId, t0: int, t1: int) -> int:
        """How long in ``[t0, t1]`` nobody could process ``task`` (rule 4 of `streams_member`)."""
        spans = list(self.spans.get(task, ()))
        run = self.running.get(task)
        if run is not None:
            spans.append((run[3], t1))
        covered, edge = 0, t0
        for a, b in sorted(spans):
            a, b = max(a, edge), min(b, t1)
            if b > a:
                covered += b - a
                edge = b
        return (t1 - t0) - covered

    def moved(self, t0: int) -> int:
        """Actives started, from ``t0`` on, on another process than the task's previous active."""
        n = 0
        for starts in self.starts.values():
            for (_, before), (t, pid) in pairwise(starts):
                if t >= t0 and pid != before:
                    n += 1
        return n


class StreamsSystem:
    """One streams group under one policy: the coordinator node, processes by slot, the ledger."""

    def __init__(self, engine: Engine, rng: random.Random, network: Network, policy: Policy,
                 settings: StreamsSimSettings | None = None) -> None:
        self.engine = engine
        self.rng = rng
        self.network = network
        self.policy = policy
        self.settings = s = settings or StreamsSimSettings()
        cold = policy is Policy.COLD
        self.streams_config = StreamsConfig(
            standby_replicas=s.standby_replicas,
            acceptable_recovery_lag=UNBOUNDED_LAG if cold else s.acceptable_recovery_lag,
            max_warmups=0 if cold else s.max_warmups)
        self.log = ProducedLog()
        self.log.create(s.topic, s.tasks, 0)
        config = CoordinatorConfig(session_timeout_ms=s.session_timeout_ms,
                                   heartbeat_interval_ms=s.heartbeat_interval_ms)
        self.node = StreamsCoordinatorNode(engine, rng, config, self.streams_config, self.log, self._wake,
                                           self._effects, self._committed)
        self.members: dict[str, SimStreamsMember] = {}
        self._by_member_id: dict[str, SimStreamsMember] = {}
        self.violations: list[str] = []
        self.ledger = Ledger(s.task_ids(), self.violation)
        #: Measuring from this time on (None: the group is still forming).
        self.t0: int | None = None
        self.restored_records = 0
        self.promotions = 0
        self.probes = 0
        self.requests_at_t0 = 0
        self._target_actives: dict[TaskId, str] = {}
        self._probe_token = 0
        self.probe_at: int | None = None

    # ---------------------------------------------------------------- setting up
    def seed_offsets(self) -> None:
        """The application has run for a while: an operator's reset sets every task's committed
        offset to the state size before anyone joins (the first member takes them over)."""
        s = self.settings
        ack = self.node.reset(OffsetResetRequest(s.group_id, {s.shard(t): s.state_records
                                                              for t in s.task_ids()}))
        if not ack.ok:
            raise RuntimeError(f"could not seed the committed offsets: {ack.error.value} {ack.message}")

    def seed_copy(self, slot: str, task: TaskId) -> None:
        """Put an up-to-date dormant copy of ``task`` on the disk of ``slot``'s process."""
        m = self.members[slot]
        m.disk.copies[task] = Copy(task, DORMANT, self.settings.state_records, self.engine.now)

    def add_member(self, slot: str, static: bool = False) -> SimStreamsMember:
        m = self.members.get(slot)
        if m is None:
            m = self.members[slot] = SimStreamsMember(slot, static, self)
        return m

    def start(self, slot: str) -> None:
        self.members[slot].start()

    def crash(self, slot: str) -> None:
        self.members[slot].crash()

    def shutdown(self, slot: str, restart_after: int | None = None) -> None:
        self.members[slot].shutdown(restart_after)

    def slots(self) -> list[str]:
        return sorted(self.members)

    def forget_unused_copies(self) -> None:
        """Delete the copies no role uses: the group ran for a long time before the scenario (Kafka
        Streams' state cleaner deletes such directories after ``state.cleanup.delay.ms``), so the
        copies formation left behind do not exist. Members report the change on their next
        heartbeats; the scenario starts after them."""
        for _, m in sorted(self.members.items()):
            for task, c in sorted(m.disk.copies.items()):
                if c.role == DORMANT:
                    del m.disk.copies[task]

    def mark(self, t0: int) -> None:
        """Start measuring at ``t0``: restore work, promotions, probes and requests count from here."""
        now = self.engine.now
        for _, m in sorted(self.members.items()):
            for _, c in sorted(m.disk.copies.items()):
                m.settle(c, now)
        self.t0 = t0
        self.restored_records = self.promotions = self.probes = 0
        self.requests_at_t0 = self.node.requests

    def finish(self) -> None:
        """Account the restore work of every copy up to now (the run ends here)."""
        now = self.engine.now
        for _, m in sorted(self.members.items()):
            if m.alive:
                for _, c in sorted(m.disk.copies.items()):
                    m.settle(c, now)

    def register(self, member_id: str, member: SimStreamsMember) -> None:
        self._by_member_id[member_id] = member

    def violation(self, message: str) -> None:
        line = f"t={self.engine.now}: {message}"
        self.engine.trace("VIOLATION " + line)
        self.violations.append(line)

    # ---------------------------------------------------------------- what the members ask
    def group(self) -> StreamsGroup | None:
        return self.node.coordinator.streams.groups.get(self.settings.group_id)

    def committed(self, task: TaskId) -> int:
        group = self.group()
        got = None if group is None else group.offsets.get(self.settings.shard(task))
        return 0 if got is None else got.offset

    def restored(self, records: int, now: int) -> None:
        if self.t0 is not None and now >= self.t0:
            self.restored_records += records

    # ---------------------------------------------------------------- coordinator hooks
    def _wake(self, group_id: str, member_id: str) -> None:
        m = self._by_member_id.get(member_id)
        if m is not None:
            m.nudged(member_id)

    def _committed(self, offsets: Mapping[Shard, int]) -> None:
        """A commit was accepted: following copies chase the new committed offset."""
        now = self.engine.now
        s = self.settings
        for shard, offset in sorted(offsets.items()):
            task = TaskId(s.subtopology, shard.partition)
            for _, m in sorted(self.members.items()):
                c = m.disk.copies.get(task)
                if m.alive and c is not None and c.role in FOLLOWING:
                    m.rebase(c, now, offset)

    def _effects(self, eff: Effects[Any]) -> None:
        if self.engine.verbose:
            for e in eff.epoch_events:
                self.engine.trace(f"coord: {e}")
            for _, mid in sorted(eff.nudges):
                self.engine.trace(f"coord: nudge {mid}")
        group = self.group()
        if group is None:
            return
        limit = self.streams_config.acceptable_recovery_lag
        for e in eff.epoch_events:
            if isinstance(e, GroupEpochBumped):
                for cause in e.causes:
                    if isinstance(cause, WarmupCaughtUp):
                        if cause.lag > limit:
                            self.violation(f"promotion of {cause.task} on {cause.member_id} with lag "
                                           f"{cause.lag} > {limit}")
                        if self.t0 is not None:
                            self.promotions += 1
            elif isinstance(e, TargetInstalled):
                self._target_installed(group)
        actives: dict[TaskId, str] = {}
        for mid, cur in sorted(group.current.items()):
            for t in sorted(held(cur).active):
                other = actives.setdefault(t, mid)
                if other != mid:
                    self.violation(f"the core holds task {t} active on both {other} and {mid}")

    def _target_installed(self, group: StreamsGroup) -> None:
        new = {t: mid for mid, tasks in sorted(group.target.items()) for t in tasks.active}
        book = self.node.coordinator.streams.lags.get(group.group_id)
        limit = self.streams_config.acceptable_recovery_lag
        for t, mid in sorted(new.items()):
            old = self._target_actives.get(t)
            if old is None or old == mid or old not in group.members:
                continue
            pid = group.members[mid].process_id
            if group.members[old].process_id == pid:
                continue
            lag = None if book is None else book.seen.get((pid, t))
            if lag is None or lag > limit:
                self.violation(f"target moves active {t} from {old} to {mid}, whose process's copy "
                               f"was seen {'absent' if lag is None else f'{lag} behind'} (limit {limit})")
        self._target_actives = new
        if self.policy is Policy.KIP441:
            self._schedule_probe(self._movements_pending(group))

    # ---------------------------------------------------------------- probing (kip441)
    def _movements_pending(self, group: StreamsGroup) -> bool:
        """Kafka Streams probes while its assignor left movements pending: warm-ups, or actives
        not yet where balance wants them (here: counts not balanced across members)."""
        if any(t.warmup for t in group.target.values()):
            return True
        return not _balanced_counts(group, self.settings.tasks)

    def _schedule_probe(self, pending: bool) -> None:
        self._probe_token += 1
        if not pending:
            self.probe_at = None
            return
        self.probe_at = self.engine.now + self.settings.probing_interval_ms
        token = self._probe_token
        self.engine.at(self.probe_at, "", lambda: self._probe(token))

    def _probe(self, token: int) -> None:
        if token != self._probe_token:
            return
        self.engine.trace("probing rebalance: every member reports every copy")
        if self.t0 is not None:
            self.probes += 1
        for _, m in sorted(self.members.items()):
            m.probe()
        group = self.group()
        self._schedule_probe(group is not None and self._movements_pending(group))

    # ---------------------------------------------------------------- state
    def live_members(self) -> list[SimStreamsMember]:
        return [m for _, m in sorted(self.members.items()) if m.alive and not m.leaving]

    def churn_pending(self) -> bool:
        return any(m.leaving or m.restart_pending for m in self.members.values())

    def available(self) -> bool:
        now = self.engine.now
        return all(self.ledger.processing(t, now) is not None for t in self.settings.task_ids())

    def balanced(self) -> bool:
        """No warm-up in the target, actives balanced across members, and every task processed by
        the member the target gives it."""
        group = self.group()
        if group is None or any(t.warmup for t in group.target.values()):
            return False
        if not _balanced_counts(group, self.settings.tasks):
            return False
        now = self.engine.now
        for mid, tasks in group.target.items():
            for t in tasks.active:
                if self.ledger.processing(t, now) != mid:
                    return False
        return True

    def settled(self) -> bool:
        """At rest: balanced, the core's group stable with exactly the live members, every member
        settled, every standby within the acceptable lag of the committed offset."""
        if not self.node.up or self.churn_pending() or not self.balanced():
            return False
        group = self.group()
        assert group is not None
        if group.state is not StreamsGroupState.STABLE:
            return False
        live = self.live_members()
        if set(group.members) != {m.member_id for m in live}:
            return False
        if not all(m.settled() for m in live):
            return False
        now = self.engine.now
        for m in live:
            for t, c in m.disk.copies.items():
                if c.role == STANDBY and self.committed(t) - c.state(now, self.settings) \
                        > self.settings.acceptable_recovery_lag:
                    return False
        return True

    def check_replay(self) -> None:
        """Invariant 4."""
        rebuilt = Coordinator.recover(self.node.store.records, self.engine.now, self.node.config,
                                      streams=self.streams_config)
        if rebuilt.streams.groups != self.node.coordinator.streams.groups:
            self.violation("the store's records do not rebuild the live streams groups")

    def describe(self) -> str:
        group = self.group()
        parts = [f"policy {self.policy.value}"]
        if group is not None:
            parts.append(f"group {group.state.value} epoch {group.epoch} target {group.target_epoch}")
            for mid, t in sorted(group.target.items()):
                parts.append(f"{mid} target a{sorted(map(str, t.active))} s{sorted(map(str, t.standby))} "
                             f"w{sorted(map(str, t.warmup))}")
        for slot, m in sorted(self.members.items()):
            if m.alive and m.sm is not None:
                parts.append(f"{m.sm.member_id}: {m.sm.state.value} op {m.op!r}")
            else:
                parts.append(f"{slot}: down")
        return "; ".join(parts)


def _balanced_counts(group: StreamsGroup, tasks: int) -> bool:
    if not group.members:
        return False
    q = tasks // len(group.members)
    counts = [len(group.member_target(mid).active) for mid in group.members]
    return all(q <= n <= q + 1 for n in counts) and sum(counts) == tasks


__all__ = ["UNBOUNDED_LAG", "Ledger", "Policy", "StreamsCoordinatorNode", "StreamsSystem"]
