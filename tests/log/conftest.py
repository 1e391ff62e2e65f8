"""Fixtures of the Kafka backend's tests: ``broker`` runs each of them on Apache Kafka and on Tansu.

The brokers are session fixtures (tests/log/brokers.py, made visible everywhere by tests/conftest.py).
Kafka is the reference; Tansu, a second and partial implementation of the protocol, keeps regroup
honest about "any Kafka-compatible cluster" (it lacks CreatePartitions, so it alone exercises the
unsupported-request path). Where Tansu deviates, the tests assert Kafka's behaviour and xfail on Tansu
only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from regroup.log.kafka import KafkaLog
from tests.log.brokers import Broker


@pytest.fixture(params=["kafka", "tansu"])
def broker(request: pytest.FixtureRequest) -> Broker:
    """Each test of the Kafka backend runs on Apache Kafka and on Tansu."""
    found: Broker = request.getfixturevalue(f"{request.param}_broker")
    return found


@pytest.fixture
def kafka_log(broker: Broker) -> Iterator[KafkaLog]:
    log = KafkaLog(broker.bootstrap, timeout_s=10.0)
    try:
        yield log
    finally:
        log.close()


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test (or earlier run on the same broker) uses."""
    return f"t-{uuid.uuid4().hex[:12]}"
