"""Consumer-group membership (KIP-848): joins, heartbeats, leaves, targets, delegation, timers and
topic changes — the part of `regroup.protocol.consumer_groups.ConsumerGroups` that moves members.
Offsets, operators' actions, retention, recovery and snapshots are in `consumer_groups`, which
builds on this class.

Every public method that may change state takes the current time (ms) as an argument and returns an
`Outcome`: the response, the records that must be made durable *before* the response is released, the
members worth nudging (their next heartbeat has something for them), and why epochs moved and who was
fenced (`regroup.protocol.causes`). Nothing here sleeps, reads a clock or touches the network;
`next_deadline()` tells the shell when to call `expire(now)`. Every request is validated here, so the
service, the simulator and the tests all exercise the same checks; the shells only decode.

Rules the methods keep (docs/protocol.md explains them):
* the group epoch is bumped only when a member joins, leaves or is fenced, when a subscription
  changes, or when the subscribed topics' metadata or a regex's resolution changes — never for a
  static member replacing itself with the same subscription, nor for its temporary leave;
* the target assignment is recomputed only when the group epoch is ahead of it, and right away, so
  that the members it affects can be nudged at once;
* each member then moves toward its target on its own heartbeats (`reconcile`): no barrier;
* a dynamic member whose connection broke is fenced at the end of the failover grace unless it
  heartbeats or reconnects first, and so is one that does not show up within a heartbeat interval
  plus the grace after a restart; a static member waits its session timeout
  (`regroup.protocol.failover`);
* a static member stepping out (-2) keeps its assigned shards reserved for its return (until its
  session times out) but releases at once the shards it was revoking — it committed them before
  leaving — and the members waiting for them are nudged; a leave (-1 or -2) that names an instance id
  is resolved by that instance id first (UNKNOWN_MEMBER_ID when nobody holds it, FENCED_INSTANCE_ID
  when another member id does), as Kafka does;
* a group migrating from a group outside regroup (a live Kafka group) grants nothing that group
  holds, and takes over what it releases at the offsets it committed (`regroup.protocol.external`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from regroup.protocol import external
from regroup.protocol.assignors import RangeAssignor, UniformAssignor, default_registry
from regroup.protocol.assignors.base import (
    Assignment,
    AssignorRegistry,
    GroupSpec,
    validate_assignment,
)
from regroup.protocol.causes import (
    BumpCause,
    EpochEvent,
    Fence,
    FenceReason,
    GroupCreated,
    GroupEpochBumped,
    MemberFenced,
    MemberJoined,
    MemberLeft,
    RegexResolved,
    StaticTakeOver,
    SubscribedTopicsChanged,
    SubscriptionChanged,
    TargetInstalled,
)
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.failover import arm_grace, arm_restart_grace, disarm_grace, member_grace
from regroup.protocol.fencing import (
    check_epoch,
    check_instance,
    check_leaving_instance,
    merged_metadata,
    static_predecessor,
    subscription_changed,
)
from regroup.protocol.messages import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Ack,
    HeartbeatRequest,
    HeartbeatResponse,
)
from regroup.protocol.offsets import check_member_epoch
from regroup.protocol.outcome import Outcome
from regroup.protocol.reconcile import reconcile
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadata,
    MemberMetadataRecord,
    MemberStatus,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetMemberRecord,
)
from regroup.protocol.shard import EMPTY, Shard, ShardSet, overlap_any
from regroup.protocol.state import Group, apply
from regroup.protocol.subscriptions import resolve_regex
from regroup.protocol.target import (
    build_spec,
    chosen_assignor,
    delegate_for,
    subscribed_topic_counts,
    target_records,
)
from regroup.protocol.timers import DueTimer, MemberKey, TimerKind, Timers
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import (
    validate_heartbeat,
    validate_member_ids,
    validate_new_member,
)

T = TypeVar("T")

_TRUSTED_ASSIGNORS = (UniformAssignor, RangeAssignor)


@dataclass(frozen=True, slots=True)
class DelegatedSpec:
    """What a delegate member needs to compute a target: for which group epoch, with what."""

    group_epoch: int
    assignor: str
    spec: GroupSpec


@dataclass
class Changes:
    """Records emitted by one step, applied as they are emitted so later decisions see them.

    Causes wait in ``pending`` until the bump they explain (rule 2 of `regroup.protocol.causes`).
    """

    groups: dict[str, Group]
    records: list[Record] = field(default_factory=list)
    wake: set[MemberKey] = field(default_factory=set)
    fences: list[Fence] = field(default_factory=list)
    events: list[EpochEvent] = field(default_factory=list)
    departed: list[MemberKey] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pending: dict[str, list[BumpCause]] = field(default_factory=dict)

    def emit(self, record: Record) -> None:
        apply(self.groups, record)
        self.records.append(record)

    def because(self, group_id: str, cause: BumpCause) -> None:
        self.pending.setdefault(group_id, []).append(cause)

    def bump(self, group: Group) -> None:
        epoch = group.epoch + 1
        self.emit(GroupEpochRecord(group.group_id, epoch))
        causes = tuple(self.pending.pop(group.group_id, ()))
        self.events.append(GroupEpochBumped(group.group_id, epoch, causes))

    def outcome(self, response: T) -> Outcome[T]:
        return Outcome(response, tuple(self.records), frozenset(self.wake), tuple(self.fences),
                       tuple(self.events), tuple(self.departed), tuple(self.notes))

class ConsumerMembership:
    """The members of every consumer group of one coordinator, their timers and the topic metadata
    their subscriptions resolve against."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        assignors: AssignorRegistry | None = None,
        topics: TopicMetadata | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.assignors = assignors or default_registry()
        self.topics = topics or TopicMetadata()
        self.groups: dict[str, Group] = {}
        self.timers = Timers()


    # ---------------------------------------------------------------- heartbeat
    def heartbeat(self, req: HeartbeatRequest, now: int) -> Outcome[HeartbeatResponse]:
        try:
            validate_heartbeat(req, self.config)
            if req.member_epoch == LEAVE_EPOCH:
                return self._leave(req, now)
            if req.member_epoch == STATIC_LEAVE_EPOCH:
                return self._static_leave(req, now)
            return self._heartbeat(req, now)
        except ProtocolError as e:
            return Outcome(HeartbeatResponse(e.code, e.message, req.member_id, req.member_epoch,
                                             self.config.heartbeat_interval_ms))

    def _heartbeat(self, req: HeartbeatRequest, now: int) -> Outcome[HeartbeatResponse]:
        gid, mid = req.group_id, req.member_id
        joining = req.member_epoch == JOIN_EPOCH
        group = self.groups.get(gid)
        meta = group.members.get(mid) if group is not None else None
        predecessor: str | None = None
        # --- checks: nothing below raises once the first record is emitted ---
        if group is None:
            if not joining:
                raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND,
                                    f"group {gid!r} does not exist; join it with member_epoch 0")
        else:
            check_instance(group, req, meta, joining)
            if joining:
                predecessor = static_predecessor(group, req)
                if meta is None and predecessor is None and len(group.members) >= self.config.max_group_size:
                    raise ProtocolError(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"group {gid!r} already has {len(group.members)} members, the most this "
                        "coordinator allows (max_group_size); add capacity or use another group")
            elif meta is None:
                raise ProtocolError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"member {mid!r} is not in group {gid!r} (it left, or was fenced after its session "
                    "timed out); release its partitions and rejoin with epoch 0")
            else:
                check_epoch(group, req, group.current[mid])
        if joining and meta is None:
            validate_new_member(req)
        base = meta if meta is not None else (
            group.members[predecessor] if group is not None and predecessor is not None else None)
        new_meta = merged_metadata(base, req, self.config, self.assignors)

        # --- changes ---
        ch = Changes(self.groups)
        if group is None:
            ch.emit(GroupEpochRecord(gid, 0))
            ch.events.append(GroupCreated(gid))
            group = self.groups[gid]
        bump = False
        if predecessor is not None:
            self._take_over(ch, group, predecessor, mid, new_meta)
            bump = subscription_changed(base, new_meta) if base is not None else True
            if bump and req.instance_id is not None:
                ch.because(gid, StaticTakeOver(req.instance_id, predecessor, mid))
        elif meta is None:
            ch.emit(MemberMetadataRecord(gid, mid, new_meta))
            ch.emit(CurrentAssignmentRecord(gid, mid, CurrentAssignment(0, LEAVE_EPOCH, MemberStatus.STABLE,
                                                                        EMPTY, EMPTY)))
            ch.because(gid, MemberJoined(mid))
            bump = True
        else:
            if new_meta is not meta:
                ch.emit(MemberMetadataRecord(gid, mid, new_meta))
                bump = subscription_changed(meta, new_meta)
                if bump:
                    ch.because(gid, SubscriptionChanged(mid))
            cur = group.current[mid]
            if cur.epoch == STATIC_LEAVE_EPOCH:  # the same static member is back under its own id
                ch.emit(CurrentAssignmentRecord(gid, mid, _returned(cur)))
        if bump:
            self._subscriptions_changed(ch, group, force_bump=True)
        self._maybe_update_target(ch, group, now)

        cur = group.current[mid]
        owners = group.owners
        owned = req.owned
        if joining and meta is not None and cur.epoch > 0:
            # A join from a member we know at a real epoch: a retry after a lost join response, a
            # rejoin after the member gave up on us, or a stale duplicate. Its "owns nothing" cannot
            # be trusted to release anything: treat ownership as unreported until its next heartbeat.
            owned = None
        if group.range_holders or group.parallelism:  # key ranges: taken when anything overlapping is
            def held_by_member(s: Shard) -> bool:
                return group.held_by_other(s, mid)
        else:
            def held_by_member(s: Shard) -> bool:
                return owners.get(s, mid) != mid

        def held_by_other(s: Shard) -> bool:  # another member, or a group we migrate from (`external`)
            return held_by_member(s) or group.externally_held(s)
        nxt = reconcile(cur, group.target_epoch, group.member_target(mid), owned,
                        held_by_other if external.holds_any(group) else held_by_member)
        if nxt is not cur:
            ch.emit(CurrentAssignmentRecord(gid, mid, nxt))
            self._wake_waiters(ch, group, _held(cur) - _held(nxt))
        self._arm_revocation(group, mid, cur, nxt, now)
        self._touch(gid, mid, now)

        # The assignment goes out when it changed or the member is out of step; a new epoch alone
        # travels in member_epoch, so a member whose shards do not change has nothing to act on.
        # A full request (owned, subscription and rebalance timeout all set) is how a member that
        # may have missed an answer resynchronises: it always gets its assignment back.
        full = req.owned is not None and req.rebalance_timeout_ms is not None and (
            req.subscribed_topics is not None or req.subscribed_regex is not None)
        send = (joining or full or (nxt.assigned is not cur.assigned and nxt.assigned != cur.assigned)
                or (req.owned is not None and req.owned != nxt.assigned))
        delegate = self._pending_delegate(group)
        return ch.outcome(HeartbeatResponse(
            ErrorCode.NONE, "", mid, nxt.epoch, self.config.heartbeat_interval_ms,
            nxt.assigned if send else None, should_compute_assignment=delegate == mid,
            session_timeout_ms=self.config.session_timeout_ms,
            failover_grace_ms=member_grace(self.config.failover_grace_ms, new_meta.instance_id)))

    def _take_over(self, ch: Changes, group: Group, old: str, new: str, meta: MemberMetadata) -> None:
        """A static member rejoins under a new member id: it inherits everything, nothing moves."""
        gid = group.group_id
        old_cur = group.current[old]
        old_target = group.target.get(old)
        self._drop_member(ch, group, old)
        ch.emit(MemberMetadataRecord(gid, new, meta))
        if old_target is not None:
            ch.emit(TargetMemberRecord(gid, new, old_target))
        ch.emit(CurrentAssignmentRecord(gid, new, _returned(old_cur)))

    # ---------------------------------------------------------------- leaving
    def _leave(self, req: HeartbeatRequest, now: int) -> Outcome[HeartbeatResponse]:
        group, _ = self._known_member(req)
        ch = Changes(self.groups)
        self._remove(ch, group, req.member_id, now, MemberLeft(req.member_id))
        return ch.outcome(HeartbeatResponse(ErrorCode.NONE, "", req.member_id, LEAVE_EPOCH,
                                            self.config.heartbeat_interval_ms))

    def _static_leave(self, req: HeartbeatRequest, now: int) -> Outcome[HeartbeatResponse]:
        """A static member steps out for a while: it keeps its assigned shards until its session times
        out, and releases at once those it was revoking (it committed them before leaving), waking the
        members waiting for them. Nothing else moves: no epoch bump, no new target."""
        group, cur = self._known_member(req)
        ch = Changes(self.groups)
        back_at = cur.previous_epoch if cur.epoch == STATIC_LEAVE_EPOCH else cur.epoch
        status = MemberStatus.STABLE if cur.status is MemberStatus.UNREVOKED else cur.status
        away = CurrentAssignment(STATIC_LEAVE_EPOCH, back_at, status, cur.assigned, EMPTY)
        if away != cur:
            ch.emit(CurrentAssignmentRecord(group.group_id, req.member_id, away))
            self._wake_waiters(ch, group, cur.pending_revocation)
        self.timers.disarm(TimerKind.REVOCATION, group.group_id, req.member_id)
        self._touch(group.group_id, req.member_id, now)
        return ch.outcome(HeartbeatResponse(ErrorCode.NONE, "", req.member_id, STATIC_LEAVE_EPOCH,
                                            self.config.heartbeat_interval_ms))

    def _known_member(self, req: HeartbeatRequest) -> tuple[Group, CurrentAssignment]:
        """The leaving member: by its instance id first when it names one (Kafka's order)."""
        group = self.groups.get(req.group_id)
        if group is None:
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {req.group_id!r} does not exist")
        check_leaving_instance(group, req)
        if req.member_id not in group.members:
            raise ProtocolError(ErrorCode.UNKNOWN_MEMBER_ID,
                                f"member {req.member_id!r} is not in group {req.group_id!r}; "
                                "nothing to leave")
        return group, group.current[req.member_id]

    def _remove(self, ch: Changes, group: Group, mid: str, now: int, cause: MemberLeft | MemberFenced,
                ) -> None:
        """Take a member out for good (leave or fence): bump, free its shards, new target."""
        released = _held(group.current[mid])
        self._drop_member(ch, group, mid)
        ch.because(group.group_id, cause)
        self._subscriptions_changed(ch, group, force_bump=True)
        self._maybe_update_target(ch, group, now)
        self._wake_waiters(ch, group, released)

    def _drop_member(self, ch: Changes, group: Group, mid: str) -> None:
        gid = group.group_id
        ch.emit(CurrentAssignmentRecord(gid, mid, None))
        if mid in group.target:
            ch.emit(TargetMemberRecord(gid, mid, None))
        ch.emit(MemberMetadataRecord(gid, mid, None))
        ch.departed.append((gid, mid))
        self.timers.forget_member(gid, mid)

    # ---------------------------------------------------------------- epochs and targets
    def _subscriptions_changed(self, ch: Changes, group: Group, force_bump: bool) -> None:
        """Re-resolve regexes and subscribed topics; bump when forced or anything moved."""
        gid = group.group_id
        changed = force_bump
        in_use = {m.subscribed_regex for m in group.members.values() if m.subscribed_regex}
        for rx in sorted(set(group.regexes) - in_use):
            ch.emit(RegexRecord(gid, rx, None))
        for rx in sorted(in_use):
            resolved = resolve_regex(rx, self.topics)
            if group.regexes.get(rx) != resolved:
                ch.emit(RegexRecord(gid, rx, resolved))
                ch.because(gid, RegexResolved(rx, resolved))
                changed = True
        counts = subscribed_topic_counts(group, self.topics)
        if counts != group.subscribed_topics:
            ch.emit(SubscribedTopicsRecord(gid, counts))
            ch.because(gid, SubscribedTopicsChanged(counts))
            changed = True
        if changed:
            ch.bump(group)

    def _maybe_update_target(self, ch: Changes, group: Group, now: int) -> None:
        if group.epoch <= group.target_epoch:
            return
        name = chosen_assignor(group, self.assignors)
        if name not in self.assignors:
            delegate = delegate_for(group, name)
            if delegate is not None:
                if not self.timers.is_armed(TimerKind.DELEGATION, group.group_id, ""):
                    self.timers.arm(TimerKind.DELEGATION, group.group_id, "",
                                    now + self._delegation_timeout(group), group.epoch)
                ch.wake.add((group.group_id, delegate))
                return
            ch.notes.append(f"group {group.group_id!r}: no member can run client assignor {name!r}; "
                            f"using {self.assignors.default.name!r}")
            name = self.assignors.default.name
        self._install(ch, group, self._compute(ch, group, name))

    def _compute(self, ch: Changes, group: Group, name: str) -> tuple[str, Assignment]:
        assignor = self.assignors.get(name)
        spec = build_spec(group)
        if isinstance(assignor, _TRUSTED_ASSIGNORS):
            return name, assignor.assign(spec)
        try:
            return name, validate_assignment(spec, assignor.assign(spec))
        except Exception as e:  # a custom assignor must not take the group down with it
            fallback = self.assignors.default
            ch.notes.append(f"group {group.group_id!r}: assignor {name!r} failed ({e}); "
                            f"used {fallback.name!r} for epoch {group.epoch}")
            return fallback.name, fallback.assign(spec)

    def _install(self, ch: Changes, group: Group, computed: tuple[str, Assignment]) -> None:
        name, assignment = computed
        records, changed = target_records(group, assignment, name)
        for r in records:
            ch.emit(r)
        gid = group.group_id
        ch.events.append(TargetInstalled(gid, group.target_epoch, name, len(records) - 1))
        ch.wake.update((gid, mid) for mid in changed)
        self.timers.disarm(TimerKind.DELEGATION, gid, "")

    def _pending_delegate(self, group: Group) -> str | None:
        if group.epoch <= group.target_epoch:
            return None
        name = chosen_assignor(group, self.assignors)
        return None if name in self.assignors else delegate_for(group, name)

    def _delegation_timeout(self, group: Group) -> int:
        timeouts = [m.rebalance_timeout_ms for m in group.members.values()]
        return max(timeouts) if timeouts else self.config.session_timeout_ms

    # ---------------------------------------------------------------- delegated assignment
    def assignment_spec(self, group_id: str, member_id: str, member_epoch: int) -> DelegatedSpec:
        """For the delegate: the input to compute the next target with a client-side assignor."""
        validate_member_ids(group_id, member_id, self.config)
        group = self._group(group_id)
        check_member_epoch(group, member_id, member_epoch)
        name = chosen_assignor(group, self.assignors)
        if self._pending_delegate(group) != member_id:
            raise ProtocolError(
                ErrorCode.NOT_ASSIGNMENT_DELEGATE,
                f"member {member_id!r} is not asked to compute the assignment of group {group_id!r} "
                f"right now (group epoch {group.epoch}, target epoch {group.target_epoch})")
        return DelegatedSpec(group.epoch, name, build_spec(group))

    def install_assignment(
        self, group_id: str, member_id: str, member_epoch: int, group_epoch: int,
        assignment: dict[str, Iterable[Shard]], now: int,
    ) -> Outcome[Ack]:
        """The delegate's computed target: validated, then installed exactly like a server one."""
        try:
            spec = self.assignment_spec(group_id, member_id, member_epoch)
            if group_epoch != spec.group_epoch:
                raise ProtocolError(
                    ErrorCode.INVALID_ASSIGNMENT,
                    f"assignment computed for group epoch {group_epoch}, but group {group_id!r} is at "
                    f"epoch {spec.group_epoch}; fetch the spec again and recompute")
            checked = validate_assignment(spec.spec, assignment)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        ch = Changes(self.groups)
        self._install(ch, self.groups[group_id], (spec.assignor, checked))
        return ch.outcome(Ack(ErrorCode.NONE))

    # ---------------------------------------------------------------- timers
    def next_deadline(self) -> int | None:
        """When `expire` has work next (ms), or None."""
        return self.timers.next_deadline()

    def connection_lost(self, group_id: str, member_id: str, now: int) -> Outcome[None]:
        """The member's last stream to the coordinator broke: a dynamic member's session ends at the
        end of the grace unless it heartbeats or reconnects first (`regroup.protocol.failover`)."""
        group = self.groups.get(group_id)
        meta = group.members.get(member_id) if group is not None else None
        if group is not None and meta is not None:
            arm_grace(self.timers, self.config.failover_grace_ms, group_id, member_id, meta.instance_id,
                      group.current[member_id].epoch, now)
        return Outcome(None)

    def connection_restored(self, group_id: str, member_id: str, now: int) -> Outcome[None]:
        """The member opened a stream again: back to the deadline its last heartbeat set (failover
        rule 3)."""
        disarm_grace(self.timers, group_id, member_id)
        return Outcome(None)

    def serving(self, now: int) -> Outcome[None]:
        """The coordinator, recovered, starts serving: every dynamic member must show up within a
        heartbeat interval plus the grace, or is fenced (failover rule 4)."""
        grace, interval = self.config.failover_grace_ms, self.config.heartbeat_interval_ms
        for gid, group in sorted(self.groups.items()):
            for mid, meta in sorted(group.members.items()):
                arm_restart_grace(self.timers, grace, interval, gid, mid, meta.instance_id,
                                  group.current[mid].epoch, now)
        return Outcome(None)

    def expire(self, now: int) -> Outcome[None]:
        """Fence members whose session or revocation timed out; finish overdue delegations."""
        ch = Changes(self.groups)
        for due in self.timers.pop_due(now):
            self._fire(ch, due, now)
        return ch.outcome(None)

    def _fire(self, ch: Changes, due: DueTimer, now: int) -> None:
        group = self.groups.get(due.group_id)
        if group is None:
            return
        if due.kind is TimerKind.DELEGATION:
            if group.epoch == due.epoch and group.epoch > group.target_epoch and group.members:
                name = self.assignors.default.name
                ch.notes.append(f"group {group.group_id!r}: the delegate did not install an assignment "
                                f"for epoch {group.epoch} in time; used {name!r}")
                self._install(ch, group, self._compute(ch, group, name))
            return
        cur = group.current.get(due.member_id)
        if cur is None:
            return
        revoking = cur.status is MemberStatus.UNREVOKED
        if due.kind is TimerKind.REVOCATION:
            if not (revoking and cur.epoch == due.epoch):
                return
            reason = FenceReason.REVOCATION_TIMEOUT
        elif due.kind is TimerKind.GRACE:  # armed only while no heartbeat came after the loss
            reason = FenceReason.CONNECTION_LOST
        else:
            reason = FenceReason.SESSION_TIMEOUT
        ch.fences.append(Fence(group.group_id, due.member_id, reason,
                               cur.pending_revocation if revoking else EMPTY))
        self._remove(ch, group, due.member_id, now, MemberFenced(due.member_id, reason))

    def _arm_revocation(self, group: Group, mid: str, cur: CurrentAssignment, nxt: CurrentAssignment,
                        now: int) -> None:
        gid = group.group_id
        if nxt.status is MemberStatus.UNREVOKED:
            # A fresh deadline for every new revocation, also one that follows another at once.
            if cur.status is not MemberStatus.UNREVOKED or nxt.pending_revocation != cur.pending_revocation \
                    or not self.timers.is_armed(TimerKind.REVOCATION, gid, mid):
                self.timers.arm(TimerKind.REVOCATION, gid, mid,
                                now + group.members[mid].rebalance_timeout_ms, nxt.epoch)
        elif cur.status is MemberStatus.UNREVOKED:
            self.timers.disarm(TimerKind.REVOCATION, gid, mid)

    def _touch(self, gid: str, mid: str, now: int) -> None:
        self.timers.touch_session(gid, mid, now + self.config.session_timeout_ms)

    def _wake_waiters(self, ch: Changes, group: Group, released: ShardSet) -> None:
        if not released:
            return
        # Key ranges: a released shard can unblock a waiter whose target overlaps it without equality.
        waits_for = overlap_any if group.range_holders or group.parallelism else _intersect
        for mid, c in group.current.items():
            if c.status is MemberStatus.UNRELEASED and waits_for(group.member_target(mid), released):
                ch.wake.add((group.group_id, mid))

    # ---------------------------------------------------------------- topic metadata
    def update_topics(self, topics: TopicMetadata, now: int) -> Outcome[None]:
        """New topic metadata from the log: groups whose subscribed topics changed get a new epoch."""
        old = self.topics
        self.topics = topics
        ch = Changes(self.groups)
        if topics == old:
            return ch.outcome(None)
        for _, group in sorted(self.groups.items()):
            if group.members:
                self._subscriptions_changed(ch, group, force_bump=False)
                self._maybe_update_target(ch, group, now)
        return ch.outcome(None)

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        return group



def _intersect(a: ShardSet, b: ShardSet) -> bool:
    return not a.isdisjoint(b)


def _held(c: CurrentAssignment) -> ShardSet:
    return c.assigned | c.pending_revocation if c.pending_revocation else c.assigned


def _returned(away: CurrentAssignment) -> CurrentAssignment:
    """A static member back from a temporary leave resumes at the epoch it had when it stepped out."""
    epoch = away.previous_epoch if away.epoch == STATIC_LEAVE_EPOCH else away.epoch
    return CurrentAssignment(epoch, epoch, away.status, away.assigned, away.pending_revocation)
