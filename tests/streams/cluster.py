"""A running streams cluster for end-to-end tests: an embedded log with the given topics and a real
coordinator process on it (tuned for quick tests), torn down in the right order — member processes
first (the caller's), then the client, the coordinator and the log."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from regroup.log import open_log
from regroup.log.base import PartitionedLog
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server


@contextmanager
def running(tmp: Path, topics: Mapping[str, int], *flags: str,
            ) -> Iterator[tuple[PartitionedLog, ServerProc, CoordinatorClient]]:
    """The log under ``tmp/log`` with ``topics`` (name: partitions), a coordinator on it (its data
    under ``tmp/data``, short session and heartbeat, extra ``flags``) and a client of it."""
    log = open_log(str(tmp / "log"))
    for topic, partitions in topics.items():
        log.create_topic(topic, partitions)
    server = start_server(tmp / "data", "--log", str(tmp / "log"), "--session-timeout-ms", "6000",
                          "--heartbeat-interval-ms", "500", "--topic-refresh-s", "0.5", *flags)
    client = CoordinatorClient(server.address, timeout_s=5)
    try:
        yield log, server, client
    finally:
        client.close()
        server.terminate()
        log.close()


def kill_all(members: Iterable[subprocess.Popen[str]]) -> None:
    """Kill the member processes still running (a test that failed half-way leaves some)."""
    for m in members:
        if m.poll() is None:
            m.kill()
            m.wait()
