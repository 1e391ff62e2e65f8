"""Consumer groups (KIP-848) as a pure state machine; `regroup.protocol.coordinator` puts them beside
streams groups behind one door.

`ConsumerGroups` is the whole of them: the members' side — joins, heartbeats, leaves, targets,
delegation, timers, topic changes — is `regroup.protocol.consumer_membership`, which this class
extends with offsets, operators' actions, recovery and snapshots.

Every public method that may change state takes the current time (ms) as an argument and returns an
`Outcome` (the response, and the records that must be made durable before it is released); nothing
here sleeps, reads a clock or touches the network, and every request is validated here.

Rules the methods keep (docs/protocol.md explains them):
* a member commits at its current epoch, only shards it holds, never backwards; an operator may
  write offsets (also backwards), delete them or delete the group only while the group has no
  members, and deletes a group only once no external group holds any of it
  (`regroup.protocol.offsets`, `regroup.protocol.external`);
* a member's offset beyond its partition's end in the log, when the shell passes the ends in, is
  refused — after the member's own checks, so that a zombie hears it is one; no offset is ever above
  `regroup.protocol.validation.MAX_OFFSET`; one reset sets at most ``max_reset_offsets`` offsets;
* a group nobody uses is deleted with its offsets once the offsets retention passed, through
  `delete_group`, by `regroup.protocol.coordinator` (`regroup.protocol.retention`);
* a change of a group's key-range parallelism is allowed on a live group: the epoch moves and
  members hand ranges over like any moved shard (`regroup.protocol.keyrange`);
* recovery replays the records through the same `apply` that built the state, and re-arms every
  timer as of the time it is given; a snapshot is the shortest record list that rebuilds the state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from regroup.protocol import external
from regroup.protocol.assignors.base import AssignorRegistry
from regroup.protocol.causes import GroupDeleted, ParallelismChanged
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.consumer_membership import Changes, ConsumerMembership, DelegatedSpec
from regroup.protocol.describe import GroupDescription, describe
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.keyrange import MAX_PARALLELISM
from regroup.protocol.messages import (
    STATIC_LEAVE_EPOCH,
    Ack,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetResetRequest,
)
from regroup.protocol.offsets import (
    check_within_ends,
    commit_records,
    delete_offset_records,
    fetch_offsets,
    require_empty,
    reset_records,
)
from regroup.protocol.outcome import Outcome
from regroup.protocol.records import (
    CurrentAssignmentRecord,
    ExternalHoldRecord,
    GroupEpochRecord,
    MemberMetadataRecord,
    MemberStatus,
    OffsetRecord,
    ParallelismRecord,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from regroup.protocol.shard import Shard
from regroup.protocol.state import Group, GroupState, apply_all
from regroup.protocol.timers import TimerKind
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import (
    check_id,
    check_name,
    validate_commit,
    validate_fetch,
    validate_group_shards,
    validate_member_ids,
    validate_reset,
)

__all__ = ["ConsumerGroups", "DelegatedSpec"]


class ConsumerGroups(ConsumerMembership):
    """Every consumer group of one coordinator: their members (`ConsumerMembership`), offsets and
    operators' actions."""

    # ---------------------------------------------------------------- recovery and snapshots
    @classmethod
    def recover(
        cls,
        records: Iterable[Record],
        now: int,
        config: CoordinatorConfig | None = None,
        assignors: AssignorRegistry | None = None,
        topics: TopicMetadata | None = None,
    ) -> ConsumerGroups:
        """Rebuild from durable records and re-arm every timer as of ``now``.

        Members get a full session from ``now`` (they could not heartbeat while we were down), and
        members still revoking get a full revocation timeout.

        Without ``topics``, the coordinator starts from the topic metadata its groups last recorded.
        Starting there, and not from the log's current view, lets the first `update_topics` see
        whatever changed while the coordinator was down, exactly as if it had been running.
        """
        coord = cls(config, assignors, topics)
        apply_all(coord.groups, records)
        if topics is None:
            coord.topics = _recorded_topics(coord.groups)
        for gid, group in sorted(coord.groups.items()):
            for mid in sorted(group.members):
                coord._touch(gid, mid, now)
                cur = group.current.get(mid)
                revoking = cur is not None and cur.status is MemberStatus.UNREVOKED
                if cur is not None and revoking and cur.epoch != STATIC_LEAVE_EPOCH:
                    coord.timers.arm(TimerKind.REVOCATION, gid, mid,
                                     now + group.members[mid].rebalance_timeout_ms, cur.epoch)
            if group.epoch > group.target_epoch and group.members:
                coord.timers.arm(TimerKind.DELEGATION, gid, "", now + coord._delegation_timeout(group),
                                 group.epoch)
        return coord

    def snapshot(self) -> list[Record]:
        """The shortest record list that rebuilds the current state (replaces the history)."""
        out: list[Record] = []
        for gid, g in sorted(self.groups.items()):
            out.append(GroupEpochRecord(gid, g.epoch))
            out.append(SubscribedTopicsRecord(gid, dict(g.subscribed_topics)))
            out.extend(RegexRecord(gid, rx, t) for rx, t in sorted(g.regexes.items()))
            out.extend(MemberMetadataRecord(gid, mid, m) for mid, m in sorted(g.members.items()))
            out.extend(TargetMemberRecord(gid, mid, s) for mid, s in sorted(g.target.items()))
            out.append(TargetEpochRecord(gid, g.target_epoch, g.assignor))
            out.extend(CurrentAssignmentRecord(gid, mid, c) for mid, c in sorted(g.current.items()))
            out.extend(OffsetRecord(gid, s, o.offset, o.metadata, o.commit_epoch)
                       for s, o in sorted(g.offsets.items()))
            out.extend(ParallelismRecord(gid, t, n) for t, n in sorted(g.parallelism.items()))
            if g.external is not None:
                out.append(ExternalHoldRecord(gid, g.external))
        return out

    # ---------------------------------------------------------------- offsets and admin
    def commit_offsets(self, req: OffsetCommitRequest, now: int, ends: Mapping[Shard, int] | None = None,
                       ) -> Outcome[Ack]:
        """A member's commit (an operator's goes through `reset_offsets`); ``ends``: where partitions end
        in the log, as far as the shell knows (`regroup.protocol.offsets.check_within_ends`), checked
        after the member's epoch and ownership so that a zombie hears it is one."""
        try:
            validate_commit(req, self.config)
            records = commit_records(self.groups.get(req.group_id), req)
            check_within_ends(req.offsets, ends)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._offsets_changed(records)

    def reset_offsets(self, req: OffsetResetRequest, now: int) -> Outcome[Ack]:
        """An operator sets committed offsets of a group nobody consumes (also backwards)."""
        try:
            validate_reset(req, self.config)
            records = reset_records(self.groups.get(req.group_id), req)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._offsets_changed(records)

    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        try:
            validate_fetch(req, self.config)
            return OffsetFetchResponse(ErrorCode.NONE, "", fetch_offsets(self.groups.get(req.group_id), req))
        except ProtocolError as e:
            return OffsetFetchResponse(e.code, e.message)

    def delete_offsets(self, group_id: str, shards: tuple[Shard, ...] | None) -> Outcome[Ack]:
        try:
            validate_group_shards(group_id, shards, self.config)
            records = delete_offset_records(self._group(group_id), shards)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._offsets_changed(records)

    def _offsets_changed(self, records: list[Record]) -> Outcome[Ack]:
        ch = Changes(self.groups)
        for r in records:
            ch.emit(r)
        return ch.outcome(Ack(ErrorCode.NONE))

    def set_parallelism(self, group_id: str, topic: str, parallelism: int, now: int) -> Outcome[Ack]:
        """An operator cuts every partition of ``topic`` into ``parallelism`` key ranges for this
        group (1: whole partitions again). Allowed on a live group: the epoch moves, the target is
        recomputed in ranges, and members hand old ranges over to new ones like any moved shard — a
        new range resumes from the committed fragments it overlaps (`regroup.protocol.keyrange`)."""
        try:
            check_id("group_id", group_id, self.config)
            check_name("topic", topic, self.config.max_topic_name_length, "topic name")
            if not isinstance(parallelism, int) or not 1 <= parallelism <= MAX_PARALLELISM:
                raise ProtocolError(ErrorCode.INVALID_REQUEST,
                                    f"parallelism must be 1..{MAX_PARALLELISM} key ranges per partition, "
                                    f"got {parallelism!r}")
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        ch = Changes(self.groups)
        group = self.groups.get(group_id)
        if (group.parallelism.get(topic, 1) if group is not None else 1) == parallelism:
            return ch.outcome(Ack(ErrorCode.NONE))
        ch.emit(ParallelismRecord(group_id, topic, None if parallelism == 1 else parallelism))
        group = self.groups[group_id]
        if group.members and topic in group.subscribed_topics:
            ch.because(group_id, ParallelismChanged(topic, parallelism))
            ch.bump(group)
            self._maybe_update_target(ch, group, now)
        return ch.outcome(Ack(ErrorCode.NONE))

    def external_owners(self, group_id: str, holder: str, view: external.ExternalView | None, now: int,
                        ) -> Outcome[Ack]:
        """What the external group ``holder`` (a Kafka group this group migrates from) holds now, and
        what it committed; None: not read yet. Grants of what it holds wait; what it released comes
        with its committed offsets (`regroup.protocol.external`)."""
        try:
            external.validate_view(group_id, holder, view, self.config)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._hold_changed(group_id, external.hold_change(self.groups.get(group_id), group_id, holder,
                                                                  view))

    def end_external_hold(self, group_id: str, now: int) -> Outcome[Ack]:
        """An operator ends the group's migration: what the external group held is free to grant (a
        group that does not exist has none to end)."""
        try:
            check_id("group_id", group_id, self.config)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        return self._hold_changed(group_id, external.end_hold(self.groups.get(group_id)))

    def _hold_changed(self, group_id: str, change: external.HoldChange) -> Outcome[Ack]:
        ch = Changes(self.groups)
        for r in change.records:
            ch.emit(r)
        ch.notes.extend(change.notes)
        group = self.groups.get(group_id)
        if group is not None:
            self._wake_waiters(ch, group, change.released)
        return ch.outcome(Ack(ErrorCode.NONE))

    def delete_group(self, group_id: str) -> Outcome[Ack]:
        try:
            check_id("group_id", group_id, self.config)
            group = self._group(group_id)
            require_empty(group, "deleting")
            external.require_no_hold(group)
        except ProtocolError as e:
            return Outcome(Ack(e.code, e.message))
        ch = Changes(self.groups)
        for r in delete_offset_records(group, None):
            ch.emit(r)
        ch.emit(GroupEpochRecord(group_id, None))
        ch.events.append(GroupDeleted(group_id))
        return ch.outcome(Ack(ErrorCode.NONE))

    def describe_group(self, group_id: str) -> GroupDescription:
        """The group as the coordinator sees it; raises INVALID_REQUEST or GROUP_ID_NOT_FOUND."""
        check_id("group_id", group_id, self.config)
        return describe(self._group(group_id))

    def list_groups(self) -> list[tuple[str, GroupState, int]]:
        """``(group id, state, member count)`` of every group."""
        return [(gid, g.state, len(g.members)) for gid, g in sorted(self.groups.items())]

    def watch(self, group_id: str, member_id: str) -> Ack:
        """May this member open a stream of nudges? Only well-formed ids are checked: a nudge is a
        hint to heartbeat, so a member may watch before it joins, or after it was fenced."""
        try:
            validate_member_ids(group_id, member_id, self.config)
        except ProtocolError as e:
            return Ack(e.code, e.message)
        return Ack(ErrorCode.NONE)

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        return group


def _recorded_topics(groups: dict[str, Group]) -> TopicMetadata:
    """The topic metadata the groups last recorded (the largest partition count any group saw)."""
    merged: dict[str, int] = {}
    for group in groups.values():
        for t, n in group.subscribed_topics.items():
            merged[t] = max(merged.get(t, 0), n)
    return TopicMetadata(merged)
