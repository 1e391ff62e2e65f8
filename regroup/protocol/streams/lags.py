"""How far behind each task copy is: the soft state of streams groups, and the arithmetic on it.

Rules:

1. Soft, not durable. Members report, for every task copy they hold locally, the source offsets the
   copy's state has reached; the coordinator keeps the latest full report of each member here and
   nowhere else. A restart loses it, and each member sends it again on its first heartbeat after
   one; until then its copies are unknown (the assignor then keeps every task where it runs).
2. A copy's lag is measured against the task's committed position: for each source partition of the
   task, the offset the active committed (through the group's normal commit path, keyed by
   `Shard(topic, partition)`) minus the copy's reported offset, at least 0, summed over the task's
   source partitions. A partition the copy does not mention counts from offset 0; a partition
   nobody committed counts as 0 behind. A key-range task (`topology` rule 4) is measured on its
   range's fragment of each partition (`TaskId.shard`): the committed offset counts the records of
   the partition's other keys too, so its lag is an upper bound of the records it has to catch up.
   A task whose active commits lanes (a split source partition, `offsets` rule 2) is measured from
   the lowest of them (`offsets.committed_low`), where its copies' reports stand too.
3. Lags are per process: the members of one process share its state directory, so a process's lag
   for a task is the smallest any of its members reports.
4. What the assignor last saw is remembered (`seen`), so that a heartbeat reporting a warm-up as
   caught up bumps the epoch once, not on every heartbeat after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from regroup.protocol.shard import Shard
from regroup.protocol.streams.messages import TaskOffsets
from regroup.protocol.streams.state import StreamsGroup
from regroup.protocol.streams.topology import TaskId, Topology

__all__ = ["CommittedOffsets", "LagBook", "no_offsets", "offsets_from"]

#: ``(group id, shard) -> committed offset`` (None: nothing committed).
CommittedOffsets = Callable[[str, Shard], int | None]

ProcessLags = dict[str, dict[TaskId, int]]


def no_offsets(group_id: str, shard: Shard) -> int | None:
    return None


def offsets_from(committed: Mapping[str, Mapping[Shard, int]]) -> CommittedOffsets:
    """Read committed offsets from a (live) mapping ``{group id: {shard: offset}}``."""

    def read(group_id: str, shard: Shard) -> int | None:
        return committed.get(group_id, {}).get(shard)

    return read


def task_sources(topology: Topology) -> dict[str, tuple[str, ...]]:
    return {s.subtopology_id: tuple(sorted(s.source_topics)) for s in topology.subtopologies}


@dataclass
class LagBook:
    """The soft state of one streams group."""

    #: member id -> its latest full report.
    reports: dict[str, TaskOffsets] = field(default_factory=dict)
    #: (process id, task) -> the lag the last target computation saw.
    seen: dict[tuple[str, TaskId], int] = field(default_factory=dict)
    #: The processes that had reported (anything) when the last target was computed.
    seen_processes: frozenset[str] = frozenset()

    def report(self, member_id: str, offsets: TaskOffsets) -> None:
        self.reports[member_id] = {t: dict(o) for t, o in offsets.items()}

    def forget(self, member_id: str) -> None:
        self.reports.pop(member_id, None)

    def process_lags(self, group: StreamsGroup, committed: CommittedOffsets) -> ProcessLags:
        """Rules 2 and 3, for every task of the group's topology."""
        if group.topology is None:
            return {}
        sources = task_sources(group.topology)
        out: ProcessLags = {}
        for mid, offsets in sorted(self.reports.items()):
            member = group.members.get(mid)
            if member is None:
                continue
            lags = out.setdefault(member.process_id, {})
            for task, reached in offsets.items():
                topics = sources.get(task.subtopology)
                if topics is None:
                    continue
                lag = copy_lag(group.group_id, task, topics, reached, committed)
                old = lags.get(task)
                lags[task] = lag if old is None else min(old, lag)
        return out

    def remember(self, lags: ProcessLags) -> None:
        self.seen = {(pid, t): lag for pid, ls in lags.items() for t, lag in ls.items()}
        self.seen_processes = frozenset(lags)


def copy_lag(group_id: str, task: TaskId, topics: tuple[str, ...], reached: Mapping[Shard, int],
             committed: CommittedOffsets) -> int:
    """Rule 2 for one copy."""
    total = 0
    for topic in topics:
        shard = task.shard(topic)
        end = committed(group_id, shard)
        if end is not None:
            total += max(0, end - reached.get(shard, 0))
    return total
