"""Fixtures and settings shared by several test folders."""

from hypothesis import HealthCheck, settings

from tests.log.brokers import kafka_broker, tansu_broker

__all__ = ["kafka_broker", "tansu_broker"]  # session fixtures: Apache Kafka and Tansu brokers

# No wall-clock bounds in property tests: Hypothesis' per-example deadline and its too-slow health
# check fail a correct test on a loaded machine (CI shares two cores with Spark JVMs). A test that
# needs a time budget measures it in a benchmark instead.
settings.register_profile("regroup", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("regroup")
