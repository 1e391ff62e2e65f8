"""Tests of regroup.log: the embedded log and the Kafka backend (against a real Tansu broker)."""
