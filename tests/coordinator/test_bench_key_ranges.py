"""`regroup bench key-ranges` briefly: a real coordinator process, one partition drained by one member
and by workers on key ranges; every run checked (exactly once, key order), figures as JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from regroup.cli import app

pytestmark = pytest.mark.slow  # about ten seconds: four drains of a few hundred records


def test_bench_key_ranges_drains_one_partition_with_workers_and_checks_every_run() -> None:
    result = CliRunner().invoke(app, [
        "bench", "key-ranges", "--records", "400", "--keys", "16", "--work-ms", "0.5", "--workers", "2,4",
        "--handlers", "io", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"] is True
    runs = out["runs"]
    assert [(r["handler"], r["workers"]) for r in runs] == [("io", 1), ("io", 2), ("io", 4)]
    for r in runs:
        assert r["records"] == 400 and r["exactly_once"] and r["key_order_kept"] and not r["errors"]
        assert r["drain_s"] > 0 and r["records_per_s"] > 0
    assert runs[0]["speedup"] == 1.0


@pytest.mark.parametrize("args, wrong", [
    (["--workers", "1"], "--workers"), (["--workers", "x"], "--workers"),
    (["--handlers", "gpu"], "--handlers")])
def test_bench_key_ranges_refuses_bad_options(args: list[str], wrong: str) -> None:
    result = CliRunner().invoke(app, ["bench", "key-ranges", *args])
    assert result.exit_code == 2 and wrong in result.output
