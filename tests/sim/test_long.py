"""Longer runs (marked slow; they still run in CI): a bigger sweep and the 1,000-member group."""

from __future__ import annotations

import pytest

from regroup.sim.check import sweep
from regroup.sim.scenarios import run, scenarios
from regroup.sim.system import ProtocolKind


@pytest.mark.slow
def test_a_longer_sweep_with_more_churn() -> None:
    summary = sweep(40, start_seed=5_000, duration_s=240, events=30)
    assert not summary.failed, [(r.seed, [str(v) for v in r.violations], r.replay) for r in summary.failed]


@pytest.mark.slow
def test_a_sweep_with_stale_requests() -> None:
    summary = sweep(30, start_seed=9_000, stale_requests=True)
    assert not summary.failed, [(r.seed, [str(v) for v in r.violations], r.replay) for r in summary.failed]


@pytest.mark.slow
def test_a_longer_key_range_sweep_with_more_churn() -> None:
    summary = sweep(30, start_seed=20_000, duration_s=240, events=30, key_ranges=True)
    assert not summary.failed, [(r.seed, [str(v) for v in r.violations], r.replay) for r in summary.failed]


@pytest.mark.slow
def test_a_key_range_sweep_with_stale_requests() -> None:
    summary = sweep(20, start_seed=100_000, stale_requests=True, key_ranges=True)
    assert not summary.failed, [(r.seed, [str(v) for v in r.violations], r.replay) for r in summary.failed]


@pytest.mark.slow
def test_a_longer_split_sweep_with_more_churn() -> None:
    summary = sweep(20, start_seed=20_000, duration_s=240, events=30, splits=True)
    assert not summary.failed, [(r.seed, [str(v) for v in r.violations], r.replay) for r in summary.failed]
    assert summary.totals["merges"] > 0 and summary.totals["lanes_cut"] > 0


@pytest.mark.slow
def test_scale_out_in_a_group_of_a_thousand() -> None:
    sc = next(s for s in scenarios() if s.name == "scale-out-1000")
    eager = run(sc, ProtocolKind.CLASSIC_EAGER).metrics
    regroup = run(sc, ProtocolKind.REGROUP).metrics
    assert eager.stops == 5000 and eager.barrier_rounds == 1 and eager.bystander_pause_s > 1
    assert regroup.moved == regroup.stops < 10 and regroup.bystander_pause_s == 0
    assert regroup.handoff_s is not None and regroup.handoff_s < 2
