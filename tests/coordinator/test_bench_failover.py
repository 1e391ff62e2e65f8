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
        "--grace-ms", "1000", "--session-timeout-ms", "4000", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    grace, off = out["modes"]
    assert (grace["mode"], grace["failover_grace_ms"], off["mode"], off["failover_grace_ms"]) == (
        "grace", 1000, "off", 0)
    for mode in (grace, off):
        assert mode["runs"] == 1 and mode["partitions_measured"] == 2 == len(mode["samples_ms"])
        assert mode["failover_ms_p50"] <= mode["failover_ms_p99"] <= mode["failover_ms_max"]
    # Nobody takes a partition over before the member is fenced: the grace, or the session timeout
    # less at most a heartbeat interval (the kill falls somewhere between two heartbeats).
    assert min(grace["samples_ms"]) >= 1000 and grace["fence_ms_p50"] >= 1000
    assert min(off["samples_ms"]) >= 4000 - out["settings"]["heartbeat_interval_ms"]
    assert grace["failover_ms_max"] < off["failover_ms_p50"]
