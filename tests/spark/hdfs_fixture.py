"""A real HDFS for the task-mode tests, as a session fixture: one single-node cluster (Hadoop's
MiniDFSCluster, regroup.testing.hdfs) from the jars ``scripts/hdfs/fetch.sh`` fetched, started at
most once per test process and stopped when it exits.

Import ``hdfs`` into a test module to use it. Several modules may: pytest makes one fixture per
module that defines it, so the cluster itself is kept here, started by the first of them (every
test gets its own directory in it). Missing jars or Java fail the tests that use it;
``REGROUP_SKIP_HDFS=1`` skips them instead, and ``REGROUP_TEST_HDFS_URI=hdfs://HOST:PORT`` uses a
running HDFS instead.
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass

import pytest

from regroup.testing.hdfs import HADOOP_VERSION, HdfsUnavailableError, MiniHdfs, start_hdfs

__all__ = ["Hdfs", "hdfs"]


@dataclass(frozen=True)
class Hdfs:
    #: ``hdfs://HOST:PORT``
    uri: str
    #: What it is, for messages.
    name: str
    #: Seconds the cluster took to start (0 for an external one).
    start_seconds: float = 0.0


_started: list[MiniHdfs] = []
_lock = threading.Lock()


@pytest.fixture(scope="session")
def hdfs() -> Hdfs:
    external = os.environ.get("REGROUP_TEST_HDFS_URI")
    if external:
        return Hdfs(external.rstrip("/"), f"the HDFS at {external}")
    if os.environ.get("REGROUP_SKIP_HDFS") == "1":
        pytest.skip("HDFS is not started (REGROUP_SKIP_HDFS=1)")
    with _lock:
        if not _started:
            try:
                cluster = start_hdfs()
            except HdfsUnavailableError as e:
                pytest.fail(f"{e} (REGROUP_SKIP_HDFS=1 skips the tests that need it)", pytrace=False)
            atexit.register(cluster.stop)
            _started.append(cluster)
        cluster = _started[0]
    return Hdfs(cluster.uri, f"HDFS (Hadoop {HADOOP_VERSION}'s MiniDFSCluster)", cluster.start_seconds)
