"""Streams groups as a pure state machine, beside the consumer groups of `regroup.protocol.coordinator`.

Same contract as the consumer-group `Coordinator`: every method that may change state takes the
time (ms) and returns an `Outcome` (the response, the records to make durable before releasing it,
the members to nudge, why epochs moved and who was fenced); `next_deadline()` says when to call
`expire(now)`. Committed source offsets are kept with each group (`StreamsOffsetRecord`); who may
commit them is `regroup.protocol.streams.offsets`'s rule. `regroup.protocol.coordinator` puts these
groups beside the consumer groups behind one door (one group-id namespace).

Rules the methods keep:

1. The group epoch moves when a member joins, leaves or is fenced, when the topology or its source
   topics' partition counts change, when a static member comes back from another process, and when
   a heartbeat reports a warm-up (or a lagging standby) caught up — promotion by event, not by a
   probing timer. Nothing else bumps it: in particular, lag reports alone do not.
2. The target is recomputed right away whenever the group epoch is ahead of it, with the
   `HighlyAvailableAssignor` over the lags the members last reported (`lags`), and checked with
   `validate_task_assignment`. A topology that cannot run on the topics (not ready) gets an empty
   target: nothing is assigned, and every response says why.
3. Each member then moves toward its target on its own heartbeats (`reconcile`): revoke, then the
   new epoch, then what is free. No barrier.
4. A heartbeat that fails a check changes nothing, not even the soft lag state: a zombie's report
   is fenced by its epoch like everything else.
5. A dynamic member whose connection broke is fenced at the end of the failover grace unless it
   heartbeats or reconnects first, and so is one that does not show up within a heartbeat interval
   plus the grace after a restart; a static member waits its session timeout
   (`regroup.protocol.failover`, the same rule as consumer groups').
6. The cut of every source topic (the parallelism of the subtopology reading it: its key ranges per
   partition, `topology` rule 4) is fixed for the life of the group: the group remembers the cut of
   each topic any of its topologies ever read (`StreamsGroup.cuts`, durable), and a member whose
   topology cuts one of them differently is refused (INVALID_REQUEST, naming the topic and both
   parallelisms) and changes nothing — its tasks would be other cuts of the keys, the state of one
   cut cannot become another's, and the holders of the old cut's tasks may still be running them.
   It is the topic's cut that is remembered, not the subtopology's, so a topology that drops the
   subtopology for a while and brings it back, or renames it, cannot re-cut the keys either. (The
   committed offsets would not do as the memory: a group has tasks running before it has committed
   anything, and an operator may delete offsets.) Any other topology change is taken as before
   (the latest sent wins). To change the parallelism, delete the group (which needs it empty, and
   drops its offsets) and start again with fresh local state. In defence of the same invariant
   when the records hold another cut anyway (data written before this rule was kept), an active is
   granted only once no other member holds an active of an overlapping key range of the same
   partition (`_blocker`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from regroup.protocol.causes import (
    BumpCause,
    EpochEvent,
    Fence,
    FenceReason,
    GroupCreated,
    GroupDeleted,
    GroupEpochBumped,
    MemberFenced,
    MemberJoined,
    MemberLeft,
    StaticTakeOver,
    SubscribedTopicsChanged,
    TargetInstalled,
    TopologyChanged,
    WarmupCaughtUp,
)
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.failover import arm_grace, arm_restart_grace, disarm_grace, member_grace
from regroup.protocol.messages import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Ack,
    CommittedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetResetRequest,
)
from regroup.protocol.outcome import Outcome
from regroup.protocol.shard import Shard
from regroup.protocol.streams import offsets as task_offsets
from regroup.protocol.streams.assignment import (
    NO_TASKS,
    AssignmentConfig,
    MemberTasks,
)
from regroup.protocol.streams.describe import StreamsGroupDescription, describe
from regroup.protocol.streams.fencing import (
    check_epoch,
    check_instance,
    check_leaving_instance,
    static_predecessor,
    validate,
)
from regroup.protocol.streams.lags import CommittedOffsets, LagBook
from regroup.protocol.streams.messages import (
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
)
from regroup.protocol.streams.reconcile import reconcile
from regroup.protocol.streams.records import (
    MemberStatus,
    SourceParallelismRecord,
    SourceTopicsRecord,
    StreamsCurrent,
    StreamsCurrentRecord,
    StreamsEpochRecord,
    StreamsMember,
    StreamsMemberRecord,
    StreamsOffsetRecord,
    StreamsRecord,
    StreamsTargetEpochRecord,
    StreamsTargetRecord,
    TopologyRecord,
)
from regroup.protocol.streams.state import StreamsGroup, apply, held
from regroup.protocol.streams.target import ASSIGNOR, ProcessLags, caught_up, group_status, new_target
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.protocol.timers import DueTimer, MemberKey, TimerKind, Timers
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import (
    check_id,
    validate_commit,
    validate_fetch,
    validate_group_shards,
    validate_reset,
)

__all__ = ["StreamsConfig", "StreamsGroups"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamsConfig:
    """A streams group's settings (defaults: Kafka Streams' KIP-441 defaults)."""

    standby_replicas: int = 0
    acceptable_recovery_lag: int = 10_000
    max_warmups: int = 2

    def __post_init__(self) -> None:
        self.assignment()  # the same checks

    def assignment(self) -> AssignmentConfig:
        return AssignmentConfig(self.standby_replicas, self.acceptable_recovery_lag, self.max_warmups)


@dataclass
class _Changes:
    """Records emitted by one step, applied as they are emitted so later decisions see them."""

    groups: dict[str, StreamsGroup]
    records: list[StreamsRecord] = field(default_factory=list)
    wake: set[MemberKey] = field(default_factory=set)
    fences: list[Fence] = field(default_factory=list)
    events: list[EpochEvent] = field(default_factory=list)
    departed: list[MemberKey] = field(default_factory=list)
    pending: list[BumpCause] = field(default_factory=list)

    def emit(self, record: StreamsRecord) -> None:
        apply(self.groups, record)
        self.records.append(record)

    def bump(self, group: StreamsGroup, *causes: BumpCause) -> None:
        epoch = group.epoch + 1
        self.emit(StreamsEpochRecord(group.group_id, epoch))
        self.events.append(GroupEpochBumped(group.group_id, epoch, (*self.pending, *causes)))
        self.pending.clear()

    def outcome(self, response: T) -> Outcome[T]:
        return Outcome(response, tuple(self.records), frozenset(self.wake), tuple(self.fences),
                       tuple(self.events), tuple(self.departed))


class StreamsGroups:
    """Every streams group of one coordinator, their timers, and the lags their members report."""

    def __init__(self, config: StreamsConfig | None = None, topics: TopicMetadata | None = None,
                 offsets: CommittedOffsets | None = None,
                 coordinator: CoordinatorConfig | None = None,
                 group_configs: Mapping[str, StreamsConfig] | None = None) -> None:
        self.config = config or StreamsConfig()
        self.group_configs = dict(group_configs or {})
        self.topics = topics or TopicMetadata()
        #: Where lags are measured from: the groups' own committed offsets unless a test says otherwise.
        self.offsets: CommittedOffsets = offsets or self._committed
        self.limits = coordinator or CoordinatorConfig()
        self.groups: dict[str, StreamsGroup] = {}
        self.lags: dict[str, LagBook] = {}
        self.timers = Timers()

    def config_for(self, group_id: str) -> StreamsConfig:
        return self.group_configs.get(group_id, self.config)

    # ---------------------------------------------------------------- recovery and snapshots
    def recover(self, records: Iterable[StreamsRecord], now: int) -> None:
        """Rebuild from durable records (replacing any state) and re-arm every timer as of ``now``.

        Members get a full session from ``now``; members still revoking a full revocation timeout.
        Lags start unknown (`lags` rule 1).
        """
        self.groups = {}
        self.lags = {}
        self.timers = Timers()
        for r in records:
            apply(self.groups, r)
        for gid, group in sorted(self.groups.items()):
            self.lags[gid] = LagBook()
            for mid in sorted(group.members):
                self._touch(gid, mid, now)
                cur = group.current[mid]
                if cur.status is MemberStatus.UNREVOKED and cur.epoch != STATIC_LEAVE_EPOCH:
                    self.timers.arm(TimerKind.REVOCATION, gid, mid,
                                    now + group.members[mid].rebalance_timeout_ms, cur.epoch)

    def snapshot(self) -> list[StreamsRecord]:
        """The shortest record list that rebuilds the durable state."""
        out: list[StreamsRecord] = []
        for gid, g in sorted(self.groups.items()):
            out.append(StreamsEpochRecord(gid, g.epoch))
            if g.topology is not None:
                out.append(TopologyRecord(gid, g.topology))
            read_now = g.topology.source_topics if g.topology is not None else frozenset()
            out.extend(SourceParallelismRecord(gid, t, k) for t, k in sorted(g.cuts.items())
                       if t not in read_now)
            out.append(SourceTopicsRecord(gid, dict(g.source_topics)))
            out.extend(StreamsMemberRecord(gid, mid, m) for mid, m in sorted(g.members.items()))
            out.extend(StreamsTargetRecord(gid, mid, t) for mid, t in sorted(g.target.items()))
            out.append(StreamsTargetEpochRecord(gid, g.target_epoch))
            out.extend(StreamsCurrentRecord(gid, mid, c) for mid, c in sorted(g.current.items()))
            out.extend(StreamsOffsetRecord(gid, sh, o.offset, o.metadata, o.commit_epoch)
                       for sh, o in sorted(g.offsets.items()))
        return out

    # ---------------------------------------------------------------- heartbeat
    def heartbeat(self, req: StreamsHeartbeatRequest, now: int) -> Outcome[StreamsHeartbeatResponse]:
        """The one door for a streams member: join, heartbeat, leave (-1) or step out (-2)."""
        try:
            validate(req, self.limits)
            if req.member_epoch == LEAVE_EPOCH:
                return self._leave(req, now)
            if req.member_epoch == STATIC_LEAVE_EPOCH:
                return self._static_leave(req, now)
            return self._heartbeat(req, now)
        except ProtocolError as e:
            return Outcome(StreamsHeartbeatResponse(e.code, e.message, req.member_id, req.member_epoch,
                                                    self.limits.heartbeat_interval_ms))

    def _heartbeat(self, req: StreamsHeartbeatRequest, now: int) -> Outcome[StreamsHeartbeatResponse]:
        gid, mid = req.group_id, req.member_id
        joining = req.member_epoch == JOIN_EPOCH
        group = self.groups.get(gid)
        meta = group.members.get(mid) if group is not None else None
        predecessor: str | None = None
        # --- checks: nothing below raises once the first record is emitted ---
        if group is None:
            if not joining:
                raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND,
                                    f"streams group {gid!r} does not exist; join it with member_epoch 0")
        else:
            check_instance(group, req, meta, joining)
            if joining:
                predecessor = static_predecessor(group, req)
                if meta is None and predecessor is None \
                        and len(group.members) >= self.limits.max_group_size:
                    raise ProtocolError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                        f"streams group {gid!r} already has {len(group.members)} members")
            elif meta is None:
                raise ProtocolError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"member {mid!r} is not in streams group {gid!r} (it left, or was fenced after its "
                    "session timed out); drop its tasks and rejoin with epoch 0")
            else:
                check_epoch(group, req, group.current[mid])
        if group is not None and req.topology is not None:
            _check_cuts(group, req.topology)
        if (group is None or group.topology is None) and req.topology is None:
            raise ProtocolError(ErrorCode.INVALID_REQUEST,
                                f"the first member of streams group {gid!r} must send the topology")
        base = meta if meta is not None else (
            group.members[predecessor] if group is not None and predecessor is not None else None)
        if req.process_id is None and base is None:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "a joining member must send its process id")
        if meta is not None and req.process_id is not None and req.process_id != meta.process_id:
            raise ProtocolError(ErrorCode.INVALID_REQUEST,
                                f"member {mid!r} runs in process {meta.process_id!r}; a member cannot "
                                "change process, join with a new member id")
        new_meta = self._merged(base, req)

        # --- changes ---
        ch = _Changes(self.groups)
        released_by_predecessor: frozenset[TaskId] = frozenset()
        if group is None:
            ch.emit(StreamsEpochRecord(gid, 0))
            ch.events.append(GroupCreated(gid))
            group = self.groups[gid]
            self.lags[gid] = LagBook()
        book = self.lags.setdefault(gid, LagBook())
        bump = False
        if predecessor is not None and base is not None and base.process_id == new_meta.process_id:
            self._take_over(ch, group, predecessor, mid, new_meta)
        elif meta is None:
            if predecessor is not None and req.instance_id is not None:
                # Back on another process: its state directory is not there, so it inherits
                # nothing (and inheriting could put an active beside a copy on the new process).
                h = held(group.current[predecessor])
                self._drop_member(ch, group, predecessor)
                released_by_predecessor = h.active | h.standby | h.warmup
                ch.pending.append(StaticTakeOver(req.instance_id, predecessor, mid))
            else:
                ch.pending.append(MemberJoined(mid))
            ch.emit(StreamsMemberRecord(gid, mid, new_meta))
            ch.emit(StreamsCurrentRecord(gid, mid, StreamsCurrent(0, LEAVE_EPOCH, MemberStatus.STABLE,
                                                                  NO_TASKS, NO_TASKS)))
            bump = True
        else:
            if new_meta != meta:
                ch.emit(StreamsMemberRecord(gid, mid, new_meta))
            cur = group.current[mid]
            if cur.epoch == STATIC_LEAVE_EPOCH:  # the same static member is back under its own id
                ch.emit(StreamsCurrentRecord(gid, mid, _returned(cur)))
        if req.topology is not None and req.topology != group.topology:
            # The latest topology sent wins (KIP-1071 orders them by a topology epoch; regroup
            # does not have one yet, so members of a rolling upgrade should send it once).
            if group.topology is not None:
                ch.pending.append(TopologyChanged(mid))
            ch.emit(TopologyRecord(gid, req.topology))
            bump = True
        if joining:
            book.forget(mid)
        if req.task_offsets is not None:
            book.report(mid, req.task_offsets)
        bump = self._source_topics_changed(ch, group) or bump
        config = self.config_for(gid)
        lags_now = book.process_lags(group, self.offsets)
        caught = caught_up(group, mid, lags_now.get(new_meta.process_id, {}),
                           book.seen, book.seen_processes, config.acceptable_recovery_lag)
        if not caught and new_meta.process_id not in book.seen_processes:
            caught = self._unseen_standbys(group, mid, new_meta.process_id, lags_now, book)
        elif caught and not bump:
            caught = self._standbys_that_matter(group, mid, new_meta.process_id, caught, lags_now, book)
        if caught:
            ch.pending.extend(caught)
            bump = True
        if bump:
            ch.bump(group)
        self._maybe_update_target(ch, group)
        self._wake_waiters(ch, group, released_by_predecessor)

        cur = group.current[mid]
        owned = req.owned
        if joining and meta is not None and cur.epoch > 0:
            owned = None  # a retried or stale join: its "owns nothing" releases nothing
        nxt = reconcile(cur, group.target_epoch, group.member_target(mid), owned,
                        _blocker(group, mid))
        if nxt is not cur:
            ch.emit(StreamsCurrentRecord(gid, mid, nxt))
            self._wake_waiters(ch, group, _released(held(cur), held(nxt)))
        self._arm_revocation(group, mid, cur, nxt, now)
        self._touch(gid, mid, now)

        full = req.owned is not None and req.rebalance_timeout_ms is not None and req.process_id is not None
        send = joining or full or nxt.assigned != cur.assigned or (
            req.owned is not None and req.owned != nxt.assigned)
        return ch.outcome(StreamsHeartbeatResponse(
            ErrorCode.NONE, "", mid, nxt.epoch, self.limits.heartbeat_interval_ms,
            nxt.assigned if send else None, group_status(group), self.limits.session_timeout_ms,
            member_grace(self.limits.failover_grace_ms, new_meta.instance_id)))

    def _merged(self, base: StreamsMember | None, req: StreamsHeartbeatRequest) -> StreamsMember:
        timeout = req.rebalance_timeout_ms if req.rebalance_timeout_ms is not None else (
            base.rebalance_timeout_ms if base else self.limits.max_rebalance_timeout_ms)
        process = req.process_id if req.process_id is not None else (base.process_id if base else "")
        instance = req.instance_id if req.instance_id is not None else (base.instance_id if base else None)
        return StreamsMember(instance, process, min(timeout, self.limits.max_rebalance_timeout_ms))

    def _take_over(self, ch: _Changes, group: StreamsGroup, old: str, new: str,
                   meta: StreamsMember) -> None:
        """A static member back under a new member id inherits everything; nothing moves."""
        gid = group.group_id
        old_cur = group.current[old]
        old_target = group.target.get(old)
        self._drop_member(ch, group, old)
        ch.emit(StreamsMemberRecord(gid, new, meta))
        if old_target is not None:
            ch.emit(StreamsTargetRecord(gid, new, old_target))
        ch.emit(StreamsCurrentRecord(gid, new, _returned(old_cur)))

    # ---------------------------------------------------------------- leaving
    def _leave(self, req: StreamsHeartbeatRequest, now: int) -> Outcome[StreamsHeartbeatResponse]:
        group = self._known_member(req)
        ch = _Changes(self.groups)
        self._remove(ch, group, req.member_id, MemberLeft(req.member_id))
        return ch.outcome(StreamsHeartbeatResponse(ErrorCode.NONE, "", req.member_id, LEAVE_EPOCH,
                                                   self.limits.heartbeat_interval_ms))

    def _static_leave(self, req: StreamsHeartbeatRequest, now: int) -> Outcome[StreamsHeartbeatResponse]:
        """A static member steps out for a while: it keeps its assigned tasks until its session times
        out, and releases at once those it was told to give up (a member stops its tasks, committing
        the actives' last batches, before it leaves), waking the members waiting for them — as for
        consumer groups. Nothing else moves: no epoch bump, no new target."""
        group = self._known_member(req)
        cur = group.current[req.member_id]
        ch = _Changes(self.groups)
        back_at = cur.previous_epoch if cur.epoch == STATIC_LEAVE_EPOCH else cur.epoch
        status = MemberStatus.STABLE if cur.status is MemberStatus.UNREVOKED else cur.status
        away = StreamsCurrent(STATIC_LEAVE_EPOCH, back_at, status, cur.assigned, NO_TASKS)
        if away != cur:
            ch.emit(StreamsCurrentRecord(group.group_id, req.member_id, away))
            self._wake_waiters(ch, group, _released(held(cur), held(away)))
        self.timers.disarm(TimerKind.REVOCATION, group.group_id, req.member_id)
        self._touch(group.group_id, req.member_id, now)
        return ch.outcome(StreamsHeartbeatResponse(ErrorCode.NONE, "", req.member_id, STATIC_LEAVE_EPOCH,
                                                   self.limits.heartbeat_interval_ms))

    def _known_member(self, req: StreamsHeartbeatRequest) -> StreamsGroup:
        group = self.groups.get(req.group_id)
        if group is None:
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND,
                                f"streams group {req.group_id!r} does not exist")
        check_leaving_instance(group, req)  # by the instance id first, when it names one (Kafka's order)
        if req.member_id not in group.members:
            raise ProtocolError(ErrorCode.UNKNOWN_MEMBER_ID,
                                f"member {req.member_id!r} is not in streams group {req.group_id!r}; "
                                "nothing to leave")
        return group

    def _remove(self, ch: _Changes, group: StreamsGroup, mid: str, cause: MemberLeft | MemberFenced) -> None:
        """Take a member out for good (leave or fence): bump, free its tasks, new target."""
        h = held(group.current[mid])
        released = h.active | h.standby | h.warmup
        self._drop_member(ch, group, mid)
        ch.pending.append(cause)
        self._source_topics_changed(ch, group)
        ch.bump(group)
        self._maybe_update_target(ch, group)
        self._wake_waiters(ch, group, released)

    def _drop_member(self, ch: _Changes, group: StreamsGroup, mid: str) -> None:
        gid = group.group_id
        ch.emit(StreamsCurrentRecord(gid, mid, None))
        if mid in group.target:
            ch.emit(StreamsTargetRecord(gid, mid, None))
        ch.emit(StreamsMemberRecord(gid, mid, None))
        ch.departed.append((gid, mid))
        self.timers.forget_member(gid, mid)
        self.lags.setdefault(gid, LagBook()).forget(mid)

    # ---------------------------------------------------------------- topology and target
    def _source_topics_changed(self, ch: _Changes, group: StreamsGroup) -> bool:
        """Record the source topics' partition counts when they changed (the caller bumps)."""
        if group.topology is None:
            return False
        counts = {t: self.topics[t] for t in sorted(group.topology.source_topics) if t in self.topics}
        if counts == group.source_topics:
            return False
        ch.emit(SourceTopicsRecord(group.group_id, counts))
        ch.pending.append(SubscribedTopicsChanged(counts))
        return True

    def _unseen_standbys(self, group: StreamsGroup, mid: str, pid: str, lags: ProcessLags,
                         book: LagBook) -> list[WarmupCaughtUp]:
        """`target` rule 3 for a process the last computation did not see (the first reports after
        a coordinator restart). The report covers every copy on the process, so every member of
        the process counts: a caught-up warm-up of any of them calls for a new target (its
        promotion); caught-up standbys only if the assignor, given the lags now, would change it —
        a move may be waiting for exactly this copy. Either way the process counts as seen from now
        on, so this runs once per process. (Looking at the reporting member's copies alone marked
        another member's caught-up warm-up as seen without promoting it, for good: found by the
        churn property test.)"""
        limit = self.config_for(group.group_id).acceptable_recovery_lag
        own = lags.get(pid, {})
        book.seen.update({(pid, t): lag for t, lag in own.items()})
        book.seen_processes = book.seen_processes | {pid}
        warmups: list[WarmupCaughtUp] = []
        standbys: list[WarmupCaughtUp] = []
        for other in sorted(m for m, meta in group.members.items() if meta.process_id == pid):
            target = group.member_target(other)
            warmups += [WarmupCaughtUp(other, str(t), own[t]) for t in sorted(target.warmup)
                        if own.get(t, limit + 1) <= limit]
            standbys += [WarmupCaughtUp(other, str(t), own[t]) for t in sorted(target.standby)
                         if own.get(t, limit + 1) <= limit]
        if group.epoch > group.target_epoch or not (warmups or standbys):
            return []  # nothing caught up, or a computation is due anyway and will see these lags
        if not warmups and not self._target_would_change(group, lags):
            return []
        return warmups + standbys

    def _standbys_that_matter(self, group: StreamsGroup, mid: str, pid: str, caught: list[WarmupCaughtUp],
                              lags: ProcessLags, book: LagBook) -> list[WarmupCaughtUp]:
        """`target` rule 3 when only standbys caught up: a standby whose lag hovers around the
        acceptable recovery lag would bump the epoch at every crossing with the target unchanged.
        So a caught-up standby calls for a new target only if the assignor, given the lags now,
        would change it; either way it counts as seen caught up, so the question is asked once per
        crossing seen by a computation. A warm-up caught up always calls for one (its promotion)."""
        target = group.member_target(mid)
        if any(c.task in {str(t) for t in target.warmup} for c in caught):
            return caught
        standbys = {str(t): t for t in target.standby}
        for c in caught:
            book.seen[(pid, standbys[c.task])] = c.lag
        return caught if self._target_would_change(group, lags) else []

    def _target_would_change(self, group: StreamsGroup, lags: ProcessLags) -> bool:
        would = new_target(group, lags, self.config_for(group.group_id).assignment())
        return any(would.get(m, NO_TASKS) != group.member_target(m) for m in group.members)

    def _maybe_update_target(self, ch: _Changes, group: StreamsGroup) -> None:
        if group.epoch <= group.target_epoch or not group.members:
            return
        gid = group.group_id
        book = self.lags.setdefault(gid, LagBook())
        lags = book.process_lags(group, self.offsets)
        target = new_target(group, lags, self.config_for(gid).assignment())
        book.remember(lags)
        changed = 0
        for mid in sorted(group.members):
            tasks = target.get(mid, NO_TASKS)
            if group.target.get(mid) != tasks:
                ch.emit(StreamsTargetRecord(gid, mid, tasks))
                ch.wake.add((gid, mid))
                changed += 1
        ch.emit(StreamsTargetEpochRecord(gid, group.epoch))
        ch.events.append(TargetInstalled(gid, group.epoch, ASSIGNOR.name, changed))

    def _wake_waiters(self, ch: _Changes, group: StreamsGroup, released: frozenset[TaskId]) -> None:
        if not released:
            return
        by_partition: dict[tuple[str, int], list[TaskId]] = {}
        for r in released:
            by_partition.setdefault((r.subtopology, r.partition), []).append(r)
        for mid, c in group.current.items():
            if c.status is MemberStatus.UNRELEASED:
                t = group.member_target(mid)
                if not released.isdisjoint(t.active | t.standby | t.warmup) or _waits_for_other_cut(
                        t.active - c.assigned.active, by_partition):
                    ch.wake.add((group.group_id, mid))

    def update_topics(self, topics: TopicMetadata, now: int) -> Outcome[None]:
        """New topic metadata: groups whose source topics changed get a new epoch and target."""
        self.topics = topics
        ch = _Changes(self.groups)
        for _, group in sorted(self.groups.items()):
            if group.members and self._source_topics_changed(ch, group):
                ch.bump(group)
                self._maybe_update_target(ch, group)
        return ch.outcome(None)

    # ---------------------------------------------------------------- timers
    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def connection_lost(self, group_id: str, member_id: str, now: int) -> Outcome[None]:
        """A dynamic member's broken connection ends its session at the end of the grace, unless it
        heartbeats or reconnects first (`regroup.protocol.failover`, the consumer groups' rule)."""
        group = self.groups.get(group_id)
        meta = group.members.get(member_id) if group is not None else None
        if group is not None and meta is not None:
            arm_grace(self.timers, self.limits.failover_grace_ms, group_id, member_id, meta.instance_id,
                      group.current[member_id].epoch, now)
        return Outcome(None)

    def connection_restored(self, group_id: str, member_id: str, now: int) -> Outcome[None]:
        """The member opened a stream again: back to its session deadline (failover rule 3)."""
        disarm_grace(self.timers, group_id, member_id)
        return Outcome(None)

    def serving(self, now: int) -> Outcome[None]:
        """The coordinator, recovered, starts serving: every dynamic member must show up within a
        heartbeat interval plus the grace, or is fenced (failover rule 4)."""
        grace, interval = self.limits.failover_grace_ms, self.limits.heartbeat_interval_ms
        for gid, group in sorted(self.groups.items()):
            for mid, meta in sorted(group.members.items()):
                arm_restart_grace(self.timers, grace, interval, gid, mid, meta.instance_id,
                                  group.current[mid].epoch, now)
        return Outcome(None)

    def expire(self, now: int) -> Outcome[None]:
        """Fence members whose session or revocation timed out."""
        ch = _Changes(self.groups)
        for due in self.timers.pop_due(now):
            self._fire(ch, due)
        return ch.outcome(None)

    def _fire(self, ch: _Changes, due: DueTimer) -> None:
        group = self.groups.get(due.group_id)
        cur = group.current.get(due.member_id) if group is not None else None
        if group is None or cur is None:
            return
        if due.kind is TimerKind.REVOCATION:
            if not (cur.status is MemberStatus.UNREVOKED and cur.epoch == due.epoch):
                return
            reason = FenceReason.REVOCATION_TIMEOUT
        elif due.kind is TimerKind.SESSION:
            reason = FenceReason.SESSION_TIMEOUT
        elif due.kind is TimerKind.GRACE:  # armed only while no heartbeat came after the loss
            reason = FenceReason.CONNECTION_LOST
        else:
            return
        ch.fences.append(Fence(group.group_id, due.member_id, reason))
        self._remove(ch, group, due.member_id, MemberFenced(due.member_id, reason))

    def _arm_revocation(self, group: StreamsGroup, mid: str, cur: StreamsCurrent, nxt: StreamsCurrent,
                        now: int) -> None:
        gid = group.group_id
        if nxt.status is MemberStatus.UNREVOKED:
            if cur.status is not MemberStatus.UNREVOKED or nxt.pending_revocation != cur.pending_revocation \
                    or not self.timers.is_armed(TimerKind.REVOCATION, gid, mid):
                self.timers.arm(TimerKind.REVOCATION, gid, mid,
                                now + group.members[mid].rebalance_timeout_ms, nxt.epoch)
        elif cur.status is MemberStatus.UNREVOKED:
            self.timers.disarm(TimerKind.REVOCATION, gid, mid)

    def _touch(self, gid: str, mid: str, now: int) -> None:
        self.timers.touch_session(gid, mid, now + self.limits.session_timeout_ms)

    # ---------------------------------------------------------------- offsets and admin
    def _committed(self, group_id: str, shard: Shard) -> int | None:
        group = self.groups.get(group_id)
        return None if group is None else task_offsets.committed_low(group, shard)

    def commit_offsets(self, req: OffsetCommitRequest, now: int) -> Outcome[Ack]:
        """An active's commit of its tasks' source offsets (`offsets` rule 1)."""
        try:
            validate_commit(req, self.limits)
            records = task_offsets.commit_records(self._group(req.group_id), req)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._offsets_changed(records)

    def reset_offsets(self, req: OffsetResetRequest, now: int) -> Outcome[Ack]:
        try:
            validate_reset(req, self.limits)
            records = task_offsets.reset_records(self._group(req.group_id), req)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._offsets_changed(records)

    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        try:
            validate_fetch(req, self.limits)
            group = self._group(req.group_id)
            found: Mapping[Shard, CommittedOffset] = task_offsets.fetch_offsets(group, req)
        except ProtocolError as e:
            return OffsetFetchResponse(e.code, e.message)
        return OffsetFetchResponse(ErrorCode.NONE, "", found)

    def delete_offsets(self, group_id: str, shards: tuple[Shard, ...] | None) -> Outcome[Ack]:
        try:
            validate_group_shards(group_id, shards, self.limits)
            records = task_offsets.delete_offset_records(self._group(group_id), shards)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._offsets_changed(records)

    def adopt_offsets(self, group_id: str, offsets: Mapping[Shard, CommittedOffset]) -> Outcome[None]:
        """Offsets an operator set before the group existed (kept as an empty consumer group's) become
        this new streams group's: `regroup.protocol.coordinator` hands them over on the first join. A
        whole partition of a topic the group cuts into key ranges seeds each range (`offsets` rule 5)."""
        ch = _Changes(self.groups)
        group = self.groups.get(group_id)
        if group is not None:
            offsets = task_offsets.per_task(group, offsets)  # whole partitions only: no clash
        for sh, o in sorted(offsets.items()):
            ch.emit(StreamsOffsetRecord(group_id, sh, o.offset, o.metadata, o.commit_epoch))
        return ch.outcome(None)

    def _offsets_changed(self, records: list[StreamsOffsetRecord]) -> Outcome[Ack]:
        ch = _Changes(self.groups)
        for r in records:
            ch.emit(r)
        return ch.outcome(Ack(ErrorCode.NONE))

    def delete_group(self, group_id: str) -> Outcome[Ack]:
        """An operator deletes a streams group with no members, its committed offsets with it."""
        try:
            check_id("group_id", group_id, self.limits)
            group = self._group(group_id)
            records = task_offsets.delete_offset_records(group, None)  # refuses a group with members
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        ch = _Changes(self.groups)
        for r in records:
            ch.emit(r)
        ch.emit(StreamsEpochRecord(group_id, None))
        ch.events.append(GroupDeleted(group_id))
        self.lags.pop(group_id, None)
        return ch.outcome(Ack(ErrorCode.NONE))

    def _group(self, group_id: str) -> StreamsGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"streams group {group_id!r} does not exist")
        return group

    # ---------------------------------------------------------------- reading
    def describe_group(self, group_id: str) -> StreamsGroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"streams group {group_id!r} does not exist")
        book = self.lags.get(group_id, LagBook())
        return describe(group, group_status(group), book.process_lags(group, self.offsets),
                        self.config_for(group_id).acceptable_recovery_lag)


def _check_cuts(group: StreamsGroup, topology: Topology) -> None:
    """Rule 6: a source topic keeps the cut the group first read it with."""
    for sub in topology.subtopologies:
        for topic in sorted(sub.source_topics):
            was = group.cuts.get(topic)
            if was is not None and was != sub.parallelism:
                raise ProtocolError(
                    ErrorCode.INVALID_REQUEST,
                    f"source topic {topic!r} of streams group {group.group_id!r} has parallelism {was} "
                    f"(key ranges per partition), and this member declares {sub.parallelism} for it "
                    f"(subtopology {sub.subtopology_id!r}); a task's state cannot be re-cut, so a topic's "
                    "parallelism cannot change while the group exists, even after a topology that leaves "
                    f"the topic out: run every member with parallelism {was}, or stop them all, delete "
                    "the group and its local state, and start over with the new one")


def _blocker(group: StreamsGroup, mid: str) -> Callable[[TaskId, str], bool]:
    pid = group.members[mid].process_id

    def blocked(task: TaskId, role: str) -> bool:
        if role == "active":
            holder = group.active_holder.get(task)
            if holder is not None and holder != mid:
                return True
            # Rule 6's defence: another member's active of another cut of these keys.
            for other in group.active_ranges.get((task.subtopology, task.partition), ()):
                if other.parts != task.parts and other.overlaps(task) and group.active_holder[other] != mid:
                    return True
        return group.held_on_process(task, pid, besides=mid)

    return blocked


def _waits_for_other_cut(withheld: frozenset[TaskId],
                         released: Mapping[tuple[str, int], list[TaskId]]) -> bool:
    """Was one of the ``withheld`` actives waiting for a ``released`` task of another cut of its keys
    (rule 6's defence in `_blocker`)?"""
    return any(r.parts != w.parts and r.overlaps(w)
               for w in withheld for r in released.get((w.subtopology, w.partition), ()))


def _released(before: MemberTasks, after: MemberTasks) -> frozenset[TaskId]:
    """Tasks that ``before`` held in some role and ``after`` no longer holds in it."""
    return (before.active - after.active) | (before.standby - after.standby) | (before.warmup - after.warmup)


def _returned(away: StreamsCurrent) -> StreamsCurrent:
    """A static member back from a temporary leave resumes at the epoch it had when it stepped out."""
    epoch = away.previous_epoch if away.epoch == STATIC_LEAVE_EPOCH else away.epoch
    return StreamsCurrent(epoch, epoch, away.status, away.assigned, away.pending_revocation)
