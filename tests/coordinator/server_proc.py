"""Start a real coordinator process for tests (and find out where it listens)."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

_LINE = re.compile(r"listening on (?P<addr>\S+?)(?: \(metrics on \S+:(?P<metrics>\d+)\))?;")
_DASHBOARD = re.compile(r"; dashboard on (?P<url>http://\S+/)$")


@dataclass
class ServerProc:
    proc: subprocess.Popen[str]
    address: str
    metrics_port: int | None
    data_dir: Path
    args: list[str] = field(default_factory=list)
    log_path: Path | None = None
    #: The dashboard's base URL (``http://HOST:PORT/``) when started with ``--http``.
    dashboard_url: str | None = None

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 15) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def restart(self) -> ServerProc:
        """Start again on the same port and data dir (after kill9 or terminate)."""
        extra = self.args[self.args.index("--data-dir") + 2:]
        return start_server(self.data_dir, *extra, listen=self.address, log_path=self.log_path)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path is not None and self.log_path.exists() else ""


def start_server(data_dir: Path, *extra: str, listen: str = "127.0.0.1:0", timeout: float = 20,
                 log_path: Path | None = None) -> ServerProc:
    args = ["--listen", listen, "--data-dir", str(data_dir), *extra]
    log_path = log_path or data_dir.parent / f"{data_dir.name}.log"
    err = open(log_path, "a")  # noqa: SIM115 - the child keeps writing to it
    proc = subprocess.Popen([sys.executable, "-m", "regroup.coordinator.server", *args],
                            stdout=subprocess.PIPE, stderr=err, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    err.close()
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"coordinator exited with {proc.returncode}:\n{log_path.read_text()}")
        if sel.select(timeout=0.1):
            line = proc.stdout.readline()
            m = _LINE.search(line)
            if m:
                metrics = m.group("metrics")
                dashboard = _DASHBOARD.search(line.rstrip("\n"))
                return ServerProc(proc, m.group("addr"), int(metrics) if metrics else None, data_dir, args,
                                  log_path, dashboard.group("url") if dashboard else None)
    proc.kill()
    raise RuntimeError(f"coordinator did not start in {timeout} s:\n{log_path.read_text()}")
