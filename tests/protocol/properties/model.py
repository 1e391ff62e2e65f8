"""What the coordinator should hold, learnt from what its members sent it.

Rules of this module:

1. The model learns only from the calls the coordinator answered without an error (what each member
   asked for) and from whom it fenced; it never copies the coordinator's state, so the checks can
   compare the two.
2. It states the membership rules the checks need once: how a heartbeat merges into a subscription,
   which member a static join takes over, what bumps the group epoch, and when each member's session
   and revocation deadlines fall.
3. It is fed after the call's own checks ran and before the state checks, so those compare the
   coordinator with what the members sent up to and including this call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from regroup.protocol.coordinator import Outcome
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH, HeartbeatRequest
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import Shard, ShardSet
from tests.protocol.properties.group import CONFIG, SESSION_MS, View


class Sub(NamedTuple):
    """A subscription as the model keeps it (regex None: none)."""

    topics: frozenset[str]
    regex: str | None


def sub(*topics: str, regex: str | None = None) -> Sub:
    return Sub(frozenset(topics), regex)


def resolve(s: Sub, topics: Mapping[str, int]) -> frozenset[str]:
    """Existing topics a subscription covers; regexes full-match (Python `re` as an oracle for RE2)."""
    names = {t for t in s.topics if t in topics}
    if s.regex:
        names.update(t for t in topics if re.fullmatch(s.regex, t))
    return frozenset(names)


def all_shards(topic_names: Iterable[str], topics: Mapping[str, int]) -> ShardSet:
    return frozenset(Shard(t, p) for t in topic_names for p in range(topics[t]))


def is_full(req: HeartbeatRequest) -> bool:
    """A full heartbeat: subscription, rebalance timeout and owned all set (not a delta)."""
    return (req.rebalance_timeout_ms is not None and req.owned is not None
            and (req.subscribed_topics is not None or req.subscribed_regex is not None))


def merged(base: Sub | None, req: HeartbeatRequest) -> Sub:
    """The subscription after ``req``: a field the request leaves out keeps its value."""
    topics = frozenset(req.subscribed_topics) if req.subscribed_topics is not None else (
        base.topics if base else frozenset())
    if req.subscribed_regex is None:
        regex = base.regex if base else None
    else:
        regex = req.subscribed_regex or None
    return Sub(topics, regex)


def predecessor(pre: View, req: HeartbeatRequest) -> str | None:
    """The member a static join takes over (held by a member away at -2), if any."""
    if req.member_epoch != JOIN_EPOCH or req.instance_id is None or req.member_id in pre.members:
        return None
    holder = pre.static.get(req.instance_id)
    if holder is None or holder == req.member_id:
        return None
    return holder if pre.current[holder].epoch == STATIC_LEAVE_EPOCH else None


@dataclass
class Membership:
    """The coordinator's members as the model knows them: what they asked for, and their timers."""

    subs: dict[str, Sub] = field(default_factory=dict)
    rtos: dict[str, int] = field(default_factory=dict)
    instances: dict[str, str | None] = field(default_factory=dict)
    #: When each member was last heard from (its session runs from there).
    last_touch: dict[str, int] = field(default_factory=dict)
    #: Since when each member has had a revocation to report (its rebalance timeout runs from there).
    unrevoked_since: dict[str, int] = field(default_factory=dict)
    #: The last epoch each member had in the coordinator's state (away at -2 aside).
    last_epoch: dict[str, int] = field(default_factory=dict)

    def effective(self, topics: Mapping[str, int]) -> dict[str, frozenset[str]]:
        """Each member's subscription resolved against ``topics``."""
        return {mid: resolve(s, topics) for mid, s in sorted(self.subs.items())}

    def due(self, pre: View, now: int) -> set[str]:
        """The members whose session or revocation deadline has passed at ``now``."""
        due = {mid for mid in pre.members if self.last_touch[mid] + SESSION_MS <= now}
        due |= {mid for mid, since in self.unrevoked_since.items() if since + self.rtos[mid] <= now}
        return due

    def next_deadline(self) -> int | None:
        """The earliest session or revocation deadline."""
        deadlines = [t + SESSION_MS for t in self.last_touch.values()]
        deadlines += [since + self.rtos[mid] for mid, since in self.unrevoked_since.items()]
        return min(deadlines) if deadlines else None

    def expected_bump(self, kind: str, pre: View, out: Outcome[Any], req: HeartbeatRequest | None,
                      old: Mapping[str, int] | None, new: Mapping[str, int] | None) -> tuple[int, str]:
        """How far the group epoch must move in this call, and why."""
        if kind == "expire":
            return len(out.fences), f"{len(out.fences)} member(s) fenced"
        if kind == "topics":
            assert old is not None and new is not None
            if not pre.members:
                return 0, "topic change in a group without members"
            subs = [self.subs[mid] for mid in sorted(pre.members)]
            before = {t: old[t] for s in subs for t in resolve(s, old)}
            after = {t: new[t] for s in subs for t in resolve(s, new)}
            regex_before = {s.regex: resolve(Sub(frozenset(), s.regex), old) for s in subs if s.regex}
            regex_after = {s.regex: resolve(Sub(frozenset(), s.regex), new) for s in subs if s.regex}
            changed = before != after or regex_before != regex_after
            return int(changed), ("subscribed topic metadata / regex resolution changed" if changed
                                  else "topic change outside the group's subscriptions")
        if kind != "heartbeat" or out.response.error is not ErrorCode.NONE:
            return 0, f"{kind} (no membership change)"
        assert req is not None
        if req.member_epoch == LEAVE_EPOCH:
            return 1, "leave (-1)"
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            return 0, "static temporary leave (-2)"
        base = self.subs.get(req.member_id)
        pred = predecessor(pre, req)
        if base is None and pred is None:
            return 1, "new member"
        if base is None:
            assert pred is not None
            changed = merged(self.subs[pred], req) != self.subs[pred]
            return int(changed), ("static replacement with a new subscription" if changed
                                  else "static replacement, same subscription")
        changed = merged(base, req) != base
        return int(changed), "subscription change" if changed else "heartbeat, same subscription"

    def forget(self, mid: str) -> None:
        for d in (self.subs, self.rtos, self.instances, self.last_touch, self.unrevoked_since,
                  self.last_epoch):
            d.pop(mid, None)

    def update(self, kind: str, pre: View, post: View, out: Outcome[Any], req: HeartbeatRequest | None,
               now: int) -> None:
        """Learn from one coordinator call."""
        if kind == "expire":
            for mid in (f.member_id for f in out.fences):
                self.forget(mid)
        elif kind == "heartbeat" and out.response.error is ErrorCode.NONE:
            assert req is not None
            mid = req.member_id
            if req.member_epoch == LEAVE_EPOCH:
                self.forget(mid)
            elif req.member_epoch == STATIC_LEAVE_EPOCH:
                self.last_touch[mid] = now
            else:
                pred = predecessor(pre, req)
                base = self.subs.get(mid) or (self.subs[pred] if pred else None)
                rto = req.rebalance_timeout_ms or self.rtos.get(mid) or (self.rtos[pred] if pred else 0)
                inst = req.instance_id or self.instances.get(mid)
                if pred is not None:
                    self.forget(pred)
                self.subs[mid] = merged(base, req)
                self.rtos[mid] = min(rto, CONFIG.max_rebalance_timeout_ms)
                self.instances[mid] = inst
                self.last_touch[mid] = now
        # Revocation deadlines: a full rebalance timeout for every new revocation — when a member
        # becomes UNREVOKED, or must revoke something else right after (Kafka reschedules too);
        # none while away at -2 (what it was revoking is freed when it steps out).
        for mid in sorted(post.current):
            c = post.current[mid]
            if c.status is MemberStatus.UNREVOKED and c.epoch != STATIC_LEAVE_EPOCH:
                b = pre.current.get(mid)
                if (mid not in self.unrevoked_since or b is None or b.status is not MemberStatus.UNREVOKED
                        or b.epoch != c.epoch or b.pending_revocation != c.pending_revocation):
                    self.unrevoked_since[mid] = now
            else:
                self.unrevoked_since.pop(mid, None)

    def note_epochs(self, post: View) -> None:
        """Remember each member's epoch after a call (a member away at -2 keeps its last one)."""
        for mid in sorted(post.current):
            if post.current[mid].epoch != STATIC_LEAVE_EPOCH:
                self.last_epoch[mid] = post.current[mid].epoch

    def restarted(self, after: View, now: int) -> None:
        """A new coordinator recovered the group at ``now``: every session and every pending
        revocation starts over."""
        for mid in after.members:
            self.last_touch[mid] = now
        self.unrevoked_since = {
            mid: now for mid, c in sorted(after.current.items())
            if c.status is MemberStatus.UNREVOKED and c.epoch != STATIC_LEAVE_EPOCH}
