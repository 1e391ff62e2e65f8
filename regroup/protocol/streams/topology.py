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

Left out for now (later parts of issue 9): repartition and changelog topics (the coordinator will
decide their partition counts, as Kafka's KIP-1071 coordinator does), stateless subtopologies (every
task is treated as stateful), and source-topic regular expressions. Kafka also lets a subtopology
read topics that are *not* co-partitioned with each other (its tasks then number the largest
partition count, and only declared co-partition groups must match); regroup requires every source
topic of a subtopology to match, which is what a join or a per-key aggregate over several topics
needs, and reports anything else as not ready rather than silently leaving partitions unread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.topics import TopicMetadata

__all__ = [
    "ConfiguredTopology",
    "Subtopology",
    "TaskId",
    "Topology",
    "TopologyNotReady",
    "TopologyReady",
    "configure",
]


class TaskId(NamedTuple):
    """One task: partition ``partition`` of every source topic of subtopology ``subtopology``.

    A named tuple, so tasks hash, compare and sort in C; sorting is by subtopology id, then
    partition, which is the order every deterministic choice in this package follows.
    """

    subtopology: str
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"  # Kafka's spelling of a task id


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message)


@dataclass(frozen=True, slots=True)
class Subtopology:
    """A part of the topology that reads ``source_topics`` (co-partitioned) as one unit of work."""

    subtopology_id: str
    source_topics: frozenset[str]


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
    def of(cls, sources: Mapping[str, Iterable[str]]) -> Topology:
        """``Topology.of({"join": ["clicks", "views"], "count": ["orders"]})``."""
        if isinstance(sources, str) or not isinstance(sources, Mapping):
            raise _invalid("a topology is a mapping of subtopology id to its source topics")
        subs = []
        for sid, topics in sources.items():
            if isinstance(topics, str):
                raise _invalid(f"the source topics of subtopology {sid!r} must be a list of names, "
                               f"not the string {topics!r}")
            subs.append(Subtopology(sid, frozenset(topics)))
        return cls(tuple(subs))

    @property
    def source_topics(self) -> frozenset[str]:
        return frozenset().union(*(s.source_topics for s in self.subtopologies))


@dataclass(frozen=True, slots=True)
class TopologyReady:
    """Every source topic exists and each subtopology's topics are co-partitioned."""

    tasks: tuple[TaskId, ...]  # sorted
    tasks_per_subtopology: Mapping[str, int]
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
    """The tasks of ``topology`` over ``topics`` (rule 2), or why there are none yet (rule 3)."""
    reasons: list[str] = []
    per_subtopology: dict[str, int] = {}
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
    tasks = tuple(TaskId(sid, p) for sid, n in per_subtopology.items() for p in range(n))
    return TopologyReady(tasks, per_subtopology)
