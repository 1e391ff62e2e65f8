"""`regroup bench vs-kafka`, smallest shape: the grow scenario once for regroup, Kafka's new protocol and
Kafka's classic protocol, on one real Apache Kafka broker that the bench starts and stops itself."""

from __future__ import annotations

import os

import pytest

from regroup.bench.vs_kafka import SYSTEMS, Settings, run_vs_kafka
from regroup.testing.kafka_broker import KafkaUnavailableError

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kafka")]


def test_grow_for_all_three_systems() -> None:
    if os.environ.get("REGROUP_SKIP_KAFKA") == "1":
        pytest.skip("Apache Kafka is not started (REGROUP_SKIP_KAFKA=1)")
    settings = Settings(members=3, grow_from=3, grow_by=30, grow_timeout_s=60)
    try:
        results = run_vs_kafka(("grow",), SYSTEMS, runs=1, settings=settings)
    except KafkaUnavailableError as e:
        pytest.fail(f"{e} (REGROUP_SKIP_KAFKA=1 skips the tests that need it)", pytrace=False)
    assert results["versions"]["apache_kafka"] == "4.4.0"
    assert results["versions"]["librdkafka"]
    grow = results["grow"]
    assert set(grow) == {"regroup", "Kafka new protocol", "Kafka classic (coop-sticky)"}
    for label, runs in grow.items():
        [figures] = runs
        assert not figures["timed_out"], (label, figures)
        assert figures["partitions_added"] == 30
        # every partition owned by exactly one member (the scenario waits for that), then stable
        for key in ("seconds_first_new_partition_assigned", "seconds_all_owned", "seconds_stable"):
            assert figures[key] is not None and figures[key] > 0, (label, key, figures)
        assert figures["seconds_first_new_partition_assigned"] <= figures["seconds_all_owned"] \
            <= figures["seconds_stable"], (label, figures)
