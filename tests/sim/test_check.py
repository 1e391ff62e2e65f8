"""The fault-injected sweep over the real core: invariants hold, runs are reproducible."""

from __future__ import annotations

from regroup.sim.check import run_seed, sweep
from regroup.sim.faults import make_plan


def test_a_short_sweep_holds_every_invariant() -> None:
    summary = sweep(20, start_seed=0)
    assert not summary.failed, [(r.seed, [str(v) for v in r.violations], r.replay) for r in summary.failed]
    assert summary.events > 10_000
    assert summary.max_settle_ms > 0


def test_the_same_seed_replays_event_for_event() -> None:
    a, b = run_seed(7, record=True), run_seed(7, record=True)
    assert a.digest == b.digest and a.log == b.log and a.events == b.events
    assert run_seed(8).digest != a.digest


def test_a_run_is_reported_with_its_replay_command_and_plan() -> None:
    r = run_seed(3, duration_s=60, events=6, record=True)
    assert r.replay == "regroup sim check --seed 3 --duration 60 --events 6"
    assert r.plan[0].startswith("seed 3:") and any("quiet" in line for line in r.plan)
    assert any("check: settled" in line for line in r.log)
    assert r.stats["heartbeats"] > 0 and r.settle_ms is not None


def test_plans_bring_every_kind_of_fault() -> None:
    kinds = {e.kind for seed in range(40) for e in make_plan(seed, 120_000, 12).events}
    assert kinds == {"crash", "shutdown", "join", "stall", "cut", "coordinator", "grow", "create"}
    plan = make_plan(1, 120_000, 12)
    assert all(e.at_ms < plan.quiet_at_ms for e in plan.events)
    assert make_plan(1, 120_000, 12) == plan


def test_stale_requests_are_opt_in() -> None:
    assert not make_plan(5, 60_000, 5).network.stale_requests
    assert make_plan(5, 60_000, 5, stale_requests=True).network.stale_requests
    r = run_seed(5, duration_s=60, events=5, stale_requests=True)
    assert r.replay.endswith("--stale-requests")


def test_runs_do_not_depend_on_the_string_hash_seed() -> None:
    import os
    import subprocess
    import sys

    code = "from regroup.sim.check import run_seed; print(run_seed(11).digest)"
    digests = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": h}).stdout.strip()
        for h in ("1", "4242")
    }
    assert len(digests) == 1
