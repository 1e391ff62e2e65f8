"""Offset commits and fetches, fenced by member epoch.

Rules: a member commits only at its current epoch and only shards it holds (assigned or still
pending revocation: committing is how it hands them over cleanly); a committed offset never moves
backwards except through an operator's reset, and operators may only write to a group with no members,
so that they cannot race a live consumer. An operator's fetch leaves the member id empty.
"""

from __future__ import annotations

from collections.abc import Mapping

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import (
    CommittedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetResetRequest,
)
from regroup.protocol.records import OffsetRecord, Record
from regroup.protocol.shard import Shard
from regroup.protocol.state import Group

#: The commit epoch an operator's reset records: no member committed it.
RESET_COMMIT_EPOCH = -1


def _by_operator(req: OffsetFetchRequest) -> bool:
    return req.member_id == "" and req.member_epoch < 0


def check_member_epoch(group: Group, member_id: str, member_epoch: int) -> None:
    """UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH unless the member is known at exactly this epoch."""
    current = group.current.get(member_id)
    check_epoch_of(group.group_id, member_id, member_epoch, None if current is None else current.epoch)


def check_epoch_of(group_id: str, member_id: str, member_epoch: int, current_epoch: int | None) -> None:
    """The epoch check of any group type: ``current_epoch`` None means the member is not in the group."""
    if current_epoch is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"member {member_id!r} is not in group {group_id!r} (it left or was fenced); rejoin "
            "before committing — its shards may already belong to another member")
    if member_epoch != current_epoch:
        raise ProtocolError(
            ErrorCode.STALE_MEMBER_EPOCH,
            f"member {member_id!r} sent epoch {member_epoch} but is at epoch {current_epoch} in group "
            f"{group_id!r}; heartbeat to learn the current epoch and retry")


def check_forward(committed: Mapping[Shard, CommittedOffset], shard: Shard, offset: int) -> None:
    """A member's commit never moves an offset back (only an operator's reset may)."""
    prev = committed.get(shard)
    if prev is not None and offset < prev.offset:
        raise ProtocolError(
            ErrorCode.OFFSET_OUT_OF_ORDER,
            f"offset {offset} for {shard} is behind the committed {prev.offset}; committed offsets "
            "only move forward (an operator's reset on an empty group can move them back)")


def require_empty(group: Group, what: str) -> None:
    require_no_members(group.group_id, len(group.members), what)


def require_no_members(group_id: str, members: int, what: str) -> None:
    if members:
        raise ProtocolError(
            ErrorCode.NON_EMPTY_GROUP,
            f"{what} of group {group_id!r} needs an empty group, but it has {members} "
            "member(s); stop its consumers first")


def commit_records(group: Group | None, req: OffsetCommitRequest) -> list[Record]:
    """The records of an accepted commit; raises ProtocolError for a refused one (all or nothing)."""
    gid = req.group_id
    if group is None:
        raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {gid!r} does not exist; join it first")
    check_member_epoch(group, req.member_id, req.member_epoch)
    current = group.current[req.member_id]
    committed = group.offsets
    for shard, offset in req.offsets.items():
        if shard not in current.assigned and shard not in current.pending_revocation:
            raise ProtocolError(
                ErrorCode.NOT_OWNED,
                f"member {req.member_id!r} commits {shard}, which it does not own at epoch "
                f"{current.epoch}; only the owner of a shard may commit its offset")
        check_forward(committed, shard, offset)
    return [OffsetRecord(gid, s, o, req.metadata, req.member_epoch) for s, o in sorted(req.offsets.items())]


def reset_records(group: Group | None, req: OffsetResetRequest) -> list[Record]:
    """An operator's reset: any offsets, also backwards, but only while nobody consumes the group.

    A group that does not exist yet is fine: offsets may be set before the first member joins.
    """
    if group is not None:
        require_empty(group, "an admin offset commit")
    gid = req.group_id
    return [OffsetRecord(gid, s, o, req.metadata, RESET_COMMIT_EPOCH) for s, o in sorted(req.offsets.items())]


def fetch_offsets(group: Group | None, req: OffsetFetchRequest) -> Mapping[Shard, CommittedOffset]:
    """Committed offsets (only those that exist); members are checked like commits."""
    if group is None:
        if not _by_operator(req):
            raise ProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {req.group_id!r} does not exist")
        return {}
    if not _by_operator(req):
        check_member_epoch(group, req.member_id, req.member_epoch)
    if req.shards is None:
        return dict(sorted(group.offsets.items()))
    return {s: group.offsets[s] for s in req.shards if s in group.offsets}


def delete_offset_records(group: Group, shards: tuple[Shard, ...] | None) -> list[Record]:
    """An operator's deletion of committed offsets (all of them when ``shards`` is None); empty group only."""
    require_empty(group, "deleting offsets")
    targets = sorted(group.offsets) if shards is None else sorted(s for s in shards if s in group.offsets)
    return [OffsetRecord(group.group_id, s, None) for s in targets]
