"""A group's state, and `apply`: the only code that changes it.

Everything in `Group` is either a fact carried by a record or derived from such facts by `apply`
(the static-member index, the shard owners, the key ranges by partition). Two coordinators that
applied the same records hold equal groups, which is what makes replay and snapshots exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from regroup.protocol.messages import STATIC_LEAVE_EPOCH, CommittedOffset
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    EmptySinceRecord,
    ExternalHold,
    ExternalHoldRecord,
    GroupEpochRecord,
    MemberMetadata,
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
from regroup.protocol.shard import EMPTY, Shard, ShardSet, overlaps


class GroupState(Enum):
    EMPTY = "empty"
    #: The group epoch moved ahead of the target assignment: a new target is due.
    ASSIGNING = "assigning"
    #: The target is set; some members have not converged to it yet.
    RECONCILING = "reconciling"
    STABLE = "stable"


class CorruptRecordError(Exception):
    """A record does not fit the state it is applied to: the log is damaged or out of order."""


@dataclass
class Group:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    #: Name of the assignor that computed the current target.
    assignor: str = ""
    subscribed_topics: dict[str, int] = field(default_factory=dict)
    regexes: dict[str, frozenset[str]] = field(default_factory=dict)
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    current: dict[str, CurrentAssignment] = field(default_factory=dict)
    target: dict[str, ShardSet] = field(default_factory=dict)
    offsets: dict[Shard, CommittedOffset] = field(default_factory=dict)
    #: Key ranges per partition, by topic (`regroup.protocol.keyrange`); a topic not here has 1.
    parallelism: dict[str, int] = field(default_factory=dict)
    #: The shards a group outside regroup holds while this one migrates from it (`regroup.protocol.external`).
    external: ExternalHold | None = None
    # Derived by `apply`, never written directly.
    static_members: dict[str, str] = field(default_factory=dict)
    owners: dict[Shard, str] = field(default_factory=dict)
    #: The key-range shards held (assigned or pending revocation), by partition: who holds what
    #: part of a partition when shards of it overlap without being equal.
    range_holders: dict[tuple[str, int], dict[Shard, str]] = field(default_factory=dict)
    #: The key-range fragments of committed offsets, by partition (whole partitions are not listed).
    offset_ranges: dict[tuple[str, int], set[Shard]] = field(default_factory=dict)

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.epoch > self.target_epoch:
            return GroupState.ASSIGNING
        for c in self.current.values():
            if c.status is not MemberStatus.STABLE or c.epoch != self.target_epoch:
                # A static member away keeps its shards; it is not "reconciling".
                if c.epoch != STATIC_LEAVE_EPOCH:
                    return GroupState.RECONCILING
        return GroupState.STABLE

    def owner_epoch(self, shard: Shard) -> int:
        """Epoch of the member holding ``shard`` (assigned or pending revocation); -1 when free."""
        owner = self.owners.get(shard)
        if owner is None:
            return -1
        return self.current[owner].epoch

    def held_by_other(self, shard: Shard, member_id: str) -> bool:
        """True when a member other than ``member_id`` holds ``shard`` or any shard overlapping it
        (a whole partition and its key ranges, or ranges of two parallelisms)."""
        holder = self.owners.get(shard)
        if holder is not None and holder != member_id:
            return True
        if not shard.whole:  # the whole partition overlaps every range of it
            holder = self.owners.get(Shard(shard.topic, shard.partition))
            if holder is not None and holder != member_id:
                return True
        elif not self.range_holders:
            return False  # a whole partition, and no key ranges held anywhere
        return any(h != member_id and overlaps(s, shard)
                   for s, h in self.range_holders.get((shard.topic, shard.partition), {}).items())

    def externally_held(self, shard: Shard) -> bool:
        """True when the external group this group migrates from holds ``shard``'s partition — or may:
        until it was read once it holds everything (`regroup.protocol.external` rule 4)."""
        hold = self.external
        if hold is None:
            return False
        return not hold.known or Shard(shard.topic, shard.partition) in hold.shards

    def offsets_overlapping(self, shard: Shard) -> dict[Shard, CommittedOffset]:
        """The committed fragments of ``shard``'s partition that overlap it (`keyrange` rule 3)."""
        out: dict[Shard, CommittedOffset] = {}
        whole = self.offsets.get(Shard(shard.topic, shard.partition))
        if whole is not None:
            out[Shard(shard.topic, shard.partition)] = whole
        for f in self.offset_ranges.get((shard.topic, shard.partition), ()):
            if overlaps(f, shard):
                out[f] = self.offsets[f]
        return out

    def member_target(self, member_id: str) -> ShardSet:
        """The member's part of the target (empty when the target does not list it)."""
        return self.target.get(member_id, EMPTY)


def apply(groups: dict[str, Group], record: Record) -> None:
    """Apply one record to the set of groups (creating or deleting a group as the record says).

    A retention mark is no group's state: `regroup.protocol.retention` applies it, and it is skipped
    here (`regroup.protocol.coordinator` replays it there)."""
    if isinstance(record, EmptySinceRecord):
        return
    gid = record.group_id
    group = groups.get(gid)
    if isinstance(record, GroupEpochRecord):
        if record.epoch is None:
            if group is not None and group.members:
                raise CorruptRecordError(f"group {gid!r} deleted while it still has members")
            groups.pop(gid, None)
            return
        if group is None:
            group = groups[gid] = Group(gid)
        group.epoch = record.epoch
        return
    if group is None:
        if (isinstance(record, OffsetRecord) and record.offset is None) or (
                isinstance(record, ParallelismRecord) and record.parallelism is None) or (
                isinstance(record, ExternalHoldRecord) and record.hold is None):
            return  # deleting an offset, a setting or a hold of a group already gone
        # Offsets may be committed by an admin before any member ever joined.
        group = groups[gid] = Group(gid)
    _APPLIERS[type(record)](group, record)


def apply_all(groups: dict[str, Group], records: Iterable[Record]) -> None:
    for r in records:
        apply(groups, r)


def _apply_subscribed_topics(group: Group, r: SubscribedTopicsRecord) -> None:
    group.subscribed_topics = dict(r.topics)


def _apply_regex(group: Group, r: RegexRecord) -> None:
    if r.topics is None:
        group.regexes.pop(r.regex, None)
    else:
        group.regexes[r.regex] = r.topics


def _apply_member_metadata(group: Group, r: MemberMetadataRecord) -> None:
    old = group.members.get(r.member_id)
    if old is not None and old.instance_id is not None \
            and group.static_members.get(old.instance_id) == r.member_id:
        del group.static_members[old.instance_id]
    if r.metadata is None:
        if r.member_id in group.current:
            raise CorruptRecordError(
                f"member {r.member_id!r} of {group.group_id!r} removed before its assignment")
        group.members.pop(r.member_id, None)
        return
    group.members[r.member_id] = r.metadata
    if r.metadata.instance_id is not None:
        group.static_members[r.metadata.instance_id] = r.member_id


def _apply_target_epoch(group: Group, r: TargetEpochRecord) -> None:
    group.target_epoch = r.target_epoch
    group.assignor = r.assignor


def _apply_target_member(group: Group, r: TargetMemberRecord) -> None:
    if r.shards is None:
        group.target.pop(r.member_id, None)
    else:
        group.target[r.member_id] = r.shards


def _apply_current(group: Group, r: CurrentAssignmentRecord) -> None:
    owners = group.owners
    old = group.current.get(r.member_id)
    if old is not None:
        for s in old.assigned:
            if owners.get(s) == r.member_id:
                del owners[s]
        for s in old.pending_revocation:
            if owners.get(s) == r.member_id:
                del owners[s]
        if group.range_holders:
            _unhold_ranges(group, old.assigned, r.member_id)
            _unhold_ranges(group, old.pending_revocation, r.member_id)
    if r.current is None:
        group.current.pop(r.member_id, None)
        return
    if r.member_id not in group.members:
        raise CorruptRecordError(
            f"assignment of {r.member_id!r} in {group.group_id!r} before the member's metadata")
    group.current[r.member_id] = r.current
    for s in r.current.assigned:
        owners[s] = r.member_id
    for s in r.current.pending_revocation:
        owners[s] = r.member_id
    _hold_ranges(group, r.current.assigned, r.member_id)
    _hold_ranges(group, r.current.pending_revocation, r.member_id)


def _hold_ranges(group: Group, shards: ShardSet, member_id: str) -> None:
    for s in shards:
        if not s.whole:
            group.range_holders.setdefault((s.topic, s.partition), {})[s] = member_id


def _unhold_ranges(group: Group, shards: ShardSet, member_id: str) -> None:
    for s in shards:
        if s.whole:
            continue
        held = group.range_holders.get((s.topic, s.partition))
        if held is not None and held.get(s) == member_id:
            del held[s]
            if not held:
                del group.range_holders[(s.topic, s.partition)]


def _apply_offset(group: Group, r: OffsetRecord) -> None:
    key = (r.shard.topic, r.shard.partition)
    if r.offset is None:
        group.offsets.pop(r.shard, None)
        if not r.shard.whole and key in group.offset_ranges:
            group.offset_ranges[key].discard(r.shard)
            if not group.offset_ranges[key]:
                del group.offset_ranges[key]
    else:
        group.offsets[r.shard] = CommittedOffset(r.offset, r.metadata, r.commit_epoch)
        if not r.shard.whole:
            group.offset_ranges.setdefault(key, set()).add(r.shard)


def _apply_parallelism(group: Group, r: ParallelismRecord) -> None:
    if r.parallelism is None or r.parallelism == 1:
        group.parallelism.pop(r.topic, None)
    else:
        group.parallelism[r.topic] = r.parallelism


def _apply_external_hold(group: Group, r: ExternalHoldRecord) -> None:
    group.external = r.hold


_APPLIERS: dict[type, Callable[[Group, Any], None]] = {
    SubscribedTopicsRecord: _apply_subscribed_topics,
    RegexRecord: _apply_regex,
    MemberMetadataRecord: _apply_member_metadata,
    TargetEpochRecord: _apply_target_epoch,
    TargetMemberRecord: _apply_target_member,
    CurrentAssignmentRecord: _apply_current,
    OffsetRecord: _apply_offset,
    ParallelismRecord: _apply_parallelism,
    ExternalHoldRecord: _apply_external_hold,
}
