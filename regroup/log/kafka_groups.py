"""Kafka consumer groups seen from outside: who owns which partition, what they committed, and an
operator's offsets written into an empty one. The AdminClient only: regroup never joins them.

This is what moving a group from Kafka to regroup needs (`regroup groups import` and ``export``, the
coordinator's ``--migrate-group``; the decisions are `regroup.protocol.external`'s). The rules:

1. **What a Kafka group holds** is the union of its members' assignments and — on Kafka's consumer
   protocol (KIP-848) — of their target assignments: a partition moving between two members is in
   the new owner's target before the old owner lets it go, so it is never in neither.
2. **Settled** only when EMPTY or DEAD (DEAD: no such group), or STABLE on the consumer protocol. In
   any other state the group is moving partitions, and a partition can be in no member's assignment
   nor target for seconds: Kafka 4.4 recomputes a consumer-protocol group's target on a member's next
   heartbeat after another left (librdkafka reports those states, ASSIGNING and RECONCILING, as
   UNKNOWN). A classic group with members is never settled: its cooperative rebalance passes through
   STABLE between its two rounds, with the partitions revoked in the first assigned to nobody.
3. **Offsets after ownership.** `read` asks for the members first and the committed offsets second,
   so a member that committed and then left is read with its last commit.
4. **Kafka takes an operator's offsets only for a group without members.** `commit_offsets` refuses a
   group with members itself, naming them, and reports Kafka's own refusal (per partition,
   UNKNOWN_MEMBER_ID) the same way, in case one joined in between.
5. A retriable error (NOT_COORDINATOR while a fresh cluster creates its offsets topic, a coordinator
   loading) is asked again until the timeout; other failures are `LogError`s naming the group and
   Kafka's error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from regroup.log.errors import LogError, LogTimeoutError
from regroup.protocol.shard import Shard

__all__ = ["KafkaGroup", "KafkaGroupNotEmptyError", "KafkaGroups"]

ConfigValue = str | int | float | bool

_SETTLED = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}
#: The group coordinator is being found, loaded or moved: ask again (librdkafka does not say retriable).
_COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE}
#: Pause between two tries of a request Kafka answered with a retriable error.
_RETRY_S = 0.2


class KafkaGroupNotEmptyError(LogError):
    """Kafka refused an operator's offsets because the group has members."""


@dataclass(frozen=True, slots=True)
class KafkaGroup:
    """One read of a Kafka consumer group."""

    group_id: str
    #: Kafka's state, lower case: ``stable``, ``empty``, ``dead`` (no such group), ``unknown``, ...
    state: str
    members: int
    #: The partitions its members own or are about to own (rule 1).
    held: frozenset[Shard]
    #: False while it moves partitions between its members (rule 2).
    settled: bool
    #: Committed offsets (the next offset to read) by partition, read after the members (rule 3).
    offsets: dict[Shard, int] = field(default_factory=dict)


class KafkaGroups:
    """Consumer groups of the Kafka cluster at ``bootstrap`` (``host:port[,host:port...]``); ``config``
    holds extra librdkafka settings (security); ``timeout_s`` bounds every request."""

    def __init__(self, bootstrap: str, config: Mapping[str, ConfigValue] | None = None, *,
                 timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False,
                                   **dict(config or {})})

    def __enter__(self) -> KafkaGroups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The AdminClient has nothing to flush; dropping it closes its connections."""

    def read(self, group_id: str) -> KafkaGroup:
        """The group's members and what they hold, then its committed offsets (rule 3)."""
        described = self._describe(group_id)
        offsets = self.committed_offsets(group_id)
        return KafkaGroup(described.group_id, described.state, described.members, described.held,
                          described.settled, offsets)

    def _describe(self, group_id: str) -> KafkaGroup:
        d = self._call(lambda: self._admin.describe_consumer_groups(
            [group_id], request_timeout=self.timeout_s), group_id, "describing")
        if d is None:
            return KafkaGroup(group_id, "dead", 0, frozenset(), True)
        held: set[Shard] = set()
        for m in d.members:
            for assignment in (m.assignment, m.target_assignment):
                if assignment is not None:
                    held.update(Shard(tp.topic, tp.partition) for tp in assignment.topic_partitions)
        state = d.state if isinstance(d.state, ConsumerGroupState) else ConsumerGroupState.UNKNOWN
        consumer_protocol = d.type is ConsumerGroupType.CONSUMER
        settled = state in _SETTLED or (state is ConsumerGroupState.STABLE and consumer_protocol)
        return KafkaGroup(group_id, state.name.lower(), len(d.members), frozenset(held), settled)

    def committed_offsets(self, group_id: str) -> dict[Shard, int]:
        """Every partition the group committed an offset for (none: an empty dict)."""
        got = self._call(lambda: self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s), group_id,
            "reading the offsets of")
        out: dict[Shard, int] = {}
        for tp in (got.topic_partitions or ()) if got is not None else ():
            if tp.error is not None:
                raise LogError(f"reading the offsets of Kafka group {group_id!r}: {tp.topic}:{tp.partition}: "
                               f"{_describe_error(tp.error)}")
            if tp.offset >= 0:  # OFFSET_INVALID (-1001): nothing committed there
                out[Shard(tp.topic, tp.partition)] = tp.offset
        return dict(sorted(out.items()))

    def commit_offsets(self, group_id: str, offsets: Mapping[Shard, int], metadata: str = "") -> None:
        """Make ``offsets`` the group's committed offsets (also backwards); only a group without
        members (rule 4): otherwise `KafkaGroupNotEmptyError`."""
        if not offsets:
            return
        if any(not s.whole for s in offsets):
            raise ValueError("Kafka commits whole partitions; collapse key ranges first")
        current = self._describe(group_id)
        if current.members:
            raise KafkaGroupNotEmptyError(_not_empty(group_id, current.members))
        partitions = [TopicPartition(s.topic, s.partition, o, metadata=metadata)
                      for s, o in sorted(offsets.items())]
        done = self._call(lambda: self._admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id, partitions)], request_timeout=self.timeout_s), group_id,
            "writing the offsets of")
        answered = (done.topic_partitions or ()) if done is not None else ()
        failed = [tp for tp in answered if tp.error is not None]
        if any(tp.error.code() == KafkaError.UNKNOWN_MEMBER_ID for tp in failed):
            raise KafkaGroupNotEmptyError(_not_empty(group_id, None, failed[0].error))
        if failed:
            raise LogError(f"Kafka refused offsets of group {group_id!r}: " + "; ".join(
                f"{tp.topic}:{tp.partition}: {_describe_error(tp.error)}" for tp in failed[:5]))

    def _call(self, request: Callable[[], Mapping[str, Any]], group_id: str, doing: str) -> Any:
        """The answer for ``group_id`` to ``request()``, asked again while Kafka's error is retriable
        (NOT_COORDINATOR while a fresh cluster creates its offsets topic, a coordinator loading) until
        the timeout; None when Kafka says there is no such group."""
        what = f"{doing} Kafka group {group_id!r}"
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return request()[group_id].result(timeout=self.timeout_s + 5)
            except KafkaException as e:
                err = e.args[0] if e.args else None
                code = err.code() if isinstance(err, KafkaError) else None
                if code == KafkaError.GROUP_ID_NOT_FOUND:
                    return None
                if code == KafkaError.UNKNOWN_MEMBER_ID:
                    raise KafkaGroupNotEmptyError(_not_empty(group_id, None, err)) from e
                if isinstance(err, KafkaError) and (err.retriable() or code in _COORDINATOR_MOVING) \
                        and time.monotonic() < deadline:
                    time.sleep(_RETRY_S)
                    continue
                if code == KafkaError._TIMED_OUT:
                    raise LogTimeoutError(f"{what}: {_describe_error(err)}") from e
                raise LogError(f"{what}: {_describe_error(err if err is not None else e)}") from e
            except TimeoutError as e:
                raise LogTimeoutError(f"{what}: no answer in {self.timeout_s} s") from e


def _describe_error(err: Any) -> str:
    if isinstance(err, KafkaError):
        text = err.str()
        return f"{err.name()}" + (f" ({text})" if text and text != err.name() else "")
    return str(err)


def _not_empty(group_id: str, members: int | None, err: Any = None) -> str:
    who = f"it has {members} member(s)" if members is not None else "it has members"
    said = f" (Kafka said {_describe_error(err)})" if err is not None else ""
    return (f"Kafka group {group_id!r} is not empty: {who}, and Kafka accepts an operator's offsets only "
            f"for a group without members{said}; stop its consumers first")
