"""Properties of the highly-available task assignor over arbitrary groups, targets and lags."""

from __future__ import annotations

from math import ceil

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from regroup.protocol.streams.assignment import (
    NO_TASKS,
    AssignmentConfig,
    MemberTasks,
    ProcessSpec,
    TaskAssignment,
    TaskAssignmentSpec,
)
from regroup.protocol.streams.topology import TaskId
from tests.protocol.streams.builders import active_owner, again, balanced, run, warmups

PROPS = settings(max_examples=300, deadline=None)

LIMIT = 10_000
LAGS = st.one_of(st.none(), st.sampled_from([0, 1, LIMIT - 1, LIMIT, LIMIT + 1, 10 * LIMIT]),
                 st.integers(0, 3 * LIMIT))


@st.composite
def groups(draw: st.DrawFn, *, min_warmups: int = 0, max_tasks: int = 14) -> TaskAssignmentSpec:
    """Any group: 1-4 processes of 1-3 members, arbitrary (even inconsistent) current roles, lags."""
    subs = draw(st.lists(st.sampled_from("xyz"), min_size=1, max_size=2, unique=True))
    all_tasks = sorted(TaskId(s, p) for s in subs
                       for p in range(draw(st.integers(0, max_tasks // len(subs)))))
    # Roles may name tasks that no longer exist.
    known = [*all_tasks, TaskId("gone", 0)]
    some = st.sets(st.sampled_from(known), max_size=4) if known else st.just(set())
    n_procs = draw(st.integers(1, 4))
    processes = {}
    member_no = 0
    for i in range(n_procs):
        pid = f"P{i}"
        members = {}
        for _ in range(draw(st.integers(1, 3))):
            members[f"m{member_no:02d}"] = MemberTasks(
                frozenset(draw(some)), frozenset(draw(some)), frozenset(draw(some)))
            member_no += 1
        lags = {t: draw(LAGS) for t in all_tasks if draw(st.booleans())}
        processes[pid] = ProcessSpec(pid, members, lags)
    config = AssignmentConfig(
        standby_replicas=draw(st.integers(0, 2)),
        acceptable_recovery_lag=LIMIT,
        max_warmups=draw(st.integers(min_warmups, 3)),
    )
    return TaskAssignmentSpec(frozenset(all_tasks), processes, config)


def current_owner(spec: TaskAssignmentSpec) -> dict[TaskId, str]:
    """Each task's current owner as the assignor reads it (the smallest member id wins a tie)."""
    owner: dict[TaskId, str] = {}
    for pid in spec.processes:
        for mid, r in spec.processes[pid].members.items():
            for task in r.active & spec.tasks:
                if task not in owner or mid < owner[task]:
                    owner[task] = mid
    return owner


def caught_up(spec: TaskAssignmentSpec, pid: str, task: TaskId) -> bool:
    lag = spec.processes[pid].lags.get(task)
    return lag is not None and lag <= spec.config.acceptable_recovery_lag


def after_reports(spec: TaskAssignmentSpec, out: TaskAssignment) -> dict[str, dict[TaskId, int | None]]:
    """The lags once every copy the assignment placed has restored: those copies report 0."""
    process_of = spec.process_of()
    lags = {pid: dict(p.lags) for pid, p in spec.processes.items()}
    for mid, r in out.items():
        for task in r.active | r.standby | r.warmup:
            lags[process_of[mid]][task] = 0
    return lags


@PROPS
@given(groups())
def test_every_task_is_active_once_and_roles_never_share_a_process(spec: TaskAssignmentSpec) -> None:
    out = run(spec)  # run() checks the invariants with validate_task_assignment
    assert set(out) == set(spec.process_of())
    assert set(active_owner(out)) == spec.tasks
    assert len(warmups(out)) <= spec.config.max_warmups


@PROPS
@given(groups())
def test_an_active_never_moves_to_a_copy_that_is_not_caught_up(spec: TaskAssignmentSpec) -> None:
    out = run(spec)
    process_of = spec.process_of()
    before = current_owner(spec)
    for task, mid in active_owner(out).items():
        old = before.get(task)
        if old is not None and process_of[old] != process_of[mid]:
            assert caught_up(spec, process_of[mid], task), (task, old, mid)


@PROPS
@given(groups())
def test_a_task_whose_owner_is_gone_goes_to_a_caught_up_copy_when_there_is_one(
        spec: TaskAssignmentSpec) -> None:
    out = run(spec)
    process_of = spec.process_of()
    before = current_owner(spec)
    for task, mid in active_owner(out).items():
        if task not in before and any(caught_up(spec, p, task) for p in spec.processes):
            assert caught_up(spec, process_of[mid], task), (task, mid)


@PROPS
@given(groups())
def test_the_same_input_gives_the_same_output(spec: TaskAssignmentSpec) -> None:
    assert run(spec) == run(spec)


@PROPS
@given(groups())
def test_assigning_again_on_the_output_with_the_same_lags_changes_nothing(
        spec: TaskAssignmentSpec) -> None:
    out = run(spec)
    assert run(again(spec, out)) == out


def test_found_a_warm_up_kept_once_then_dropped() -> None:
    """Rule 9's counterexample found by Hypothesis (2026-11-25): the orphan x1 was placed on m03,
    the member warming up x0, as if m03 held nothing; on the next run x1 (caught up) outranked the
    warm-up for m03's one slot and the move of x0 was dropped. Orphans now count warm-ups."""
    def x(p: int) -> TaskId:
        return TaskId("x", p)
    spec = TaskAssignmentSpec(frozenset(x(i) for i in range(6)), {
        "P0": ProcessSpec("P0", {"m00": NO_TASKS, "m01": MemberTasks(active=frozenset({x(0)}))}, {}),
        "P1": ProcessSpec("P1", {"m02": NO_TASKS}, {x(1): 1, x(4): 0}),
        "P2": ProcessSpec("P2", {"m03": MemberTasks(warmup=frozenset({x(0)}))}, {x(1): 0}),
    }, AssignmentConfig(0, LIMIT, 1))
    out = run(spec)
    assert run(again(spec, out)) == out


@PROPS
@given(groups())
def test_when_every_process_is_caught_up_on_every_task_the_actives_are_balanced(
        spec: TaskAssignmentSpec) -> None:
    everywhere = {pid: dict.fromkeys(spec.tasks, 0) for pid in spec.processes}
    spec = again(spec, {m: r for p in spec.processes.values() for m, r in p.members.items()},
                 everywhere)
    out = run(spec)
    assert balanced(out)
    assert not warmups(out)
    # Sticky: a task whose owner is within its member's share stays (tested in detail elsewhere);
    # here, at least, nothing moves on a second run.
    assert run(again(spec, out)) == out


@PROPS
@given(groups())
def test_when_every_process_is_caught_up_only_what_balance_forces_moves(
        spec: TaskAssignmentSpec) -> None:
    # Warm-ups are over once every copy is caught up; an unfinished one may claim a slot (rule 3).
    everywhere = {pid: dict.fromkeys(spec.tasks, 0) for pid in spec.processes}
    spec = again(spec, {m: MemberTasks(active=r.active, standby=r.standby)
                        for p in spec.processes.values() for m, r in p.members.items()},
                 everywhere)
    out = run(spec)
    process_of = spec.process_of()
    members = sorted(process_of, key=lambda m: (process_of[m], m))  # rule 2's capacity order
    q, extra = divmod(len(spec.tasks), len(members))
    share = {m: q + (i < extra) for i, m in enumerate(members)}  # rule 2's quotas
    owned: dict[str, set[TaskId]] = {m: set() for m in members}
    for task, m in current_owner(spec).items():
        owned[m].add(task)
    for m in members:
        lost = len(owned[m] - out[m].active)
        assert lost <= max(0, len(owned[m]) - share[m]), (m, sorted(owned[m]), out[m])


def renamed(spec: TaskAssignmentSpec, old: str, new: str) -> TaskAssignmentSpec:
    """``spec`` with member ``old`` called ``new``: same process, same roles."""
    return TaskAssignmentSpec(spec.tasks, {
        pid: ProcessSpec(pid, {(new if m == old else m): r for m, r in p.members.items()}, p.lags)
        for pid, p in spec.processes.items()}, spec.config)


def actives_by_process(spec: TaskAssignmentSpec, out: TaskAssignment) -> dict[TaskId, str]:
    process_of = spec.process_of()
    return {task: process_of[m] for m, r in out.items() for task in r.active}


def over_full_processes(spec: TaskAssignmentSpec, out: TaskAssignment) -> set[str]:
    """Processes holding more actives than their quota (rule 2: ``q, extra = divmod(tasks,
    members)``, the first ``extra`` members by process id, then member id, may hold ``q + 1``)."""
    process_of = spec.process_of()
    order = sorted(process_of, key=lambda m: (process_of[m], m))
    q, extra = divmod(len(spec.tasks), len(order)) if order else (0, 0)
    quota = {pid: 0 for pid in spec.processes}
    for i, m in enumerate(order):
        quota[process_of[m]] += q + (i < extra)
    held = {pid: 0 for pid in spec.processes}
    for m, r in out.items():
        held[process_of[m]] += len(r.active)
    return {pid for pid in spec.processes if held[pid] > quota[pid]}


def settle(spec: TaskAssignmentSpec) -> tuple[TaskAssignmentSpec, TaskAssignment]:
    """``spec`` after a few runs in which every placed copy restored, with its last target."""
    out = run(spec)
    for _ in range(6):  # let the copies restore and the warm-ups finish
        spec = again(spec, out, after_reports(spec, out))
        out = run(spec)
    return again(spec, out), out


@PROPS
@given(groups(), st.sampled_from(["a", "m00x", "m99", "zz"]), st.data())
def test_a_static_member_back_with_a_new_member_id_moves_no_task_to_another_process(
        spec: TaskAssignmentSpec, new_id: str, data: st.DataObject) -> None:
    """A static member restarted in place keeps its process id but gets a new member id. On a
    settled group that must change nothing but names: were the quotas ordered by member id, the
    restarted member's could swap with another's, and the next computation would move a task away
    from its local state (found by the stateful demo's static roll, 2026-11-25)."""
    settled, out = settle(spec)
    assume(run(settled) == out)
    # A process settled over its quota (its members' quotas add up to less than it holds: its extra
    # task can move nowhere at once) is rule 3's known gap: which task it gives up may follow the
    # member ids (the strict xfail below). The property is checked everywhere else.
    assume(not over_full_processes(settled, out))
    members = sorted(settled.process_of())
    assume(members and new_id not in members)
    old_id = data.draw(st.sampled_from(members))
    back = renamed(settled, old_id, new_id)
    assert actives_by_process(back, run(back)) == actives_by_process(settled, out)


def test_found_a_restarted_member_whose_new_id_makes_its_process_give_up_another_task() -> None:
    """The rename property's counterexample found by Hypothesis (2026-11-26), an input the
    coordinator can produce (one owner per task). It settled with P0 over its quota of 5 by one
    (max_warmups=0: x5 waits for a copy on P1 that never comes): m00 [x2 x3 x4] within its quota
    of 3, m01 [x0 x1 x5] over its quota of 2. Renamed m99, m00 came after m01 in the capacity
    order, the quotas of P0's two members changed places, and m99 gave up x2 — which P1 holds
    caught up, so x2 moved to P1. A process now keeps its quota as a whole (rule 3): it gives up
    the task another process can take over at once whichever of its members holds the extra quota."""
    def x(p: int) -> TaskId:
        return TaskId("x", p)
    start = TaskAssignmentSpec(frozenset(x(i) for i in range(7)), {
        "P0": ProcessSpec("P0", {"m00": MemberTasks(active=frozenset({x(2)})),
                                 "m01": MemberTasks(active=frozenset({x(0), x(1), x(5)}))}, {}),
        "P1": ProcessSpec("P1", {"m02": NO_TASKS}, {x(2): 0}),
    }, AssignmentConfig(0, LIMIT, 0))
    settled, out = settle(start)
    assert run(settled) == out
    back = renamed(settled, "m00", "m99")
    assert actives_by_process(back, run(back)) == actives_by_process(settled, out)
    # The state the old rule settled in, given as such: its rename must move nothing either.
    old = TaskAssignmentSpec(start.tasks, {
        "P0": ProcessSpec("P0", {"m00": MemberTasks(active=frozenset({x(2), x(3), x(4)})),
                                 "m01": MemberTasks(active=frozenset({x(0), x(1), x(5)}))},
                          dict.fromkeys([x(i) for i in range(6)], 0)),
        "P1": ProcessSpec("P1", {"m02": MemberTasks(active=frozenset({x(6)}))}, {x(2): 0, x(6): 0}),
    }, start.config)
    back = renamed(old, "m00", "m99")
    assert actives_by_process(back, run(back)) == actives_by_process(old, run(old))


@pytest.mark.xfail(strict=True, reason=(
    "known gap of rule 3 (2026-11-26): between tasks the lags tie, an over-full process gives up "
    "the one outside its member's own quota, and the quotas within a process follow member ids. "
    "Ranking first the tasks no process with room could take over fixed this example but broke "
    "rule 9 (room changes as tasks move: Hypothesis, idempotence property, seeds 1 and 2)"))
def test_an_over_full_process_gives_up_what_another_has_room_for_whatever_the_names() -> None:
    """The same mechanism where the lags alone tie, built by hand (2026-11-26). P0 (quota 3)
    settles holding x1-x4 with max_warmups=0; x3 and x4 are caught up there and elsewhere, x3 on
    P1 (which has room), x4 on P2 (full). Told apart by whose member's own quota they fall in, P0
    gives up x4 (it can move nowhere at once) while a holds P0's extra quota, and x3 (P1 takes it
    over at once) once a, restarted as zz, no longer does."""
    def x(p: int) -> TaskId:
        return TaskId("x", p)

    def actives(*ps: int) -> MemberTasks:
        return MemberTasks(active=frozenset(x(p) for p in ps))
    start = TaskAssignmentSpec(frozenset(x(i) for i in range(1, 6)), {
        "P0": ProcessSpec("P0", {"a": actives(1, 3), "b": actives(2, 4)},
                          dict.fromkeys([x(1), x(2), x(3), x(4)], 0)),
        "P1": ProcessSpec("P1", {"c": NO_TASKS}, {x(3): 0}),
        "P2": ProcessSpec("P2", {"d": actives(5)}, {x(4): 0, x(5): 0}),
    }, AssignmentConfig(0, LIMIT, 0))
    settled, out = settle(start)
    assert run(settled) == out
    back = renamed(settled, "a", "zz")
    assert actives_by_process(back, run(back)) == actives_by_process(settled, out)


@settings(max_examples=200, deadline=None)
@given(groups(min_warmups=1))
def test_warmups_that_catch_up_lead_to_balance_within_a_bounded_number_of_runs(
        spec: TaskAssignmentSpec) -> None:
    """Liveness: once churn stops and every placed copy restores, the target settles.

    Settled means balanced, without warm-ups, and a fixed point: the copies' reports change
    nothing more. Each run completes up to ``max_warmups`` moves (a standby on the intended process
    restores without using the budget), hence the bound.
    """
    bound = ceil(len(spec.tasks) / spec.config.max_warmups) + 2
    out = run(spec)
    for _ in range(bound):
        spec = again(spec, out, after_reports(spec, out))
        following = run(spec)
        if following == out and balanced(out) and not warmups(out):
            return
        out = following
    raise AssertionError(f"not settled after {bound} runs: {out}")
