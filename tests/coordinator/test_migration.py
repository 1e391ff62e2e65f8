"""The migration poller (`regroup.coordinator.migration`) on a real service and durable store, with a
Kafka group played by a fake: declared before anything is served, each read handed to the core and
persisted, a failed read changes nothing, and a restart finds the hold where it was."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from regroup.coordinator.migration import Migration, MigrationPoller, holds_not_read, parse_migrations
from regroup.coordinator.server import ServerConfig, serve
from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.store import DurableStore
from regroup.log.errors import LogTimeoutError
from regroup.log.kafka_groups import KafkaGroup, KafkaGroups
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.records import ExternalHold, MemberStatus
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.topics import TopicMetadata

ALL = frozenset(Shard("t", p) for p in range(4))
MIGRATION = Migration("g", "legacy")


class FakeKafka(KafkaGroups):
    """What `KafkaGroups.read` would answer, set by the test (an exception: the read fails)."""

    def __init__(self) -> None:
        self.answer: KafkaGroup | Exception = LogTimeoutError("not reachable")

    def read(self, group_id: str) -> KafkaGroup:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def kafka_group(held: frozenset[Shard], offsets: dict[Shard, int] | None = None, settled: bool = True,
                ) -> KafkaGroup:
    return KafkaGroup("legacy", "stable" if held else "empty", 2 if held else 0, held, settled, offsets or {})


def test_parse_migrations() -> None:
    assert parse_migrations(["g", "h=legacy-h"]) == (Migration("g", "g"), Migration("h", "legacy-h"))
    assert Migration("g", "legacy").holder == "kafka:legacy"
    for bad in (["=x"], ["g="], ["g", "g=other"]):
        with pytest.raises(ValueError):
            parse_migrations(bad)


def test_a_migration_needs_a_kafka_cluster_and_cannot_be_ended_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--migrate-from"):
        asyncio.run(serve(ServerConfig(str(tmp_path), migrate_groups=("g",))))
    with pytest.raises(ValueError, match="both name 'g'"):
        asyncio.run(serve(ServerConfig(str(tmp_path), migrate_from="kafka://localhost:9",
                                       migrate_groups=("g",), end_migrations=("g",))))


def test_the_poller_holds_adopts_and_survives_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                         ) -> None:
    caplog.set_level(logging.INFO, logger="regroup.coordinator")
    kafka = FakeKafka()

    async def first_run() -> tuple[MemberStatus, MemberStatus, frozenset[Shard], dict[Shard, int]]:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        service = CoordinatorService(Coordinator(topics=TopicMetadata({"t": 4})), store)
        poller = MigrationPoller(kafka, [MIGRATION], service, interval_s=0.01)
        try:
            poller.declare()
            await poller.poll()  # Kafka unreachable: the group holds everything
            assert poller.reads == {"g": 0}
            join = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=30_000, subscribed_topics=("t",),
                                    owned=EMPTY)
            eff = service._step(lambda c: c.heartbeat(join, service.clock()))
            before = eff.response.assignment or EMPTY
            blocked = service.coord.groups["g"].current["m"].status
            kafka.answer = kafka_group(frozenset({Shard("t", 0)}), {Shard("t", p): 10 * p for p in range(4)})
            await poller.poll()
            assert poller.reads == {"g": 1}
            after = service._step(lambda c: c.heartbeat(HeartbeatRequest("g", "m", 1, owned=EMPTY),
                                                         service.clock())).response
            kafka.answer = LogTimeoutError("gone again")  # a failed read changes nothing
            await poller.poll()
            group = service.coord.groups["g"]
            assert group.external == ExternalHold("kafka:legacy", frozenset({Shard("t", 0)}))
            await store.durable(store.tail)
            assert before == EMPTY and after.assignment == ALL - {Shard("t", 0)}
            return blocked, group.current["m"].status, after.assignment, {
                s: o.offset for s, o in group.offsets.items()}
        finally:
            poller.close()
            await service.close()
            await store.close()

    blocked, waiting, granted, offsets = asyncio.run(first_run())
    assert blocked is MemberStatus.UNRELEASED and waiting is MemberStatus.UNRELEASED
    assert offsets == {Shard("t", 1): 10, Shard("t", 2): 20, Shard("t", 3): 30}
    text = caplog.text
    assert "not read yet, nothing is granted until it is" in text
    assert text.count("reading Kafka group 'legacy' failed") == 2  # once per failure streak
    assert "adopted the offsets Kafka group 'legacy' committed: t:1=10, t:2=20, t:3=30" in text
    assert "Kafka group 'legacy' (stable, 2 member(s)) holds t:0" in text

    # A restart: the hold is replayed, in force before any new read.
    store = DurableStore(str(tmp_path))
    loaded = store.open()
    coord = Coordinator.recover(loaded.records, 0, topics=TopicMetadata({"t": 4}))
    assert coord.groups["g"].external == ExternalHold("kafka:legacy", frozenset({Shard("t", 0)}))
    assert holds_not_read(coord, [MIGRATION]) == []
    [line] = holds_not_read(coord, [])
    assert "'g' is held by kafka:legacy (1 partition(s))" in line and "--end-migration g" in line
    out = coord.heartbeat(HeartbeatRequest("g", "m", 2, owned=granted), 0)
    assert Shard("t", 0) not in (out.response.assignment or granted)
    assert coord.groups["g"].current["m"].status is MemberStatus.UNRELEASED


def test_an_empty_kafka_group_with_no_offsets_is_warned_about_once_and_releases_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A mistyped Kafka group name reads as an empty group without offsets: nothing is released
    (`external` rule 4), and the poller says why once, not at every poll."""
    caplog.set_level(logging.INFO, logger="regroup.coordinator")
    kafka = FakeKafka()
    kafka.answer = KafkaGroup("legacy", "dead", 0, EMPTY, True, {})

    async def run() -> ExternalHold | None:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        service = CoordinatorService(Coordinator(topics=TopicMetadata({"t": 4})), store)
        poller = MigrationPoller(kafka, [MIGRATION], service, interval_s=0.01)
        try:
            poller.declare()
            for _ in range(5):
                await poller.poll()
            assert poller.reads == {"g": 5}
            return service.coord.groups["g"].external
        finally:
            poller.close()
            await store.close()

    assert asyncio.run(run()) == ExternalHold("kafka:legacy", EMPTY, known=False)
    warnings = [r for r in caplog.records if "no members and no committed offsets" in r.getMessage()]
    assert len(warnings) == 1 and "--end-migration g" in warnings[0].getMessage()
