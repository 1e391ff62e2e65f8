"""Key ranges in the PySpark source: a group that cuts a partition into key ranges, read by streaming
queries (docs/key-ranges.md, regroup/spark/source.py). Real Spark, a real coordinator process, the
embedded log; one partition, keyed and keyless records.

* two queries share one partition cut in four ranges: each reads only its ranges' keys, and together
  they process every record exactly once;
* the parallelism changes (2 -> 4 -> 1) while a query runs: nothing lost, nothing repeated;
* a partition merged back from ranges with uneven progress resumes at the laggard and skips what was
  done (the skip pieces reach the executors and the checkpoint).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.protocol.describe import GroupDescription
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import key_hash, range_shards
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server
from tests.spark.conftest import SESSION_MS, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

TOPIC, GROUP = "events", "ranged"
WHOLE = Shard(TOPIC, 0)


def key_of(i: int) -> bytes | None:
    """Record i's key: 101 keys, and every 17th record keyless (spread by its offset)."""
    return None if i % 17 == 0 else f"key-{i % 101}".encode()


@dataclass
class RangeQuery:
    """A running query and every batch it completed: (offset, key, value) rows, per batch."""

    name: str
    handle: Any = None
    batches: list[list[tuple[int, bytes | None, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rows(self) -> list[tuple[int, bytes | None, str]]:
        with self.lock:
            return [r for b in self.batches for r in b]


@dataclass
class RangeCluster:
    tmp: Path
    server: ServerProc
    log_dir: Path
    spark: Any
    produced: int = 0
    queries: dict[str, RangeQuery] = field(default_factory=dict)

    def client(self) -> CoordinatorClient:
        return CoordinatorClient(self.server.address)

    def produce(self, n: int) -> None:
        log = open_log(f"embedded://{self.log_dir}?fsync=never")
        try:
            log.produce(TOPIC, 0, [LogRecord(key_of(i), str(i).encode(), 1_700_000_000_000 + i)
                                   for i in range(self.produced, self.produced + n)])
        finally:
            log.close()
        self.produced += n

    def parallelism(self, n: int) -> None:
        with self.client() as c:
            ack = c.set_parallelism(GROUP, TOPIC, n)
        assert ack.error is ErrorCode.NONE, ack

    def start(self, name: str, instance: str | None = None, max_records: int = 2000) -> RangeQuery:
        reader = (self.spark.readStream.format("regroup").option("group", GROUP).option("topics", TOPIC)
                  .option("coordinator", self.server.address).option("log", str(self.log_dir))
                  .option("maxRecordsPerTrigger", str(max_records)).option("rebalanceTimeoutMs", "20000"))
        if instance is not None:
            reader = reader.option("instanceId", instance)
        query = RangeQuery(name)

        def on_batch(df: Any, batch_id: int) -> None:
            rows = [(r.offset, None if r.key is None else bytes(r.key), bytes(r.value).decode())
                    for r in df.select("offset", "key", "value").collect()]
            with query.lock:
                query.batches.append(rows)

        query.handle = (reader.load().writeStream.queryName(name).foreachBatch(on_batch)
                        .option("checkpointLocation", str(self.checkpoint(name)))
                        .trigger(processingTime="200 milliseconds").start())
        self.queries[name] = query
        return query

    def checkpoint(self, name: str) -> Path:
        return self.tmp / "checkpoints" / name

    def checkpointed_offsets(self, name: str) -> list[dict[str, Any]]:
        """The source's end offsets in a query's checkpoint, batch by batch (Spark's offset log: a
        version line, the batch's metadata, then one line per source)."""
        out = []
        for f in sorted((self.checkpoint(name) / "offsets").glob("[0-9]*"), key=lambda p: int(p.name)):
            lines = f.read_text().splitlines()
            out.append(json.loads(lines[2]))
        return out

    def describe(self) -> GroupDescription:
        with self.client() as c:
            return c.describe_group(GROUP).description

    def wait_ranges(self, parallelism: int, members: int, timeout: float = 90) -> dict[str, frozenset[Shard]]:
        """Wait until the group is stable with ``members`` members holding exactly the partition's
        ranges at ``parallelism``; each member's ranges, by instance id (member id if dynamic)."""
        want = sorted(range_shards(TOPIC, 0, parallelism))
        got: dict[str, frozenset[Shard]] = {}

        def settled() -> bool:
            d = self.describe()
            got.clear()
            got.update({m.instance_id or m.member_id: m.assigned for m in d.members})
            return (d.state.value == "stable" and len(d.members) == members
                    and sorted(s for m in d.members for s in m.assigned) == want
                    and not any(m.pending_revocation for m in d.members))

        wait_until(settled, timeout, f"{members} members holding the {parallelism} ranges")
        return dict(got)

    def counts(self) -> collections.Counter[int]:
        return collections.Counter(o for q in self.queries.values() for o, _, _ in q.rows())

    def wait_processed(self, want: set[int], timeout: float = 90) -> collections.Counter[int]:
        """Wait until every offset of ``want`` was processed (a failure guard, not a pause); the
        counts per offset then."""
        wait_until(lambda: want <= set(self.counts()), timeout, f"{len(want)} records to be processed")
        return self.counts()

    def assert_exactly_once(self, want: set[int] | None = None) -> None:
        want = set(range(self.produced)) if want is None else want
        counts = self.wait_processed(want)
        extra = set(counts) - want
        dups = {o: n for o, n in counts.items() if n > 1}
        assert not extra, f"{len(extra)} records processed that should not be, e.g. {sorted(extra)[:5]}"
        assert not dups, f"{len(dups)} records processed twice, e.g. {sorted(dups)[:5]}"
        for q in self.queries.values():
            with q.lock:
                batches = list(q.batches)
            for o, key, value in (r for b in batches for r in b):
                assert key == key_of(o) and value == str(o), f"query {q.name}: record {o} is wrong"
            assert_keys_in_order(q.name, batches)

    def wait_committed(self, upto: int, timeout: float = 60) -> None:
        """Wait until every committed fragment of the partition is at ``upto``: every finished
        batch was committed at a boundary, so no query holds anything in flight."""
        wait_until(lambda: {c.offset for c in self.describe().offsets.values()} == {upto}, timeout,
                   f"every range committed at {upto}")


def assert_keys_in_order(name: str, batches: list[list[tuple[int, bytes | None, str]]]) -> None:
    """Per-key order across a query's batches: each key's records in a batch come after all of its
    records in the batches before."""
    last: dict[bytes, int] = {}
    for rows in batches:
        first: dict[bytes, int] = {}
        for o, key, _ in rows:
            if key is not None:
                first[key] = min(first.get(key, o), o)
        for key, o in first.items():
            assert last.get(key, -1) < o, f"query {name}: {key!r} at {o} in a batch after offset {last[key]}"
        for o, key, _ in rows:
            if key is not None:
                last[key] = max(last.get(key, -1), o)


@pytest.fixture
def ranges_cluster(tmp_path: Path, spark: Any) -> Iterator[RangeCluster]:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, 1)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), "--session-timeout-ms", str(SESSION_MS),
                          "--heartbeat-interval-ms", "500")
    c = RangeCluster(tmp_path, server, log_dir, spark)
    yield c
    for q in c.queries.values():
        with contextlib.suppress(Exception):
            q.handle.stop()
    server.proc.kill()
    server.proc.wait(timeout=10)


def test_two_queries_share_one_partition_cut_in_four_ranges(ranges_cluster: RangeCluster) -> None:
    c = ranges_cluster
    c.parallelism(4)  # before anyone joins
    c.produce(4_000)
    c.start("a", instance="a")
    c.start("b", instance="b")
    owners = c.wait_ranges(4, members=2)
    assert sorted(len(s) for s in owners.values()) == [2, 2]
    c.assert_exactly_once()
    # The first query may have read every range until the second joined; once the group is stable
    # and every finished batch is committed, each query reads its own ranges only.
    c.wait_committed(c.produced)
    split_at = c.produced
    c.produce(3_000)
    c.assert_exactly_once()
    assert c.wait_ranges(4, members=2) == owners, "the assignment moved while records flowed"
    for name, q in c.queries.items():
        after = [(o, key) for o, key, _ in q.rows() if o >= split_at]
        assert after, f"query {name} read nothing of its ranges"
        strays = [o for o, key in after if not any(s.lo <= key_hash(key, o) < s.hi for s in owners[name])]
        assert not strays, f"query {name} read {len(strays)} records of another query's ranges: {strays[:5]}"
    # Keyless records were read too (spread over the ranges by their offsets).
    assert any(key is None for q in c.queries.values() for _, key, _ in q.rows())


def test_a_live_change_of_parallelism_loses_and_repeats_nothing(ranges_cluster: RangeCluster) -> None:
    c = ranges_cluster
    c.parallelism(2)
    c.produce(2_000)
    c.start("a", max_records=800)
    c.wait_ranges(2, members=1)
    c.assert_exactly_once()
    for n in (4, 1):
        # The change arrives mid-stream: records are still coming (800 read a trigger) when the
        # ranges are handed off, at a batch boundary.
        before = c.produced
        c.produce(4_000)

        def busy(at: int = before) -> bool:
            return sum(1 for o in c.counts() if o >= at) >= 800

        wait_until(busy, 90, "the query to be busy with the new records")
        c.parallelism(n)
        c.wait_ranges(n, members=1)
        c.produce(1_000)
        c.assert_exactly_once()
    c.wait_committed(c.produced)
    assert {s for s in c.describe().offsets} == {WHOLE}, "the fragments did not fold back into one"
    # The query ran at the three parallelisms, and each new range began where the ranges it was cut
    # from (or merged of) stopped: the hand-offs were clean, at batch boundaries.
    offsets = [off for off in c.checkpointed_offsets("a") if off["ends"]]
    assert {2, 4, 1} <= {len(off["ends"]) for off in offsets}
    for prev, off in itertools.pairwise(offsets):
        if set(off["ends"]) != set(prev["ends"]):
            assert set(off["starts"].values()) == set(prev["ends"].values()), (prev, off)


def test_a_merged_partition_resumes_at_the_laggard_and_skips_the_rest(ranges_cluster: RangeCluster) -> None:
    """Progress kept in two ranges' fragments, the low half done to 300 and the high half to 800 (as
    two members at parallelism 2 would leave it before the group went back to 1): the query that
    takes the whole partition begins at 300 and skips the high half's records below 800."""
    c = ranges_cluster
    c.produce(1_200)
    lo, hi = range_shards(TOPIC, 0, 2)
    with c.client() as client:
        assert client.reset_offsets(GROUP, {lo: 300, hi: 800}).error is ErrorCode.NONE
    c.start("a", max_records=200)  # 300..800 takes a few batches: the skips ride in each of them
    assert list(c.wait_ranges(1, members=1).values()) == [frozenset({WHOLE})]

    def todo(o: int) -> bool:
        done = 300 if key_hash(key_of(o), o) < lo.hi else 800
        return o >= done

    c.assert_exactly_once({o for o in range(c.produced) if todo(o)})
    c.produce(300)
    c.assert_exactly_once({o for o in range(c.produced) if todo(o)})
    # The skips are in the checkpoint (a replay skips them too), and only while they drop records.
    skips = [off["skips"] for off in c.checkpointed_offsets("a") if "skips" in off]
    assert skips and all(s == {f"{TOPIC}:0": [[hi.lo, hi.hi, 800]]} for s in skips), skips
    # Once past 800, commits of the whole partition fold both fragments back into one.
    c.wait_committed(c.produced)
    assert {s for s in c.describe().offsets} == {WHOLE}
