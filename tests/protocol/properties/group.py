"""The group under test, and a frozen view of the coordinator's state.

Every check compares two `View`s: the group before a coordinator call and after it. A view is taken
with `capture` and never changes afterwards (the core's values are immutable; the maps are copied).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import CommittedOffset
from regroup.protocol.records import CurrentAssignment, MemberMetadata
from regroup.protocol.shard import EMPTY, Shard, ShardSet, format_shards
from regroup.protocol.state import GroupState
from regroup.sim.invariants import held

GID = "g"
CONFIG = CoordinatorConfig()
SESSION_MS = CONFIG.session_timeout_ms
INTERVAL_MS = CONFIG.heartbeat_interval_ms


def fmt(s: Iterable[Shard]) -> str:
    return format_shards(sorted(s))


@dataclass(frozen=True)
class View:
    exists: bool
    epoch: int
    target_epoch: int
    state: GroupState | None
    members: dict[str, MemberMetadata]
    current: dict[str, CurrentAssignment]
    target: dict[str, ShardSet]
    static: dict[str, str]
    owners: dict[Shard, str]
    offsets: dict[Shard, CommittedOffset]
    subscribed_topics: dict[str, int]
    regexes: dict[str, frozenset[str]]

    def held_by(self, mid: str) -> ShardSet:
        c = self.current.get(mid)
        return held(c) if c is not None else EMPTY


def capture(coord: Coordinator) -> View:
    g = coord.groups.get(GID)
    if g is None:
        return View(False, 0, 0, None, {}, {}, {}, {}, {}, {}, {}, {})
    # Values are immutable: shallow copies freeze the view.
    return View(True, g.epoch, g.target_epoch, g.state, dict(g.members), dict(g.current), dict(g.target),
                dict(g.static_members), dict(g.owners), dict(g.offsets), dict(g.subscribed_topics),
                dict(g.regexes))
