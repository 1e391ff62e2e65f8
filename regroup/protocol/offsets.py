"""Offset commits and fetches, fenced by member epoch.

Rules: a member commits only at its current epoch and only shards it holds (assigned or still
pending revocation: committing is how it hands them over cleanly); a committed offset never moves
backwards except through an operator's reset, and operators may only write to a group with no members,
so that they cannot race a live consumer. An operator's fetch leaves the member id empty.

Key ranges (`regroup.protocol.keyrange`): a commit of a key range writes the partition's committed
*fragments* (rule 3 there: it raises the fragments inside the range, never lowers one, and keeps the
parts of fragments outside it); a fetch of a shard answers every fragment overlapping it, from which
the member works out where the range resumes and what it skips. A group that never used key ranges
has one fragment per partition, the whole partition, and these rules are exactly the plain ones.

When a key-range commit is behind: a member's commit at ``o`` of a shard it owns, or of a key range
inside one (a lane), is refused (``OFFSET_OUT_OF_ORDER``) only when ``o`` is below the *floor* of the
owned shard: the lowest point its owner can have begun at (keyrange rule 4 with a reset offset of 0)
— the lowest of its fragments if they cover all its keys; no floor at all (0) if some of its keys
have no fragment, since those began at the member's reset offset, which the core does not know and
which may be 0 (``earliest``). Why this is enough:

(1) No accepted commit moves any key's committed progress back, whoever sends it (a zombie is refused
    before, by epoch and ownership): inside the range a fragment above ``o`` keeps its offset and is
    skipped below it by the next owner (keyrange rule 4), and only keys with no fragment or a lower
    one get ``o``. The floor only tells a client that a commit is behind where it began.
(2) A legitimate owner can always commit its progress: its shard's fragments change only by its own
    commits, which raise them to positions it reached, so some key of the shard keeps a progress at or
    below its position — provided each lane starts at least where its own keys resume (`microbatch.clip`)
    and moves only forward; a key that began at the reset offset, below every fragment, is such a key
    until the owner's first commit covers it.

Bounds: no offset is ever above `regroup.protocol.validation.MAX_OFFSET` (2^53 - 1), and where the
shell knows where a partition ends in the log it passes that end in, and a member's commit of an
offset beyond it is refused (`check_within_ends`) — the core cannot know how fresh the end is, so
the shell only passes ends read after the request arrived (`regroup.coordinator.ends`). A consumer
commits the position of the next record it reads, which is never beyond the log's end; an offset
beyond it would pin the partition ahead of every later commit (they would all be behind it). An
operator's reset is not checked against the end: a reset can always be undone by another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.keyrange import commit_fragments, resume
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


def check_within_ends(offsets: object, ends: Mapping[Shard, int] | None) -> None:
    """INVALID_REQUEST when an offset is beyond its partition's end in ``ends`` (``Shard(topic,
    partition)`` -> the offset the log writes next); offsets whose partition is not in ``ends`` pass.

    Called once the request's own checks passed (shape, epoch, ownership: a zombie hears it is one),
    and still only looks at well-formed entries. A key range's offset is a position in its whole
    partition's offsets, checked against the partition's end."""
    if not ends or not isinstance(offsets, Mapping):
        return
    for shard, offset in offsets.items():
        if not isinstance(shard, Shard) or not isinstance(offset, int):
            continue
        end = ends.get(shard if shard.whole else Shard(shard.topic, shard.partition))
        if isinstance(end, int) and offset > end:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"offset {offset} for {shard} is beyond the end of the partition in the log ({end}, the "
                "offset its next record gets); a committed offset names the next record to read, so "
                "it is at most the log's end")


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
    ranged = False
    for shard, offset in req.offsets.items():
        owner = shard
        if shard not in current.assigned and shard not in current.pending_revocation:
            container = _owned_container(shard, current.assigned, current.pending_revocation)
            if container is None:
                raise ProtocolError(
                    ErrorCode.NOT_OWNED,
                    f"member {req.member_id!r} commits {shard}, which it does not own at epoch "
                    f"{current.epoch}; only the owner of a shard may commit its offset")
            owner = container
        if shard.whole and (shard.topic, shard.partition) not in group.offset_ranges:
            check_forward(committed, shard, offset)
        else:
            ranged = True
            _check_range_forward(group, owner, shard, offset)
    if not ranged:
        return [OffsetRecord(gid, s, o, req.metadata, req.member_epoch)
                for s, o in sorted(req.offsets.items())]
    return _fragment_records(group, req)


def _owned_container(shard: Shard, *owned: Iterable[Shard]) -> Shard | None:
    """The shard the member owns that ``shard``, a key range, lies inside (None: none). A member may
    commit parts of what it owns separately: a consumer reading a partition split on the producer
    side keeps one position per piece of the log (`regroup.log.embedded.layout`), and commits each
    (keyrange rule 3 keeps the parts as fragments of their own)."""
    for shards in owned:
        for o in shards:
            if o.partition == shard.partition and o.topic == shard.topic and o.lo <= shard.lo \
                    and shard.hi <= o.hi:
                return o
    return None


def _check_range_forward(group: Group, owned: Shard, shard: Shard, offset: int) -> None:
    """A key range's commit is behind when it is below the floor of the shard it is part of
    (``owned``; itself, unless it is a part of an owned shard): see `check_floor`."""
    check_floor(group.offsets_overlapping(owned), owned, shard, offset)


def check_floor(hit: Mapping[Shard, CommittedOffset], owned: Shard, shard: Shard, offset: int) -> None:
    """OFFSET_OUT_OF_ORDER when a commit of ``shard`` (``owned`` or a part of it) at ``offset`` is
    below the floor of ``owned``, whose committed fragments are ``hit``: where its owner began it at
    the lowest (keyrange rule 4, with a reset offset of 0 for its keys that no fragment covers — the
    core does not know the member's reset policy; see the module's rules). A part of a shard may well
    be below its own fragments — it began where the whole shard did, and skips what a former owner
    did — and committing it there lowers nothing (keyrange rule 3). Streams groups keep the same rule
    for the parts of a task (`regroup.protocol.streams.offsets`)."""
    if not hit:
        return
    floor = resume({f: c.offset for f, c in hit.items()}, owned, 0).start
    if offset < floor:
        raise ProtocolError(
            ErrorCode.OFFSET_OUT_OF_ORDER,
            f"offset {offset} for {shard} is behind every committed offset of the key range "
            f"{owned} it is part of (lowest {floor}, and every key of it has one); committed "
            "offsets only move forward")


def _fragment_records(group: Group, req: OffsetCommitRequest) -> list[Record]:
    """The records of a commit that names key ranges or partitions with range fragments."""
    gid = req.group_id
    deleted, written = fragment_changes(
        lambda s: group.offsets_overlapping(Shard(s.topic, s.partition)), req.offsets, req.metadata,
        req.member_epoch)
    out: list[Record] = [OffsetRecord(gid, f, None) for f in deleted if f in group.offsets]
    out.extend(OffsetRecord(gid, f, c.offset, c.metadata, c.commit_epoch) for f, c in sorted(written.items()))
    return out


def fragment_changes(
    partition_fragments: Callable[[Shard], Mapping[Shard, CommittedOffset]],
    offsets: Mapping[Shard, int], metadata: str, epoch: int,
) -> tuple[list[Shard], dict[Shard, CommittedOffset]]:
    """The fragments a commit of ``offsets`` deletes and writes (keyrange rule 3), applied in order on
    a working copy so that two ranges of one partition in one request see each other's fragments.
    ``partition_fragments(s)`` gives the committed fragments of ``s``'s partition (those that matter
    to it). Consumer groups and streams groups (the lanes of a task) share it."""
    work: dict[tuple[str, int], dict[Shard, CommittedOffset]] = {}
    deleted: dict[Shard, None] = {}
    written: dict[Shard, CommittedOffset] = {}
    for shard, offset in sorted(offsets.items()):
        key = (shard.topic, shard.partition)
        if key not in work:
            work[key] = dict(partition_fragments(shard))
        frags = work[key]
        done = CommittedOffset(offset, metadata, epoch)
        gone, changed = commit_fragments(frags, shard, done)
        for f in gone:
            frags.pop(f, None)
            written.pop(f, None)
            deleted[f] = None
        for f, c in changed.items():
            frags[f] = c
            written[f] = c
            deleted.pop(f, None)
    return sorted(deleted), written


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
    if not group.offset_ranges and all(s.whole for s in req.shards):
        return {s: group.offsets[s] for s in req.shards if s in group.offsets}
    out: dict[Shard, CommittedOffset] = {}
    for s in req.shards:  # key ranges: every fragment overlapping the shard (keyrange rule 4)
        out.update(group.offsets_overlapping(s))
    return dict(sorted(out.items()))


def delete_offset_records(group: Group, shards: tuple[Shard, ...] | None) -> list[Record]:
    """An operator's deletion of committed offsets (all of them when ``shards`` is None); empty group only."""
    require_empty(group, "deleting offsets")
    targets = sorted(group.offsets) if shards is None else sorted(s for s in shards if s in group.offsets)
    return [OffsetRecord(group.group_id, s, None) for s in targets]
