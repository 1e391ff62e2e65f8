"""validate_task_assignment: every broken invariant is refused with a message naming it."""

from __future__ import annotations

import pytest

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.streams.assignment import (
    MemberTasks,
    TaskAssignment,
    TaskAssignmentSpec,
    validate_task_assignment,
)
from regroup.protocol.streams.topology import TaskId
from tests.protocol.streams.builders import roles, spec, tasks, ts


def group(**config: int) -> TaskAssignmentSpec:
    return spec(tasks(3), {"A": {"a1": roles(), "a2": roles()}, "B": {"b": roles()},
                           "C": {"c": roles()}}, None, **config)


def refused(s: TaskAssignmentSpec, out: TaskAssignment, match: str) -> None:
    with pytest.raises(ProtocolError, match=match) as err:
        validate_task_assignment(s, out)
    assert err.value.code is ErrorCode.INVALID_ASSIGNMENT


GOOD: TaskAssignment = {"a1": roles(ts(0)), "a2": roles(ts(1)), "b": roles(ts(2), standby=ts(0)),
                        "c": roles(warmup=ts(2))}


def test_a_valid_assignment_comes_back_frozen() -> None:
    loose = {m: MemberTasks(set(r.active), set(r.standby), set(r.warmup))  # type: ignore[arg-type]
             for m, r in GOOD.items()}
    assert validate_task_assignment(group(standby_replicas=1), loose) == GOOD


def test_unknown_and_missing_members_are_refused() -> None:
    refused(group(), {**GOOD, "z": roles()}, r"not in the group: \['z'\]")
    refused(group(), {m: r for m, r in GOOD.items() if m != "c"}, r"leaves out .*\['c'\]")


def test_unknown_tasks_are_refused_naming_member_and_role() -> None:
    out = {**GOOD, "c": roles(standby={TaskId("s", 9)})}
    refused(group(standby_replicas=1), out,
            "member 'c' was given standby task s_9, which is not a task of the group")


def test_a_task_active_twice_is_refused() -> None:
    out = {**GOOD, "c": roles(ts(0))}
    refused(group(), out, "task s_0 is active on both 'a1' and 'c'")


def test_a_task_without_active_is_refused() -> None:
    out = {**GOOD, "b": roles()}
    refused(group(), out, "tasks without an active member: s_2")


@pytest.mark.parametrize("other", [roles(standby=ts(0)), roles(warmup=ts(0)), roles(ts(0))])
def test_two_roles_of_one_task_on_one_process_are_refused(other: MemberTasks) -> None:
    # a1 runs s_0; a2 is on the same process.
    out = {**GOOD, "a2": MemberTasks(other.active | ts(1), other.standby, other.warmup)}
    refused(group(standby_replicas=1, max_warmups=2), out,
            "task s_0 has two roles on process 'A'")


def test_too_many_standbys_or_warmups_are_refused() -> None:
    refused(group(standby_replicas=0), GOOD, "task s_0 has 1 standbys; the group allows 0")
    refused(group(standby_replicas=1, max_warmups=0), GOOD, "1 warm-ups; the group allows 0")


def test_a_result_that_is_not_member_tasks_is_refused() -> None:
    out: dict[str, object] = {**GOOD, "c": {"active": []}}
    refused(group(), out, "member 'c' was given")  # type: ignore[arg-type]
