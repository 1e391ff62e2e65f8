"""End to end on Apache Kafka: a coordinator and consumer processes whose log is ``kafka://`` — the
test session's single-node Kafka broker (tests/log/brokers.py), or REGROUP_TEST_KAFKA_BOOTSTRAP.

The same story as test_consumer_group.py's scale-out-and-in on the embedded log, with Kafka holding
the records and regroup the membership and offsets: every record processed exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord
from tests.coordinator.server_proc import start_server
from tests.e2e.test_consumer_group import COORD_ARGS, PARTITIONS, Cluster, assert_exactly_once
from tests.log.brokers import Broker

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka")]


@dataclass
class KafkaCluster(Cluster):
    """A :class:`Cluster` whose log is a Kafka topic (``spec`` is the ``kafka://`` log spec)."""

    spec: str = ""
    topic: str = "orders"

    def produce(self, n: int) -> None:
        log = open_log(self.spec)
        try:
            batches: dict[int, list[LogRecord]] = {p: [] for p in range(PARTITIONS)}
            for i in range(self.produced, self.produced + n):
                batches[i % PARTITIONS].append(LogRecord(f"k{i}".encode(), f"v{i}".encode(), 1))
            for p, recs in batches.items():
                if recs:
                    log.produce(self.topic, p, recs)
        finally:
            log.close()
        self.produced += n

    def start(self, name: str, instance: str | None = None) -> None:
        args = [sys.executable, "-m", "regroup.demo.worker", self.server.address, self.spec, "g",
                str(self.tmp / f"{name}.out"), "--topic", self.topic]
        if instance:
            args += ["--instance", instance]
        self.workers[name] = subprocess.Popen(args, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                              stderr=open(self.tmp / f"{name}.err", "ab"))  # noqa: SIM115


@pytest.fixture
def kafka_cluster(tmp_path: Path, kafka_broker: Broker) -> Iterator[KafkaCluster]:
    spec = f"kafka://{kafka_broker.bootstrap}"
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    log = open_log(spec)
    try:
        log.create_topic(topic, PARTITIONS)
    finally:
        log.close()
    server = start_server(tmp_path / "coord", "--log", spec, *COORD_ARGS)
    cluster = KafkaCluster(tmp_path, server, tmp_path / "unused", spec=spec, topic=topic)
    try:
        yield cluster
    finally:
        for proc in cluster.workers.values():
            proc.kill()
        cluster.server.proc.kill()


def test_scale_out_and_in_on_kafka_is_exactly_once(kafka_cluster: KafkaCluster) -> None:
    c = kafka_cluster
    c.produce(2_000)
    c.start("a")
    c.start("b")
    c.wait_stable(2)
    c.produce(2_000)
    c.start("c")
    c.wait_stable(3)
    c.produce(2_000)
    c.stop("a")
    c.wait_stable(2)
    c.produce(2_000)
    assert_exactly_once(c)
    assert "revoke" in c.events("a") and "assign" in c.events("c")
