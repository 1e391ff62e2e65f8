"""Real PySpark streaming queries against a real coordinator process and the embedded log.

One SparkSession serves every test (starting one costs ~7 s); the tests run on one xdist worker
(``xdist_group("spark")``, with ``--dist loadgroup`` in scripts/test.sh).
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.protocol.describe import GroupDescription
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable
from tests.coordinator.server_proc import ServerProc, start_server

TOPIC = "orders"
PARTITIONS = 6
SESSION_MS = 6000


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from regroup.spark import register

    session = (SparkSession.builder.master("local[2]").appName("regroup-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@dataclass
class Batch:
    at: float
    batch_id: int
    records: list[tuple[int, int]]


@dataclass
class Query:
    """A running query and every batch it completed (recorded by its foreachBatch)."""

    name: str
    handle: Any
    batches: list[Batch] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def records(self) -> list[tuple[int, int]]:
        with self.lock:
            return [r for b in self.batches for r in b.records]

    def partitions(self) -> set[int]:
        return {p for p, _ in self.records()}

    def batch_times(self, since: float = 0.0) -> list[float]:
        with self.lock:
            return [b.at for b in self.batches if b.at >= since]

    def stop(self) -> None:
        self.handle.stop()


@dataclass
class Cluster:
    tmp: Path
    server: ServerProc
    log_dir: Path
    spark: Any
    group: str = "pipeline"
    produced: int = 0
    queries: dict[str, Query] = field(default_factory=dict)
    #: Every query started, restarts included (what was processed is counted over all of them).
    runs: list[Query] = field(default_factory=list)

    def produce(self, n: int) -> None:
        log = open_log(f"embedded://{self.log_dir}?fsync=never")
        try:
            per: dict[int, list[LogRecord]] = collections.defaultdict(list)
            for i in range(self.produced, self.produced + n):
                rec = LogRecord(f"k{i}".encode(), str(i).encode(), 1_700_000_000_000 + i)
                per[i % PARTITIONS].append(rec)
            for p, recs in per.items():
                log.produce(TOPIC, p, recs)
        finally:
            log.close()
        self.produced += n

    def start(self, name: str, instance: str | None = None, **options: str) -> Query:
        reader = (self.spark.readStream.format("regroup").option("group", self.group)
                  .option("topics", TOPIC).option("coordinator", self.server.address)
                  .option("log", str(self.log_dir)).option("maxRecordsPerTrigger", "2000")
                  .option("rebalanceTimeoutMs", "20000"))
        if instance is not None:
            reader = reader.option("instanceId", instance)
        for k, v in options.items():
            reader = reader.option(k, v)
        query = Query(name, None)

        def on_batch(df: Any, batch_id: int) -> None:
            rows = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
            with query.lock:
                query.batches.append(Batch(time.monotonic(), batch_id, rows))

        query.handle = (reader.load().writeStream.queryName(name).foreachBatch(on_batch)
                        .option("checkpointLocation", str(self.tmp / "checkpoints" / name))
                        .trigger(processingTime="200 milliseconds").start())
        self.queries[name] = query
        self.runs.append(query)
        return query

    def records_since(self, t: float) -> dict[str, int]:
        """Records each query processed in batches completed after monotonic time ``t``."""
        out = {}
        for name, q in self.queries.items():
            with q.lock:
                out[name] = sum(len(b.records) for b in q.batches if b.at >= t)
        return out

    def records_of(self, q: Query, since: float) -> list[tuple[int, int]]:
        with q.lock:
            return [r for b in q.batches if b.at >= since for r in b.records]

    def describe(self) -> GroupDescription:
        with CoordinatorClient(self.server.address) as c:
            return c.describe_group(self.group).description

    def wait_stable(self, members: int, timeout: float = 60) -> dict[str, frozenset[Shard]]:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                d = last = self.describe()
            except Exception:
                time.sleep(0.2)
                continue
            if d.state.value == "stable" and len(d.members) == members and \
                    sum(len(m.assigned) for m in d.members) == PARTITIONS:
                return {m.member_id: m.assigned for m in d.members}
            time.sleep(0.2)
        raise AssertionError(f"group not stable with {members} members after {timeout} s: {last}")

    def wait_processed(self, timeout: float = 60) -> collections.Counter[tuple[int, int]]:
        """Every produced record seen at least once (or the timeout); the counts per record."""
        deadline = time.monotonic() + timeout
        while True:
            counts = collections.Counter(r for q in self.runs for r in q.records())
            if len(counts) >= self.produced or time.monotonic() > deadline:
                return counts
            time.sleep(0.2)

    def committed(self) -> dict[int, int]:
        return {s.partition: c.offset for s, c in self.describe().offsets.items()}

    def reader_pid(self, member_id: str) -> int:
        """The pid of the process running a member's driver-side reader (from its client id)."""
        with CoordinatorClient(self.server.address) as c:
            client = c.describe_group(self.group).clients[member_id]
        return int(client.client_id.rpartition(":")[2])

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a Prometheus counter's samples with these labels, from the coordinator's /metrics."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.server.metrics_port}/metrics").read().decode()
        return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def expected_records(c: Cluster) -> set[tuple[int, int]]:
    per = collections.Counter(i % PARTITIONS for i in range(c.produced))
    return {(p, o) for p, n in per.items() for o in range(n)}


@pytest.fixture
def cluster(tmp_path: Path, spark: Any, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A coordinator process and an embedded log; the session timeout is SESSION_MS unless the test
    is marked ``@pytest.mark.session_ms(N)``."""
    marker = request.node.get_closest_marker("session_ms")
    session_ms = int(marker.args[0]) if marker is not None else SESSION_MS
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, PARTITIONS)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), "--session-timeout-ms", str(session_ms),
                          "--heartbeat-interval-ms", "500", "--metrics-port", "0")
    c = Cluster(tmp_path, server, log_dir, spark)
    yield c
    for q in c.queries.values():
        with contextlib.suppress(Exception):
            q.stop()
    server.proc.kill()
    server.proc.wait(timeout=10)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``cond()`` holds; ``timeout`` only guards against a hang. A call to the coordinator
    that fails on a loaded machine (unavailable, or /metrics not answering) counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while not _holds(cond):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _holds(cond: Callable[[], bool]) -> bool:
    try:
        return cond()
    except (CoordinatorUnavailable, OSError):  # URLError is an OSError
        return False
