"""Fixtures shared by several test folders."""

from tests.log.brokers import kafka_broker, tansu_broker

__all__ = ["kafka_broker", "tansu_broker"]  # session fixtures: Apache Kafka and Tansu brokers
