"""Three rules from the reliability issue, each with the scenario that broke it:

1. a shard listed twice in a request's owned list is INVALID_REQUEST, and the owned limit counts the
   list as sent — both checked before any shard is built;
2. a leave (-1 or -2) that names an instance id is resolved by the instance id first;
3. a static member stepping out (-2) frees at once the shards it was revoking.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.records import MemberStatus
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.state import GroupState
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.coordinator import StreamsGroups
from regroup.protocol.streams.fencing import tasks_from_listing
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.topology import TaskId
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import check_shards, shards_from_listing
from tests.protocol.harness import Harness, fenced, shards
from tests.protocol.streams.fake_members import GROUP, TOPOLOGY, Deployment


class Untouchable:
    """A listed group of partitions that may be measured but not read: proves a check ran on the
    length alone, before any shard was built."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        raise AssertionError("the listing was read before its length was checked")

    def __contains__(self, item: object) -> bool:
        raise AssertionError("the listing was read before its length was checked")


def refused(match: str) -> pytest.RaisesContext[ProtocolError]:
    return pytest.raises(ProtocolError, match=match)


# ------------------------------------------------------------------ 1. owned listed as sent
class TestOwnedListing:
    LIMIT = CoordinatorConfig().max_owned_shards

    def test_a_well_formed_listing_becomes_the_set(self) -> None:
        got = shards_from_listing("owned", [("t", [2, 0]), ("u", []), ("v", [1]), ("t", [5])], 10)
        assert got == shards("t", 0, 2, 5) | shards("v", 1)

    def test_a_partition_listed_twice_in_one_group_is_named(self) -> None:
        with refused(r"owned lists partition t:3 twice; list each partition once") as e:
            shards_from_listing("owned", [("t", [1, 3, 2, 3])], 10)
        assert e.value.code is ErrorCode.INVALID_REQUEST

    def test_a_partition_listed_again_under_a_second_group_of_its_topic_is_named(self) -> None:
        with refused("owned lists partition t:1 twice"):
            shards_from_listing("owned", [("t", [0, 1]), ("u", [1]), ("t", [4, 1])], 10)

    def test_the_limit_counts_the_listing_as_sent_not_the_set(self) -> None:
        with refused("owned lists at least 4 partitions; the limit is 3"):
            shards_from_listing("owned", [("t", [0, 0, 0, 0])], 3)
        with refused("at least 4 partitions; the limit is 3"):
            shards_from_listing("owned", [("t", [0, 1]), ("u", [0, 1])], 3)
        assert len(shards_from_listing("owned", [("t", [0, 1]), ("u", [0])], 3)) == 3

    def test_regression_15m_copies_of_one_partition_are_refused_before_any_work(self) -> None:
        """The incident: 15M copies of one partition passed the 1M limit (counted after the set
        removed the copies) and took the coordinator 4.9 s to decode. Now the length alone refuses
        it: the partitions are never read (`Untouchable` would raise)."""
        with refused(f"owned lists at least 15000000 partitions; the limit is {self.LIMIT}") as e:
            shards_from_listing("owned", [("orders", Untouchable(15_000_000))], self.LIMIT)
        assert e.value.code is ErrorCode.INVALID_REQUEST

    def test_copies_under_the_limit_stop_at_the_first_repeat(self) -> None:
        with refused("owned lists partition orders:7 twice"):
            shards_from_listing("owned", [("orders", [7] * 500_000)], self.LIMIT)

    def test_check_shards_measures_a_list_before_reading_it(self) -> None:
        cfg = CoordinatorConfig()
        with refused("owned lists 5 shards; the limit is 4"):
            check_shards("owned", Untouchable(5), cfg, 4)  # type: ignore[arg-type]

    def test_check_shards_stops_reading_an_unsized_iterable_past_the_limit(self) -> None:
        def endless() -> Iterator[Shard]:
            p = 0
            while True:
                yield Shard("t", p)
                p += 1
        with refused("more than 3 shards"):
            check_shards("owned", endless(), CoordinatorConfig(), 3)

    def test_a_heartbeat_owning_more_than_the_limit_is_refused_and_changes_nothing(self) -> None:
        h = Harness(config=CoordinatorConfig(max_owned_shards=3))
        r = h.ok(h.join("a"))
        before = h.coord.snapshot()
        bad = h.hb("a", r.member_epoch, owned=shards("t", 0, 1, 2, 3))
        assert bad.error is ErrorCode.INVALID_REQUEST and "limit is 3" in bad.message
        assert h.coord.snapshot() == before

    def test_streams_task_lists_refuse_a_repeat_and_count_as_sent(self) -> None:
        assert tasks_from_listing("owned.active", [("s", [0, 2])], 5) == {TaskId("s", 0), TaskId("s", 2)}
        with refused("owned.active lists task s_2 twice; list each task once"):
            tasks_from_listing("owned.active", [("s", [0, 2]), ("s", [2])], 5)
        with refused("owned.standby lists at least 15000000 tasks; the limit is 5"):
            tasks_from_listing("owned.standby", [("s", Untouchable(15_000_000))], 5)

    def test_a_streams_heartbeat_owning_more_tasks_than_the_limit_is_refused(self) -> None:
        sg = StreamsGroups(coordinator=CoordinatorConfig(max_owned_shards=3),
                           topics=TopicMetadata({"in": 4}))
        joined = sg.heartbeat(StreamsHeartbeatRequest(GROUP, "a", 0, process_id="P1",
                                                      rebalance_timeout_ms=1000, topology=TOPOLOGY), 0)
        assert joined.response.error is ErrorCode.NONE
        owned = MemberTasks(active=frozenset({TaskId("s", 0), TaskId("s", 1)}),
                            standby=frozenset({TaskId("s", 2)}), warmup=frozenset({TaskId("s", 3)}))
        out = sg.heartbeat(StreamsHeartbeatRequest(GROUP, "a", joined.response.member_epoch, owned=owned), 1)
        assert out.response.error is ErrorCode.INVALID_REQUEST and not out.records
        assert "owned lists 4 tasks in all roles; the limit is 3" in out.response.message


# ------------------------------------------------------------------ 2. a static leave: the instance first
class TestStaticLeaveResolvesTheInstanceFirst:
    @pytest.mark.parametrize("epoch", [-1, -2])
    def test_an_instance_nobody_holds_is_unknown_member(self, epoch: int) -> None:
        h = Harness()
        h.ok(h.join("a"))  # a dynamic member: its member id is known, the instance id is not
        before = h.coord.snapshot()
        r = h.hb("a", epoch, instance_id="ghost")
        assert r.error is ErrorCode.UNKNOWN_MEMBER_ID and "'ghost'" in r.message
        assert h.coord.snapshot() == before

    @pytest.mark.parametrize("epoch", [-1, -2])
    def test_an_instance_another_member_holds_is_fenced_even_from_an_unknown_member_id(self, epoch: int
                                                                                       ) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        before = h.coord.snapshot()
        r = h.hb("nobody", epoch, instance_id="alpha")
        assert r.error is ErrorCode.FENCED_INSTANCE_ID and "'a1'" in r.message
        assert h.coord.snapshot() == before

    def test_an_instance_another_static_member_holds_is_fenced(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.join("b1", instance_id="beta"))
        assert h.hb("b1", -1, instance_id="alpha").error is ErrorCode.FENCED_INSTANCE_ID
        assert set(h.group().members) == {"a1", "b1"}

    def test_then_the_normal_path(self) -> None:
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        assert h.hb("zz", -1).error is ErrorCode.UNKNOWN_MEMBER_ID  # no instance id: by member id
        r = h.ok(h.hb("a1", -1, instance_id="alpha"))
        assert r.member_epoch == -1 and not h.group().members

    def test_regression_replaced_static_process_leaving_is_fenced_not_unknown(self) -> None:
        """A process that stepped out (-2) and was replaced under a new member id later sends its
        leave: it must learn that another process took its instance over (FENCED_INSTANCE_ID, stop),
        not that it is merely unknown (which invites a rejoin) — and the new holder is untouched."""
        h = Harness()
        h.ok(h.join("a1", instance_id="alpha"))
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        h.ok(h.join("a2", instance_id="alpha"))
        before = h.coord.snapshot()
        for epoch in (-2, -1):
            r = h.hb("a1", epoch, instance_id="alpha")
            assert r.error is ErrorCode.FENCED_INSTANCE_ID and "'a2'" in r.message
        assert h.coord.snapshot() == before and h.group().static_members == {"alpha": "a2"}

    def test_streams_groups_follow_the_same_order(self) -> None:
        d = Deployment()
        d.join("a1", "P1", instance_id="i1")
        d.join("b", "P2")
        def leave(member: str, epoch: int, instance: str) -> ErrorCode:
            req = StreamsHeartbeatRequest(GROUP, member, epoch, instance_id=instance)
            return d.sg.heartbeat(req, d.now).response.error
        assert leave("b", -1, "ghost") is ErrorCode.UNKNOWN_MEMBER_ID
        assert leave("nobody", -2, "i1") is ErrorCode.FENCED_INSTANCE_ID
        assert set(d.group().members) == {"a1", "b"}


# ------------------------------------------------------------------ 3. -2 frees what is being revoked
def static_member_revoking(h: Harness) -> tuple[frozenset[Shard], frozenset[Shard]]:
    """Static a1 owns all of t; b joins; a1 is told to revoke half and b waits UNRELEASED for it.
    Returns (what a1 keeps, what it is revoking)."""
    h.ok(h.join("a1", instance_id="alpha"))
    h.ok(h.join("b"))
    r = h.ok(h.hb("a1", 1, owned=shards("t", *range(6))))
    assert r.member_epoch == 1 and r.assignment is not None
    keep, revoking = r.assignment, h.group().current["a1"].pending_revocation
    assert len(keep) == 3 and len(revoking) == 3
    h.ok(h.hb("b", 2, owned=EMPTY))
    b = h.group().current["b"]  # everything b wants is a1's still: it waits
    assert b.status is MemberStatus.UNRELEASED and b.assigned == EMPTY
    return keep, revoking


class TestTemporaryLeaveReleasesRevocations:
    def test_regression_waiters_get_the_revoked_shards_at_once_not_after_the_session(self) -> None:
        """The incident: a static member stepped out in the middle of a revocation, and the member
        waiting for those shards waited for the static member's session timeout (45 s)."""
        h = Harness()
        keep, revoking = static_member_revoking(h)
        epoch, target = h.group().epoch, dict(h.group().target)
        out = h.keep(h.coord.heartbeat(HeartbeatRequest("g", "a1", -2, instance_id="alpha"), h.now))
        assert out.response.error is ErrorCode.NONE and out.response.member_epoch == -2
        assert ("g", "b") in out.wake  # nudged: what it waits for is free
        away = h.group().current["a1"]
        assert (away.epoch, away.previous_epoch) == (-2, 1)  # back at epoch 1, as before
        assert (away.assigned, away.pending_revocation) == (keep, EMPTY)
        assert away.status is MemberStatus.STABLE  # nothing left to revoke
        assert all(h.group().owners.get(s) is None for s in revoking)
        assert all(h.group().owners[s] == "a1" for s in keep)  # reserved for its return
        assert h.group().epoch == epoch and h.group().target == target  # no bump, no new target
        # b's next heartbeat, at once: it gets them.
        r = h.ok(h.hb("b", 2, owned=EMPTY))
        assert r.assignment == revoking and h.group().current["b"].status is MemberStatus.STABLE

    def test_the_static_member_comes_back_with_what_it_kept_at_the_target_epoch(self) -> None:
        h = Harness()
        keep, revoking = static_member_revoking(h)
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        h.ok(h.hb("b", 2, owned=EMPTY))
        epoch = h.group().epoch
        r = h.ok(h.join("a2", instance_id="alpha"))  # the restarted process, a new member id
        assert r.assignment == keep and r.member_epoch == 2 and h.group().epoch == epoch
        assert h.group().current["a2"].status is MemberStatus.STABLE
        h.ok(h.hb("b", 2, owned=revoking))
        assert h.group().state is GroupState.STABLE

    def test_the_same_member_id_comes_back_too(self) -> None:
        h = Harness()
        keep, _ = static_member_revoking(h)
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        r = h.ok(h.join("a1", instance_id="alpha"))
        assert r.assignment == keep and r.member_epoch == 2

    def test_no_revocation_timeout_and_an_empty_fence_after_the_session(self) -> None:
        h = Harness()
        keep, _ = static_member_revoking(h)
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        h.ok(h.hb("b", 2, owned=EMPTY))
        out = h.advance(44_999)  # the rebalance timeout (60 s) is disarmed, the session runs
        assert fenced(out) == []
        h.ok(h.hb("b", 2, owned=h.group().current["b"].assigned))
        out = h.advance(1)
        assert fenced(out) == [("g", "a1")] and out.fences[0].revoking == EMPTY
        assert all(h.group().owners.get(s) != "a1" for s in keep)

    def test_replay_rebuilds_the_released_state(self) -> None:
        h = Harness()
        static_member_revoking(h)
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        rebuilt = Coordinator.recover(h.log, h.now, topics=TopicMetadata(h.topics))
        assert rebuilt.groups == h.coord.groups

    def test_a_repeated_temporary_leave_changes_nothing(self) -> None:
        h = Harness()
        static_member_revoking(h)
        h.ok(h.hb("a1", -2, instance_id="alpha"))
        out = h.coord.heartbeat(HeartbeatRequest("g", "a1", -2, instance_id="alpha"), h.now)
        assert out.response.error is ErrorCode.NONE and out.records == () and not out.wake

    def test_a_full_leave_still_frees_everything_and_bumps(self) -> None:
        h = Harness()
        static_member_revoking(h)
        epoch = h.group().epoch
        h.ok(h.hb("a1", -1, instance_id="alpha"))
        assert h.group().epoch == epoch + 1 and set(h.group().owners.values()) <= {"b"}
