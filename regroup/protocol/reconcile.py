"""Per-member reconciliation: move one member one safe step toward its target.

The rules (docs/protocol.md has the diagram):

* revoke first: a member that must give shards up keeps its epoch and is told its smaller
  assignment; it stays UNREVOKED until a heartbeat no longer reports those shards;
* a new epoch only then: the member jumps to the target epoch together with what it may add;
* grant only what is free: a shard still held by another member (assigned or pending revocation
  there) is withheld and the member waits UNRELEASED until the holder lets go;
* a member already stable at the target epoch is left alone: same object back, no record, nothing
  in its response. This is what "no group-wide barrier" means in code.
"""

from __future__ import annotations

from collections.abc import Callable

from regroup.protocol.records import CurrentAssignment, MemberStatus
from regroup.protocol.shard import EMPTY, Shard, ShardSet


def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target: ShardSet,
    owned: ShardSet | None,
    held_by_other: Callable[[Shard], bool],
) -> CurrentAssignment:
    """The member's next reconciliation state.

    ``owned`` is what the member reported in this heartbeat (None: not reported, so assume it still
    owns everything it was given). ``held_by_other(shard)`` says whether another member holds it.
    Returns ``current`` itself when nothing changes.
    """
    status = current.status
    if status is MemberStatus.UNREVOKED:
        if _still_owns_any(owned, current.pending_revocation):
            return current
        return _next(current, current.assigned, target_epoch, target, owned, held_by_other)
    if status is MemberStatus.STABLE and current.epoch == target_epoch and (
        current.assigned is target or current.assigned == target
    ):
        return current
    return _next(current, current.assigned, target_epoch, target, owned, held_by_other)


def _still_owns_any(owned: ShardSet | None, shards: ShardSet) -> bool:
    if not shards:
        return False
    if owned is None:
        return True
    return not owned.isdisjoint(shards)


def _next(
    current: CurrentAssignment,
    assigned: ShardSet,
    target_epoch: int,
    target: ShardSet,
    owned: ShardSet | None,
    held_by_other: Callable[[Shard], bool],
) -> CurrentAssignment:
    if assigned == target:
        keep, revoke, add = assigned, EMPTY, EMPTY
    else:
        keep = assigned & target
        revoke = assigned - keep
        add = target - keep
    if revoke and _still_owns_any(owned, revoke):
        # Step 1: revoke. Same epoch; the shards stay owned by this member until it lets go.
        return CurrentAssignment(
            epoch=current.epoch,
            previous_epoch=current.previous_epoch,
            status=MemberStatus.UNREVOKED,
            assigned=keep,
            pending_revocation=revoke,
        )
    unreleased = frozenset(s for s in add if held_by_other(s)) if add else EMPTY
    if not unreleased and not revoke:
        granted = target  # share the target's object: the steady-state check is then `is`
    else:
        granted = keep | (add - unreleased) if add else keep
    status = MemberStatus.UNRELEASED if unreleased else MemberStatus.STABLE
    new_previous = current.epoch if current.epoch != target_epoch else current.previous_epoch
    nxt = CurrentAssignment(
        epoch=target_epoch,
        previous_epoch=new_previous,
        status=status,
        assigned=granted,
        pending_revocation=EMPTY,
    )
    return current if nxt == current else nxt
