"""External owners: a consumer group outside regroup (a live Kafka group) that still holds partitions
of a regroup group while the group migrates to regroup by rolling restart.

The shell reads the external group (who owns which partition, what it committed) and hands each read
to the core as an `ExternalView` (`Coordinator.external_owners`); everything below is decided here,
with no clock and no I/O. The rules:

1. **A hold blocks grants, never revokes.** A partition the external group holds is withheld from
   every member exactly like a shard another member still holds: a member whose target includes it
   (or a key range of it) waits UNRELEASED. A partition a regroup member already holds stays with
   it; if the external group reports owning it too, the step says so (two consumers read it, and
   only stopping the external one ends that).
2. **What a view holds.** The partitions the external group's members own or are about to own (for
   Kafka: their assignments and their targets). While the external group is moving partitions
   between its members (``settled`` False) the hold only grows: a partition on its way from one
   member to another can look owned by nobody for a moment (Kafka 4.4 recomputes a group's target
   on a member's next heartbeat, seconds after another left), and granting it then would give it
   two owners. Partitions added to a topic while the external group still has members are not in
   any view yet and are granted at once, although the external group takes them too a heartbeat
   later (both then start at their reset policies): add partitions before or after a migration,
   not during one (docs/operations.md).
3. **A release hands over the committed offset first.** A partition leaves the hold when a settled
   view no longer lists it: the external group is stable without it, empty, or gone. In the same
   step, before the release, the external group's committed offset for it becomes the group's
   committed offset (an operator's kind of commit: it may move backwards, and replaces the
   partition's key-range fragments), so the member granted the partition starts exactly where the
   external owner stopped. A partition a regroup member holds is left alone (its commits stand).
   The shell reads the offsets *after* the ownership, so an owner that committed and then left is
   read with its last commit.
4. **Nothing before the first read.** A migration the group has no record of (a new one, or another
   external group than the recorded one) holds everything until a first settled read: a
   coordinator started to migrate a group grants nothing in it before it has seen the external
   group. That first read releases what the external group does not hold, and adopts offsets only
   for partitions the group has no committed offset for: the external group is not known to have
   been their last owner. A first read of a group with no members *and* no committed offsets —
   what a mistyped group name, the wrong cluster, or consumers that ``assign()`` partitions look
   like — releases nothing: the hold stays unread (the shell says why) until a read shows members
   or offsets, or an operator ends the migration.
5. **Durable.** The hold is a record (`ExternalHoldRecord`), replayed like every other, so a
   restarted coordinator blocks what it blocked before its first new read. A hold that has emptied
   stays recorded — the migration is finished: another read adopts nothing again — until an
   operator ends the migration (`end_hold`) or deletes the group, which is refused while the
   external group holds anything (`require_no_hold`): the deletion would forget the hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.offsets import RESET_COMMIT_EPOCH
from regroup.protocol.records import ExternalHold, ExternalHoldRecord, OffsetRecord, Record
from regroup.protocol.shard import EMPTY, Shard, ShardSet
from regroup.protocol.state import Group
from regroup.protocol.validation import check_id, check_name, check_shards, invalid

__all__ = ["ExternalView", "HoldChange", "end_hold", "hold_change", "holds_any", "require_no_hold",
           "validate_view"]


@dataclass(frozen=True, slots=True)
class ExternalView:
    """One read of the external group."""

    #: Whole partitions its members own or are about to own (rule 2).
    held: ShardSet
    #: Its committed offsets (next offset to read), by whole partition.
    offsets: Mapping[Shard, int] = field(default_factory=dict)
    #: False while it is moving partitions between its members (a rebalance in progress).
    settled: bool = True


@dataclass(frozen=True, slots=True)
class HoldChange:
    """What one view (or the end of a migration) does to a group."""

    #: Adopted offsets first, then the new hold (rule 3's order).
    records: tuple[Record, ...] = ()
    #: Whole partitions the group may grant now that it could not before (the waiters to wake).
    released: ShardSet = EMPTY
    notes: tuple[str, ...] = ()


def validate_view(group_id: str, holder: str, view: ExternalView | None, cfg: CoordinatorConfig) -> None:
    """INVALID_REQUEST unless the ids are well-formed and the view speaks of whole partitions."""
    check_id("group_id", group_id, cfg)
    check_name("holder", holder, cfg.max_id_length, "external group name")
    if view is None:
        return
    check_shards("held", view.held, cfg, cfg.max_owned_shards)
    check_shards("offsets", view.offsets.keys(), cfg, cfg.max_owned_shards)
    for s in (*view.held, *view.offsets):
        if not s.whole:
            raise invalid(f"an external group holds and commits whole partitions, not key range {s}")
    for s, o in view.offsets.items():
        if not isinstance(o, int) or isinstance(o, bool) or o < 0:
            raise invalid(f"offset for {s} must be a non-negative integer, got {o!r}")


def hold_change(group: Group | None, group_id: str, holder: str, view: ExternalView | None) -> HoldChange:
    """What ``view`` of the external group ``holder`` does to the group (None: a migration declared,
    the external group not read yet)."""
    recorded = group.external if group is not None else None
    same = recorded if recorded is not None and recorded.holder == holder else None
    known = same if same is not None and same.known else None
    if view is None or (not view.settled and known is None):
        # Rule 4 (and rule 2 before any settled read): everything is held until a settled read.
        if same is not None:
            return HoldChange()
        return HoldChange((ExternalHoldRecord(group_id, ExternalHold(holder, EMPTY, known=False)),))
    held = frozenset(view.held)
    if known is None and not held and not view.offsets:
        return HoldChange()  # rule 4: nothing says this is the group we migrate from; stay unread
    if not view.settled and known is not None:  # rule 2: only grows
        grown = known.shards | held
        if grown == known.shards:
            return HoldChange()
        return HoldChange((ExternalHoldRecord(group_id, ExternalHold(holder, grown)),),
                          notes=_conflicts(group, holder, grown - known.shards))
    if known is not None:
        released = known.shards - held
        adopt = {s: view.offsets[s] for s in released if s in view.offsets}
    else:  # rule 4: the first read releases all it does not hold, adopts only where nothing is committed
        released = _targeted(group) - held
        adopt = {s: o for s, o in view.offsets.items() if s not in held and not _committed(group, s)}
    records: list[Record] = []
    notes: list[str] = []
    skipped = []
    for s, offset in sorted(adopt.items()):
        if group is not None and group.held_by_other(s, ""):
            skipped.append(s)
            continue
        records.extend(_adopted(group, group_id, holder, s, offset))
    if known is not None and (silent := sorted(released - view.offsets.keys())):
        notes.append(f"group {group_id!r}: {holder} released {_listed(silent)} with no committed offset; "
                     "their new owners start where their offset reset policy says")
    if skipped:
        notes.append(f"group {group_id!r}: {holder} released {_listed(skipped)} while regroup members hold "
                     "them; their own commits stand, its offsets were not adopted")
    hold = ExternalHold(holder, held)
    if recorded != hold:
        records.append(ExternalHoldRecord(group_id, hold))
        notes.extend(_conflicts(group, holder, held - (known.shards if known is not None else EMPTY)))
    return HoldChange(tuple(records), released, tuple(notes))


def holds_any(group: Group) -> bool:
    """Does an external group hold (or may it hold) anything of ``group`` now?"""
    hold = group.external
    return hold is not None and (not hold.known or bool(hold.shards))


def require_no_hold(group: Group) -> None:
    """A group is deleted only once no external group holds anything of it: the deletion would forget
    the hold, and a member joining the group anew before the next read would be granted what the
    external group still owns."""
    hold = group.external
    if hold is not None and holds_any(group):
        held = "everything (not read yet)" if not hold.known else f"{len(hold.shards)} partition(s)"
        raise ProtocolError(ErrorCode.NON_EMPTY_GROUP,
                            f"group {group.group_id!r} migrates from {hold.holder}, which holds {held}; "
                            "stop its consumers or end the migration before deleting the group")


def end_hold(group: Group | None) -> HoldChange:
    """An operator ends the migration: nothing is held any more, nothing is adopted."""
    if group is None or group.external is None:
        return HoldChange()
    hold = group.external
    released = hold.shards if hold.known else _targeted(group)
    return HoldChange((ExternalHoldRecord(group.group_id, None),), released)


def _adopted(group: Group | None, group_id: str, holder: str, shard: Shard, offset: int) -> list[Record]:
    """The records that make ``offset`` the partition's committed offset (rule 3): its key-range
    fragments go, the whole partition's offset comes; nothing when it is already so."""
    fragments = sorted(group.offset_ranges.get(shard.partition_key, ())) if group is not None else []
    current = group.offsets.get(shard) if group is not None else None
    if not fragments and current is not None and current.offset == offset:
        return []
    out: list[Record] = [OffsetRecord(group_id, f, None) for f in fragments]
    out.append(OffsetRecord(group_id, shard, offset, f"adopted from {holder}", RESET_COMMIT_EPOCH))
    return out


def _committed(group: Group | None, shard: Shard) -> bool:
    """Does the group have any committed offset for ``shard``'s partition (whole or fragments)?"""
    return group is not None and (shard in group.offsets or shard.partition_key in group.offset_ranges)


def _targeted(group: Group | None) -> ShardSet:
    """The whole partitions of every member's target: what an unknown hold kept from them."""
    if group is None:
        return EMPTY
    return frozenset(Shard(s.topic, s.partition) for t in group.target.values() for s in t)


def _conflicts(group: Group | None, holder: str, added: ShardSet) -> tuple[str, ...]:
    """Rule 1: partitions the external group now reports that regroup members hold."""
    if group is None:
        return ()
    taken = sorted(s for s in added if group.held_by_other(s, ""))
    if not taken:
        return ()
    return (f"group {group.group_id!r}: {holder} reports owning {_listed(taken)}, which regroup members "
            "hold: two consumers read them until the external one stops (a hold never revokes)",)


def _listed(shards: list[Shard]) -> str:
    head = ", ".join(str(s) for s in shards[:5])
    return head if len(shards) <= 5 else f"{head} and {len(shards) - 5} more"
