"""A consumer's session with the coordinator: `Session` with the consumer's heartbeat and reports.

The consumer's owner (the `Consumer`'s poll loop, or the PySpark source at a micro-batch boundary)
reports back with `revocation_done` / `assignment_done`; `where_to_begin` does the I/O (committed
offsets, the log's ends) for the member driver's rule. Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Collection

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
        ends: dict[Shard, int] = {}
        for topic in topics_to_look_up(shards, committed, reset):
            ends.update((Shard(topic, p), end) for p, end in log.end_offsets(topic).items())
        return committed, start_positions(shards, committed, reset, ends)


    def where_to_resume(self, shards: Collection[Shard], reset: OffsetReset,
                        log: PartitionedLog) -> tuple[dict[Shard, int], dict[Shard, Resume]]:
        """`where_to_begin` for members that may own key ranges: the committed offsets of
        ``shards`` themselves, and where each begins with what it skips (`driver.resumes`).

        Raises `OffsetFetchError` when the committed offsets cannot be read (rule 4).
        """
        committed = self.fetch_committed(shards)
        ends: dict[Shard, int] = {}
        for topic in topics_to_look_up(shards, committed, reset):
            ends.update((Shard(topic, p), end) for p, end in log.end_offsets(topic).items())
        own = {s: committed[s] for s in shards if s in committed}
        return own, resumes(shards, committed, reset, ends)
