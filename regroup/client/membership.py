"""A consumer's session with the coordinator: `Session` with the consumer's heartbeat and reports.

The consumer's owner (the `Consumer`'s poll loop, or the PySpark source at a micro-batch boundary)
reports back with `revocation_done` / `assignment_done`; `where_to_begin` does the I/O (committed
offsets, the log's ends — per open piece of a partition split on the producer side) for the member
driver's rule. Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from regroup.client.session import Session, now_ms
from regroup.log.base import PartitionedLog
from regroup.protocol.driver import OffsetReset, resumes, start_positions, topics_to_look_up
from regroup.protocol.keyrange import Resume
from regroup.protocol.member import MemberStateMachine
from regroup.protocol.messages import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.shard import Shard, ShardSet

__all__ = ["Membership", "now_ms"]


class Membership(Session[MemberStateMachine]):
    """One consumer's session with the coordinator: join at construction, `leave()` to go."""

    def _exchange(self, req: HeartbeatRequest) -> HeartbeatResponse:
        return self.client.heartbeat(req)

    # ------------------------------------------------------------------ what the owner reports
    def revocation_done(self, shards: ShardSet) -> None:
        with self._lock:
            self._enqueue(self._machine.revocation_done(shards, now_ms()))
        self._wake.set()

    def assignment_done(self, shards: ShardSet) -> None:
        with self._lock:
            self._enqueue(self._machine.assignment_done(shards, now_ms()))
        self._wake.set()

    def where_to_begin(self, shards: Collection[Shard], reset: OffsetReset,
                       log: PartitionedLog) -> tuple[dict[Shard, int], dict[Shard, int]]:
        """The committed offsets of newly assigned ``shards`` and where each begins (the member
        driver's rule 3), asking ``log`` where it ends only when the reset policy needs it.

        Raises `OffsetFetchError` when the committed offsets cannot be read (rule 4).
        """
        committed = self.fetch_committed(shards)
        return committed, start_positions(shards, committed, reset, _log_ends(shards, committed, reset, log))

    def where_to_resume(self, shards: Collection[Shard], reset: OffsetReset,
                        log: PartitionedLog) -> tuple[dict[Shard, int], dict[Shard, Resume]]:
        """`where_to_begin` for members that may own key ranges, or read a partition split on the
        producer side in lanes: the committed offsets of ``shards`` themselves, and where each begins
        with what it skips (`driver.resumes`).

        Raises `OffsetFetchError` when the committed offsets cannot be read (rule 4).
        """
        committed = self.fetch_committed(shards)
        own = {s: committed[s] for s in shards if s in committed}
        return own, resumes(shards, committed, reset, _log_ends(shards, committed, reset, log))


def _log_ends(shards: Collection[Shard], committed: Mapping[Shard, int], reset: OffsetReset,
              log: PartitionedLog) -> dict[Shard, int]:
    """Where ``log`` ends now for the partitions of ``shards`` the member driver needs it for
    (`topics_to_look_up`): by whole partition, and by open piece (`PartitionedLog.piece_ends`) for a
    partition split on the producer side, as `driver.resumes` takes it. One end-offsets call per
    topic; a partition's pieces are asked for only when it is split."""
    ends: dict[Shard, int] = {}
    for topic in topics_to_look_up(shards, committed, reset):
        by_partition = log.end_offsets(topic)
        for p in sorted({s.partition for s in shards if s.topic == topic} & by_partition.keys()):
            if len(log.key_pieces(topic, p)) > 1:
                pieces = log.piece_ends(topic, p)
                ends.update((Shard(topic, p, lo, hi), end) for (lo, hi), end in pieces.items())
            else:
                ends[Shard(topic, p)] = by_partition[p]
    return ends
