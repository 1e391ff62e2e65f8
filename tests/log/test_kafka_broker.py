"""regroup.testing.kafka_broker without starting a broker (the Kafka tests use the one it starts)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from regroup.testing import kafka_broker
from regroup.testing.kafka_broker import KAFKA_VERSION, KafkaUnavailableError, start_kafka

ROOT = Path(__file__).resolve().parents[2]


def test_the_fetch_and_the_launcher_pin_the_same_kafka() -> None:
    pom = (ROOT / "scripts" / "kafka" / "pom.xml").read_text()
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert found is not None and found.group(1) == KAFKA_VERSION


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kafka_broker.LIBS_ENV, str(tmp_path))
    with pytest.raises(KafkaUnavailableError, match=r"scripts/kafka/fetch\.sh"):
        start_kafka()
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {kafka_broker._cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)


def test_the_command_line_refuses_a_setting_without_a_value() -> None:
    with pytest.raises(SystemExit) as exc:
        kafka_broker.main(["--set", "num.partitions"])
    assert exc.value.code == 2
