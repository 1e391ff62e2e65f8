"""Rolling migration from live Kafka groups: the poller that reads them and reports to the core.

``--migrate-from kafka://HOST:PORT --migrate-group GROUP[=KAFKA_GROUP]`` (repeatable) makes the
coordinator treat each Kafka group as an external owner of its regroup group: members of ``GROUP``
are granted a partition only once no Kafka member owns it, starting at the offset Kafka committed
for it. `regroup.protocol.external` decides all of that; this module only reads and reports:

1. **Nothing before the first read.** Before the coordinator serves, each migration is declared to
   the core (a view of None): a group with no record of it then holds everything, durably, so no
   member is granted anything in it before its Kafka group was read. One read follows, still before
   serving (bounded by the timeout; a failed one leaves the group holding everything).
2. **Every ``--migrate-poll-s`` seconds** (default 1) each Kafka group is read on a thread — its
   members and what they hold first, its committed offsets second (`regroup.log.kafka_groups` rule
   3) — and the view goes to the core through the service, one step per group: the adopted offsets
   and the new hold are persisted like any record before anything depends on them, and the members
   waiting for released partitions are nudged.
3. **A failed read changes nothing**: the hold stays what the last good read made it. A failure is
   logged once, and again only after a read succeeded in between.
4. **The log says what the core decided**, worded from the step's records: the hold whenever it
   changes, and each adopted offset (info); the core's notes (a partition two consumers read, a
   release without a committed offset) at warning, as the service logs every note.
5. A hold whose migration is not configured any more is left as it is (it keeps blocking what it
   blocked: its Kafka consumers may still run) and logged at start-up; ``--end-migration GROUP``
   ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from regroup.coordinator.runtime import Effects
from regroup.coordinator.service import CoordinatorService
from regroup.log.kafka_groups import KafkaGroup, KafkaGroups
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.external import ExternalView
from regroup.protocol.records import ExternalHoldRecord, OffsetRecord

log = logging.getLogger("regroup.coordinator")

__all__ = ["Migration", "MigrationPoller", "holds_not_read", "parse_migrations"]


@dataclass(frozen=True, slots=True)
class Migration:
    """The regroup group ``group_id`` takes over from the Kafka group ``kafka_group``."""

    group_id: str
    kafka_group: str

    @property
    def holder(self) -> str:
        """How the core names the external owner (and the adopted offsets' metadata)."""
        return f"kafka:{self.kafka_group}"


def parse_migrations(specs: Iterable[str]) -> tuple[Migration, ...]:
    """``GROUP`` (the Kafka group of the same name) or ``GROUP=KAFKA_GROUP``; a group twice is refused."""
    out: dict[str, Migration] = {}
    for spec in specs:
        group, sep, kafka = spec.partition("=")
        group, kafka = group.strip(), (kafka.strip() if sep else group.strip())
        if not group or not kafka:
            raise ValueError(f"--migrate-group {spec!r}: expected GROUP or GROUP=KAFKA_GROUP")
        if group in out:
            raise ValueError(f"--migrate-group names group {group!r} twice; a group migrates from one "
                             "Kafka group")
        out[group] = Migration(group, kafka)
    return tuple(out.values())


def holds_not_read(coord: Coordinator, migrations: Sequence[Migration]) -> list[str]:
    """Rule 5: the groups whose recorded hold no configured migration reads, with what they hold."""
    reading = {(m.group_id, m.holder) for m in migrations}
    out = []
    for gid, group in sorted(coord.groups.items()):
        hold = group.external
        if hold is None or (gid, hold.holder) in reading or (hold.known and not hold.shards):
            continue
        what = "everything (never read)" if not hold.known else f"{len(hold.shards)} partition(s)"
        out.append(f"group {gid!r} is held by {hold.holder} ({what}), which this coordinator does not read: "
                   f"nothing held is granted; give --migrate-group {gid}=... to finish the migration or "
                   f"--end-migration {gid} to drop it")
    return out


class MigrationPoller:
    """Reads every migration's Kafka group and hands each read to the service (rules 1 to 4)."""

    def __init__(self, kafka: KafkaGroups, migrations: Sequence[Migration], service: CoordinatorService, *,
                 interval_s: float = 1.0, timeout_s: float = 30.0) -> None:
        self.kafka = kafka
        self.migrations = tuple(migrations)
        self.service = service
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="regroup-migration")
        self._failing: set[str] = set()
        #: Groups whose last poll was warned about (a refusal, or an unread hold on an empty group),
        #: so that a condition that lasts is logged once, not at every poll.
        self._warned: dict[str, str] = {}
        #: Reads handed to the core, per regroup group.
        self.reads: dict[str, int] = {m.group_id: 0 for m in self.migrations}

    def declare(self) -> None:
        """Rule 1: every migration is known to the core before anything is served."""
        for m in self.migrations:
            eff = self.service.external_owners(m.group_id, m.holder, None)
            self._report(m, eff)
            group = self.service.coord.groups.get(m.group_id)
            hold = group.external if group is not None else None
            if eff is not None and not eff.records and hold is not None:  # recorded before a restart
                log.info("migration of group %r from Kafka group %r resumed: %s when last read", m.group_id,
                         m.kafka_group, f"it held {len(hold.shards)} partition(s)" if hold.known
                         else "never read, it holds everything")

    async def poll(self) -> None:
        """One read of every Kafka group, each handed to the core as it arrives."""
        loop = asyncio.get_running_loop()
        for m in self.migrations:
            try:
                got: KafkaGroup = await asyncio.wait_for(
                    loop.run_in_executor(self._executor, self.kafka.read, m.kafka_group), self.timeout_s)
            except Exception as e:  # rule 3: the hold stays as it was
                if m.group_id not in self._failing:
                    self._failing.add(m.group_id)
                    log.warning("migration of group %r: reading Kafka group %r failed (%s: %s); its hold "
                                "stays as last read until a read succeeds", m.group_id, m.kafka_group,
                                type(e).__name__, e)
                continue
            if m.group_id in self._failing:
                self._failing.discard(m.group_id)
                log.info("migration of group %r: Kafka group %r read again", m.group_id, m.kafka_group)
            view = ExternalView(got.held, got.offsets, got.settled)
            eff = self.service.external_owners(m.group_id, m.holder, view)
            if eff is None:
                return  # the service stopped
            self.reads[m.group_id] += 1
            if not eff.response.ok:  # e.g. the id is a streams group's: said once, not every poll
                self._warn_once(m, f"migration of group {m.group_id!r} refused: {eff.response.message}")
                continue
            self._report(m, eff, got)
            self._warn_once(m, self._still_unread(m, got))

    def _still_unread(self, m: Migration, got: KafkaGroup) -> str:
        """Why the hold is still unread after a settled read (`external` rule 4), or ''."""
        group = self.service.coord.groups.get(m.group_id)
        hold = group.external if group is not None else None
        if not got.settled or hold is None or hold.known:
            return ""
        return (f"migration of group {m.group_id!r}: Kafka group {m.kafka_group!r} has no members and no "
                "committed offsets — a mistyped name, the wrong cluster, or consumers that assign() "
                "partitions look like that — so nothing is granted until it shows either; if the group "
                "really is new and empty, restart the coordinator with --end-migration "
                f"{m.group_id}")

    def _warn_once(self, m: Migration, warning: str) -> None:
        if warning and self._warned.get(m.group_id) != warning:
            log.warning("%s", warning)
        if warning:
            self._warned[m.group_id] = warning
        else:
            self._warned.pop(m.group_id, None)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # a poller that dies would leave every hold as it is for good
                log.exception("migration poller: a poll failed; trying again in %.1f s", self.interval_s)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _report(m: Migration, eff: Effects[Any] | None, got: KafkaGroup | None = None) -> None:
        """Rule 4: the hold when it changed and the offsets adopted, from the step's records."""
        if eff is None:
            return
        if not eff.response.ok:
            log.warning("migration of group %r refused: %s", m.group_id, eff.response.message)
            return
        adopted = [f"{r.shard}={r.offset}" for r in eff.records
                   if isinstance(r, OffsetRecord) and r.offset is not None]
        if adopted:
            log.info("migration of group %r: adopted the offsets Kafka group %r committed: %s", m.group_id,
                     m.kafka_group, ", ".join(adopted))
        for r in eff.records:
            if not isinstance(r, ExternalHoldRecord) or r.hold is None:
                continue
            if not r.hold.known:
                log.info("migration of group %r from Kafka group %r: not read yet, nothing is granted until "
                         "it is", m.group_id, m.kafka_group)
            else:
                state = "" if got is None else (
                    f" ({got.state}{'' if got.settled else ', moving partitions'}, {got.members} member(s))")
                held = ", ".join(str(s) for s in sorted(r.hold.shards)[:20]) or "nothing"
                more = f" and {len(r.hold.shards) - 20} more" if len(r.hold.shards) > 20 else ""
                log.info("migration of group %r: Kafka group %r%s holds %s%s", m.group_id, m.kafka_group,
                         state, held, more)
