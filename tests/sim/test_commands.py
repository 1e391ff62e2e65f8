"""`regroup sim check` and `regroup sim compare`, through the typer app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from regroup.sim.commands import sim_app

runner = CliRunner()


def test_check_sweep_json() -> None:
    result = runner.invoke(sim_app, ["check", "--seeds", "3", "--start-seed", "10", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["seeds"] == 3 and out["failed"] == [] and out["events"] > 0


def test_check_replays_one_seed_with_its_event_log() -> None:
    result = runner.invoke(sim_app, ["check", "--seed", "4", "--duration", "40", "--events", "4"])
    assert result.exit_code == 0, result.output
    assert "plan: seed 4:" in result.output and "check: settled" in result.output
    assert "seed 4:" in result.output and "OK" in result.output


def test_compare_quick_json_and_plots(tmp_path: Path) -> None:
    result = runner.invoke(sim_app, ["compare", "--quick", "--json", "--scenario", "scale-out-10",
                                     "--scenario", "slow-member", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    rows = {(r["scenario"], r["protocol"]): r for r in out["rows"]}
    assert len(rows) == 8
    assert rows[("scale-out-10", "classic-eager")]["barrier_rounds"] == 1
    assert rows[("scale-out-10", "regroup")]["bystander_pause_s"] == 0
    assert (tmp_path / "compare_stable.png").stat().st_size > 1000
    assert (tmp_path / "timeline_slow-member.png").exists()
    assert "| scale-out-10 | regroup |" in (tmp_path / "compare.md").read_text()
