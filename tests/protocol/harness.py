"""A small driver for coordinator tests: virtual time and well-formed requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.records import Record
from regroup.protocol.shard import EMPTY, Shard, ShardSet
from regroup.protocol.topics import TopicMetadata


def shards(topic: str, *parts: int) -> ShardSet:
    return frozenset(Shard(topic, p) for p in parts)


@dataclass
class Harness:
    topics: dict[str, int] = field(default_factory=lambda: {"t": 6})
    config: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    now: int = 1_000
    log: list[Record] = field(default_factory=list)
    coord: Coordinator = field(init=False)

    def __post_init__(self) -> None:
        self.coord = Coordinator(self.config, topics=TopicMetadata(self.topics))

    def keep(self, out: Outcome) -> Outcome:  # type: ignore[type-arg]
        self.log.extend(out.records)
        return out

    def send(self, req: HeartbeatRequest) -> HeartbeatResponse:
        out = self.keep(self.coord.heartbeat(req, self.now))
        resp: HeartbeatResponse = out.response
        return resp

    def join(self, member: str, topics: tuple[str, ...] = ("t",), group: str = "g", **kw: object
             ) -> HeartbeatResponse:
        req = HeartbeatRequest(group, member, 0, rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 60_000),
                               subscribed_topics=topics if "subscribed_regex" not in kw else None,
                               owned=EMPTY, **kw)  # type: ignore[arg-type]
        return self.send(req)

    def hb(self, member: str, epoch: int, owned: ShardSet | None = None, group: str = "g", **kw: object
           ) -> HeartbeatResponse:
        return self.send(HeartbeatRequest(group, member, epoch, owned=owned, **kw))  # type: ignore[arg-type]

    def ok(self, resp: HeartbeatResponse) -> HeartbeatResponse:
        assert resp.error is ErrorCode.NONE, resp.message
        return resp

    def advance(self, ms: int) -> Outcome:  # type: ignore[type-arg]
        self.now += ms
        return self.keep(self.coord.expire(self.now))

    def group(self, gid: str = "g"):  # type: ignore[no-untyped-def]
        return self.coord.groups[gid]


def fenced(out: Outcome[object]) -> list[tuple[str, str]]:
    """The (group, member) of each member a step fenced."""
    return [(f.group_id, f.member_id) for f in out.fences]
