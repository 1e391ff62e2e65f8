"""The highly-available task assignor, rule by rule (rules at the top of its module)."""

from __future__ import annotations

import pytest

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.streams.assignment import AssignmentConfig, MemberTasks, TaskAssignor
from regroup.protocol.streams.assignor import HighlyAvailableAssignor
from regroup.protocol.streams.topology import TaskId
from tests.protocol.streams.builders import (
    active_counts,
    active_owner,
    again,
    balanced,
    roles,
    run,
    spec,
    standbys,
    t,
    tasks,
    ts,
    warmups,
)

CAUGHT_UP = 0
COLD = 1_000_000  # far beyond the default acceptable recovery lag of 10,000


def test_the_assignor_is_a_named_task_assignor_plugin() -> None:
    assert HighlyAvailableAssignor.name == "highly-available"
    assert isinstance(HighlyAvailableAssignor(), TaskAssignor)


# -- rules 1, 2: every task active once, balanced across members ---------------------------------


def test_a_fresh_group_is_balanced_without_warmups() -> None:
    s = spec(tasks(7), {"A": {"a": roles()}, "B": {"b": roles()}, "C": {"c": roles()}})
    out = run(s)
    assert sorted(active_counts(out).values()) == [2, 2, 3]
    assert active_counts(out)["a"] == 3  # the extra slot goes by member id
    assert not warmups(out)
    assert all(not r.standby for r in out.values())


def test_members_of_one_process_share_its_tasks_evenly() -> None:
    s = spec(tasks(6), {"P": {"p1": roles(), "p2": roles()}, "Q": {"q": roles()}})
    out = run(s)
    assert active_counts(out) == {"p1": 2, "p2": 2, "q": 2}


def test_no_members_no_assignment_and_no_tasks_empty_roles() -> None:
    assert run(spec(tasks(3), {})) == {}
    out = run(spec((), {"A": {"a": roles()}}))
    assert out == {"a": MemberTasks()}


# -- rule 3: sticky -------------------------------------------------------------------------------


def test_a_balanced_caught_up_group_keeps_everything_where_it_is() -> None:
    current = {"A": {"a": roles(ts(0, 3))}, "B": {"b": roles(ts(1, 4))}, "C": {"c": roles(ts(2))}}
    lags = {"A": {t(0): 0, t(3): 0}, "B": {t(1): 0, t(4): 0}, "C": {t(2): 0}}
    out = run(spec(tasks(5), current, lags))
    assert {m: r.active for m, r in out.items()} == {"a": ts(0, 3), "b": ts(1, 4), "c": ts(2)}


def test_a_static_member_back_under_a_member_id_that_sorts_last_keeps_its_tasks() -> None:
    """Rule 2's capacity order is by process id first: the demo's static roll, in small. Before,
    "a1" on P1 had the extra quota; back as "z2" on P1 it would have lost it to "m" (P2), and with
    every copy caught up one of its tasks would have moved to P2."""
    lags = {"P1": dict.fromkeys(tasks(3), 0), "P2": dict.fromkeys(tasks(3), 0)}
    before = run(spec(tasks(3), {"P1": {"a1": roles(ts(0, 1), ts(2))}, "P2": {"m": roles(ts(2), ts(0, 1))}},
                      lags, standby_replicas=1))
    assert before["a1"].active == ts(0, 1)
    after = run(spec(tasks(3), {"P1": {"z2": before["a1"]}, "P2": {"m": before["m"]}}, lags,
                     standby_replicas=1))
    assert after["z2"] == before["a1"] and after["m"] == before["m"]


def test_when_a_member_leaves_only_its_tasks_move() -> None:
    current = {"A": {"a": roles(ts(0, 1))}, "B": {"b": roles(ts(2, 3))}, "C": {"c": roles(ts(4, 5))}}
    lags = {p: {task: 0 for task in r[m].active} for p, r in current.items() for m in r}
    del current["C"]
    out = run(spec(tasks(6), current, lags))
    owner = active_owner(out)
    assert {owner[t(0)], owner[t(1)]} == {"a"} and {owner[t(2)], owner[t(3)]} == {"b"}
    assert balanced(out)


# -- rule 5: an active moves only to a caught-up copy; rule 6: warm-ups ---------------------------


def scale_out() -> tuple[dict[str, dict[str, MemberTasks]], dict[str, dict[TaskId, int | None]]]:
    """A and B run three tasks each, caught up; C has just joined with nothing."""
    current = {"A": {"a": roles(ts(0, 1, 2))}, "B": {"b": roles(ts(3, 4, 5))}, "C": {"c": roles()}}
    lags: dict[str, dict[TaskId, int | None]] = {
        "A": dict.fromkeys(ts(0, 1, 2), 0), "B": dict.fromkeys(ts(3, 4, 5), 0)}
    return current, lags


def test_scale_out_keeps_actives_on_caught_up_owners_and_warms_up_the_newcomer() -> None:
    current, lags = scale_out()
    s = spec(tasks(6), current, lags)
    out = run(s)
    assert active_owner(out) == active_owner({m: r for p in current.values() for m, r in p.items()})
    assert set(warmups(out).values()) == {"c"} and len(warmups(out)) == 2


def test_a_caught_up_warmup_is_promoted_on_the_next_run() -> None:
    current, lags = scale_out()
    s = spec(tasks(6), current, lags)
    first = run(s)
    warm = warmups(first)
    lags["C"] = dict.fromkeys(warm, CAUGHT_UP)
    second = run(again(s, first, lags))
    owner = active_owner(second)
    assert all(owner[task] == "c" for task in warm)
    assert active_counts(second) == {"a": 2, "b": 2, "c": 2}
    assert not warmups(second)
    # Only the warmed-up tasks moved.
    before = active_owner(first)
    assert {task for task in owner if owner[task] != before[task]} == set(warm)


def test_a_warmup_still_behind_does_not_move_the_active() -> None:
    current, lags = scale_out()
    s = spec(tasks(6), current, lags)
    first = run(s)
    lags["C"] = dict.fromkeys(warmups(first), 10_001)
    second = run(again(s, first, lags))
    assert active_owner(second) == active_owner(first)
    assert warmups(second) == warmups(first)


def test_a_copy_within_the_acceptable_lag_takes_over_at_once() -> None:
    current, lags = scale_out()
    lags["C"] = {t(2): 10_000, t(5): 3}
    out = run(spec(tasks(6), current, lags))
    owner = active_owner(out)
    assert owner[t(2)] == "c" and owner[t(5)] == "c"
    assert not warmups(out) and balanced(out)


def test_a_copy_beyond_the_acceptable_lag_gets_a_warmup_instead() -> None:
    current, lags = scale_out()
    lags["C"] = {t(2): 101}
    out = run(spec(tasks(6), current, lags, acceptable_recovery_lag=100))
    assert active_owner(out)[t(2)] == "a"
    assert warmups(out)[t(2)] == "c"


def test_warmups_are_limited_group_wide() -> None:
    current = {"A": {"a": roles(tasks(12))}, "B": {"b": roles()}, "C": {"c": roles()},
               "D": {"d": roles()}}
    lags: dict[str, dict[TaskId, int | None]] = {"A": dict.fromkeys(tasks(12), 0)}
    for budget in (0, 1, 2, 5):
        out = run(spec(tasks(12), current, lags, max_warmups=budget))
        assert len(warmups(out)) == budget
        assert active_counts(out)["a"] == 12  # nobody else is caught up


def test_moving_between_members_of_one_process_needs_no_warmup() -> None:
    current = {"P": {"p1": roles(tasks(4)), "p2": roles()}}
    out = run(spec(tasks(4), current, {"P": dict.fromkeys(tasks(4), COLD)}))
    assert active_counts(out) == {"p1": 2, "p2": 2}
    assert not warmups(out)


def test_a_current_owner_that_is_behind_keeps_its_task_when_nobody_is_caught_up() -> None:
    current = {"A": {"a": roles(ts(0, 1))}, "B": {"b": roles()}}
    lags: dict[str, dict[TaskId, int | None]] = {"A": {t(0): COLD, t(1): COLD}, "B": {t(1): COLD // 2}}
    out = run(spec(tasks(2), current, lags))
    assert active_owner(out) == {t(0): "a", t(1): "a"}
    assert len(warmups(out)) == 1 and set(warmups(out).values()) == {"b"}


def test_continuing_warmups_keep_the_budget() -> None:
    # c is half-way through warming up t4 and t5; t0 also wants to move to d, but must wait.
    current = {"A": {"a": roles(ts(0, 1, 2, 3, 4, 5))}, "C": {"c": roles(warmup=ts(4, 5))},
               "D": {"d": roles()}}
    lags = {"A": dict.fromkeys(tasks(6), 0), "C": {t(4): 40_000, t(5): 40_000}}
    out = run(spec(tasks(6), current, lags))
    assert warmups(out) == {t(4): "c", t(5): "c"}
    assert active_counts(out)["a"] == 6


def test_scale_out_from_two_to_three_settles_after_two_rounds_of_warmups() -> None:
    current = {"A": {"a": roles(tasks(6))}, "B": {"b": roles(tasks(12) - tasks(6))},
               "C": {"c": roles()}}
    lags: dict[str, dict[TaskId, int | None]] = {
        "A": dict.fromkeys(tasks(6), 0), "B": dict.fromkeys(tasks(12) - tasks(6), 0), "C": {}}
    s = spec(tasks(12), current, lags)
    out = run(s)
    first = active_owner(out)
    history = []
    while warmups(out):
        history.append(sorted(warmups(out)))
        lags["C"].update(dict.fromkeys(warmups(out), 0))
        s = again(s, out, lags)
        out = run(s)
    assert len(history) == 2 and all(len(w) == 2 for w in history)
    assert active_counts(out) == {"a": 4, "b": 4, "c": 4}
    moved = {task for task, m in active_owner(out).items() if first[task] != m}
    assert moved == {task for w in history for task in w}  # only the warmed-up tasks moved


# -- rule 5: a task whose owner is gone ---------------------------------------------------------


def test_a_dead_members_task_goes_to_its_caught_up_standby() -> None:
    # a (dead) ran t0; b kept a standby of it; c has an old copy from long ago.
    current = {"B": {"b": roles(ts(1), standby=ts(0))}, "C": {"c": roles(ts(2))}}
    lags = {"B": {t(0): 20, t(1): 0}, "C": {t(0): 50_000, t(2): 0}}
    out = run(spec(tasks(3), current, lags, standby_replicas=1))
    assert active_owner(out)[t(0)] == "b"
    assert not warmups(out)


def test_a_dead_members_task_goes_to_a_caught_up_standby_balance_permitting() -> None:
    # Both standbys are caught up, so either can take t0 over at once: balance decides (b holds
    # the extra slot), as KIP-441 treats every caught-up copy alike.
    current = {"B": {"b": roles(ts(1), standby=ts(0))}, "C": {"c": roles(ts(2), standby=ts(0))},
               "D": {"d": roles(ts(3))}}
    lags = {"B": {t(0): 900, t(1): 0}, "C": {t(0): 30, t(2): 0}, "D": {t(3): 0}}
    out = run(spec(tasks(4), current, lags, standby_replicas=2))
    assert active_owner(out)[t(0)] == "b"
    assert not warmups(out)


def test_a_dead_members_task_goes_to_the_freshest_standby_when_balance_wants_it_elsewhere() -> None:
    # The extra slot is a's, which holds no copy: t0 runs on the freshest standby (c) while a
    # warms it up, rather than restoring from scratch on a.
    current = {"A": {"a": roles(ts(3))}, "B": {"b": roles(ts(1), standby=ts(0))},
               "C": {"c": roles(ts(2), standby=ts(0))}}
    lags = {"A": {t(3): 0}, "B": {t(0): 900, t(1): 0}, "C": {t(0): 30, t(2): 0}}
    out = run(spec(tasks(4), current, lags, standby_replicas=2))
    assert active_owner(out)[t(0)] == "c"
    assert warmups(out) == {t(0): "a"}


def test_a_dead_members_task_goes_to_the_freshest_copy_when_none_is_caught_up() -> None:
    current = {"B": {"b": roles(ts(1), standby=ts(0))}, "C": {"c": roles(ts(2))},
               "D": {"d": roles()}}
    lags = {"B": {t(0): 50_000, t(1): 0}, "C": {t(0): 20_000, t(2): 0}}
    out = run(spec(tasks(3), current, lags, standby_replicas=1))
    assert active_owner(out)[t(0)] == "c"


def test_a_task_nobody_has_a_copy_of_goes_to_the_least_loaded_member() -> None:
    current = {"B": {"b": roles(ts(1, 2))}, "C": {"c": roles()}}
    out = run(spec(tasks(3), current, {"B": {t(1): 0, t(2): 0}}))
    assert active_owner(out)[t(0)] == "c"
    assert not warmups(out)


def test_an_orphan_never_displaces_a_current_owner() -> None:
    # Found by hypothesis: P0 holds a caught-up copy of everything; its member already runs s_2.
    # The orphans s_0 and s_1 must not push s_2 off m00: one of them goes to m01 instead.
    current = {"P0": {"m00": roles(ts(2))}, "P1": {"m01": roles()}}
    lags = {"P0": dict.fromkeys(tasks(3), 0), "P1": dict.fromkeys(tasks(3), 0)}
    out = run(spec(tasks(3), current, lags))
    assert t(2) in out["m00"].active
    assert balanced(out) and not warmups(out)


def test_an_orphan_with_a_caught_up_copy_on_a_full_member_still_goes_there() -> None:
    # Only B can run t0 without restoring it, so B runs both tasks for now, although balance
    # wants one of them on C; C warms that one up.
    current = {"B": {"b": roles(ts(1))}, "C": {"c": roles()}}
    lags = {"B": {t(0): 0, t(1): 0}}
    out = run(spec(tasks(2), current, lags))
    assert active_owner(out) == {t(0): "b", t(1): "b"}
    assert list(warmups(out).values()) == ["c"]


# -- rule 7: standbys ---------------------------------------------------------------------------


def test_standbys_sit_on_other_processes_and_shrink_when_processes_run_out() -> None:
    s = spec(tasks(4), {"A": {"a": roles()}, "B": {"b": roles()}, "C": {"c": roles()}},
             standby_replicas=2)
    out = run(s)
    process = {"a": "A", "b": "B", "c": "C"}
    owner = active_owner(out)
    for task, ms in standbys(out).items():
        assert len(ms) == 2 and process[owner[task]] not in {process[m] for m in ms}
    one = run(spec(tasks(2), {"A": {"a1": roles(), "a2": roles()}}, standby_replicas=1))
    assert not standbys(one)  # a single process cannot hold a standby of its own tasks


def test_a_standby_prefers_a_caught_up_copy_and_then_stays_put() -> None:
    current = {"A": {"a": roles(ts(0))}, "B": {"b": roles()}, "C": {"c": roles()}}
    lags = {"A": {t(0): 0}, "C": {t(0): 7}}
    s = spec(ts(0), current, lags, standby_replicas=1)
    out = run(s)
    assert standbys(out) == {t(0): {"c"}}
    # Even when another process becomes fresher, the standby does not move.
    lags2 = {"A": {t(0): 0}, "B": {t(0): 0}, "C": {t(0): 9_000}}
    assert standbys(run(again(s, out, lags2))) == {t(0): {"c"}}


def test_a_standby_on_the_intended_process_serves_as_its_warmup() -> None:
    current = {"A": {"a": roles(ts(0, 1))}, "B": {"b": roles(standby=ts(1))}}
    lags = {"A": {t(0): 0, t(1): 0}, "B": {t(1): COLD}}
    out = run(spec(tasks(2), current, lags, standby_replicas=1))
    assert active_owner(out) == {t(0): "a", t(1): "a"}  # b is not caught up yet
    assert standbys(out).get(t(1)) == {"b"}  # still restoring there, as a standby
    assert not warmups(out)  # so no warm-up budget is spent on it


# -- rule 8: inconsistent input ------------------------------------------------------------------


def test_inconsistent_current_roles_are_cleaned_not_trusted() -> None:
    current = {
        "A": {"a": roles(ts(0, 1) | {TaskId("gone", 0)}, warmup=ts(0))},  # warm-up on its own active
        "B": {"b": roles(ts(1), warmup=ts(2, 3, 4))},  # t1 active twice; three warm-ups
    }
    out = run(spec(tasks(5), current, {"A": {t(0): 0, t(1): 0}}, max_warmups=2))
    assert active_owner(out)[t(1)] == "a"  # the smaller member id keeps a contested task
    assert len(warmups(out)) <= 2


# -- rule 9: deterministic and stable ------------------------------------------------------------


def test_same_input_same_output_and_stable_on_its_own_output() -> None:
    current, lags = scale_out()
    s = spec(tasks(6), current, lags, standby_replicas=1)
    out = run(s)
    assert run(s) == out
    assert run(again(s, out)) == out


# -- configuration and spec validation ---------------------------------------------------------


@pytest.mark.parametrize("field", ["standby_replicas", "acceptable_recovery_lag", "max_warmups"])
def test_negative_settings_are_invalid_requests(field: str) -> None:
    with pytest.raises(ProtocolError, match=field) as err:
        AssignmentConfig(**{field: -1})
    assert err.value.code is ErrorCode.INVALID_REQUEST


def test_a_member_in_two_processes_is_an_invalid_request() -> None:
    with pytest.raises(ProtocolError, match="member 'm' belongs to both process 'A' and 'B'"):
        spec(tasks(1), {"A": {"m": roles()}, "B": {"m": roles()}})


def test_a_negative_lag_is_an_invalid_request() -> None:
    with pytest.raises(ProtocolError, match="process 'A' reports lag -1 for task s_0"):
        spec(tasks(1), {"A": {"a": roles()}}, {"A": {t(0): -1}})


def test_an_orphan_tied_between_fresh_copies_goes_to_its_anchor_so_the_next_run_agrees() -> None:
    # Found by the stability property: y_3 is as fresh on P0 as on P2, where its anchor m04 is.
    # Picking P0 by process id overloaded m00, and the next run then moved y_0 off m00.
    def x(i: int) -> TaskId:
        return TaskId("x", i)

    def y(i: int) -> TaskId:
        return TaskId("y", i)

    s = spec([x(i) for i in range(5)] + [y(i) for i in range(7)],
             {"P0": {"m00": roles(), "m01": roles(active=[x(0), x(1), x(2)])},
              "P1": {"m02": roles(), "m03": roles()}, "P2": {"m04": roles()}},
             {"P0": {x(3): 0, y(0): 1, y(2): 0, y(3): 0}, "P1": {y(0): 1},
              "P2": {y(3): 0, y(4): 0, y(6): 0}},
             max_warmups=0)
    out = run(s)
    assert active_owner(out)[y(3)] == "m04"
    assert run(again(s, out)) == out


def test_an_orphan_goes_to_a_caught_up_copy_where_it_pushes_no_kept_task_out_of_its_quota() -> None:
    # Found by the stability property (max_warmups=0): x4 is caught up on P0 (lag 0) and P1 (lag 1)
    # and its intended owner m02 holds no copy. On m00, already at its quota of 3 with tasks its
    # process holds no copy of, x4 would outrank x6 on the next run, which would move x6 to P2.
    # On m01 (at its quota of 2 with x1 and x5, caught up only there) x4 ranks last: it stays.
    def x(i: int) -> TaskId:
        return TaskId("x", i)

    s = spec([x(i) for i in range(7)],
             {"P0": {"m00": roles(active=[x(0), x(2), x(6)])}, "P1": {"m01": roles()},
              "P2": {"m02": roles()}},
             {"P0": {x(4): 0}, "P1": {x(1): 0, x(4): 1, x(5): 0}, "P2": {x(6): 0}},
             max_warmups=0)
    out = run(s)
    owner = active_owner(out)
    assert owner[x(4)] == "m01"
    assert {owner[x(i)] for i in (0, 2, 6)} == {"m00"}
    assert active_counts(out)["m00"] == 3
    assert run(again(s, out)) == out
