"""Committed source offsets of streams groups: who may commit them, and the operator's tools.

Rules (the consumer-group rules of `regroup.protocol.offsets`, with tasks for shards):

1. A member commits only at its current epoch, and only source partitions of tasks it holds as
   *active* (assigned, or still pending revocation: committing is how it hands a task over cleanly).
   A standby or warm-up copy processes nothing downstream, so it never commits.
2. A source partition ``Shard(topic, i)`` belongs to task ``TaskId(s, i)`` where ``s`` is the
   subtopology reading ``topic``; a topic the topology does not read cannot be committed. A
   subtopology cut into K key ranges commits per range: ``Shard(topic, i, lo, hi)`` with ``[lo, hi)``
   exactly range r of K belongs to task ``TaskId(s, i, r, K)`` (its fragment of the partition, as
   a consumer group's range commit is); a whole partition or another cut belongs to no task.
   A *lane* — a part of a task's range, as its active reads a source partition split on the
   producer side (one lane per open piece, `regroup.protocol.microbatch.lanes_of`) — belongs to that
   task too, and is kept as a fragment of the task's part (`regroup.protocol.keyrange` rule 3: it
   raises what lies inside it, never lowers anything), exactly as a consumer group keeps a lane of
   an owned shard. A fetch of a task's part answers every fragment of it; the task's committed
   position as a whole is their lowest (`committed_low`).
3. Committed offsets only move forward, except through an operator's reset, which needs a group
   with no members so that it cannot race a live task. A task whose part is kept in fragments is
   behind only below its floor (`regroup.protocol.offsets.check_floor`, the consumer groups' rule):
   a lane may commit below a fragment a former active left higher, and lowers nothing. A reset or a
   deletion of a task's part replaces (removes) the fragments inside it.
4. The metadata string is the member's to use (the plain-Python member records there where its
   changelog stands at that commit); it is stored and returned unchanged.
5. An operator names partitions; a topic the group cuts into K > 1 key ranges (`StreamsGroup.cuts`,
   the cut it is read in, even by a topology it no longer has) keeps none of its offsets per whole
   partition, since no task would read them. So a reset of a whole partition of such a topic sets
   each of its K ranges to that offset (`per_task`), a deletion of one deletes every range's offset
   (what lies inside the partition, rule 3), and offsets adopted from before the group existed
   (`regroup.protocol.coordinator`, kept per whole partition) seed every range of their partition.
   A reset naming a whole partition and also a key range of it is refused: which one wins would be
   a guess. Offsets the group kept before a topology first cut the topic (a reset while no topology
   read it) are cut into its ranges when one does (`regroup.protocol.streams.state`, in `apply`):
   each fragment crossing a range's bounds becomes its pieces, each with its offset, so that no
   task's floor counts another task's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.keyrange import ranges
from regroup.protocol.messages import (
    CommittedOffset,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetResetRequest,
)
from regroup.protocol.offsets import (
    RESET_COMMIT_EPOCH,
    check_epoch_of,
    check_floor,
    check_forward,
    fragment_changes,
    require_no_members,
)
from regroup.protocol.shard import Shard
from regroup.protocol.streams.records import StreamsOffsetRecord
from regroup.protocol.streams.state import StreamsGroup, held
from regroup.protocol.streams.topology import Subtopology, TaskId, task_holding, task_of_shard

V = TypeVar("V")

__all__ = ["commit_records", "committed_low", "delete_offset_records", "fetch_offsets", "per_task",
           "reset_records", "task_holding_shard", "task_of"]


def task_of(group: StreamsGroup, shard: Shard) -> TaskId | None:
    """The task whose source ``shard`` is (rule 2), or None when the topology does not read it."""
    if group.topology is None:
        return None
    for sub in group.topology.subtopologies:
        if shard.topic in sub.source_topics:
            return task_of_shard(sub.subtopology_id, sub.parallelism, shard)
    return None


def task_holding_shard(group: StreamsGroup, shard: Shard) -> TaskId | None:
    """The task whose part ``shard`` is, or a lane of (rule 2); None when no task's part holds it."""
    sub = _reader(group, shard.topic)
    return None if sub is None else task_holding(sub.subtopology_id, sub.parallelism, shard)


def committed_low(group: StreamsGroup, shard: Shard) -> int | None:
    """A task's part ``shard`` as one committed offset: its own, or the lowest of its fragments when
    its lanes were committed on their own (where it would resume as a whole; None: nothing
    committed). What lags are measured against."""
    exact = group.offsets.get(shard)
    parts = group.offset_parts.get((shard.topic, shard.partition), ())
    if exact is not None and len(parts) <= 1:
        return exact.offset
    hit = group.offsets_overlapping(shard)
    return min((c.offset for c in hit.values()), default=None)


def _reader(group: StreamsGroup, topic: str) -> Subtopology | None:
    if group.topology is None:
        return None
    return next((s for s in group.topology.subtopologies if topic in s.source_topics), None)


def commit_records(group: StreamsGroup, req: OffsetCommitRequest) -> list[StreamsOffsetRecord]:
    """The records of an accepted commit; raises ProtocolError for a refused one (all or nothing)."""
    current = group.current.get(req.member_id)
    check_epoch_of(group.group_id, req.member_id, req.member_epoch,
                   None if current is None else current.epoch)
    assert current is not None
    active = held(current).active
    ranged = False
    for shard, offset in req.offsets.items():
        task = task_of(group, shard)
        lane = task is None and (task := task_holding_shard(group, shard)) is not None
        if task is None:
            sub = _reader(group, shard.topic)
            raise ProtocolError(
                ErrorCode.NOT_OWNED,
                f"member {req.member_id!r} commits {shard}, but no subtopology of streams group "
                f"{group.group_id!r} reads topic {shard.topic!r}" if sub is None else
                f"member {req.member_id!r} commits {shard}, which is not a task's part of topic "
                f"{shard.topic!r}: subtopology {sub.subtopology_id!r} cuts its partitions into "
                f"{sub.parallelism} key range(s), and each task commits exactly its own")
        if task not in active:
            raise ProtocolError(
                ErrorCode.NOT_OWNED,
                f"member {req.member_id!r} commits {shard} of task {task}, which it does not run as active "
                f"at epoch {current.epoch}; only a task's active commits its source offsets")
        own = task.shard(shard.topic)
        hit = group.offsets_overlapping(own)
        if lane or any(f != own for f in hit):
            ranged = True
            check_floor(hit, own, shard, offset)
        else:
            check_forward(group.offsets, shard, offset)
    if not ranged:
        return [StreamsOffsetRecord(group.group_id, s, o, req.metadata, req.member_epoch)
                for s, o in sorted(req.offsets.items())]
    # Lanes (rule 2): fragments of their task's part, as a consumer group keeps a lane of a shard.
    deleted, written = fragment_changes(
        lambda s: group.offsets_overlapping(Shard(s.topic, s.partition)), req.offsets, req.metadata,
        req.member_epoch)
    out = [StreamsOffsetRecord(group.group_id, f, None) for f in deleted if f in group.offsets]
    out.extend(StreamsOffsetRecord(group.group_id, f, c.offset, c.metadata, c.commit_epoch)
               for f, c in sorted(written.items()))
    return out


def per_task(group: StreamsGroup, offsets: Mapping[Shard, V]) -> dict[Shard, V]:
    """``offsets`` as the group's tasks keep them (rule 5): each whole partition of a topic cut into
    K > 1 key ranges becomes its K ranges, each with the partition's value; any other shard stays.
    INVALID_REQUEST for a whole partition named beside a key range of it."""
    out: dict[Shard, V] = {}
    cut_parts = {(s.topic, s.partition) for s in offsets if not s.whole}
    for shard, value in offsets.items():
        k = group.cuts.get(shard.topic, 1)
        if not shard.whole or k == 1:
            out[shard] = value
            continue
        if (shard.topic, shard.partition) in cut_parts:
            named = sorted(str(s) for s in offsets
                           if not s.whole and (s.topic, s.partition) == (shard.topic, shard.partition))
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"offsets name partition {shard} of source topic {shard.topic!r}, which streams group "
                f"{group.group_id!r} cuts into {k} key ranges, and also key range(s) {', '.join(named[:3])} "
                f"of it; name the whole partition (every range gets its offset) or its ranges, not both")
        out.update((Shard(shard.topic, shard.partition, lo, hi), value) for lo, hi in ranges(k))
    return out


def reset_records(group: StreamsGroup, req: OffsetResetRequest) -> list[StreamsOffsetRecord]:
    """An operator's reset: any offsets, also backwards, but only while the group has no members; a
    task's part reset replaces the fragments its lanes left inside it (rule 3)."""
    require_no_members(group.group_id, len(group.members), "an admin offset commit")
    offsets = per_task(group, req.offsets)  # a whole partition of a cut topic: its ranges (rule 5)
    gone = sorted({f for s in (*req.offsets, *offsets) for f in _inside(group, s)} - set(offsets))
    return [StreamsOffsetRecord(group.group_id, f, None) for f in gone] + [
        StreamsOffsetRecord(group.group_id, s, o, req.metadata, RESET_COMMIT_EPOCH)
        for s, o in sorted(offsets.items())]


def fetch_offsets(group: StreamsGroup, req: OffsetFetchRequest) -> Mapping[Shard, CommittedOffset]:
    """Committed offsets (only those that exist): for each shard asked, every fragment of it (its own
    offset, or its lanes', rule 2); a member is checked like a commit, an operator (empty member id,
    negative epoch) is not. Any member may read: a warm-up needs the active's."""
    if not (req.member_id == "" and req.member_epoch < 0):
        current = group.current.get(req.member_id)
        check_epoch_of(group.group_id, req.member_id, req.member_epoch,
                       None if current is None else current.epoch)
    if req.shards is None:
        return dict(sorted(group.offsets.items()))
    out: dict[Shard, CommittedOffset] = {}
    for s in req.shards:
        out.update(group.offsets_overlapping(s))
    return dict(sorted(out.items()))


def delete_offset_records(group: StreamsGroup, shards: tuple[Shard, ...] | None) -> list[StreamsOffsetRecord]:
    """An operator's deletion of committed offsets (all when ``shards`` is None), with the fragments
    inside each (rule 3); empty group only."""
    require_no_members(group.group_id, len(group.members), "deleting offsets")
    targets = sorted(group.offsets) if shards is None else \
        sorted({f for s in shards for f in _inside(group, s)})
    return [StreamsOffsetRecord(group.group_id, s, None) for s in targets]


def _inside(group: StreamsGroup, shard: Shard) -> list[Shard]:
    """The committed shards whose keys all lie in ``shard``'s (itself included)."""
    return [f for f in group.offsets_overlapping(shard) if shard.lo <= f.lo and f.hi <= shard.hi]
