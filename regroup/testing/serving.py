"""Serving a test service from the command line until Ctrl-C (`python -m regroup.testing.hdfs`,
`python -m regroup.testing.kafka_broker`): one loop for both, so they stop the same way."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def serve_until_signal(process: subprocess.Popen[bytes], stop: Callable[[], int | None], keep: bool,
                       work_dir: Path) -> int:
    """Wait until SIGINT/SIGTERM or the service's own exit, stop it, say how; the exit status (0 when
    stopped by a signal, 1 when the service ended on its own)."""
    stopping = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stopping and process.poll() is None:
            time.sleep(0.2)
    finally:
        code = stop()
    print(f"stopped (exit {code})" + (f"; files kept in {work_dir}" if keep else ""))
    return 0 if stopping else 1
