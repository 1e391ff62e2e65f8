"""`regroup bench split` at a tiny size: real reader and producer processes, every run checked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from regroup.bench.split import run_split_bench


def test_the_split_bench_checks_every_run_and_reports_read_amplification(
        capsys: pytest.CaptureFixture[str]) -> None:
    run_split_bench(3000, 16, [1, 2], [1, 2], json_output=True)
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == []
    amplification = {(r["layout"], r["readers"]): r["scanned_per_kept"] for r in out["reads"]}
    assert amplification == {("filtered", 1): 1.0, ("filtered", 2): 2.0, ("split", 2): 1.0}
    assert [(p["layout"], p["producers"], p["fsync"]) for p in out["produce"]] == [
        ("one partition", 1, "batch"), ("split", 2, "batch"),
        ("one partition", 1, "never"), ("split", 2, "never")]
    assert all(p["records_per_s"] > 0 for p in out["produce"])


def test_bad_counts_are_refused_by_name() -> None:
    done = subprocess.run([sys.executable, "-m", "regroup.cli", "bench", "split", "--readers", "2,x"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--readers" in done.stderr
