"""The group coordinator as a pure state machine: consumer groups and streams groups behind one door.

Every public method that may change state takes the current time (ms) as an argument and returns an
`Outcome`: the response, the records that must be made durable *before* the response is released, the
members worth nudging, and why epochs moved and who was fenced (`regroup.protocol.causes`). Nothing
here sleeps, reads a clock or touches the network; `next_deadline()` tells the shell when to call
`expire(now)`. Every request is validated in the core, so the service, the simulator and the tests
all exercise the same checks; the shells only decode.

Each kind of group keeps its own rules in its own module: `consumer_groups` (KIP-848 consumer groups)
and `streams.coordinator` (tasks with active, standby and warm-up roles). This module only keeps the
rules between them:

1. One namespace of group ids. A group id names a consumer group or a streams group, never both. A
   request of one kind for a group of the other kind is refused with INVALID_REQUEST naming the kind
   the group is (a misconfigured application, not something to retry).
2. Offsets set by an operator before anyone joined live in an empty consumer group (there is no way
   to know yet which kind the group will be). The first streams member to join such a group id takes
   the group over: its offsets move to the new streams group, in the same step, as records; a consumer
   group with members is never taken over.
3. Offset commits, fetches, resets and deletions, describe and delete go to whichever kind the group
   is; timers, topic changes, snapshots and recovery cover both kinds, consumer groups first; so do
   a member's broken and restored connections (`regroup.protocol.failover`).
4. Offsets retention covers both kinds (`regroup.protocol.retention`): its marks live here, beside
   the groups; `expire_offsets(now_ms)`, called on a periodic tick with the wall-clock time, marks
   the groups nobody uses and deletes, through each kind's own ``delete_group``, those whose
   retention passed. An operator's write to a group (offsets reset or deleted, parallelism set, a
   migration's hold changed) restarts its clock in the same step, and deleting a group drops it.
5. Bounds on what requests can store, for both kinds: a request that would create a group — a
   join, an operator's reset or parallelism, a migration's first read — is refused with
   GROUP_MAX_SIZE_REACHED once the coordinator holds ``max_groups`` groups; a member's commit of an
   offset beyond its partition's end, when the shell passes the end in (``ends``), is refused with
   INVALID_REQUEST (`regroup.protocol.offsets.check_within_ends`). An operator's reset is not checked
   against the log's end: it can always be reset again, and a Kafka group imported may have
   committed beyond the end regroup reads to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from regroup.protocol.assignors.base import AssignorRegistry
from regroup.protocol.causes import GroupDeleted
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.consumer_groups import ConsumerGroups, DelegatedSpec
from regroup.protocol.describe import GroupDescription
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.external import ExternalView, holds_any
from regroup.protocol.messages import (
    JOIN_EPOCH,
    Ack,
    CommittedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetResetRequest,
)
from regroup.protocol.offsets import check_within_ends, commit_records
from regroup.protocol.outcome import AnyRecord, Outcome, merged
from regroup.protocol.records import EmptySinceRecord, GroupEpochRecord, OffsetRecord, Record
from regroup.protocol.retention import GroupUse, Retention, duration
from regroup.protocol.shard import Shard
from regroup.protocol.state import Group, GroupState, apply
from regroup.protocol.streams import offsets as task_offsets
from regroup.protocol.streams.coordinator import StreamsConfig, StreamsGroups
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.records import StreamsRecord
from regroup.protocol.streams.state import StreamsGroup
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import validate_commit

__all__ = ["Coordinator", "DelegatedSpec", "ExternalView", "Outcome"]

class Coordinator:
    """All groups of one coordinator, of both kinds, and the topic metadata they resolve against."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        assignors: AssignorRegistry | None = None,
        topics: TopicMetadata | None = None,
        streams: StreamsConfig | None = None,
    ) -> None:
        self.consumer = ConsumerGroups(config, assignors, topics)
        self.streams = StreamsGroups(streams, self.consumer.topics, coordinator=self.consumer.config)
        #: Offsets retention's marks of empty groups, of both kinds (rule 4).
        self.retention = Retention()

    # The consumer-group state, as the shells and tests have always read it.
    @property
    def config(self) -> CoordinatorConfig:
        return self.consumer.config

    @property
    def assignors(self) -> AssignorRegistry:
        return self.consumer.assignors

    @property
    def topics(self) -> TopicMetadata:
        return self.consumer.topics

    @property
    def groups(self) -> dict[str, Group]:
        return self.consumer.groups

    # ---------------------------------------------------------------- recovery and snapshots
    @classmethod
    def recover(
        cls,
        records: Iterable[AnyRecord],
        now: int,
        config: CoordinatorConfig | None = None,
        assignors: AssignorRegistry | None = None,
        topics: TopicMetadata | None = None,
        streams: StreamsConfig | None = None,
    ) -> Coordinator:
        """Rebuild from durable records of both kinds and re-arm every timer as of ``now`` (see
        `ConsumerGroups.recover` for what "as of now" means and where topic metadata starts)."""
        consumer: list[Record] = []
        streams_records: list[StreamsRecord] = []
        marks: list[EmptySinceRecord] = []
        for r in records:
            if isinstance(r, StreamsRecord):
                streams_records.append(r)
            elif isinstance(r, EmptySinceRecord):
                marks.append(r)
            else:
                consumer.append(r)
        coord = cls(config, assignors, topics, streams)
        for m in marks:
            coord.retention.apply(m)
        coord.consumer = ConsumerGroups.recover(consumer, now, config, assignors, topics)
        coord.streams.topics = coord.consumer.topics
        coord.streams.recover(streams_records, now)
        return coord

    def snapshot(self) -> list[AnyRecord]:
        """The shortest record list that rebuilds the current state (replaces the history)."""
        return [*self.consumer.snapshot(), *self.streams.snapshot(), *self.retention.snapshot()]

    # ---------------------------------------------------------------- heartbeats
    def heartbeat(self, req: HeartbeatRequest, now: int) -> Outcome[HeartbeatResponse]:
        """The one door for a consumer: join, heartbeat, leave (-1) or step out (-2)."""
        if req.group_id in self.streams.groups:
            refused = HeartbeatResponse(ErrorCode.INVALID_REQUEST, _other_kind(req.group_id, "streams"))
            return Outcome(refused)
        if req.member_epoch == JOIN_EPOCH and (full := self._no_room(req.group_id)) is not None:
            return Outcome(HeartbeatResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, full, req.member_id,
                                             req.member_epoch, self.config.heartbeat_interval_ms))
        return self.consumer.heartbeat(req, now)

    def streams_heartbeat(self, req: StreamsHeartbeatRequest, now: int) -> Outcome[StreamsHeartbeatResponse]:
        """The one door for a streams member (rule 2 when it is the first to join an id)."""
        gid = req.group_id
        taken = self.consumer.groups.get(gid) if isinstance(gid, str) else None
        if taken is not None and gid not in self.streams.groups:
            if taken.members:
                refused = StreamsHeartbeatResponse(ErrorCode.INVALID_REQUEST, _other_kind(gid, "consumer"))
                return Outcome(refused)
            if taken.external is not None and holds_any(taken):  # a takeover would forget the hold
                refused = StreamsHeartbeatResponse(
                    ErrorCode.INVALID_REQUEST,
                    f"group id {gid!r} is a consumer group migrating from {taken.external.holder}, which "
                    "still holds partitions; a streams group cannot take the id over until the "
                    "migration ends")
                return Outcome(refused)
            if req.member_epoch != JOIN_EPOCH:
                return self.streams.heartbeat(req, now)  # not a join: refused there as unknown
            out = self.streams.heartbeat(req, now)
            if gid not in self.streams.groups:
                return out  # the join was refused: nothing taken over
            moved = dict(taken.offsets)
            gone: list[Record] = [OffsetRecord(gid, s, None) for s in sorted(moved)]
            gone.append(GroupEpochRecord(gid, None))
            gone.extend(self.retention.drop(gid))  # (applied there; `apply` below skips it)
            for r in gone:
                apply(self.consumer.groups, r)
            adopted = self.streams.adopt_offsets(gid, _whole_partitions(moved))
            deleted = Outcome(None, tuple(gone), epoch_events=(GroupDeleted(gid),))
            # The consumer group's end comes first: whoever reads the events in order (the epoch
            # history, the dashboard's timeline) drops what it kept under the id before the streams
            # group's creation and first bump, not after.
            return merged(out.response, deleted, out, adopted)
        if req.member_epoch == JOIN_EPOCH and gid not in self.streams.groups \
                and (full := self._no_room(gid)) is not None:
            return Outcome(StreamsHeartbeatResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, full))
        return self.streams.heartbeat(req, now)

    # ---------------------------------------------------------------- delegation (consumer groups)
    def assignment_spec(self, group_id: str, member_id: str, member_epoch: int) -> DelegatedSpec:
        return self.consumer.assignment_spec(group_id, member_id, member_epoch)

    def install_assignment(
        self, group_id: str, member_id: str, member_epoch: int, group_epoch: int,
        assignment: dict[str, Iterable[Shard]], now: int,
    ) -> Outcome[Ack]:
        return self.consumer.install_assignment(group_id, member_id, member_epoch, group_epoch, assignment,
                                                now)

    # ---------------------------------------------------------------- timers and topics
    def next_deadline(self) -> int | None:
        due = [d for d in (self.consumer.next_deadline(), self.streams.next_deadline()) if d is not None]
        return min(due) if due else None

    def expire(self, now: int) -> Outcome[None]:
        return merged(None, self.consumer.expire(now), self.streams.expire(now))

    def connection_lost(self, group_id: str, member_id: str, now: int) -> Outcome[None]:
        """The shell saw the member's last stream to the coordinator end without ending it itself (the
        process died, or the network dropped it): a dynamic member is fenced at the end of the
        failover grace unless it heartbeats or reconnects first; nothing else changes
        (`regroup.protocol.failover`). Unknown members are ignored: a stream may be opened before a
        join and outlive a leave."""
        if group_id in self.streams.groups:
            return self.streams.connection_lost(group_id, member_id, now)
        return self.consumer.connection_lost(group_id, member_id, now)

    def connection_restored(self, group_id: str, member_id: str, now: int) -> Outcome[None]:
        """The member opened a stream again: a grace its broken one started is forgotten."""
        if group_id in self.streams.groups:
            return self.streams.connection_restored(group_id, member_id, now)
        return self.consumer.connection_restored(group_id, member_id, now)

    def serving(self, now: int) -> Outcome[None]:
        """The shell, recovered, starts serving at ``now``: members of either kind that do not show up
        soon are fenced (`regroup.protocol.failover` rule 4). Call it once, after `recover`, when the
        server listens."""
        return merged(None, self.consumer.serving(now), self.streams.serving(now))

    def update_topics(self, topics: TopicMetadata, now: int) -> Outcome[None]:
        return merged(None, self.consumer.update_topics(topics, now), self.streams.update_topics(topics, now))

    # ---------------------------------------------------------------- offsets and admin
    def commit_offsets(self, req: OffsetCommitRequest, now: int, ends: Mapping[Shard, int] | None = None,
                       ) -> Outcome[Ack]:
        """A member's commit; ``ends``: where partitions end in the log, as far as the shell knows (an
        offset beyond its partition's end is refused, rule 5, once the member's own checks passed)."""
        if req.group_id in self.streams.groups:
            if (refused := _key_ranges_refused(self.streams.groups[req.group_id], req.offsets,
                                               lanes=True)) is not None:
                return Outcome(refused)
            if ends and (beyond := self._streams_beyond_ends(req, ends)) is not None:
                return Outcome(beyond)
            return self.streams.commit_offsets(req, now)
        return self.consumer.commit_offsets(req, now, ends)

    def commit_refusal(self, req: OffsetCommitRequest) -> Ack | None:
        """What `commit_offsets` answers a commit its own checks refuse (its shape, the group, the
        member's epoch, what it owns, the order of offsets), or None: they pass, and only the log's end
        may still refuse it (rule 5). Changes nothing: a shell asks it before looking ends up, so that
        a zombie's commit is answered without waiting on the log."""
        try:
            if req.group_id in self.streams.groups:
                refused = _key_ranges_refused(self.streams.groups[req.group_id], req.offsets, lanes=True)
                if refused is not None:
                    return refused
                validate_commit(req, self.config)
                task_offsets.commit_records(self.streams.groups[req.group_id], req)
            else:
                validate_commit(req, self.config)
                commit_records(self.groups.get(req.group_id), req)
        except ProtocolError as e:
            return Ack(e.code, e.message)
        return None

    def reset_offsets(self, req: OffsetResetRequest, now: int) -> Outcome[Ack]:
        """An operator's reset; a group id nobody uses yet becomes an empty consumer group (rule 2),
        unless the coordinator holds ``max_groups`` groups already (rule 5)."""
        if req.group_id in self.streams.groups:
            if (refused := _key_ranges_refused(self.streams.groups[req.group_id], req.offsets)) is not None:
                return Outcome(refused)
            return self._restarted(req.group_id, self.streams.reset_offsets(req, now))
        if (full := self._no_room(req.group_id)) is not None:
            return Outcome(Ack(ErrorCode.GROUP_MAX_SIZE_REACHED, full))
        return self._restarted(req.group_id, self.consumer.reset_offsets(req, now))

    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        if req.group_id in self.streams.groups:
            refused = _key_ranges_refused(self.streams.groups[req.group_id], req.shards or (), lanes=True)
            if refused is not None:
                return OffsetFetchResponse(refused.error, refused.message)
            return self.streams.fetch_offsets(req)
        return self.consumer.fetch_offsets(req)

    def delete_offsets(self, group_id: str, shards: tuple[Shard, ...] | None) -> Outcome[Ack]:
        if group_id in self.streams.groups:
            if (refused := _key_ranges_refused(self.streams.groups[group_id], shards or ())) is not None:
                return Outcome(refused)
            return self._restarted(group_id, self.streams.delete_offsets(group_id, shards))
        return self._restarted(group_id, self.consumer.delete_offsets(group_id, shards))

    def set_parallelism(self, group_id: str, topic: str, parallelism: int, now: int) -> Outcome[Ack]:
        """Key ranges per partition of ``topic`` in a consumer group. A streams group's key ranges are
        part of its topology (each subtopology's ``parallelism``), since its tasks' state cannot be
        re-cut: refused here, saying where to set them."""
        if group_id in self.streams.groups:
            return Outcome(Ack(ErrorCode.INVALID_REQUEST,
                               f"group {group_id!r} is a streams group; its key ranges are part of its "
                               "topology (a subtopology's parallelism, declared by its members) and cannot "
                               "change while the group exists"))
        if (full := self._no_room(group_id)) is not None:
            return Outcome(Ack(ErrorCode.GROUP_MAX_SIZE_REACHED, full))
        return self._restarted(group_id, self.consumer.set_parallelism(group_id, topic, parallelism, now))

    def external_owners(self, group_id: str, holder: str, view: ExternalView | None, now: int,
                        ) -> Outcome[Ack]:
        """What a group outside regroup that this consumer group migrates from holds, and what it
        committed (None: not read yet); `regroup.protocol.external` has the rules."""
        if group_id in self.streams.groups:
            return Outcome(Ack(ErrorCode.INVALID_REQUEST, f"group {group_id!r} is a streams group; migrating "
                               "from an external group is for consumer groups"))
        if (full := self._no_room(group_id)) is not None:
            return Outcome(Ack(ErrorCode.GROUP_MAX_SIZE_REACHED, full))
        return self._restarted(group_id, self.consumer.external_owners(group_id, holder, view, now))

    def end_external_hold(self, group_id: str, now: int) -> Outcome[Ack]:
        """An operator ends a consumer group's migration: what the external group held is free."""
        if group_id in self.streams.groups:
            return Outcome(Ack(ErrorCode.NONE))  # a streams group never has one
        return self._restarted(group_id, self.consumer.end_external_hold(group_id, now))

    def delete_group(self, group_id: str) -> Outcome[Ack]:
        if group_id in self.streams.groups:
            return self._restarted(group_id, self.streams.delete_group(group_id))
        return self._restarted(group_id, self.consumer.delete_group(group_id))

    # ---------------------------------------------------------------- offsets retention (rule 4)
    def expire_offsets(self, now_ms: int) -> Outcome[None]:
        """One retention check at wall-clock time ``now_ms`` (unix ms, not the timers' clock): marks the
        groups of both kinds found empty, and deletes those empty for ``offsets_retention_ms`` with
        their committed offsets, a note each (`regroup.protocol.retention`)."""
        uses = [GroupUse(gid, g.epoch, bool(g.members) or holds_any(g))
                for gid, g in self.consumer.groups.items()]
        uses.extend(GroupUse(gid, g.epoch, bool(g.members)) for gid, g in self.streams.groups.items())
        retention_ms = self.config.offsets_retention_ms
        marks, due = self.retention.check(uses, now_ms, retention_ms)
        parts: list[Outcome[object]] = [Outcome(None, tuple(marks))]
        for gid, mark in due:
            streams = gid in self.streams.groups
            group = self.streams.groups.get(gid) or self.consumer.groups.get(gid)
            offsets = len(group.offsets) if group is not None else 0
            out = self.streams.delete_group(gid) if streams else self.consumer.delete_group(gid)
            kind = "streams group" if streams else "group"
            if not out.response.ok:
                parts.append(Outcome(None, notes=(f"{kind} {gid!r}: its offsets retention passed, but it "
                                                  f"could not be deleted: {out.response.message}",)))
                continue
            note = (f"{kind} {gid!r}: no members for {duration(now_ms - mark.since_ms)} (offsets retention "
                    f"{duration(retention_ms)}): its {offsets} committed offset(s) expired and the group "
                    "was deleted")
            parts.extend((out, Outcome(None, tuple(self.retention.drop(gid)), notes=(note,))))
        return merged(None, *parts)

    def _streams_beyond_ends(self, req: OffsetCommitRequest, ends: Mapping[Shard, int]) -> Ack | None:
        """A streams member's commit refused for an offset beyond the log's end (rule 5) — once its own
        checks passed (they answer first, as for a consumer group: a zombie hears it is one); None: go
        on (also when those checks refuse: the streams group answers that itself)."""
        if self.commit_refusal(req) is not None:
            return None
        try:
            check_within_ends(req.offsets, ends)
        except ProtocolError as e:
            return Ack(e.code, e.message)
        return None

    def _restarted(self, group_id: str, out: Outcome[Ack]) -> Outcome[Ack]:
        """``out``, and if it wrote anything (an operator's write, or the group's deletion), the end of
        the group's retention mark: its clock starts again at the next check (rule 4)."""
        if not out.records or not isinstance(group_id, str):
            return out
        dropped = self.retention.drop(group_id)
        return merged(out.response, out, Outcome(None, tuple(dropped))) if dropped else out

    def _no_room(self, group_id: object) -> str | None:
        """Why ``group_id`` cannot become a new group (rule 5), or None: it exists already, there is
        room, or the id is malformed (the request's own checks refuse it)."""
        if not isinstance(group_id, str) or not group_id or len(group_id) > self.config.max_id_length \
                or group_id in self.consumer.groups or group_id in self.streams.groups:
            return None
        held = len(self.consumer.groups) + len(self.streams.groups)
        if held < self.config.max_groups:
            return None
        return (f"group {group_id!r} would be a new group, but this coordinator already holds {held} groups, "
                f"the most it allows (max_groups); delete groups nobody uses (empty groups are deleted "
                "anyway once their offsets expire) or raise the limit")

    # ---------------------------------------------------------------- reading
    def describe_group(self, group_id: str) -> GroupDescription:
        """A consumer group as the coordinator sees it; raises INVALID_REQUEST (also for a streams
        group: `describe_streams_group` describes those) or GROUP_ID_NOT_FOUND."""
        if group_id in self.streams.groups:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, _other_kind(group_id, "streams"))
        return self.consumer.describe_group(group_id)

    def describe_streams_group(self, group_id: str) -> StreamsGroupDescription:
        if group_id in self.consumer.groups:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, _other_kind(group_id, "consumer"))
        return self.streams.describe_group(group_id)

    def list_groups(self) -> list[tuple[str, GroupState, int]]:
        """``(group id, state, member count)`` of every consumer group."""
        return self.consumer.list_groups()

    def list_streams_groups(self) -> list[tuple[str, str, int]]:
        """``(group id, state, member count)`` of every streams group."""
        return [(gid, g.state.value, len(g.members)) for gid, g in sorted(self.streams.groups.items())]

    def watch(self, group_id: str, member_id: str) -> Ack:
        return self.consumer.watch(group_id, member_id)


def _key_ranges_refused(group: StreamsGroup, shards: Iterable[Shard], *, lanes: bool = False) -> Ack | None:
    """Streams groups keep offsets per task: per whole partition, or per key range of a subtopology
    cut into key ranges (`regroup.protocol.streams.topology` rule 4) — exactly its tasks' ranges, and
    in a member's commit or fetch (``lanes``) the lanes of them an active reads a split partition as
    (`regroup.protocol.streams.offsets` rule 2). Any other key range named for one is refused. A
    whole partition is not: of a topic cut into key ranges, it stands for all of them (reset, delete
    and fetch, `regroup.protocol.streams.offsets` rule 5)."""
    ranged = sorted(str(s) for s in shards if not s.whole and not _task_part(group, s, lanes))
    if not ranged:
        return None
    return Ack(ErrorCode.INVALID_REQUEST, f"group {group.group_id!r} is a streams group, whose offsets are "
               f"per task: whole partitions, or the key ranges of its subtopologies' parallelism; key ranges "
               f"({', '.join(ranged[:3])}) are none of its tasks'")


def _task_part(group: StreamsGroup, shard: Shard, lanes: bool) -> bool:
    """Whether ``shard`` is a task's part — or, with ``lanes`` (a member's commit or fetch), a lane
    of one (`regroup.protocol.streams.offsets` rule 2); an operator names tasks' parts only."""
    task = task_offsets.task_holding_shard(group, shard) if lanes else task_offsets.task_of(group, shard)
    return task is not None


def _whole_partitions(offsets: Mapping[Shard, CommittedOffset]) -> dict[Shard, CommittedOffset]:
    """A consumer group's offsets as a streams group keeps them: a partition kept in key-range
    fragments resumes at its lowest (at least once for the keys the others had passed)."""
    out: dict[Shard, CommittedOffset] = {}
    for s, c in sorted(offsets.items()):
        whole = Shard(s.topic, s.partition)
        if whole not in out or c.offset < out[whole].offset:
            out[whole] = c
    return out


def _other_kind(group_id: str, kind: str) -> str:
    return (f"group {group_id!r} is a {kind} group; a group id names one kind of group — use another id, "
            f"or delete the {kind} group once it has no members")
