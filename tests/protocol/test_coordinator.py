"""Unit tests of the coordinator core: every rule and every error of the heartbeat protocol."""

from __future__ import annotations

import pytest

from regroup.protocol.causes import (
    Fence,
    FenceReason,
    GroupCreated,
    GroupDeleted,
    GroupEpochBumped,
    MemberFenced,
    MemberJoined,
    MemberLeft,
    RegexResolved,
    StaticTakeOver,
    SubscribedTopicsChanged,
    SubscriptionChanged,
    TargetInstalled,
)
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.records import GroupEpochRecord, MemberStatus, Record, SubscribedTopicsRecord
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.state import GroupState
from regroup.protocol.topics import TopicMetadata
from tests.protocol.harness import Harness, fenced, shards


def two_members(h: Harness) -> tuple[frozenset[Shard], frozenset[Shard]]:
    """a owns everything, then b joins and the hand-off completes. Returns (a's, b's) shards."""
    ra = h.ok(h.join("a"))
    assert ra.member_epoch == 1 and ra.assignment == shards("t", *range(6))
    rb = h.ok(h.join("b"))
    assert rb.member_epoch == 2 and rb.assignment == EMPTY  # everything is still held by a
    ra = h.ok(h.hb("a", 1, owned=shards("t", *range(6))))
    assert ra.member_epoch == 1  # revoke first: same epoch, smaller assignment
    assert ra.assignment is not None and len(ra.assignment) == 3
    a_keep = ra.assignment
    assert h.group().current["a"].status is MemberStatus.UNREVOKED
    ra = h.ok(h.hb("a", 1, owned=a_keep))
    assert ra.member_epoch == 2 and ra.assignment is None
    rb = h.ok(h.hb("b", 2))
    assert rb.assignment == shards("t", *range(6)) - a_keep
    h.ok(h.hb("b", 2, owned=rb.assignment))
    assert h.group().state is GroupState.STABLE
    return a_keep, rb.assignment


class TestJoinAndReconcile:
    def test_first_join_creates_group_and_gets_everything(self) -> None:
        h = Harness()
        r = h.ok(h.join("a"))
        assert (r.member_epoch, r.heartbeat_interval_ms) == (1, 5_000)
        g = h.group()
        assert (g.epoch, g.target_epoch, g.state) == (1, 1, GroupState.STABLE)
        assert g.owner_epoch(Shard("t", 0)) == 1 and g.owner_epoch(Shard("zzz", 0)) == -1

    def test_hand_off_revokes_before_assigning(self) -> None:
        h = Harness()
        a, b = two_members(h)
        assert a.isdisjoint(b) and a | b == shards("t", *range(6))

    def test_partition_granted_only_after_release(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        h.ok(h.join("b"))
        # b heartbeats before a has revoked anything: it must get nothing a still holds.
        rb = h.ok(h.hb("b", 2))
        assert not rb.assignment
        assert h.group().current["b"].status is MemberStatus.UNRELEASED

    def test_release_wakes_the_waiting_member(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        h.ok(h.join("b"))
        ra = h.ok(h.hb("a", 1, owned=shards("t", *range(6))))
        out = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "a", 1, owned=ra.assignment), h.now))
        assert ("g", "b") in out.wake

    def test_target_change_wakes_the_members_that_must_act(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        out = h.keep(h.coord.heartbeat(HeartbeatRequest(
            "g", "b", 0, rebalance_timeout_ms=1000, subscribed_topics=("t",), owned=EMPTY), h.now))
        assert ("g", "a") in out.wake

    def test_unaffected_member_sees_nothing(self) -> None:
        h = Harness(topics={"t1": 2, "t2": 2})
        h.ok(h.join("a", ("t1",)))
        h.ok(h.join("b", ("t2",)))
        h.ok(h.hb("a", 1, owned=shards("t1", 0, 1)))
        rb = h.ok(h.hb("b", 2))
        h.ok(h.hb("b", 2, owned=rb.assignment))
        h.ok(h.join("c", ("t2",)))  # only b's topic is affected
        ra = h.ok(h.hb("a", 2, owned=shards("t1", 0, 1)))
        assert ra.assignment is None  # nothing to do: no revoke, no pause
        assert ra.member_epoch == 3  # the new epoch travels alone

    def test_rejoin_with_epoch_zero_is_idempotent(self) -> None:
        h = Harness()
        r1 = h.ok(h.join("a"))
        r2 = h.ok(h.join("a"))  # the join response was lost and the member retries
        assert r2.member_epoch == r1.member_epoch and r2.assignment == r1.assignment
        assert h.group().epoch == 1

    def test_steady_heartbeat_writes_nothing(self) -> None:
        h = Harness()
        r = h.ok(h.join("a"))
        out = h.coord.heartbeat(HeartbeatRequest("g", "a", 1, owned=r.assignment), h.now)
        assert out.records == () and out.response.assignment is None
        out = h.coord.heartbeat(HeartbeatRequest("g", "a", 1), h.now)
        assert out.records == () and out.response.assignment is None


class TestErrors:
    @pytest.mark.parametrize("req, fragment", [
        (HeartbeatRequest("", "m", 0, rebalance_timeout_ms=1, subscribed_topics=("t",), owned=EMPTY),
         "group_id"),
        (HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, subscribed_topics=("t",), owned=EMPTY),
         "member_id"),
        (HeartbeatRequest("g", "m", -3), "member_epoch"),
        (HeartbeatRequest("g", "m", 0, subscribed_topics=("t",), owned=EMPTY), "rebalance_timeout_ms"),
        (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, owned=EMPTY), "subscribed"),
        (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topics=("t",),
                          owned=shards("t", 0)), "owned"),
        (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topics=("t",)), "owned"),
        (HeartbeatRequest("g", "m", -2), "instance_id"),
        (HeartbeatRequest("g", "m", 0, instance_id="", rebalance_timeout_ms=1, subscribed_topics=("t",),
                          owned=EMPTY), "instance_id"),
        (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=0, subscribed_topics=("t",), owned=EMPTY),
         "rebalance_timeout_ms"),
        (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topics=("",), owned=EMPTY),
         "topic name"),
        (HeartbeatRequest("g", "m", 3, owned=frozenset({Shard("t", -1)})), "negative partition"),
        (HeartbeatRequest("g", "m", 3, owned=frozenset({("t", 1)})), "Shard"),  # type: ignore[arg-type]
        (HeartbeatRequest("g" * 300, "m", 3), "limit"),
    ])
    def test_invalid_request(self, req: HeartbeatRequest, fragment: str) -> None:
        h = Harness()
        r = h.send(req)
        assert r.error is ErrorCode.INVALID_REQUEST and fragment in r.message
        assert h.coord.groups == {} and h.log == []

    def test_unsupported_assignor(self) -> None:
        h = Harness()
        r = h.join("a", assignor="fancy")
        assert r.error is ErrorCode.UNSUPPORTED_ASSIGNOR and "uniform" in r.message
        assert h.coord.groups == {}

    def test_group_not_found(self) -> None:
        r = Harness().hb("a", 4)
        assert r.error is ErrorCode.GROUP_ID_NOT_FOUND

    def test_group_full(self) -> None:
        h = Harness(config=CoordinatorConfig(max_group_size=2))
        h.ok(h.join("a"))
        h.ok(h.join("b"))
        r = h.join("c")
        assert r.error is ErrorCode.GROUP_MAX_SIZE_REACHED and "2 members" in r.message
        h.ok(h.join("a"))  # a known member may still rejoin

    def test_unknown_member(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        r = h.hb("zz", 1)
        assert r.error is ErrorCode.UNKNOWN_MEMBER_ID and "rejoin" in r.message
        assert h.hb("zz", -1).error is ErrorCode.UNKNOWN_MEMBER_ID

    def test_fenced_newer_epoch(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        r = h.hb("a", 7)
        assert r.error is ErrorCode.FENCED_MEMBER_EPOCH and "newer" in r.message

    def test_lost_response_rule(self) -> None:
        h = Harness()
        a, _ = two_members(h)  # a went from epoch 1 to 2; its previous epoch is 1
        assert h.group().current["a"].previous_epoch == 1
        # a never saw epoch 2: it resends 1 with what it owns, a subset of its assignment: accepted.
        r = h.hb("a", 1, owned=a)
        assert r.error is ErrorCode.NONE and r.member_epoch == 2
        # ...but not while claiming a shard that moved on,
        r = h.hb("a", 1, owned=shards("t", *range(6)))
        assert r.error is ErrorCode.FENCED_MEMBER_EPOCH
        # ...nor without saying what it owns, nor from an epoch older than the previous one.
        assert h.hb("a", 1).error is ErrorCode.FENCED_MEMBER_EPOCH
        h2 = Harness()
        two_members(h2)
        assert h2.hb("a", 0 + 1, owned=frozenset()).error is ErrorCode.NONE
        h2.ok(h2.join("c"))
        h2.ok(h2.hb("a", 2, owned=h2.group().current["a"].assigned))

    def test_invalid_regex(self) -> None:
        h = Harness()
        r = h.join("a", subscribed_regex="(a)\\1")
        assert r.error is ErrorCode.INVALID_REGULAR_EXPRESSION and "RE2" in r.message
        assert h.coord.groups == {}

    def test_errors_change_nothing(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        before = h.coord.snapshot()
        for bad in (h.hb("a", 9), h.hb("b", 1), h.join("c", assignor="nope"), h.hb("a", 1, instance_id="x")):
            assert bad.error is not ErrorCode.NONE
        assert h.coord.snapshot() == before


class TestEpochBumps:
    def test_subscription_change_bumps(self) -> None:
        h = Harness(topics={"t": 2, "u": 2})
        h.ok(h.join("a"))
        r = h.ok(h.hb("a", 1, subscribed_topics=("t", "u")))
        assert h.group().epoch == 2 and r.member_epoch == 2
        assert r.assignment == shards("t", 0, 1) | shards("u", 0, 1)

    def test_same_subscription_does_not_bump(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        h.ok(h.hb("a", 1, subscribed_topics=("t",), rebalance_timeout_ms=5_000))
        assert h.group().epoch == 1

    def test_new_partitions_bump(self) -> None:
        h = Harness(topics={"t": 2})
        h.ok(h.join("a"))
        h.keep(h.coord.update_topics(TopicMetadata({"t": 4, "other": 1}), h.now))
        assert h.group().epoch == 2
        r = h.ok(h.hb("a", 1, owned=shards("t", 0, 1)))
        assert r.assignment == shards("t", 0, 1, 2, 3)

    def test_unrelated_topic_does_not_bump(self) -> None:
        h = Harness(topics={"t": 2})
        h.ok(h.join("a"))
        h.keep(h.coord.update_topics(TopicMetadata({"t": 2, "other": 3}), h.now))
        assert h.group().epoch == 1

    def test_topic_deleted_bumps_and_revokes(self) -> None:
        h = Harness(topics={"t": 2, "u": 1})
        h.ok(h.join("a", ("t", "u")))
        h.keep(h.coord.update_topics(TopicMetadata({"t": 2}), h.now))
        assert h.group().epoch == 2
        r = h.ok(h.hb("a", 1, owned=shards("t", 0, 1) | shards("u", 0)))
        assert r.assignment == shards("t", 0, 1) and r.member_epoch == 1  # revoke u-0 first
        r = h.ok(h.hb("a", 1, owned=shards("t", 0, 1)))
        assert r.member_epoch == 2

    def test_regex_picks_up_new_topics(self) -> None:
        h = Harness(topics={"orders-eu": 1, "payments": 1})
        r = h.ok(h.join("a", subscribed_regex="orders-.*"))
        assert r.assignment == shards("orders-eu", 0)
        h.keep(h.coord.update_topics(TopicMetadata({"orders-eu": 1, "orders-us": 2, "payments": 1}), h.now))
        assert h.group().epoch == 2
        r = h.ok(h.hb("a", 1, owned=r.assignment))
        assert r.assignment == shards("orders-eu", 0) | shards("orders-us", 0, 1)
        assert h.group().regexes["orders-.*"] == frozenset({"orders-eu", "orders-us"})

    def test_regex_dropped_when_unused(self) -> None:
        h = Harness(topics={"orders-eu": 1, "t": 1})
        h.ok(h.join("a", subscribed_regex="orders-.*"))
        h.ok(h.hb("a", 1, subscribed_regex="", subscribed_topics=("t",)))
        assert h.group().regexes == {}

    def test_leave_bumps_and_recomputes(self) -> None:
        h = Harness()
        a, _ = two_members(h)
        r = h.ok(h.hb("b", -1))
        assert r.member_epoch == -1
        g = h.group()
        assert g.epoch == 3 and g.target_epoch == 3 and "b" not in g.members
        r = h.ok(h.hb("a", 2, owned=a))
        assert r.assignment == shards("t", *range(6)) and r.member_epoch == 3

    def test_last_member_leaving_empties_group(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        h.ok(h.hb("a", -1))
        assert h.group().state is GroupState.EMPTY and h.group().owners == {}


class TestTimers:
    def test_session_timeout_fences(self) -> None:
        h = Harness()
        a, _ = two_members(h)
        assert h.coord.next_deadline() == h.now + 45_000
        h.advance(30_000)
        h.ok(h.hb("a", 2, owned=a))
        out = h.advance(15_000)
        assert fenced(out) == [("g", "b")]
        assert out.fences == (Fence("g", "b", FenceReason.SESSION_TIMEOUT),)
        assert "b" not in h.group().members and h.group().epoch == 3
        assert h.hb("b", 2).error is ErrorCode.UNKNOWN_MEMBER_ID

    def test_revocation_timeout_fences_only_an_unmoved_epoch(self) -> None:
        h = Harness()
        h.ok(h.join("a", rebalance_timeout_ms=10_000))
        h.ok(h.join("b"))
        h.ok(h.hb("a", 1, owned=shards("t", *range(6))))  # a told to revoke, does not
        assert h.coord.next_deadline() == h.now + 10_000
        pending = h.group().current["a"].pending_revocation
        out = h.advance(10_000)
        assert fenced(out) == [("g", "a")]
        assert pending and out.fences == (Fence("g", "a", FenceReason.REVOCATION_TIMEOUT, pending),)

    def test_revocation_in_time_disarms(self) -> None:
        h = Harness()
        h.ok(h.join("a", rebalance_timeout_ms=10_000))
        h.ok(h.join("b"))
        r = h.ok(h.hb("a", 1, owned=shards("t", *range(6))))
        h.advance(5_000)
        h.ok(h.hb("a", 1, owned=r.assignment))
        h.ok(h.hb("b", 2))
        assert fenced(h.advance(6_000)) == []

    def test_expire_before_deadline_does_nothing(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        out = h.advance(44_999)
        assert out.records == () and fenced(out) == []


class TestStaticMembership:
    def test_restart_keeps_partitions_without_bump(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.join("b", instance_id=None))
        ra = h.ok(h.hb("a1", 1, owned=shards("t", *range(6))))
        ra = h.ok(h.hb("a1", 1, owned=ra.assignment))
        rb = h.ok(h.hb("b", 2))
        h.ok(h.hb("b", 2, owned=rb.assignment))
        alpha = h.group().current["a1"].assigned
        epoch = h.group().epoch
        r = h.ok(h.hb("a1", -2, instance_id="alpha"))
        assert r.member_epoch == -2 and h.group().epoch == epoch
        assert h.group().owners[next(iter(alpha))] == "a1"  # still held while away
        r = h.ok(h.join("a2", instance_id="alpha"))  # the restarted process, new member id
        assert r.assignment == alpha and r.member_epoch == 2 and h.group().epoch == epoch
        assert "a1" not in h.group().members and h.group().static_members == {"alpha": "a2"}
        assert h.hb("a1", 2, instance_id="alpha").error is ErrorCode.FENCED_INSTANCE_ID

    def test_second_live_holder_is_refused(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        r = h.join("a2", instance_id="alpha")
        assert r.error is ErrorCode.UNRELEASED_INSTANCE_ID and "a1" in r.message

    def test_temporary_leave_expires_into_full_leave(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        out = h.advance(45_000)
        assert fenced(out) == [("g", "a1")] and h.group().epoch == 2 and not h.group().static_members

    def test_static_full_leave_bumps(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.hb("a1", -1, instance_id="alpha"))
        assert h.group().epoch == 2 and h.group().static_members == {}

    def test_replacement_with_new_subscription_bumps(self) -> None:
        h = Harness(topics={"t": 2, "u": 2})
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        r = h.ok(h.join("a2", ("t", "u"), instance_id="alpha"))
        assert h.group().epoch == 2 and r.assignment == shards("t", 0, 1) | shards("u", 0, 1)

    def test_same_member_id_returns(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        assert h.hb("a1", 1, owned=shards("t", *range(6))).error is ErrorCode.FENCED_MEMBER_EPOCH
        r = h.ok(h.join("a1", instance_id="alpha"))
        assert r.member_epoch == 1 and r.assignment == shards("t", *range(6)) and h.group().epoch == 1


class TestReplay:
    def test_recover_rebuilds_state_and_timers(self) -> None:
        h = Harness()
        two_members(h)
        h.ok(h.join("c", instance_id="gamma"))
        h.ok(h.hb("c", -2, instance_id="gamma"))
        rebuilt = Coordinator.recover(h.log, h.now, topics=TopicMetadata(h.topics))
        assert rebuilt.groups == h.coord.groups
        assert rebuilt.next_deadline() == h.now + 45_000
        snap = Coordinator.recover(h.coord.snapshot(), h.now, topics=TopicMetadata(h.topics))
        assert snap.groups == h.coord.groups

    def test_members_carry_on_after_recovery(self) -> None:
        h = Harness()
        a, b = two_members(h)
        h.coord = Coordinator.recover(h.log, h.now, topics=TopicMetadata(h.topics))
        assert h.ok(h.hb("a", 2, owned=a)).assignment is None
        assert h.ok(h.hb("b", 2, owned=b)).assignment is None

    def test_recover_starts_from_the_topics_the_groups_recorded(self) -> None:
        records: list[Record] = [GroupEpochRecord("g", 1), SubscribedTopicsRecord("g", {"a": 2}),
                   GroupEpochRecord("h", 1), SubscribedTopicsRecord("h", {"a": 4, "b": 1}),
                   GroupEpochRecord("gone", 1), SubscribedTopicsRecord("gone", {"c": 9}),
                   GroupEpochRecord("gone", None)]
        assert Coordinator.recover(records, 0).topics == TopicMetadata({"a": 4, "b": 1})
        given = TopicMetadata({"z": 1})
        assert Coordinator.recover(records, 0, topics=given).topics == given

    def test_a_change_made_while_down_is_seen_after_recovery(self) -> None:
        h = Harness(topics={"t": 2})
        h.ok(h.join("a"))
        rebuilt = Coordinator.recover(h.log, h.now)
        out = rebuilt.update_topics(TopicMetadata({"t": 3}), h.now)
        assert rebuilt.groups["g"].epoch == 2 and out.epoch_events[0] == GroupEpochBumped(
            "g", 2, (SubscribedTopicsChanged({"t": 3}),))


class TestCauses:
    """The core says why each epoch moved; nothing downstream reads it back from the records."""

    def test_first_join_creates_bumps_and_installs(self) -> None:
        h = Harness(topics={"t": 4})
        out = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1_000,
                                                        subscribed_topics=("t",), owned=EMPTY), h.now))
        assert out.epoch_events == (
            GroupCreated("g"),
            GroupEpochBumped("g", 1, (MemberJoined("a"), SubscribedTopicsChanged({"t": 4}))),
            TargetInstalled("g", 1, "uniform", 1))

    def test_leave_subscription_change_and_regex(self) -> None:
        h = Harness(topics={"t": 2, "u": 1})
        h.ok(h.join("a"))
        h.ok(h.join("b"))
        out = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "b", 2, subscribed_topics=("t", "u")), h.now))
        assert out.epoch_events[0] == GroupEpochBumped(
            "g", 3, (SubscriptionChanged("b"), SubscribedTopicsChanged({"t": 2, "u": 1})))
        epoch_a = h.group().current["a"].epoch
        out = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "a", epoch_a, subscribed_regex="u.*"), h.now))
        bump = out.epoch_events[0]
        assert isinstance(bump, GroupEpochBumped) and bump.causes == (
            SubscriptionChanged("a"), RegexResolved("u.*", frozenset({"u"})))
        out = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "a", -1), h.now))
        assert out.epoch_events[0] == GroupEpochBumped("g", 5, (MemberLeft("a"),))
        assert out.departed == (("g", "a"),)

    def test_each_fence_bumps_with_its_own_cause(self) -> None:
        h = Harness()
        two_members(h)
        out = h.advance(45_000)
        bumps = [e for e in out.epoch_events if isinstance(e, GroupEpochBumped)]
        assert [b.causes for b in bumps] == [
            (MemberFenced("a", FenceReason.SESSION_TIMEOUT),),
            (MemberFenced("b", FenceReason.SESSION_TIMEOUT), SubscribedTopicsChanged({}))]
        assert set(out.departed) == {("g", "a"), ("g", "b")}

    def test_static_take_over_names_both_members_only_when_it_bumps(self) -> None:
        h = Harness(topics={"t": 2, "u": 2})
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        same = h.keep(h.coord.heartbeat(HeartbeatRequest(
            "g", "a2", 0, instance_id="alpha", rebalance_timeout_ms=60_000, subscribed_topics=("t",),
            owned=EMPTY), h.now))
        assert same.epoch_events == () and same.departed == (("g", "a1"),)
        h.ok(h.hb("a2", -2, instance_id="alpha"))
        other = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "a3", 0, instance_id="alpha",
                                                          rebalance_timeout_ms=60_000,
                                                          subscribed_topics=("t", "u"), owned=EMPTY), h.now))
        assert other.epoch_events[0] == GroupEpochBumped(
            "g", 2, (StaticTakeOver("alpha", "a2", "a3"), SubscribedTopicsChanged({"t": 2, "u": 2})))

    def test_delete_group_is_an_event(self) -> None:
        h = Harness()
        h.ok(h.join("a"))
        h.ok(h.hb("a", -1))
        assert h.coord.delete_group("g").epoch_events == (GroupDeleted("g"),)

