"""One streams member's next safe step toward its target (Kafka's streams ``CurrentAssignmentBuilder``).

Notation, per member: ``C = (Ca, Cs, Cw)`` its current tasks by role (active, standby, warm-up),
``T = (Ta, Ts, Tw)`` its target, ``all(X) = Xa | Xs | Xw``, and ``O`` what it reported owning.

Rules:

1. Revoke first. ``Ra = Ca - Ta`` (an active it must stop running, whatever role it gets instead)
   and ``Rs = Cs - all(T)``, ``Rw = Cw - all(T)`` (a copy nobody wants here any more). While the
   member still reports any of ``R``, it keeps its epoch, is told ``C - R`` and stays UNREVOKED; the
   tasks of ``R`` count as held by it (`state.held`), so nobody is granted them meanwhile.
   A standby that becomes a warm-up or an active (and the reverse between the copy roles) is not a
   revocation: the same state store simply changes role on the same member.
2. Then the new epoch, with the grants: ``Ta`` minus the actives still held by another member (the
   previous owner has not released them), and ``Ts``/``Tw`` minus the tasks another member of the
   same process holds in any role (one state store per task per process). An active is also
   withheld while another member of its process holds the task in any role. Withheld tasks make the
   member UNRELEASED; it is granted them on a later heartbeat, once they are free.
3. A withheld active that the member already holds as a standby or warm-up stays that copy in the
   meantime, so its state keeps following the log until the active arrives.
4. A member stable at the target epoch with exactly its target is left alone: the same object comes
   back, no record, nothing in the response.
"""

from __future__ import annotations

from collections.abc import Callable

from regroup.protocol.records import MemberStatus
from regroup.protocol.streams.assignment import EMPTY_TASKS, NO_TASKS, MemberTasks, TaskSet
from regroup.protocol.streams.records import StreamsCurrent
from regroup.protocol.streams.topology import TaskId

__all__ = ["reconcile"]

#: ``(task, role) -> True`` when another member stops this member from taking the task in that role.
Blocked = Callable[[TaskId, str], bool]


def reconcile(current: StreamsCurrent, target_epoch: int, target: MemberTasks,
              owned: MemberTasks | None, blocked: Blocked) -> StreamsCurrent:
    """The member's next state; ``current`` itself when nothing changes.

    ``owned`` is what the member reported (None: not reported, assume it holds everything it was
    given). ``blocked(task, role)`` applies rule 2 against the other members.
    """
    if current.status is MemberStatus.UNREVOKED:
        if _still_owns_any(owned, current.pending_revocation):
            return current
    elif (current.status is MemberStatus.STABLE and current.epoch == target_epoch
          and current.assigned == target):
        return current
    return _next(current, target_epoch, target, owned, blocked)


def _still_owns_any(owned: MemberTasks | None, tasks: MemberTasks) -> bool:
    if tasks == NO_TASKS:
        return False
    if owned is None:
        return True
    everything = owned.active | owned.standby | owned.warmup
    return not everything.isdisjoint(tasks.active | tasks.standby | tasks.warmup)


def _next(current: StreamsCurrent, target_epoch: int, target: MemberTasks,
          owned: MemberTasks | None, blocked: Blocked) -> StreamsCurrent:
    c = current.assigned
    wanted = target.active | target.standby | target.warmup
    # Rule 1: R = (Ca - Ta, Cs - all(T), Cw - all(T)).
    revoke = MemberTasks(c.active - target.active, c.standby - wanted, c.warmup - wanted)
    if revoke != NO_TASKS and _still_owns_any(owned, revoke):
        kept = MemberTasks(c.active - revoke.active, c.standby - revoke.standby,
                           c.warmup - revoke.warmup)
        return _same(current, StreamsCurrent(current.epoch, current.previous_epoch,
                                             MemberStatus.UNREVOKED, kept, revoke))
    # Rule 2: grant A = Ta - withheld, S = Ts - withheld, W = Tw - withheld.
    withheld_active = _withheld(target.active - c.active, "active", blocked)
    active = target.active - withheld_active
    # Rule 3: a withheld active the member holds as a copy keeps that copy's role for now.
    standby = (target.standby - _withheld(target.standby - c.standby, "standby", blocked)) \
        | (withheld_active & c.standby)
    warmup = (target.warmup - _withheld(target.warmup - c.warmup, "warm-up", blocked)) \
        | (withheld_active & c.warmup)
    granted = MemberTasks(active, standby, warmup)
    status = MemberStatus.STABLE if granted == target else MemberStatus.UNRELEASED
    if granted == target:
        granted = target  # share the target's object
    previous = current.epoch if current.epoch != target_epoch else current.previous_epoch
    return _same(current, StreamsCurrent(target_epoch, previous, status, granted, NO_TASKS))


def _withheld(new: TaskSet, role: str, blocked: Blocked) -> TaskSet:
    if not new:
        return EMPTY_TASKS
    return frozenset(t for t in new if blocked(t, role))


def _same(current: StreamsCurrent, nxt: StreamsCurrent) -> StreamsCurrent:
    return current if nxt == current else nxt
