"""Consumer worker processes (`regroup.demo.worker`) for the end-to-end tests: start one, stop one
cleanly (SIGTERM, exit status 0 or its stderr in the failure)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def start_worker(address: str, log: str, group: str, out: Path, *options: str) -> subprocess.Popen[bytes]:
    """A worker of ``group`` writing what it processes to ``out``, its stderr beside it (``.err``)."""
    args = [sys.executable, "-m", "regroup.demo.worker", address, log, group, str(out), *options]
    return subprocess.Popen(args, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stderr=open(out.with_suffix(".err"), "ab"))


def stop_worker(proc: subprocess.Popen[bytes], out: Path) -> None:
    """SIGTERM: the worker commits, leaves and exits 0."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, out.with_suffix(".err").read_text()
