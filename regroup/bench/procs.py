"""Start real regroup processes for benchmarks (and tests): a coordinator, consumer workers."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on (\S+?)[;\s]")


def start_coordinator(data_dir: Path, *args: str, timeout: float = 30) -> tuple[subprocess.Popen[str], str]:
    """A coordinator process on a free port; returns it and its HOST:PORT once it listens."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    err = open(data_dir.parent / f"{data_dir.name}.log", "a")  # noqa: SIM115 - the child writes to it
    proc = subprocess.Popen(
        [sys.executable, "-m", "regroup.coordinator.server", "--listen", "127.0.0.1:0", "--data-dir",
         str(data_dir), *args], stdout=subprocess.PIPE, stderr=err, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    err.close()
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the coordinator exited with status {proc.returncode}; see "
                               f"{data_dir.parent / (data_dir.name + '.log')}")
        if sel.select(timeout=0.1):
            m = _LISTENING.search(proc.stdout.readline())
            if m:
                return proc, m.group(1)
    proc.kill()
    raise RuntimeError(f"the coordinator did not start within {timeout} s")
