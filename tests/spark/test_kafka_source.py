"""The source on a Kafka-protocol log: executors read offset ranges from the broker.

Runs against Apache Kafka: the test session's single-node broker (tests/log/brokers.py), or the
cluster REGROUP_TEST_KAFKA_BOOTSTRAP names. Each partition's records go in one produce request (on
Kafka the end offsets are right after multi-record requests; Tansu's were not).
"""

from __future__ import annotations

import collections
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from regroup.log.base import LogRecord
from regroup.log.kafka import KafkaLog
from tests.coordinator.server_proc import start_server
from tests.log.brokers import Broker

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


def test_a_query_reads_a_kafka_topic(tmp_path: Path, spark: Any, kafka_broker: Broker) -> None:
    topic, parts, per_part = f"spark-{uuid.uuid4().hex[:8]}", 3, 20
    log = KafkaLog(kafka_broker.bootstrap, timeout_s=10.0)
    try:
        log.create_topic(topic, parts)
        for p in range(parts):
            log.produce(topic, p, [LogRecord(f"k{i}".encode(), f"{p}-{i}".encode(), 1_700_000_000_000)
                                   for i in range(per_part)])
    finally:
        log.close()
    spec = f"kafka://{kafka_broker.bootstrap}"
    server = start_server(tmp_path / "coord", "--log", spec)
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    values: dict[tuple[int, int], bytes] = {}

    def on_batch(df: Any, _batch_id: int) -> None:
        for r in df.select("partition", "offset", "value").collect():
            seen[(r.partition, r.offset)] += 1
            values[(r.partition, r.offset)] = bytes(r.value)

    query = (spark.readStream.format("regroup").option("group", "kafka-readers").option("topics", topic)
             .option("coordinator", server.address).option("log", spec).load()
             .writeStream.foreachBatch(on_batch).option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        deadline = time.monotonic() + 60
        while len(seen) < parts * per_part and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
        server.proc.kill()
    assert set(seen) == {(p, o) for p in range(parts) for o in range(per_part)}
    assert all(n == 1 for n in seen.values())
    assert values[(2, 7)] == b"2-7"
