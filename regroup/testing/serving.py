"""What the test services (`regroup.testing.hdfs`, `regroup.testing.kafka_broker`) share: serving
from the command line until Ctrl-C, so both stop the same way, and the tail of a log for errors."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def log_tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` of a service's log, for an error message ("(no log)" when unreadable)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


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
