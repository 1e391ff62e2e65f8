"""One streams member's next step (`reconcile`), rule by rule, without a coordinator."""

from __future__ import annotations

from regroup.protocol.records import MemberStatus
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.reconcile import reconcile
from regroup.protocol.streams.records import StreamsCurrent
from regroup.protocol.streams.topology import TaskId
from tests.protocol.streams.builders import roles, t


def stable(epoch: int, tasks: MemberTasks) -> StreamsCurrent:
    return StreamsCurrent(epoch, epoch - 1, MemberStatus.STABLE, tasks, NO_TASKS)


def free(task: TaskId, role: str) -> bool:
    return False


def test_stable_at_target_is_left_alone() -> None:
    cur = stable(3, roles(active=[t(0)]))
    assert reconcile(cur, 3, roles(active=[t(0)]), None, free) is cur


def test_revoke_first_in_every_role_and_keep_the_epoch() -> None:
    cur = stable(3, roles(active=[t(0), t(1)], standby=[t(2)], warmup=[t(3)]))
    nxt = reconcile(cur, 4, roles(active=[t(0), t(5)]), None, free)
    assert nxt.status is MemberStatus.UNREVOKED and nxt.epoch == 3
    assert nxt.assigned == roles(active=[t(0)])
    assert nxt.pending_revocation == roles(active=[t(1)], standby=[t(2)], warmup=[t(3)])
    # still reported: no progress
    assert reconcile(nxt, 4, roles(active=[t(0), t(5)]), roles(active=[t(0), t(1)]), free) is nxt
    # released: the new epoch, with the grant
    done = reconcile(nxt, 4, roles(active=[t(0), t(5)]), roles(active=[t(0)]), free)
    assert done == StreamsCurrent(4, 3, MemberStatus.STABLE, roles(active=[t(0), t(5)]), NO_TASKS)


def test_a_copy_changing_role_on_the_same_member_is_not_a_revocation() -> None:
    cur = stable(3, roles(standby=[t(0)], warmup=[t(1)]))
    nxt = reconcile(cur, 4, roles(warmup=[t(0)], standby=[t(1)]), None, free)
    assert nxt.status is MemberStatus.STABLE and nxt.epoch == 4
    assert nxt.assigned == roles(warmup=[t(0)], standby=[t(1)])


def test_an_active_becoming_a_standby_is_revoked_first() -> None:
    cur = stable(3, roles(active=[t(0)]))
    nxt = reconcile(cur, 4, roles(standby=[t(0)]), None, free)
    assert nxt.status is MemberStatus.UNREVOKED
    assert nxt.pending_revocation == roles(active=[t(0)])


def test_an_unreleased_active_waits_and_its_warmup_keeps_restoring() -> None:
    cur = stable(3, roles(warmup=[t(0)]))

    def held_elsewhere(task: TaskId, role: str) -> bool:
        return task == t(0) and role == "active"

    nxt = reconcile(cur, 4, roles(active=[t(0)]), None, held_elsewhere)
    assert nxt.status is MemberStatus.UNRELEASED and nxt.epoch == 4
    assert nxt.assigned == roles(warmup=[t(0)])  # not active yet, still a warm-up
    later = reconcile(nxt, 4, roles(active=[t(0)]), roles(warmup=[t(0)]), free)
    assert later.status is MemberStatus.STABLE and later.assigned == roles(active=[t(0)])


def test_a_standby_is_withheld_while_its_process_holds_the_task_in_another_role() -> None:
    cur = stable(3, NO_TASKS)

    def same_process_holds(task: TaskId, role: str) -> bool:
        return task == t(1)

    nxt = reconcile(cur, 4, roles(standby=[t(1)], warmup=[t(2)]), None, same_process_holds)
    assert nxt.status is MemberStatus.UNRELEASED
    assert nxt.assigned == roles(warmup=[t(2)])
