"""A partition split on the producer side under a running PySpark query (docs/spark.md, "Split
partitions"): real Spark, a real coordinator process, the embedded log, a producer thread writing all
along. The partition is split in two, one piece split again, then merged back whole, while the
group's parallelism goes 1 -> 2 -> 1; the query reads it as lanes, one per piece, cut at each split
and joined after the merge. Its sink keeps one file per batch id (written atomically, so a replayed
batch would overwrite its own): at the end every record is in it exactly once, each key in order.
The driver side without Spark, case by case: tests/spark/test_member_lanes.py."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import range_shards
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import RequestRejected
from tests.coordinator.server_proc import ServerProc, start_server
from tests.spark.conftest import SESSION_MS, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

TOPIC, GROUP, KEYS = "events", "split", 10


class Producer(threading.Thread):
    """Writes ``key-{i % KEYS}`` = ``i`` to partition 0, 10 records every 200 ms (little data: Spark on a
    busy 2-core machine may take seconds a batch), until stopped; it lets go of a piece being split or
    merged at its next produce call (the log's rule). Every call writes every key, so every piece it
    holds: a call that wrote only some of the pieces being merged would keep the others until the
    merge's deadline (tests/log/test_split_producer_holds_pieces.py)."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(daemon=True)
        self.log_dir = log_dir
        self.count = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with EmbeddedLog(self.log_dir, fsync="never") as log:
                while not self.stopping.is_set():
                    i = self.count
                    log.produce(TOPIC, 0, [LogRecord(f"key-{j % KEYS}".encode(), str(j).encode(), 0)
                                           for j in range(i, i + KEYS)])
                    self.count = i + KEYS
                    time.sleep(0.2)
        except BaseException as e:  # reported by the test (stop())
            self.error = e

    def stop(self) -> int:
        self.stopping.set()
        self.join(timeout=60)
        assert self.error is None, self.error
        return self.count


@dataclass
class SplitCluster:
    tmp: Path
    server: ServerProc
    log_dir: Path
    spark: Any
    out: Path
    queries: list[Any] = field(default_factory=list)

    def start(self, name: str) -> Any:
        out = self.out

        def sink(df: Any, batch_id: int) -> None:  # one file per batch id, replaced atomically
            rows = [(r.offset, bytes(r.key).decode(), int(bytes(r.value))) for r in
                    df.select("offset", "key", "value").collect()]
            tmp = out / f".{batch_id}.tmp"
            tmp.write_text(json.dumps(rows))
            os.replace(tmp, out / f"{batch_id}.json")

        query = (self.spark.readStream.format("regroup").option("group", GROUP).option("topics", TOPIC)
                 .option("coordinator", self.server.address).option("log", str(self.log_dir))
                 .option("maxRecordsPerTrigger", "3000").option("rebalanceTimeoutMs", "20000").load()
                 .writeStream.queryName(name).foreachBatch(sink)
                 .option("checkpointLocation", str(self.checkpoint(name)))
                 .trigger(processingTime="200 milliseconds").start())
        self.queries.append(query)
        return query

    def checkpoint(self, name: str) -> Path:
        return self.tmp / "checkpoints" / name

    def checkpointed_keys(self, name: str) -> list[set[str]]:
        """The shard keys of the source's end offsets in a query's checkpoint, batch by batch."""
        out = []
        for f in sorted((self.checkpoint(name) / "offsets").glob("[0-9]*"), key=lambda p: int(p.name)):
            with contextlib.suppress(IndexError, ValueError):  # a file Spark is writing
                out.append(set(json.loads(f.read_text().splitlines()[2])["ends"]))
        return out

    def batches(self) -> dict[int, list[tuple[int, str, int]]]:
        out = {}
        for f in self.out.glob("[0-9]*.json"):
            out[int(f.stem)] = [tuple(r) for r in json.loads(f.read_text())]
        return out

    def values(self) -> list[int]:
        return [v for _, rows in sorted(self.batches().items()) for _, _, v in rows]

    def wait_processed(self, upto: int, timeout: float = 300) -> None:
        """Wait until the first ``upto`` records were processed (a guard against a hang, not a pause)."""
        deadline = time.monotonic() + timeout
        while len(set(self.values()) & set(range(upto))) < upto:
            if time.monotonic() > deadline:
                done = set(self.values())
                raise AssertionError(
                    f"timed out after {timeout} s waiting for the first {upto} records: "
                    f"{len(done & set(range(upto)))} processed (lowest missing "
                    f"{min(set(range(upto)) - done)}) in {len(self.batches())} batches; last checkpointed "
                    f"shards {self.checkpointed_keys('a')[-1:]}")
            time.sleep(0.2)

    def parallelism(self, n: int) -> None:
        with CoordinatorClient(self.server.address) as c:
            assert c.set_parallelism(GROUP, TOPIC, n).error is ErrorCode.NONE

    def wait_ranges(self, n: int, timeout: float = 300) -> None:
        want = sorted(range_shards(TOPIC, 0, n))

        def settled() -> bool:
            with CoordinatorClient(self.server.address) as c:
                try:
                    d = c.describe_group(GROUP).description
                except RequestRejected:  # no such group yet: the query has not joined
                    return False
            return (d.state.value == "stable" and sorted(s for m in d.members for s in m.assigned) == want
                    and not any(m.pending_revocation for m in d.members))

        wait_until(settled, timeout, f"the query to hold the {n} ranges")


@pytest.fixture
def split_cluster(tmp_path: Path, spark: Any) -> Iterator[SplitCluster]:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, 1)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), "--session-timeout-ms", str(SESSION_MS),
                          "--heartbeat-interval-ms", "500")
    out = tmp_path / "out"
    out.mkdir()
    c = SplitCluster(tmp_path, server, log_dir, spark, out)
    yield c
    for q in c.queries:
        with contextlib.suppress(Exception):
            q.stop()
    server.proc.kill()
    server.proc.wait(timeout=10)


def test_a_query_reads_a_partition_split_split_again_and_merged_exactly_once(
        split_cluster: SplitCluster) -> None:
    c = split_cluster
    producer = Producer(c.log_dir)
    producer.start()
    try:
        c.start("a")
        c.wait_ranges(1)
        c.wait_processed(100)
        with EmbeddedLog(c.log_dir) as log:
            log.split_partition(TOPIC, 0, 2)  # one shard, two lanes
            wait_until(lambda: len(c.checkpointed_keys("a")[-1]) == 2, 300, "the partition in two lanes")
            assert all(k.startswith(f"{TOPIC}:0:") for k in c.checkpointed_keys("a")[-1])
            c.wait_processed(producer.count)
            c.parallelism(2)  # a range per piece: handed off (lanes committed, ranges resumed from them)
            c.wait_ranges(2)
            c.wait_processed(producer.count)
            lower = log.layout(TOPIC, 0).open_pieces()[0]
            log.split_partition(TOPIC, 0, 2, piece=lower.id)  # the lower range now spans two pieces
            wait_until(lambda: len(c.checkpointed_keys("a")[-1]) == 3, 300, "the lower range in two lanes")
            c.wait_processed(producer.count)
            log.merge_partition(TOPIC, 0)  # whole again: the ranges' lanes read sealed pieces on
            c.wait_processed(producer.count)
            c.parallelism(1)
            c.wait_ranges(1)
            c.wait_processed(producer.count)
    finally:
        total = producer.stop()
    c.wait_processed(total)
    values = c.values()
    counts = collections.Counter(values)
    dups = {v: n for v, n in counts.items() if n > 1}
    assert set(counts) == set(range(total)), f"lost {sorted(set(range(total)) - set(counts))[:5]}"
    assert not dups, f"{len(dups)} records processed twice, e.g. {sorted(dups)[:5]}"
    last: dict[str, int] = {}
    for _, rows in sorted(c.batches().items()):
        for _, key, v in rows:
            assert int(key.rpartition("-")[2]) == v % KEYS
            assert last.get(key, -1) < v, f"{key}: {v} after {last[key]}"
            last[key] = v
    keys = c.checkpointed_keys("a")
    assert {len(k) for k in keys} >= {1, 2, 3}, "the query did not read the lanes the test meant"
    assert keys[-1] == {f"{TOPIC}:0"}, keys[-1]
