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


def test_bench_measures_heartbeats_with_and_without_dashboard_pages(
        capsys: pytest.CaptureFixture[str]) -> None:
    result = run_coordinator_bench(40, 500, 1.5, True, sweep=False, group_size=20, compare_unary=False,
                                   dashboard_clients=2)
    capsys.readouterr()
    paged = [w for w in result["sweep"] if w["dashboard_clients"] or w["transport"] == "stream, 0 pages"]
    assert [(w["transport"], w["dashboard_clients"]) for w in paged] == [("stream, 0 pages", 0),
                                                                         ("stream, 2 pages", 2)]
    assert all(w["errors"] == 0 and w["achieved_per_s"] > 40 for w in paged)
    dash = result["dashboard"]
    assert dash["clients"] == 2 and len(dash["client_p99_ms"]) == 2 and dash["client_p99_ratio"] > 0
    assert "JSON fetches" in paged[1]["notes"][-1]
