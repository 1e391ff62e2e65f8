"""The invariants the property tests hold the coordinator to, as named ``assert_*`` functions.

Each function takes views of the group before (``pre``) and after (``post``) one coordinator call,
and the model or the processes where it needs them; each says in its message what broke. The rules
the simulator checks too (single owner, revoke before assign, epochs and offsets never going back,
replay) are asked of the pure functions in `regroup.sim.invariants`, so they are stated once.

1. single owner — coordinator: the assigned ∪ pending_revocation sets of the group's members are
   pairwise disjoint and ``group.owners`` is exactly their inverse. Members: a process is *live* when
   its member id is in the coordinator's group; a live process only processes shards the coordinator
   counts as held by its member id (processing = acknowledged shards plus an Assign it is still
   taking), so no shard is processed by two live processes. A process whose member id the
   coordinator removed (fenced, left) but that still processes shards is a *zombie*: it may overlap
   with a live owner, and its commits must be refused;
2. revoke before assign: a shard a member gains (coordinator) was held by nobody before the step,
   except a static take-over inheriting from the member it replaces; a process is told to Assign a
   shard only when no other live process owns it;
3. member epoch ≤ target epoch ≤ group epoch (away members at -2 excluded); the group epoch and every
   member's epoch never decrease while the member id stays in the group;
4. the group epoch moves by exactly the number of causes the model counted in the step: a new member,
   a subscription change (also a static replacement that changes it), a leave (-1), a fencing, a
   change of the subscribed topics' metadata or of a regex's resolution; never -2, never a static
   replacement with the same subscription. Expiry fences exactly the members whose session or
   revocation deadline (as the model tracks them) passed, and no deadline is ever left overdue;
5. a TargetEpochRecord is only emitted while the group epoch is ahead of the target epoch (checked
   record by record while replaying the step), and the target is then current right away;
6. uniform: the target covers every subscribed shard once, only to subscribers; max − min ≤ 1 in each
   class of identical subscriptions that shares no topic with another class; when one member joins a
   group whose target was current and homogeneous, the others only lose shards, and keep at least
   min(what they had, quota); an unchanged assignor input (even across an epoch bump) gives an
   unchanged target;
7. range: the target is exactly the range layout computed independently here, so ranges are
   contiguous and topics with equal partition counts and subscribers are co-partitioned;
8. static membership: a join with an instance id still held by a live member is refused
   (UNRELEASED_INSTANCE_ID) and changes nothing; -2 keeps the member's assigned shards and epoch,
   and frees the shards it was revoking (the waiting members are nudged, as for any freed shard); a take-over
   of a member away at -2 with the same subscription changes no epoch and inherits the same target
   and assignment;
9. replay: the state rebuilt record by record equals the coordinator's after every call, and so do
   ``Coordinator.recover(snapshot())`` (every call) and ``Coordinator.recover(whole log)`` (every rule);
10. committed offsets never go backwards except through an admin commit on a group with no members;
    each commit's result is the one the fencing rules predict, and zombies are always refused;
11. liveness: once churn stops and everyone left heartbeats and acknowledges at once, the group
    becomes STABLE, every member STABLE at the target epoch, and the processes own every subscribed
    shard exactly once (`not_converged` says what is still missing);
12. revocations are heard, step by step: a member whose process holds none of the shards it must
    revoke is no longer UNREVOKED after its second answered heartbeat in a row (UNREVOKED_ANSWERS
    explains why one may not free them), rather than at its rebalance timeout.

Besides: the epoch check of every heartbeat follows the lost-response rule (current epoch, or the
previous one with owned ⊆ assigned); an answer carries the assignment on a join, a full request, a
change, or when the member reports something else; ``next_deadline()`` is exactly the earliest
session / revocation deadline of the model; members with work are in ``wake``; a process's epoch
never goes back except to 0 on a rejoin; an error response never writes a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import event

from regroup.protocol.coordinator import Outcome
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import MemberState
from regroup.protocol.messages import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    Ack,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
)
from regroup.protocol.records import CurrentAssignment, MemberStatus, TargetEpochRecord
from regroup.protocol.shard import EMPTY, Shard, ShardSet
from regroup.protocol.state import Group, GroupState
from regroup.sim.invariants import (
    given_while_held,
    group_epoch_went_back,
    held,
    held_twice,
    holders_of,
    member_ahead_of_target,
    member_epoch_went_back,
    offset_went_back,
    process_epoch_went_back,
    taken_while_held,
    target_ahead_of_group,
)
from tests.protocol.properties.group import GID, SESSION_MS, View, fmt
from tests.protocol.properties.model import Membership, Sub, all_shards, is_full, merged
from tests.protocol.properties.processes import TERMINAL, Proc


def _broken(answers: Iterable[tuple[Shard, str]]) -> str:
    return "; ".join(message for _, message in answers)


# --------------------------------------------------------------------------------------------------
# One state


def assert_coordinator_single_owner(v: View) -> None:
    """1 (coordinator): assigned ∪ pending sets pairwise disjoint; owners is their exact inverse."""
    holders = holders_of(v.current)
    twice = held_twice(GID, holders, holders)
    assert not twice, "single owner broken: " + _broken(twice) + " (" + "; ".join(
        f"{mid}: {v.current[mid]}" for s, _ in twice for mid in sorted(holders[s])) + ")"
    derived = {s: min(mids) for s, mids in holders.items()}
    assert derived == v.owners, (
        f"group.owners disagrees with the members' held shards: owners={v.owners} derived={derived}")


def assert_epoch_order(v: View) -> None:
    """3: member epoch ≤ target epoch ≤ group epoch (members away at -2 excluded)."""
    ahead = target_ahead_of_group(GID, v.epoch, v.target_epoch)
    assert ahead is None, ahead
    for mid in sorted(v.current):
        c = v.current[mid]
        if c.epoch == STATIC_LEAVE_EPOCH:
            continue
        assert c.epoch >= 0, f"member {mid!r} at epoch {c.epoch}"
        ahead = member_ahead_of_target(GID, mid, c, v.target_epoch)
        assert ahead is None, f"{ahead} (group epoch {v.epoch})"


def assert_target_current(v: View) -> None:
    """5 (second half): a group with members has a target for its current epoch, for every member."""
    if not v.members:
        return
    assert v.target_epoch == v.epoch, (
        f"group epoch {v.epoch} is ahead of target epoch {v.target_epoch} after the step: the target "
        "must be recomputed right away")
    assert set(v.target) == set(v.members), (
        f"target members {sorted(v.target)} != group members {sorted(v.members)}")


def assert_target_covers_subscriptions(v: View, eff: Mapping[str, frozenset[str]],
                                       topics: Mapping[str, int]) -> None:
    """6/7: every subscribed shard is in exactly one member's target, and only in a subscriber's."""
    owner: dict[Shard, str] = {}
    for mid in sorted(v.target):
        allowed = all_shards(eff[mid], topics)
        extra = v.target[mid] - allowed
        assert not extra, f"target gives {mid!r} shards it does not subscribe to: {fmt(extra)}"
        for s in sorted(v.target[mid]):
            assert s not in owner, f"target gives {s} to both {owner[s]!r} and {mid!r}"
            owner[s] = mid
    wanted = all_shards(set().union(*eff.values()) if eff else set(), topics)
    missing = wanted - set(owner)
    assert not missing, f"target leaves subscribed shards unassigned: {fmt(missing)}"


def assert_uniform_balanced(v: View, eff: Mapping[str, frozenset[str]]) -> None:
    """6: max − min ≤ 1 among members with identical subscriptions (classes sharing no topic)."""
    classes: dict[frozenset[str], list[str]] = {}
    for mid in sorted(v.target):
        classes.setdefault(eff[mid], []).append(mid)
    for topics_, mids in sorted(classes.items(), key=lambda kv: sorted(kv[0])):
        if not topics_ or any(other & topics_ for other in classes if other != topics_):
            continue
        sizes = {mid: len(v.target[mid]) for mid in mids}
        assert max(sizes.values()) - min(sizes.values()) <= 1, (
            f"uniform target unbalanced for subscription {sorted(topics_)}: {sizes}")


def range_layout(members: Mapping[str, tuple[str | None, frozenset[str]]],
                 topics: Mapping[str, int]) -> dict[str, ShardSet]:
    """The range assignment, independently: per topic, contiguous ranges over its subscribers in
    order (static members by (instance id, member id) first, then dynamic by member id), the first
    ``n % k`` one partition longer."""
    def order_key(mid: str) -> tuple[int, str, str]:
        inst = members[mid][0]
        return (0, inst, mid) if inst is not None else (1, "", mid)

    out: dict[str, set[Shard]] = {mid: set() for mid in members}
    for t in sorted(topics):
        subs = sorted((mid for mid, (_, ts) in members.items() if t in ts), key=order_key)
        if not subs:
            continue
        quota, extra = divmod(topics[t], len(subs))
        start = 0
        for j, mid in enumerate(subs):
            end = start + quota + (1 if j < extra else 0)
            out[mid].update(Shard(t, p) for p in range(start, end))
            start = end
    return {mid: frozenset(s) for mid, s in out.items()}


def assert_range_contiguous_and_copartitioned(v: View, eff: Mapping[str, frozenset[str]],
                                              topics: Mapping[str, int]) -> None:
    """7: each member's partitions of a topic are one contiguous run; topics with the same partition
    count and the same subscribers give each member the same partition numbers."""
    for mid in sorted(v.target):
        by_topic: dict[str, list[int]] = {}
        for s in v.target[mid]:
            by_topic.setdefault(s.topic, []).append(s.partition)
        for t, parts in sorted(by_topic.items()):
            parts.sort()
            assert parts == list(range(parts[0], parts[0] + len(parts))), (
                f"range: {mid!r} got a non-contiguous range of {t}: {parts}")
    layout: dict[tuple[int, frozenset[str]], list[str]] = {}
    subscribed = sorted(set().union(*eff.values())) if eff else []
    for t in subscribed:
        subscribers = frozenset(mid for mid in v.target if t in eff[mid])
        layout.setdefault((topics[t], subscribers), []).append(t)
    for (_, subscribers), ts in sorted(layout.items(), key=lambda kv: kv[1]):
        for mid in sorted(subscribers):
            numbers = {t: sorted(s.partition for s in v.target[mid] if s.topic == t) for t in ts}
            assert len({tuple(p) for p in numbers.values()}) == 1, (
                f"range: topics {ts} have equal partition counts and subscribers but {mid!r} is not "
                f"co-partitioned: {numbers}")


def assert_range_target(post: View, eff: Mapping[str, frozenset[str]], instances: Mapping[str, str | None],
                        topics: Mapping[str, int]) -> None:
    """7: every member asked for range, and the target is exactly the range layout."""
    assert all(m.assignor == "range" for m in post.members.values())
    expected = range_layout({mid: (instances[mid], eff[mid]) for mid in post.members},
                            {t: topics[t] for ts in eff.values() for t in ts})
    assert_range_contiguous_and_copartitioned(post, eff, topics)
    assert post.target == expected, (
        "range target differs from the layout: "
        + "; ".join(f"{m}: {fmt(post.target[m])} vs {fmt(expected[m])}"
                    for m in sorted(expected) if post.target.get(m) != expected[m]))


def assert_model_matches(post: View, model: Membership, topics: Mapping[str, int]) -> None:
    """The coordinator's members and their metadata are what they sent."""
    assert set(model.subs) == set(post.members), (
        f"coordinator members {sorted(post.members)} != members the model expects {sorted(model.subs)}")
    for mid in sorted(post.members):
        m = post.members[mid]
        assert Sub(m.subscribed_topics, m.subscribed_regex) == model.subs[mid], (
            f"{mid!r}: coordinator has subscription {m.subscribed_topics} / {m.subscribed_regex!r}, "
            f"the member sent {model.subs[mid]}")
        assert m.rebalance_timeout_ms == model.rtos[mid] and m.instance_id == model.instances[mid], (
            f"{mid!r}: metadata {m} does not match what it sent")
    if post.members:
        eff = model.effective(topics)
        counts = {t: topics[t] for ts in eff.values() for t in ts}
        assert post.subscribed_topics == counts, (
            f"subscribed topic metadata {post.subscribed_topics} != expected {counts}")


def assert_next_deadline(got: int | None, model: Membership) -> None:
    """4 (timers): the coordinator's next deadline is the earliest session or revocation deadline
    the model tracks — nothing armed that should not be, nothing missing."""
    expected = model.next_deadline()
    assert got == expected, (
        f"next_deadline() is {got}, the model expects {expected} (sessions "
        f"{ {m: t + SESSION_MS for m, t in sorted(model.last_touch.items())} }, revocations "
        f"{ {m: t + model.rtos[m] for m, t in sorted(model.unrevoked_since.items())} })")


def assert_no_overdue_timer(post: View, model: Membership, now: int) -> None:
    """4 (timers): no member outlives its session or its revocation deadline."""
    for mid in sorted(post.members):
        assert model.last_touch[mid] + SESSION_MS > now, (
            f"{mid!r}'s session expired at {model.last_touch[mid] + SESSION_MS} (now {now}) "
            "but it is still a member")
    for mid, since in sorted(model.unrevoked_since.items()):
        assert since + model.rtos[mid] > now, (
            f"{mid!r} has been UNREVOKED since {since}, past its rebalance timeout {model.rtos[mid]}"
            f" (now {now}), and is still a member")


def assert_processes(procs: Iterable[Proc], v: View) -> None:
    """1 (members): live processes process only what the coordinator counts as theirs, so no
    shard is processed by two live processes; zombies (removed member ids) are exempt.
    3 (members): a process's epoch never goes back, except to 0 when it rejoins."""
    procs = list(procs)
    for p in procs:
        back = process_epoch_went_back(repr(p), p.last_epoch, p.sm.epoch)
        assert back is None or p.sm.state in TERMINAL, back
    owner: dict[Shard, Proc] = {}
    for p in live_procs(procs, v):
        mine = v.held_by(p.mid)
        stray = p.processing - mine
        assert not stray, (
            f"live {p!r} processes {fmt(stray)} that the coordinator does not count as its own "
            f"({v.current[p.mid]})")
        for s in sorted(p.processing):
            assert s not in owner, f"{s} is processed by two live processes: {owner[s]!r} and {p!r}"
            owner[s] = p
        if p.sm.epoch > 0 and v.current[p.mid].epoch != STATIC_LEAVE_EPOCH:
            assert p.sm.epoch <= v.current[p.mid].epoch, (
                f"{p!r} believes it is at epoch {p.sm.epoch}, the coordinator has "
                f"{v.current[p.mid].epoch}")


def live_procs(procs: Iterable[Proc], v: View) -> list[Proc]:
    """Active processes whose member id the coordinator still has (not zombies)."""
    return [p for p in procs if p.active and p.mid in v.current]


def not_converged(v: View, procs: Iterable[Proc], wanted: ShardSet) -> str | None:
    """11: what keeps the group from being settled (None: settled), ``wanted`` being every
    subscribed shard."""
    # A process whose subscription is empty and that is not in the group does not ask to be.
    live = [p for p in procs if p.active and p.sm.state is not MemberState.UNSUBSCRIBED]
    if not v.members:
        return None if not live else f"processes {live} are not in the group"
    if v.state is not GroupState.STABLE:
        return f"group state {v.state}"
    by_mid = {p.mid: p for p in live}
    owned: dict[Shard, str] = {}
    for mid in sorted(v.members):
        c = v.current[mid]
        if mid not in by_mid:
            return f"member {mid!r} has no running process"
        if not (c.status is MemberStatus.STABLE and c.epoch == v.target_epoch
                and c.assigned == v.target[mid] and not c.pending_revocation):
            return f"member {mid!r} not stable at the target epoch: {c}"
        p = by_mid[mid]
        if not (p.sm.state is MemberState.STABLE and p.sm.epoch == v.target_epoch
                and p.sm.owned == c.assigned):
            return f"process {p!r} has not caught up with {c}"
        for s in p.sm.owned:
            assert s not in owned, f"liveness: {s} owned by {owned[s]!r} and {mid!r}"
            owned[s] = mid
    if len(by_mid) != len(v.members):
        return f"processes outside the group: {sorted(set(by_mid) - set(v.members))}"
    if set(owned) != wanted:
        return f"owned {fmt(owned)} != subscribed {fmt(wanted)}"
    return None


# --------------------------------------------------------------------------------------------------
# One transition


def assert_assign_exclusive(p: Proc, granted: ShardSet, live: Iterable[Proc]) -> None:
    """2 (members): a process starts processing a shard only when no other live process has it."""
    live = [q for q in live if q is not p]
    for s in sorted(granted):
        taken = taken_while_held(repr(p), s, [repr(q) for q in live if s in q.processing])
        assert taken is None, f"told to take a shard a live process still processes: {taken}"


def assert_nudged(pre: View, post: View, out: Outcome[Any], me: str | None) -> None:
    """Wake-ups: a member whose target changed, or that waits (UNRELEASED) for a shard this step
    freed, is in ``wake`` (unless it is ``me``, the member whose own request this is)."""
    freed = {s for s in pre.owners if s not in post.owners}
    for mid in sorted(post.current):
        if mid == me or mid not in pre.current:
            continue
        c = post.current[mid]
        target = post.target.get(mid, EMPTY)
        waits = c.status is MemberStatus.UNRELEASED and bool((target - c.assigned) & freed)
        if pre.target.get(mid) != target or waits:
            assert (GID, mid) in out.wake, (
                f"{mid!r} has work (target {fmt(pre.target.get(mid, EMPTY))} -> {fmt(target)}, "
                f"{c.status.value}, freed {fmt(freed)}) but is not in wake {sorted(out.wake)}")


def assert_revoke_before_assign(pre: View, post: View) -> None:
    """2 (coordinator): a shard a member gains was held by nobody before the step, unless the member
    is a static take-over inheriting it from the member it replaced."""
    takeovers = {post.static[i]: h for i, h in pre.static.items()
                 if i in post.static and post.static[i] != h and h not in post.members}
    for mid in sorted(post.current):
        inherits = takeovers.get(mid)
        others = {s: {h} for s, h in pre.owners.items() if h != inherits}
        given = given_while_held(GID, mid, held(post.current[mid]) - pre.held_by(mid), others)
        assert not given, "revoke before assign: " + _broken(given) + " (" + "; ".join(
            f"{pre.owners[s]}: {pre.current.get(pre.owners[s])}" for s, _ in given) + ")"


#: 12: how many answered heartbeats in a row may leave a member UNREVOKED although its process held
#: none of the shards it must revoke when it sent them. One: the coordinator takes a report from any
#: heartbeat it accepts, except a join (epoch 0) from a member it already knows, whose "owns nothing"
#: it does not trust (it may be a retry or a stale duplicate; docs/protocol.md). The request after
#: that join carries owned (member rule 3: a join's owned is never taken as acknowledged) at the epoch
#: the join's answer gave, so it is accepted and frees them. No other answer can keep them: a delta
#: leaves owned out only when the member holds its target, which then is its assigned set and does
#: not overlap the revocation; and a resend at the previous epoch from a member holding none of them
#: owns only shards it is still assigned. A fenced resend (the lost-response rule wants owned ⊆
#: assigned, as Kafka does) is one from a member that still held some of them: it is not counted.
UNREVOKED_ANSWERS = 1


def forget_heard_revocations(procs: Iterable[Proc], v: View) -> None:
    """12: a revocation the coordinator no longer waits for (the member moved on, stepped out, left or
    was removed) ends its count: the next UNREVOKED is another revocation, counted afresh."""
    for p in procs:
        c = v.current.get(p.mid)
        if p.unrevoked_answers and (c is None or c.status is not MemberStatus.UNREVOKED
                                    or c.epoch == STATIC_LEAVE_EPOCH):
            p.unrevoked_answers.clear()


def assert_revocation_heard(p: Proc, holding: ShardSet, req: HeartbeatRequest, resp: HeartbeatResponse,
                            v: View) -> None:
    """12: a member whose process holds none of the shards it must revoke — ``holding``, what it
    processed when it sent ``req``, the answered request; not what it holds after the answer (a
    fenced member has dropped everything by then) — stays UNREVOKED after at most UNREVOKED_ANSWERS
    answered heartbeats in a row: its report frees them, not its rebalance timeout."""
    c = v.current.get(p.mid)
    if (c is None or c.status is not MemberStatus.UNREVOKED or c.epoch == STATIC_LEAVE_EPOCH
            or holding & c.pending_revocation):
        p.unrevoked_answers.clear()
        return
    owned = fmt(req.owned) if req.owned is not None else "unchanged"
    p.unrevoked_answers.append(f"epoch {req.member_epoch} owned {owned} -> {resp.error.value}")
    assert len(p.unrevoked_answers) <= UNREVOKED_ANSWERS, (
        f"{p!r} holds none of {fmt(c.pending_revocation)}, yet the coordinator keeps it UNREVOKED ({c}) "
        f"after {len(p.unrevoked_answers)} answered heartbeats: " + "; ".join(p.unrevoked_answers))


def assert_target_only_when_behind(g: Group | None, r: TargetEpochRecord) -> None:
    """5: a new target only while the group epoch is ahead of the target epoch, and for that epoch."""
    assert g is not None, f"{r} for a group that does not exist"
    assert g.epoch > g.target_epoch, (
        f"target recomputed although group epoch {g.epoch} is not ahead of target epoch {g.target_epoch}")
    assert r.target_epoch == g.epoch, f"target installed for epoch {r.target_epoch}, group is at {g.epoch}"


def assert_bump_matches_causes(pre: View, post: View, expected: int, cause: str, kind: str) -> None:
    """4: the group epoch moved by exactly the number of causes the model counted."""
    moved = post.epoch - pre.epoch
    assert moved == expected, (
        f"{kind}: group epoch {pre.epoch} -> {post.epoch} (+{moved}), expected +{expected} ({cause})")


def assert_epochs_monotonic(pre: View, post: View, last_epoch: Mapping[str, int]) -> None:
    """3: the group epoch and each member's epoch never decrease while the member stays
    (``last_epoch``: each member's epoch when it was last seen, away at -2 aside)."""
    back = group_epoch_went_back(GID, pre.epoch, post.epoch)
    assert back is None, back
    for mid in sorted(post.current):
        last = last_epoch.get(mid)
        back = None if last is None else member_epoch_went_back(GID, mid, last, post.current[mid])
        assert back is None, back


def assert_offsets_monotonic(pre: View, post: View, admin_reset: bool) -> None:
    """10: committed offsets never regress (or vanish), except an admin reset of an empty group."""
    if admin_reset:
        return
    for s, o in sorted(pre.offsets.items()):
        assert s in post.offsets, f"committed offset of {s} disappeared"
        back = offset_went_back(GID, s, o.offset, post.offsets[s].offset)
        assert back is None, back


def assert_same_input_same_target(pre: View, post: View, eff_pre: Mapping[str, frozenset[str]],
                                  eff_post: Mapping[str, frozenset[str]], topics_pre: Mapping[str, int],
                                  topics_post: Mapping[str, int]) -> None:
    """6: unchanged assignor input (members, resolved subscriptions, partition counts, current
    target) gives an unchanged target, even when the epoch moved (e.g. a subscription change that
    resolves to the same topics)."""
    if not pre.members or pre.epoch != pre.target_epoch or set(pre.members) != set(post.members):
        return
    counts_pre = {t: topics_pre[t] for ts in eff_pre.values() for t in ts}
    counts_post = {t: topics_post[t] for ts in eff_post.values() for t in ts}
    if eff_pre == eff_post and counts_pre == counts_post:
        if post.epoch != pre.epoch:
            event("epoch bump with an unchanged assignor input")
        assert post.target == pre.target, (
            f"the assignor input did not change (epoch {pre.epoch} -> {post.epoch}) but the target did: "
            + "; ".join(f"{m}: {fmt(pre.target[m])} -> {fmt(post.target[m])}"
                        for m in sorted(post.target) if pre.target.get(m) != post.target[m]))


def assert_sticky_join(pre: View, post: View, joiner: str) -> None:
    """6: one member joins a homogeneous group with a current target: the others only give shards
    up, and each keeps min(what it had, quota)."""
    total = sum(len(s) for s in post.target.values())
    quota = total // len(post.target)
    for mid in sorted(pre.target):
        old, new = pre.target[mid], post.target[mid]
        assert new <= old, f"sticky: {mid!r} gained {fmt(new - old)} when {joiner!r} joined"
        assert len(new) >= min(len(old), quota), (
            f"sticky: {mid!r} kept {len(new)} of {len(old)} shards, quota {quota}")


def assert_heartbeat_answer(pre: View, post: View, resp: HeartbeatResponse, req: HeartbeatRequest,
                            subs: Mapping[str, Sub]) -> None:
    """The epoch check (with the lost-response rule), the answer's epoch and assignment, and the
    static-membership rules (8)."""
    mid = req.member_id
    cur = pre.current.get(mid)
    if req.member_epoch > 0 and cur is not None and resp.error in (
            ErrorCode.NONE, ErrorCode.FENCED_MEMBER_EPOCH):
        accept = req.member_epoch == cur.epoch or (
            req.member_epoch < cur.epoch and req.member_epoch == cur.previous_epoch
            and req.owned is not None and req.owned <= cur.assigned)
        if accept and req.member_epoch != cur.epoch:
            event("lost-response rule: previous epoch accepted")
        elif not accept:
            event("epoch check: stale epoch fenced")
        assert (resp.error is ErrorCode.NONE) == accept, (
            f"epoch check: {mid!r} sent epoch {req.member_epoch} owning "
            f"{fmt(req.owned) if req.owned is not None else 'unchanged'}; coordinator had epoch "
            f"{cur.epoch} (previous {cur.previous_epoch}) assigned {fmt(cur.assigned)}; "
            f"answered {resp.error}")
    if resp.error is ErrorCode.NONE and req.member_epoch >= 0:
        now = post.current[mid]
        assert resp.member_epoch == now.epoch, f"response epoch {resp.member_epoch} != state {now.epoch}"
        if resp.assignment is not None:
            assert resp.assignment == now.assigned, "response assignment != coordinator's assigned"
        was = pre.current.get(mid)
        if req.member_epoch == JOIN_EPOCH or is_full(req) or was is None or was.assigned != now.assigned or (
                req.owned is not None and req.owned != now.assigned):
            assert resp.assignment == now.assigned, (
                f"{mid!r}'s assignment must be sent (join, full request, changed, or it reports "
                f"something else): sent {resp.assignment}, assigned {fmt(now.assigned)}")
    assert_static_rules(pre, post, resp, req, subs)
    if req.member_epoch == STATIC_LEAVE_EPOCH and resp.error is ErrorCode.NONE:
        assert_away_keeps_shards(pre.current[mid], post.current[mid], mid, post)


def assert_static_rules(pre: View, post: View, resp: HeartbeatResponse, req: HeartbeatRequest,
                        subs: Mapping[str, Sub]) -> None:
    """8: a second live holder is refused; a take-over with the same subscription changes nothing."""
    if req.member_epoch != JOIN_EPOCH or req.instance_id is None:
        return
    holder = pre.static.get(req.instance_id)
    if holder is None:
        return
    away = pre.current[holder]
    if holder != req.member_id and away.epoch != STATIC_LEAVE_EPOCH:
        event("static: second live holder refused")
        assert resp.error is ErrorCode.UNRELEASED_INSTANCE_ID, (
            f"instance {req.instance_id!r} is held by live {holder!r}, yet {req.member_id!r} got "
            f"{resp.error}")
        return
    if away.epoch != STATIC_LEAVE_EPOCH:
        return  # a live member re-sending its join: nothing static about it
    assert resp.error is ErrorCode.NONE, f"static take-over / return refused: {resp}"
    event("static: take-over" if holder != req.member_id else "static: same member id returns")
    if holder != req.member_id:
        assert holder not in post.members, f"replaced static member {holder!r} is still in the group"
        assert post.static.get(req.instance_id) == req.member_id, "instance id not rebound to the new member"
    if merged(subs.get(holder), req) == subs.get(holder):
        assert post.epoch == pre.epoch, (
            f"static replacement with the same subscription bumped the epoch {pre.epoch} -> {post.epoch}")
        assert post.target.get(req.member_id) == pre.target.get(holder), (
            "static replacement did not inherit its predecessor's target")
        if (away.status is MemberStatus.STABLE and away.assigned == pre.target.get(holder)
                and away.previous_epoch == pre.target_epoch):
            assert resp.assignment == away.assigned and resp.member_epoch == away.previous_epoch, (
                f"static replacement got epoch {resp.member_epoch} {fmt(resp.assignment or EMPTY)}, "
                f"its predecessor had epoch {away.previous_epoch} {fmt(away.assigned)}")


def assert_away_keeps_shards(before: CurrentAssignment, after: CurrentAssignment, mid: str,
                             post: View) -> None:
    """8: a static member stepping out (-2) keeps its assigned shards, and its epoch for its return;
    the shards it was revoking are free at once."""
    back_at = before.previous_epoch if before.epoch == STATIC_LEAVE_EPOCH else before.epoch
    assert (after.epoch, after.previous_epoch) == (STATIC_LEAVE_EPOCH, back_at), (
        f"-2: {mid!r} went from {before} to {after}")
    assert after.assigned == before.assigned, (
        f"-2: {mid!r} was assigned {fmt(before.assigned)} and now {fmt(after.assigned)}; it keeps them "
        "while away")
    if before.pending_revocation:
        event("static: -2 released a pending revocation")
    still = {s for s in before.pending_revocation if s in post.owners}
    assert not after.pending_revocation and not still, (
        f"-2: {mid!r} was revoking {fmt(before.pending_revocation)}; they must be free at once, yet "
        f"{fmt(still | after.pending_revocation)} are still held")


def assert_commit_result(pre: View, ack: Ack, req: OffsetCommitRequest, proc: Proc) -> None:
    """10 and commit fencing: the result is the one the rules predict; zombies always refused."""
    expected = expected_commit_error(pre, req)
    if proc.mid not in pre.current:
        event("zombie commit")
        assert ack.error is not ErrorCode.NONE, f"zombie {proc!r} committed {req.offsets}"
    assert ack.error is expected, (
        f"commit by {req.member_id!r} at epoch {req.member_epoch} of {req.offsets}: "
        f"got {ack.error} ({ack.message}), expected {expected}")


def assert_admin_result(pre: View, ack: Ack, offsets: Mapping[Shard, int]) -> None:
    """10: an admin may set offsets (even backwards) only on a group with no members."""
    expected = ErrorCode.NON_EMPTY_GROUP if pre.members else ErrorCode.NONE
    assert ack.error is expected, (
        f"admin commit of {offsets}: got {ack.error} ({ack.message}), expected {expected}")


def expected_commit_error(pre: View, req: OffsetCommitRequest) -> ErrorCode:
    if not pre.exists:
        return ErrorCode.GROUP_ID_NOT_FOUND
    cur = pre.current.get(req.member_id)
    if cur is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if req.member_epoch != cur.epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    for s, off in req.offsets.items():
        if s not in held(cur):
            return ErrorCode.NOT_OWNED
        if s in pre.offsets and off < pre.offsets[s].offset:
            return ErrorCode.OFFSET_OUT_OF_ORDER
    return ErrorCode.NONE
