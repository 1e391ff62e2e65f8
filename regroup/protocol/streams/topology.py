"""A streams group's topology, its tasks, and whether the topics let it run.

Rules:

1. A topology is a set of subtopologies, each with a non-empty, group-unique id and a non-empty set
   of source topics. A topic is the source of at most one subtopology: two subtopologies reading one
   topic would process every record twice (Kafka Streams' topology builder refuses it too: "topic
   has already been registered by another source"). Breaking these is the *user's request* being
   malformed: `Topology` raises INVALID_REQUEST naming what was wrong, once, when it is built.
2. The source topics of one subtopology are co-partitioned: partition *i* of each of them holds the
   same keys, so one task reads partition *i* of all of them. A task is therefore
   ``TaskId(subtopology, i)``, and a subtopology has as many tasks as its topics have partitions.
3. Whether the topics exist with matching partition counts is a fact about the cluster, not about
   the request, and it changes while the group runs (a topic is created late, partitions are added
   to one side of a join). So `configure` never raises for it: it returns `TopologyReady` with the
   task list, or `TopologyNotReady` with every reason, each naming the topics and their counts. A
   group that is not ready assigns nothing until a later metadata change makes it ready.
4. A subtopology may cut each partition into ``parallelism`` K key ranges (default 1: whole
   partitions). Its tasks are then ``TaskId(subtopology, i, r, K)`` for r in 0..K-1: key range r of
   partition *i* of every source topic, cut exactly as a consumer group's parallelism cuts a
   partition (`regroup.protocol.keyrange.ranges`, the same hash), so equal ranges of co-partitioned
   topics stay together in one task. A task's state is keyed by its task id and cannot be re-cut,
   so K is part of the topology: a group's K cannot change while the group exists (the coordinator
   refuses a member that declares another, `regroup.protocol.streams.coordinator`). ``str(task)`` is
   ``sub_3`` at K=1, as it always was, and ``sub_3.1of4`` for range 1 of 4.

Left out for now (later parts of issue 9): repartition and changelog topics (the coordinator will
decide their partition counts, as Kafka's KIP-1071 coordinator does), stateless subtopologies (every
task is treated as stateful), and source-topic regular expressions. Kafka also lets a subtopology
read topics that are *not* co-partitioned with each other (its tasks then number the largest
partition count, and only declared co-partition groups must match); regroup requires every source
topic of a subtopology to match, which is what a join or a per-key aggregate over several topics
needs, and reports anything else as not ready rather than silently leaving partitions unread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.keyrange import MAX_PARALLELISM, ranges
from regroup.protocol.shard import Shard
from regroup.protocol.topics import TopicMetadata

__all__ = [
    "ConfiguredTopology",
    "Subtopology",
    "TaskId",
    "Topology",
    "TopologyNotReady",
    "TopologyReady",
    "configure",
    "parse_task_id",
    "task_of_shard",
]


class TaskId(NamedTuple):
    """One task: partition ``partition`` of every source topic of subtopology ``subtopology`` — or,
    when the subtopology's ``parallelism`` is above 1, key range ``part`` of ``parts`` of that
    partition (rule 4).

    A named tuple, so tasks hash, compare and sort in C; sorting is by subtopology id, then
    partition, then range, which is the order every deterministic choice in this package follows.
    """

    subtopology: str
    partition: int
    part: int = 0
    parts: int = 1

    def __str__(self) -> str:
        if self.parts == 1:
            return f"{self.subtopology}_{self.partition}"  # Kafka's spelling of a task id
        return f"{self.subtopology}_{self.partition}.{self.part}of{self.parts}"

    @property
    def key_range(self) -> tuple[int, int]:
        """The ``[lo, hi)`` of the key space this task's records fall in (all of it at 1 part)."""
        return ranges(self.parts)[self.part]

    def overlaps(self, other: TaskId) -> bool:
        """Do the two tasks read some of the same keys: the same partition of the same subtopology,
        with key ranges that intersect (itself, or a range of another cut of it)?"""
        if (self.subtopology, self.partition) != (other.subtopology, other.partition):
            return False
        (lo, hi), (other_lo, other_hi) = self.key_range, other.key_range
        return lo < other_hi and other_lo < hi

    @property
    def changelog_partition(self) -> int:
        """The one partition per task of the subtopology's tasks (its changelog's, its checkpoints'):
        ``partition * parts + part``, so the partition number itself at 1 part."""
        return self.partition * self.parts + self.part

    def shard(self, topic: str) -> Shard:
        """This task's part of source topic ``topic``: its partition, cut to the task's key range."""
        if self.parts == 1:
            return Shard(topic, self.partition)
        lo, hi = self.key_range
        return Shard(topic, self.partition, lo, hi)


_TASK_NAME = re.compile(r"(.+)_(\d+)(?:\.(\d+)of(\d+))?")


def parse_task_id(name: str) -> TaskId | None:
    """The task ``str(task)`` spells (``sub_3``, ``sub_3.1of4``), or None for any other name (a
    directory named after a task is read back with it)."""
    m = _TASK_NAME.fullmatch(name)
    if m is None:
        return None
    sub, partition, part, parts = m.groups()
    if parts is None:
        return TaskId(sub, int(partition))
    if not 0 <= int(part) < int(parts) <= MAX_PARALLELISM or int(parts) == 1:
        return None
    return TaskId(sub, int(partition), int(part), int(parts))


def task_of_shard(subtopology: str, parallelism: int, shard: Shard) -> TaskId | None:
    """The task of a subtopology cut ``parallelism`` ways that reads exactly ``shard`` (None when the
    shard is not one of its tasks' parts: a whole partition of a cut subtopology, or another cut)."""
    if parallelism == 1:
        return TaskId(subtopology, shard.partition) if shard.whole else None
    for r, (lo, hi) in enumerate(ranges(parallelism)):
        if (shard.lo, shard.hi) == (lo, hi):
            return TaskId(subtopology, shard.partition, r, parallelism)
    return None


def task_holding(subtopology: str, parallelism: int, shard: Shard) -> TaskId | None:
    """The task of a subtopology cut ``parallelism`` ways whose part of ``shard``'s partition holds
    every key of ``shard``: its own part (`task_of_shard`), or a *lane* of it — the part of the task's
    range in one open piece of a partition split on the producer side, which the member reads and
    commits on its own (`regroup.protocol.streams.offsets` rule 2). None when no task's range holds it."""
    for r, (lo, hi) in enumerate(ranges(parallelism)):
        if lo <= shard.lo and shard.hi <= hi:
            return TaskId(subtopology, shard.partition) if parallelism == 1 else \
                TaskId(subtopology, shard.partition, r, parallelism)
    return None


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message)


@dataclass(frozen=True, slots=True)
class Subtopology:
    """A part of the topology that reads ``source_topics`` (co-partitioned) as one unit of work, each
    partition cut into ``parallelism`` key ranges (rule 4)."""

    subtopology_id: str
    source_topics: frozenset[str]
    parallelism: int = 1


@dataclass(frozen=True, slots=True)
class Topology:
    """A validated topology (rule 1); subtopologies in id order."""

    subtopologies: tuple[Subtopology, ...]

    def __post_init__(self) -> None:
        if not self.subtopologies:
            raise _invalid("a topology needs at least one subtopology")
        seen_ids: set[str] = set()
        reader: dict[str, str] = {}
        for sub in self.subtopologies:
            sid = sub.subtopology_id
            if not isinstance(sid, str) or not sid.strip():
                raise _invalid(f"a subtopology id must be a non-empty string, got {sid!r}")
            if sid in seen_ids:
                raise _invalid(f"subtopology id {sid!r} is used twice; ids must be unique")
            seen_ids.add(sid)
            if not sub.source_topics:
                raise _invalid(f"subtopology {sid!r} has no source topics")
            k = sub.parallelism
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_PARALLELISM:
                raise _invalid(f"subtopology {sid!r} has parallelism {k!r}; it must be an integer "
                               f"1..{MAX_PARALLELISM} (key ranges per partition)")
            for topic in sorted(sub.source_topics):
                if not isinstance(topic, str) or not topic.strip():
                    raise _invalid(f"subtopology {sid!r} names a source topic {topic!r}; "
                                   f"topic names must be non-empty strings")
                other = reader.setdefault(topic, sid)
                if other != sid:
                    raise _invalid(f"topic {topic!r} is a source of both subtopology {other!r} and "
                                   f"{sid!r}; a topic can feed only one subtopology (merge them)")
        ordered = tuple(sorted(self.subtopologies, key=lambda s: s.subtopology_id))
        object.__setattr__(self, "subtopologies", ordered)

    @classmethod
    def of(cls, sources: Mapping[str, Iterable[str]],
           parallelism: Mapping[str, int] | None = None) -> Topology:
        """``Topology.of({"join": ["clicks", "views"], "count": ["orders"]}, parallelism={"count": 4})``
        (a subtopology not in ``parallelism`` reads whole partitions)."""
        if isinstance(sources, str) or not isinstance(sources, Mapping):
            raise _invalid("a topology is a mapping of subtopology id to its source topics")
        cuts = dict(parallelism or {})
        unknown = sorted(set(cuts) - set(sources))
        if unknown:
            raise _invalid(f"parallelism names subtopolog{'ies' if len(unknown) > 1 else 'y'} "
                           f"{', '.join(map(repr, unknown))}, which the topology does not have")
        subs = []
        for sid, topics in sources.items():
            if isinstance(topics, str):
                raise _invalid(f"the source topics of subtopology {sid!r} must be a list of names, "
                               f"not the string {topics!r}")
            subs.append(Subtopology(sid, frozenset(topics), cuts.get(sid, 1)))
        return cls(tuple(subs))

    def subtopology(self, subtopology_id: str) -> Subtopology | None:
        for s in self.subtopologies:
            if s.subtopology_id == subtopology_id:
                return s
        return None

    @property
    def source_topics(self) -> frozenset[str]:
        return frozenset().union(*(s.source_topics for s in self.subtopologies))


@dataclass(frozen=True, slots=True)
class TopologyReady:
    """Every source topic exists and each subtopology's topics are co-partitioned."""

    tasks: tuple[TaskId, ...]  # sorted
    tasks_per_subtopology: Mapping[str, int]  # partitions times parallelism
    ready: bool = True


@dataclass(frozen=True, slots=True)
class TopologyNotReady:
    """Why nothing can be assigned yet, one sentence per problem, in subtopology order."""

    reasons: tuple[str, ...]
    ready: bool = False

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


ConfiguredTopology = TopologyReady | TopologyNotReady


def configure(topology: Topology, topics: TopicMetadata) -> ConfiguredTopology:
    """The tasks of ``topology`` over ``topics`` (rules 2 and 4), or why there are none yet (rule 3)."""
    reasons: list[str] = []
    per_subtopology: dict[str, int] = {}
    cuts = {s.subtopology_id: s.parallelism for s in topology.subtopologies}
    for sub in topology.subtopologies:
        sid = sub.subtopology_id
        ordered = sorted(sub.source_topics)
        missing = [t for t in ordered if t not in topics]
        if missing:
            reasons.append(f"subtopology {sid!r}: source topic{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(map(repr, missing))} "
                           f"{'do' if len(missing) > 1 else 'does'} not exist")
            continue
        counts = {t: topics[t] for t in ordered}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{t!r} has {n}" for t, n in counts.items())
            reasons.append(f"subtopology {sid!r}: source topics are not co-partitioned ({listed} "
                           f"partitions); give them the same partition count")
            continue
        per_subtopology[sid] = counts[ordered[0]]
    if reasons:
        return TopologyNotReady(tuple(reasons))
    tasks = tuple(TaskId(sid, p) if cuts[sid] == 1 else TaskId(sid, p, r, cuts[sid])
                  for sid, n in per_subtopology.items() for p in range(n) for r in range(cuts[sid]))
    return TopologyReady(tasks, {sid: n * cuts[sid] for sid, n in per_subtopology.items()})
