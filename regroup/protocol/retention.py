"""Offsets retention: the committed offsets of a group nobody uses expire, and the group with them.

Kafka keeps an empty group's offsets for ``offsets.retention.minutes`` (7 days) counted from when the
group became empty (KIP-211). regroup does the same for both kinds of group, with these rules:

1. **In use.** A group is in use while it has members, or while a group outside regroup that it
   migrates from holds any of it (`regroup.protocol.external`: the migration is still running). A
   group not in use is *empty*, whatever it holds: offsets, key-range parallelism, an emptied hold.
2. **The clock starts at a check.** Retention is checked on a periodic tick (`check`, every
   `CoordinatorConfig.retention_check_ms`). The first check that finds a group empty marks it
   (`EmptySinceRecord`): empty since now, at its current group epoch. So the clock starts at most one
   interval after the group became empty, never before. A group created empty — by an operator's
   offset reset, say, with no member ever — is marked by the first check after, exactly like a group
   its members left.
3. **A mark holds only while nothing happened.** Members joining and leaving move the group epoch, so
   a mark whose epoch is not the group's is stale: the check marks the group again from now. A check
   that finds the group in use drops the mark. An operator's write to the group (offsets reset or
   deleted, parallelism set, a migration's hold changed) drops it too (`regroup.protocol.coordinator`
   does that in the same step): the clock restarts at the next check, as a commit restarts it in
   Kafka. Deleting a group drops its mark.
4. **Expiry.** A check at or after ``since + offsets_retention_ms`` of a group still empty at the
   marked epoch expires it: every committed offset of it — key-range fragments included — gets a
   tombstone and the group is deleted, in one step, with a note for the log. Never partially: a
   group is deleted whole, as an operator's `delete_group` would.
5. **Wall-clock time, durable marks.** A check is given the wall-clock time (unix ms) by the shell,
   and the marks are records: a restart replays them, so it neither restarts nor skips the clock. A
   wall clock set back delays expiry; one set forward brings it early (Kafka behaves the same way).
   A store written before marks existed has none: its empty groups are marked at the first check.

The marks are the coordinator's, not a group's (both kinds of group share them, and a group id
names one kind at a time): `regroup.protocol.coordinator` keeps a `Retention` beside the groups,
replays its records into it, and deletes what `check` says is due through each kind's own
``delete_group``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from regroup.protocol.records import EmptySinceRecord

__all__ = ["EmptySince", "GroupUse", "Retention", "duration"]


@dataclass(frozen=True, slots=True)
class EmptySince:
    """A group seen empty since ``since_ms`` (wall clock), at group epoch ``epoch``."""

    since_ms: int
    epoch: int


@dataclass(frozen=True, slots=True)
class GroupUse:
    """What a check needs to know of one group (of either kind)."""

    group_id: str
    epoch: int
    in_use: bool


class Retention:
    """The marks of empty groups (rules 2 and 3), and the check that expires them (rule 4)."""

    def __init__(self) -> None:
        self.marks: dict[str, EmptySince] = {}

    def apply(self, record: EmptySinceRecord) -> None:
        """The only code that changes the marks (also on replay)."""
        if record.since_ms is None:
            self.marks.pop(record.group_id, None)
        else:
            self.marks[record.group_id] = EmptySince(record.since_ms, record.epoch)

    def snapshot(self) -> list[EmptySinceRecord]:
        return [EmptySinceRecord(gid, m.since_ms, m.epoch) for gid, m in sorted(self.marks.items())]

    def drop(self, group_id: str) -> list[EmptySinceRecord]:
        """Forget the group's mark (rule 3): the tombstone to persist, already applied; none if unmarked."""
        if group_id not in self.marks:
            return []
        record = EmptySinceRecord(group_id, None)
        self.apply(record)
        return [record]

    def check(self, groups: Iterable[GroupUse], now_ms: int, retention_ms: int,
              ) -> tuple[list[EmptySinceRecord], list[tuple[str, EmptySince]]]:
        """One retention check at wall-clock time ``now_ms``: the mark records it wrote (already
        applied), and the groups whose retention passed with their marks, in group id order. Their
        marks stay until the caller deleted them (`drop`): a group that could not be deleted is due
        again at the next check."""
        records: list[EmptySinceRecord] = []
        due: list[tuple[str, EmptySince]] = []
        seen: set[str] = set()
        for use in sorted(groups, key=lambda u: u.group_id):
            gid = use.group_id
            seen.add(gid)
            mark = self.marks.get(gid)
            if use.in_use:
                records.extend(self.drop(gid))
            elif mark is None or mark.epoch != use.epoch:
                record = EmptySinceRecord(gid, now_ms, use.epoch)
                self.apply(record)
                records.append(record)
            elif now_ms - mark.since_ms >= retention_ms:
                due.append((gid, mark))
        for gid in sorted(self.marks.keys() - seen):  # the group is gone: its mark goes too
            records.extend(self.drop(gid))
        return records, due


def duration(ms: int) -> str:
    """``ms`` in an operator's words: ``7 d``, ``2 d 3 h``, ``90 min``, ``1.5 s``."""
    if ms < 60_000:
        return f"{ms / 1000:g} s"
    minutes = ms // 60_000
    if minutes < 180:
        return f"{minutes} min"
    days, hours = divmod(minutes // 60, 24)
    if not days:
        return f"{hours} h"
    return f"{days} d" + (f" {hours} h" if hours else "")
