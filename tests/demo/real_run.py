"""What every real run of a PySpark demo must show, whichever demo (the slow tests)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

R = TypeVar("R")


def run_for_real(run_demo: Callable[..., R], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                 **kwargs: Any) -> tuple[R, dict[str, Any]]:
    """Run a demo with ``--json`` and check what every run must: one JSON object printed, the same as
    the result and as ``results.json`` (written before the data directory went), the workload
    produced and drained, the four events in order, the report written, and the data directory
    removed. Returns the result and the printed object."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    result: Any = run_demo(json_output=True, report=tmp_path / "report", **kwargs)
    printed = json.loads(capsys.readouterr().out)  # --json: one JSON object and nothing else
    assert printed == result.to_json()
    stored = json.loads(Path(result.report["json"]).read_text())  # written before the cleanup
    assert stored["data_dir"] is not None and {**stored, "data_dir": None} == printed
    assert result.produced > 0 and result.drained
    assert [e.event for e in result.events] == ["scale-out", "scale-in", "static-roll", "kill-9"]
    assert Path(result.report["png"]).exists() and Path(result.report["html"]).exists()
    assert result.data_dir is None and printed["data_dir"] is None  # removed: not kept
    return result, printed
