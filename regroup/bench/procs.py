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
_DASHBOARD = re.compile(r"; dashboard on (http://\S+/)")


def start_coordinator(data_dir: Path, *args: str, timeout: float = 30) -> tuple[subprocess.Popen[str], str]:
    """A coordinator process on a free port; returns it and its HOST:PORT once it listens."""
    proc, line = _start_coordinator(data_dir, args, timeout)
    m = _LISTENING.search(line)
    assert m is not None
    return proc, m.group(1)


def start_coordinator_with_dashboard(data_dir: Path, *args: str, timeout: float = 30,
                                     ) -> tuple[subprocess.Popen[str], str, str]:
    """A coordinator process with its dashboard, both on free loopback ports; returns it, its HOST:PORT
    and the dashboard's URL once it listens."""
    proc, line = _start_coordinator(data_dir, (*args, "--http", "127.0.0.1:0"), timeout)
    listening, dashboard = _LISTENING.search(line), _DASHBOARD.search(line)
    if listening is None or dashboard is None:
        proc.kill()
        raise RuntimeError(f"unexpected start-up line from the coordinator: {line!r}")
    return proc, listening.group(1), dashboard.group(1)


def start_coordinator_process(data_dir: Path, *args: str, timeout: float = 30,
                              ) -> tuple[subprocess.Popen[str], str]:
    """A coordinator process on a free port (unless ``args`` give ``--listen``) and its start-up line
    (``regroup coordinator listening on ...``: address, metrics port, dashboard) once it listens.
    Its stderr goes to ``DATA_DIR.log`` beside the data dir."""
    return _start_coordinator(data_dir, args, timeout)


def _start_coordinator(data_dir: Path, args: tuple[str, ...], timeout: float,
                       ) -> tuple[subprocess.Popen[str], str]:
    """Start the process and return it with its start-up line once it listens."""
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
            line = proc.stdout.readline()
            if _LISTENING.search(line):
                return proc, line
    proc.kill()
    raise RuntimeError(f"the coordinator did not start within {timeout} s")
