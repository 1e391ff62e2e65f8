"""`regroup bench coordinator` on a tiny load: it starts the processes, measures and reports."""

from __future__ import annotations

import json

import pytest

from regroup.bench.coordinator import run_coordinator_bench


def test_bench_reports_rates_latencies_and_saturation(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_coordinator_bench(60, 500, 1.5, True, sweep=False, group_size=30, compare_unary=False)
    printed = json.loads(capsys.readouterr().out)
    assert printed == result
    assert result["groups"] == 2 and result["members"] == 60
    (window,) = result["sweep"]
    assert window["transport"] == "stream" and window["offered_per_s"] == 120
    assert window["achieved_per_s"] > 60 and window["errors"] == 0
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["server_p99_ms"] > 0 and window["server_cpu"] > 0
