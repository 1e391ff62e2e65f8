"""Why the coordinator acted: what it reports beside the records of a step.

Rules:
1. The coordinator names the cause of every epoch change when it makes the change. The shells (the
   epoch history, logs, the simulator's checks) read these values; none of them guesses a cause back
   from the pattern of a step's records.
2. Every group epoch bump carries its causes in the order they happened in the step; a step that bumps
   the same group twice (two members fenced at once) reports two bumps, each with its own causes.
3. Causes are facts about the decision, not texts: `describe_cause` is the one place that words them
   for an operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from regroup.protocol.shard import EMPTY, ShardSet


class FenceReason(Enum):
    """Which deadline a fenced member missed."""

    SESSION_TIMEOUT = "session timeout"
    REVOCATION_TIMEOUT = "revocation timeout"
    #: Its connection broke and it did not come back within the failover grace (`protocol.failover`).
    CONNECTION_LOST = "connection lost"


@dataclass(frozen=True, slots=True)
class Fence:
    """A member the coordinator removed because it missed a deadline."""

    group_id: str
    member_id: str
    reason: FenceReason
    #: What it had been told to give up and still held when it was fenced (empty unless revoking).
    revoking: ShardSet = EMPTY


# ------------------------------------------------------------------------ causes of a group epoch bump


@dataclass(frozen=True, slots=True)
class MemberJoined:
    member_id: str


@dataclass(frozen=True, slots=True)
class MemberLeft:
    member_id: str


@dataclass(frozen=True, slots=True)
class MemberFenced:
    member_id: str
    reason: FenceReason


@dataclass(frozen=True, slots=True)
class SubscriptionChanged:
    """The member's topics, regex, assignor or rack changed: the target may change."""

    member_id: str


@dataclass(frozen=True, slots=True)
class StaticTakeOver:
    """A static member rejoined under a new member id with a different subscription."""

    instance_id: str
    old_member_id: str
    new_member_id: str


@dataclass(frozen=True, slots=True)
class SubscribedTopicsChanged:
    """The partition counts of the group's subscribed topics are now these."""

    topics: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class RegexResolved:
    """A subscription regex now resolves to these topics."""

    regex: str
    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class TopologyChanged:
    """A streams-group member sent a topology that differs from the group's: it becomes the group's."""

    member_id: str


@dataclass(frozen=True, slots=True)
class WarmupCaughtUp:
    """A warm-up copy of a streams task reported a lag within the acceptable recovery lag.

    The task can now move to it without downtime, so the target is recomputed at once rather than
    at the next probing rebalance (KIP-441 waits for one).
    """

    member_id: str
    #: The task in Kafka's spelling (``subtopology_partition``).
    task: str
    lag: int


@dataclass(frozen=True, slots=True)
class ParallelismChanged:
    """An operator set how many key ranges each partition of ``topic`` is cut into."""

    topic: str
    parallelism: int


BumpCause = (MemberJoined | MemberLeft | MemberFenced | SubscriptionChanged | StaticTakeOver
             | SubscribedTopicsChanged | RegexResolved | TopologyChanged | WarmupCaughtUp
             | ParallelismChanged)


# ------------------------------------------------------------------------ epoch events of a step


@dataclass(frozen=True, slots=True)
class GroupCreated:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupEpochBumped:
    group_id: str
    epoch: int
    causes: tuple[BumpCause, ...]


@dataclass(frozen=True, slots=True)
class TargetInstalled:
    group_id: str
    target_epoch: int
    assignor: str
    #: Members whose part of the target was set or removed.
    changed_members: int


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    group_id: str


EpochEvent = GroupCreated | GroupEpochBumped | TargetInstalled | GroupDeleted


def describe_cause(cause: BumpCause) -> str:
    """An operator's words for one cause (docs/operations.md quotes some of them)."""
    if isinstance(cause, MemberJoined):
        return f"member {cause.member_id} joined"
    if isinstance(cause, MemberLeft):
        return f"member {cause.member_id} left"
    if isinstance(cause, MemberFenced):
        return f"member {cause.member_id} fenced ({cause.reason.value})"
    if isinstance(cause, SubscriptionChanged):
        return f"member {cause.member_id} changed its subscription"
    if isinstance(cause, StaticTakeOver):
        return (f"member {cause.new_member_id} took over instance {cause.instance_id} from "
                f"{cause.old_member_id} with a new subscription")
    if isinstance(cause, SubscribedTopicsChanged):
        items = sorted(cause.topics.items())
        shown = ", ".join(f"{t}={n}" for t, n in items[:3])
        more = f", +{len(items) - 3} more" if len(items) > 3 else ""
        return f"subscribed topics now {shown or 'none'}{more}"
    if isinstance(cause, TopologyChanged):
        return f"member {cause.member_id} sent a new topology"
    if isinstance(cause, ParallelismChanged):
        return f"parallelism of topic {cause.topic} set to {cause.parallelism} key range(s) per partition"
    if isinstance(cause, WarmupCaughtUp):
        return f"warm-up of task {cause.task} on member {cause.member_id} caught up (lag {cause.lag})"
    return f"regex {cause.regex!r} now matches {len(cause.topics)} topic(s)"
