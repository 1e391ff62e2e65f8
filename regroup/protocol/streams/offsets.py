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
3. Committed offsets only move forward, except through an operator's reset, which needs a group
   with no members so that it cannot race a live task.
4. The metadata string is the member's to use (the plain-Python member records there where its
   changelog stands at that commit); it is stored and returned unchanged.
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
from regroup.protocol.offsets import RESET_COMMIT_EPOCH, check_epoch_of, check_forward, require_no_members
from regroup.protocol.shard import Shard
from regroup.protocol.streams.records import StreamsOffsetRecord
from regroup.protocol.streams.state import StreamsGroup, held
from regroup.protocol.streams.topology import Subtopology, TaskId, task_of_shard

__all__ = ["commit_records", "delete_offset_records", "fetch_offsets", "reset_records", "task_of"]


def task_of(group: StreamsGroup, shard: Shard) -> TaskId | None:
    """The task whose source ``shard`` is (rule 2), or None when the topology does not read it."""
    if group.topology is None:
        return None
    for sub in group.topology.subtopologies:
        if shard.topic in sub.source_topics:
            return task_of_shard(sub.subtopology_id, sub.parallelism, shard)
    return None


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
    for shard, offset in req.offsets.items():
        task = task_of(group, shard)
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
        check_forward(group.offsets, shard, offset)
    return [StreamsOffsetRecord(group.group_id, s, o, req.metadata, req.member_epoch)
            for s, o in sorted(req.offsets.items())]


def reset_records(group: StreamsGroup, req: OffsetResetRequest) -> list[StreamsOffsetRecord]:
    """An operator's reset: any offsets, also backwards, but only while the group has no members."""
    require_no_members(group.group_id, len(group.members), "an admin offset commit")
    return [StreamsOffsetRecord(group.group_id, s, o, req.metadata, RESET_COMMIT_EPOCH)
            for s, o in sorted(req.offsets.items())]


def fetch_offsets(group: StreamsGroup, req: OffsetFetchRequest) -> Mapping[Shard, CommittedOffset]:
    """Committed offsets (only those that exist); a member is checked like a commit, an operator
    (empty member id, negative epoch) is not. Any member may read: a warm-up needs the active's."""
    if not (req.member_id == "" and req.member_epoch < 0):
        current = group.current.get(req.member_id)
        check_epoch_of(group.group_id, req.member_id, req.member_epoch,
                       None if current is None else current.epoch)
    if req.shards is None:
        return dict(sorted(group.offsets.items()))
    return {s: group.offsets[s] for s in req.shards if s in group.offsets}


def delete_offset_records(group: StreamsGroup, shards: tuple[Shard, ...] | None) -> list[StreamsOffsetRecord]:
    """An operator's deletion of committed offsets (all when ``shards`` is None); empty group only."""
    require_no_members(group.group_id, len(group.members), "deleting offsets")
    targets = sorted(group.offsets) if shards is None else sorted(s for s in shards if s in group.offsets)
    return [StreamsOffsetRecord(group.group_id, s, None) for s in targets]
