"""The invariant checker catches bad traces (and leaves good ones alone)."""

from __future__ import annotations

from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberStatus,
    OffsetRecord,
    TargetEpochRecord,
)
from regroup.protocol.shard import Shard
from regroup.protocol.state import Group
from regroup.sim.invariants import (
    ALL_INVARIANTS,
    AT_LEAST_ONCE,
    EPOCHS_MONOTONIC,
    EXACTLY_ONCE,
    OFFSETS_MONOTONIC,
    REPLAY,
    REVOKE_BEFORE_ASSIGN,
    SINGLE_OWNER,
    InvariantChecker,
    given_while_held,
    held_twice,
    holders_of,
    member_ahead_of_target,
    member_epoch,
    member_epoch_went_back,
    offset_went_back,
    process_epoch_went_back,
    rebuilt_differs,
    taken_while_held,
)

S0, S1 = Shard("t", 0), Shard("t", 1)


def kinds(c: InvariantChecker) -> set[str]:
    return {v.invariant for v in c.violations}


def cur(epoch: int, assigned: set[Shard], pending: set[Shard] | None = None,
        status: MemberStatus = MemberStatus.STABLE, previous: int = 0) -> CurrentAssignment:
    return CurrentAssignment(epoch, previous, status, frozenset(assigned), frozenset(pending or ()))


def test_a_clean_handoff_is_fine() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_activate(1, "a#1", S0, 0)
    c.on_processed(10, "a#1", S0, 0, 50)
    c.on_release(11, "a#1", S0, clean=True)
    c.on_acquire(12, "b#1", S0)
    c.on_activate(13, "b#1", S0, 50)
    c.on_processed(20, "b#1", S0, 50, 80)
    assert c.ok and c.duplicates == 0 and c.clean_handoffs == 1


def test_two_owners_at_once() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_acquire(5, "b#1", S0)
    assert SINGLE_OWNER in kinds(c)


def test_processing_without_owning() -> None:
    c = InvariantChecker()
    c.on_processed(5, "a#1", S0, 0, 10)
    assert SINGLE_OWNER in kinds(c)


def test_duplicates_after_a_clean_handoff_break_exactly_once() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_processed(10, "a#1", S0, 0, 50)
    c.on_release(11, "a#1", S0, clean=True)
    c.on_acquire(12, "b#1", S0)
    c.on_activate(12, "b#1", S0, 40)  # started behind what a processed: a's commit was stale
    c.on_processed(20, "b#1", S0, 40, 60)
    assert kinds(c) == {EXACTLY_ONCE}


def test_duplicates_after_an_unclean_handoff_are_allowed() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_processed(10, "a#1", S0, 0, 50)
    c.on_release(11, "a#1", S0, clean=False)  # crashed: its last commit was at 40
    c.on_acquire(12, "b#1", S0)
    c.on_activate(12, "b#1", S0, 40)
    c.on_processed(20, "b#1", S0, 40, 60)
    assert c.ok and c.duplicates == 10 and c.unclean_handoffs == 1


def test_a_gap_breaks_at_least_once() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_processed(10, "a#1", S0, 0, 50)
    c.on_release(11, "a#1", S0, clean=True)
    c.on_acquire(12, "b#1", S0)
    c.on_activate(12, "b#1", S0, 70)  # skips 50..69
    assert AT_LEAST_ONCE in kinds(c)


def test_unprocessed_records_at_the_end_break_at_least_once() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_processed(10, "a#1", S0, 0, 50)
    c.all_processed(100, {S0: 50})
    assert c.ok
    c.all_processed(100, {S0: 60, S1: 1})
    assert [v.shard for v in c.violations] == [S0, S1]


def test_a_zombie_may_overlap_after_being_fenced() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_processed(10, "a#1", S0, 0, 50)
    c.on_fenced(20, "a#1")  # revocation timeout: the coordinator gives S0 away
    c.on_acquire(21, "b#1", S0)
    c.on_activate(21, "b#1", S0, 40)
    c.on_processed(25, "a#1", S0, 50, 60)  # the zombie has not noticed yet
    c.on_release(26, "a#1", S0, clean=False)
    c.on_processed(30, "b#1", S0, 40, 70)
    assert c.ok and c.zombie_records == 10


def test_coordinator_state_with_two_holders() -> None:
    c = InvariantChecker()
    c.records(0, [GroupEpochRecord("g", 1), TargetEpochRecord("g", 1, "uniform"),
                  CurrentAssignmentRecord("g", "a", cur(1, {S0}))])
    c.records(1, [CurrentAssignmentRecord("g", "b", cur(1, {S0}))])
    assert kinds(c) == {SINGLE_OWNER, REVOKE_BEFORE_ASSIGN}


def test_assign_while_pending_revocation_elsewhere() -> None:
    c = InvariantChecker()
    c.records(0, [GroupEpochRecord("g", 2), TargetEpochRecord("g", 2, "uniform"),
                  CurrentAssignmentRecord("g", "a", cur(1, set(), {S0}, MemberStatus.UNREVOKED))])
    c.records(1, [CurrentAssignmentRecord("g", "b", cur(2, {S0}))])
    assert REVOKE_BEFORE_ASSIGN in kinds(c)


def test_a_revoke_then_assign_is_fine() -> None:
    c = InvariantChecker()
    c.records(0, [GroupEpochRecord("g", 2), TargetEpochRecord("g", 2, "uniform"),
                  CurrentAssignmentRecord("g", "a", cur(1, set(), {S0}, MemberStatus.UNREVOKED))])
    c.records(1, [CurrentAssignmentRecord("g", "a", cur(2, set(), previous=1))])
    c.records(2, [CurrentAssignmentRecord("g", "b", cur(2, {S0}))])
    assert c.ok


def test_epochs_going_back() -> None:
    c = InvariantChecker()
    c.records(0, [GroupEpochRecord("g", 5), TargetEpochRecord("g", 5, "uniform"),
                  CurrentAssignmentRecord("g", "a", cur(5, set()))])
    c.records(1, [GroupEpochRecord("g", 4)])
    c.records(2, [CurrentAssignmentRecord("g", "a", cur(3, set()))])
    c.records(3, [TargetEpochRecord("g", 3, "uniform")])
    c.records(4, [TargetEpochRecord("g", 9, "uniform")])  # ahead of the group epoch
    assert [v.invariant for v in c.violations] == [EPOCHS_MONOTONIC] * 4


def test_member_epoch_ahead_of_target() -> None:
    c = InvariantChecker()
    c.records(0, [GroupEpochRecord("g", 2), TargetEpochRecord("g", 1, "uniform"),
                  CurrentAssignmentRecord("g", "a", cur(2, set()))])
    assert kinds(c) == {EPOCHS_MONOTONIC}


def test_member_side_epoch_only_goes_back_to_zero() -> None:
    c = InvariantChecker()
    c.member_epoch(0, "a#1", 4, 0)  # rejoining
    assert c.ok
    c.member_epoch(1, "a#1", 4, 3)
    assert kinds(c) == {EPOCHS_MONOTONIC}


def test_committed_offsets_never_regress_nor_run_ahead() -> None:
    c = InvariantChecker()
    c.on_acquire(0, "a#1", S0)
    c.on_processed(1, "a#1", S0, 0, 100)
    c.records(2, [OffsetRecord("g", S0, 80)])
    c.records(3, [OffsetRecord("g", S0, 70)])
    c.records(4, [OffsetRecord("g", S0, 120)])
    assert [v.invariant for v in c.violations] == [OFFSETS_MONOTONIC] * 2


def test_a_rebuilt_coordinator_must_equal_the_old_one() -> None:
    c = InvariantChecker()
    same = {"g": Group("g", epoch=3)}
    c.recovered(0, same, {"g": Group("g", epoch=3)}, "from its records")
    assert c.ok
    c.recovered(0, same, {"g": Group("g", epoch=2)}, "from its records")
    assert kinds(c) == {REPLAY} and "epoch differs" in c.violations[0].message


def test_the_rules_are_pure_and_answer_in_words() -> None:
    away = cur(-2, {S0}, previous=4)
    assert member_epoch(away) == 4 and member_epoch(cur(3, set())) == 3
    assert holders_of({"a": cur(1, {S0}), "b": cur(1, set(), {S0})}) == {S0: {"a", "b"}}
    assert held_twice("g", {S0: {"a", "b"}, S1: {"a"}}, [S0, S1]) == [
        (S0, "group g: t:0 is held by ['a', 'b'] in the coordinator's state")]
    assert taken_while_held("a", S0, {"a"}) is None
    assert given_while_held("g", "b", {S0, S1}, {S0: {"a"}}) == [
        (S0, "group g: b is given t:0 while ['a'] still hold it")]
    assert member_epoch_went_back("g", "a", 4, away) is None  # stepping out is not going back
    assert member_ahead_of_target("g", "a", away, 1) is None
    assert process_epoch_went_back("a#1", 4, 0) is None and process_epoch_went_back("a#1", 4, 3)
    assert offset_went_back("g", S0, None, 0) is None and offset_went_back("g", S0, 5, 4)
    same = {"g": Group("g", epoch=3)}
    assert rebuilt_differs(same, {"g": Group("g", epoch=3)}, "from its records") is None


def test_every_invariant_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "simulation.md").read_text()
    assert all(f"`{name}`" in doc for name in ALL_INVARIANTS)
