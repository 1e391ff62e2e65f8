"""Upgrade by rolling restart, end to end on Apache Kafka (the session's broker, tests/log/brokers.py):
a live Kafka consumer group hands its partitions to a regroup group one consumer at a time under a
steady keyed produce load; and `regroup groups import` / `export` copy committed offsets between a
Kafka group and a regroup group.

The roll: four confluent-kafka consumers (``group.protocol=consumer``, committing after every batch
and on revocation) process a topic of 8 partitions; a coordinator started with ``--migrate-from``
and ``--migrate-group`` treats that Kafka group as the external owner of the regroup group. Each
step stops one Kafka consumer cleanly and starts one regroup `Consumer`. Kafka's own rebalance gives
a stopped consumer's partitions to the Kafka consumers still running, so the regroup members wait
(nothing is granted while a Kafka member owns it) until the last Kafka consumer leaves; then they
take every partition at the offset Kafka committed. Every record is processed exactly once: all the
hand-offs are clean (the last commit before each release), so a duplicate would be a bug.
"""

from __future__ import annotations

import collections
import itertools
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Producer

from regroup import Consumer
from regroup.client.errors import CommitFailedError
from regroup.log import open_kafka_groups, open_log
from regroup.log.kafka_groups import KafkaGroups
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetFetchRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.state import GroupState
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable, RequestRejected
from tests.coordinator.server_proc import ServerProc, start_server
from tests.log.brokers import Broker

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka")]

PARTITIONS = 8
CONSUMERS = 4
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 90.0) -> T:
    """``check()``'s first truthy answer, asked every 0.1 s; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@dataclass
class Ledger:
    """Every record processed: by whom, from where, which value (the producer's sequence number)."""

    rows: list[tuple[str, int, int, int]] = field(default_factory=list)
    #: When each row was processed (time.monotonic()), for the hand-over's figures.
    times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, who: str, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.rows.append((who, partition, offset, int(value)))
            self.times.append(time.monotonic())

    def snapshot(self) -> list[tuple[str, int, int, int]]:
        with self.lock:
            return list(self.rows)


class Load(threading.Thread):
    """A steady keyed load (50 keys, ~200 records/s); ``acked`` holds what Kafka acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="load", daemon=True)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5})
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.add(int(msg.value()))

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            for _ in range(10):
                self.producer.produce(self.topic, key=f"key-{n % 50}".encode(), value=str(n).encode(),
                                      on_delivery=self._delivered)
                n += 1
            self.producer.poll(0)
            self.stopping.wait(0.05)  # pacing of the load, not a wait for a condition
        self.producer.flush(30)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)


class KafkaWorker(threading.Thread):
    """A confluent-kafka consumer of the Kafka group: processes, then commits after every batch; on
    revocation (also at close) commits again before the partitions go."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ledger: Ledger) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger = ledger
        self.commit_failures: list[str] = []
        self.stopping = threading.Event()
        self.closed_at = 0.0
        self.consumer = KafkaConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": False})
        self.consumer.subscribe([topic], on_revoke=lambda c, _parts: self._commit())

    def _commit(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing new to commit is no failure
                self.commit_failures.append(str(e))

    def run(self) -> None:
        while not self.stopping.is_set():
            batch = [m for m in self.consumer.consume(200, 0.2) if m.error() is None]
            for m in batch:
                self.ledger.add(self.name, m.partition(), m.offset(), m.value())
            if batch:
                self._commit()
        self.consumer.close()  # revokes (committing) and leaves the group

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive(), f"{self.name} did not close"
        self.closed_at = time.monotonic()


class RegroupWorker(threading.Thread):
    """A regroup `Consumer` of the regroup group on the Kafka log: processes, commits every batch."""

    def __init__(self, name: str, coordinator: str, spec: str, group: str, topic: str, ledger: Ledger,
                 ) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger = ledger
        self.commit_failures: list[str] = []
        self.stopping = threading.Event()
        self.consumer = Consumer(group, coordinator=coordinator, log=spec, topics=[topic], member_id=name)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                batch = self.consumer.consume(200, 0.2)
                for r in batch:
                    self.ledger.add(self.name, r.partition, r.offset, r.value or b"")
                if batch:
                    try:
                        self.consumer.commit()
                    except CommitFailedError as e:
                        self.commit_failures.append(str(e))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)


@dataclass
class Kafka:
    broker: Broker
    spec: str
    topic: str
    groups: KafkaGroups


@pytest.fixture
def kafka(kafka_broker: Broker) -> Iterator[Kafka]:
    spec = f"kafka://{kafka_broker.bootstrap}"
    topic = f"migrate-{uuid.uuid4().hex[:8]}"
    log = open_log(spec)
    try:
        log.create_topic(topic, PARTITIONS)
    finally:
        log.close()
    with open_kafka_groups(spec) as groups:
        yield Kafka(kafka_broker, spec, topic, groups)


def regroup_group(server: ServerProc, group: str) -> Any:
    """The group as its coordinator describes it; None while it does not exist, or while the
    coordinator cannot be reached (a restarted one, until gRPC's reconnection backoff has passed)."""
    with CoordinatorClient(server.address) as c:
        try:
            return c.describe_group(group).description
        except (RequestRejected, CoordinatorUnavailable):
            return None


def test_a_live_kafka_group_rolls_over_to_regroup_losing_and_repeating_nothing(
        kafka: Kafka, tmp_path: Path) -> None:
    legacy, group = f"legacy-{uuid.uuid4().hex[:6]}", "orders-app"
    ledger, load = Ledger(), Load(kafka.broker.bootstrap, kafka.topic)
    kafka_workers = [KafkaWorker(f"kafka-{i}", kafka.broker.bootstrap, legacy, kafka.topic, ledger)
                     for i in range(CONSUMERS)]
    regroup_workers: list[RegroupWorker] = []
    server: ServerProc | None = None
    try:
        load.start()
        for w in kafka_workers:
            w.start()
        wait_for(lambda: (g := kafka.groups.read(legacy)).state == "stable" and g.members == CONSUMERS
                 and len(g.held) == PARTITIONS, "the Kafka group to be stable with 4 consumers")
        wait_for(lambda: len({r[1] for r in ledger.snapshot()}) == PARTITIONS,
                 "the Kafka consumers to process every partition")
        # The coordinator starts on the live Kafka group, as an operator's would.
        server = start_server(tmp_path / "coord", "--log", kafka.spec, "--session-timeout-ms", "10000",
                              "--heartbeat-interval-ms", "1000", "--migrate-from", kafka.spec,
                              "--migrate-group", f"{group}={legacy}", "--migrate-poll-s", "0.5")

        for step, old in enumerate(kafka_workers, 1):
            if step == 3:  # a coordinator crash mid-roll: the hold is durable, replayed before serving
                server.kill9()
                server = server.restart()
            old.stop()
            new = RegroupWorker(f"regroup-{step}", server.address, kafka.spec, group, kafka.topic, ledger)
            new.start()
            regroup_workers.append(new)
            wait_for(lambda n=step, at=server: (d := regroup_group(at, group)) is not None
                     and len(d.members) == n, f"regroup member {step} to join")
            if step < CONSUMERS:
                wait_for(lambda n=step: (g := kafka.groups.read(legacy)).state == "stable"
                         and g.members == CONSUMERS - n and len(g.held) == PARTITIONS,
                         f"the Kafka group to be stable with {CONSUMERS - step} consumer(s)")
                # Kafka's own rebalance gave the stopped consumer's partitions to the others: nothing
                # is free for regroup yet, and no regroup member may have read anything.
                assert not [r for r in ledger.snapshot() if r[0].startswith("regroup")]
                d = regroup_group(server, group)
                assert all(m.assigned == EMPTY for m in d.members), d
        last_kafka_close = kafka_workers[-1].closed_at

        def stable_on_regroup() -> bool:
            d = regroup_group(server, group)
            return d is not None and d.state is GroupState.STABLE and len(d.members) == CONSUMERS and \
                sum(len(m.assigned) for m in d.members) == PARTITIONS
        wait_for(stable_on_regroup, "the regroup group to own every partition")
        load.stop()
        assert not load.errors and load.acked

        def all_processed() -> bool:
            return {r[3] for r in ledger.snapshot()} >= load.acked
        wait_for(all_processed, "every acknowledged record to be processed")
    finally:
        for w in regroup_workers:
            w.stop()
        for k in kafka_workers:
            if k.is_alive():
                k.stop()
        load.stopping.set()
        if server is not None:
            server.terminate()

    rows = ledger.snapshot()
    counts = collections.Counter(r[3] for r in rows)
    lost = load.acked - set(counts)
    duplicated = {v: n for v, n in counts.items() if n > 1}
    failures = [f for w in (*kafka_workers, *regroup_workers) for f in w.commit_failures]
    by_value = collections.defaultdict(list)
    for who, p, o, v in rows:
        if v in duplicated:
            by_value[v].append((who, p, o))
    assert not lost, f"{len(lost)} records lost of {len(load.acked)}"
    # Every hand-off was clean (commit, then release), so a duplicate would be a bug; show where.
    assert not duplicated, (f"{len(duplicated)} records processed twice (commit failures: {failures}): "
                            f"{dict(list(by_value.items())[:5])}")
    # The regroup members started every partition where the Kafka group had stopped.
    first = {p: min(o for who, q, o, _ in rows if q == p and who.startswith("regroup"))
             for p in range(PARTITIONS)}
    last = {p: max(o for who, q, o, _ in rows if q == p and who.startswith("kafka"))
            for p in range(PARTITIONS)}
    assert all(first[p] == last[p] + 1 for p in range(PARTITIONS)), (first, last)
    assert server is not None
    log = server.log()
    assert f"migration of group '{group}': adopted the offsets Kafka group '{legacy}' committed" in log
    assert "recovered" in log and log.count("not read yet") == 1  # the restart found the hold recorded
    # Figures: how long after the last Kafka consumer closed regroup processed a first record, and
    # the longest pause of any partition during the whole roll (Kafka's own rebalances included).
    timed = list(zip(rows, ledger.times, strict=True))  # every worker has stopped
    first_regroup = min(t for (who, *_), t in timed if who.startswith("regroup"))
    pauses = [max(b - a for a, b in itertools.pairwise([t for (_, q, _, _), t in timed if q == p]))
              for p in range(PARTITIONS)]
    print(f"\n{len(load.acked)} records, {len(rows)} processed; regroup's first record "
          f"{first_regroup - last_kafka_close:.2f} s after the last Kafka consumer closed; longest pause "
          f"of a partition {max(pauses):.1f} s")


def cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``regroup groups ARGS``; a refusal's stderr with its line wrapping undone."""
    out = subprocess.run([sys.executable, "-m", "regroup.cli", "groups", *args], capture_output=True,
                         text=True, timeout=120)
    assert (out.returncode == 0) == ok, (out.returncode, out.stdout, out.stderr)
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout, " ".join(out.stderr.split()))


def test_groups_import_and_export(kafka: Kafka, tmp_path: Path) -> None:
    server = start_server(tmp_path / "coord", "--log", kafka.spec)
    at = ("-c", server.address)
    t = kafka.topic
    legacy = f"legacy-{uuid.uuid4().hex[:6]}"
    kafka.groups.commit_offsets(legacy, {Shard(t, p): 10 * p + 1 for p in range(PARTITIONS)})
    try:
        # Import into a new regroup group: every committed offset, durably through the coordinator.
        src = ("--from", kafka.spec, "--kafka-group", legacy)
        out = json.loads(cli("import", "g", *src, *at, "--json").stdout)
        assert [(r["partition"], r["offset"], r["replaced"]) for r in out["imported"]] == [
            (p, 10 * p + 1, None) for p in range(PARTITIONS)]
        with CoordinatorClient(server.address) as c:
            fetched = c.fetch_offsets(OffsetFetchRequest("g")).offsets
            assert {s.partition: o.offset for s, o in fetched.items()} == {
                p: 10 * p + 1 for p in range(PARTITIONS)}
            assert fetched[Shard(t, 0)].metadata == f"imported from kafka:{legacy}"
        # Again: refused, the group committed those partitions; --force replaces them.
        refused = cli("import", "g", *src, *at, ok=False)
        assert "refused" in refused.stderr and "--force" in refused.stderr
        out = json.loads(cli("import", "g", *src, *at, "--force", "--json").stdout)
        assert out["imported"][3]["replaced"] == 31
        # A group with members is never written to.
        with CoordinatorClient(server.address) as c:
            joined = c.heartbeat(HeartbeatRequest("busy", "m", 0, rebalance_timeout_ms=30_000,
                                                  subscribed_topics=(t,), owned=EMPTY))
            assert joined.error is ErrorCode.NONE, joined.message
        refused = cli("import", "busy", *src, *at, ok=False)
        assert "has 1 member(s)" in refused.stderr

        # Export with key ranges: each partition at the lowest offset of its ranges, and said so.
        with CoordinatorClient(server.address) as c:
            assert c.set_parallelism("g", t, 2).ok
            assert c.reset_offsets("g", {Shard(t, 1, 0, 1 << 31): 5, Shard(t, 1, 1 << 31, 1 << 32): 9}).ok
        out = json.loads(cli("export", "g", "--to", kafka.spec, "--kafka-group", f"{legacy}-back", *at,
                             "--json").stdout)
        rows = {r["partition"]: (r["offset"], r["key_ranges"]) for r in out["exported"]}
        assert rows[1] == (5, 2) and rows[2] == (21, 0)
        assert any("key ranges" in n for n in out["notes"])
        back = kafka.groups.committed_offsets(f"{legacy}-back")
        assert back[Shard(t, 1)] == 5 and back[Shard(t, 7)] == 71

        # Kafka refuses offsets for a group with members: said clearly.
        live = KafkaConsumer({"bootstrap.servers": kafka.broker.bootstrap, "group.id": legacy,
                              "group.protocol": "consumer", "auto.offset.reset": "earliest",
                              "enable.auto.commit": False, "log_level": 0})
        live.subscribe([t])
        try:
            def joined_kafka() -> bool:
                live.poll(0.1)
                return kafka.groups.read(legacy).members == 1
            wait_for(joined_kafka, "the Kafka consumer to join")
            refused = cli("export", "g", "--to", kafka.spec, "--kafka-group", legacy, *at, ok=False)
            assert "is not empty" in refused.stderr and "stop its consumers first" in refused.stderr
        finally:
            live.close()
        missing = cli("import", "g2", "--from", kafka.spec, "--kafka-group", "no-such-group", *at, ok=False)
        assert "has no committed offsets (dead): nothing to import" in missing.stderr
    finally:
        server.terminate()
