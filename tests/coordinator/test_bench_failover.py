"""`regroup bench failover` briefly: real processes, a member killed with kill -9 once with the
failover grace and once without; the figures come out as JSON and say what they should."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from regroup.cli import app

pytestmark = pytest.mark.slow  # about half a minute: five processes started per mode, two kills


def test_bench_failover_measures_the_grace_against_the_session_timeout() -> None:
    result = CliRunner().invoke(app, [
        "bench", "failover", "--runs", "1", "--baseline-runs", "1", "--members", "2", "--partitions", "4",
        "--grace-ms", "1000", "--session-timeout-ms", "4000", "--kind", "consumer", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    grace, off = out["modes"]
    assert (grace["mode"], grace["failover_grace_ms"], off["mode"], off["failover_grace_ms"]) == (
        "grace", 1000, "off", 0)
    assert grace["kind"] == off["kind"] == "consumer"
    for mode in (grace, off):
        assert mode["runs"] == 1 and mode["partitions_measured"] == 2 == len(mode["samples_ms"])
        assert mode["failover_ms_p50"] <= mode["failover_ms_p99"] <= mode["failover_ms_max"]
    # Nobody takes a partition over before the member is fenced: the grace, or the session timeout
    # less at most a heartbeat interval (the kill falls somewhere between two heartbeats).
    assert min(grace["samples_ms"]) >= 1000 and grace["fence_ms_p50"] >= 1000
    assert min(off["samples_ms"]) >= 4000 - out["settings"]["heartbeat_interval_ms"]
    assert grace["failover_ms_max"] < off["failover_ms_p50"]


@pytest.mark.xdist_group("spark")  # one Spark test at a time (tests/spark/conftest.py)
def test_bench_failover_kills_a_pyspark_application_and_a_surviving_query_takes_its_partitions() -> None:
    """Two PySpark applications, each one query on the regroup source; kill -9 of one (its driver,
    JVM and Python workers) — the other's micro-batches hold the dead one's partitions after the
    grace. About a minute: two Spark applications start, then a third replaces the killed one."""
    result = CliRunner().invoke(app, [
        "bench", "failover", "--kind", "spark", "--runs", "1", "--baseline-runs", "0", "--members", "2",
        "--partitions", "2", "--grace-ms", "1000", "--session-timeout-ms", "30000", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    (mode,) = out["modes"]
    assert (mode["kind"], mode["mode"], mode["runs"], mode["partitions_measured"]) == ("spark", "grace", 1, 1)
    # Fenced by the grace (the session timeout had not run out), and nobody processed the partition
    # before the fence.
    assert 1000 <= mode["fence_ms_p50"] < 30_000
    assert mode["samples_ms"][0] >= mode["fence_ms_p50"]


def test_bench_failover_refuses_an_unknown_kind_of_member() -> None:
    result = CliRunner().invoke(app, ["bench", "failover", "--kind", "flink"])
    assert result.exit_code != 0
    assert "--kind must be one of consumer, spark" in result.output
