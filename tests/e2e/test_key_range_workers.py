"""End to end: several workers in one process (`Consumer(workers=N)`) — a real coordinator process, the
embedded log, one partition cut into four key ranges.

A consumer's four workers own one range each; a second consumer's two workers join, then the first
consumer closes while records are being handled, so every range moves to another worker; more records
follow. Every record is handled exactly once (every hand-off is clean), each key's records in offset
order by every worker, and each range by one worker at a time: in the order the workers handled them,
all workers together, a range's offsets only go up.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from regroup import Consumer
from regroup.client.workers import Worker
from regroup.log import open_log
from regroup.log.base import ConsumedRecord, LogRecord
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import key_hash, range_of, range_shards
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server

pytestmark = pytest.mark.slow

TOPIC, GROUP, KEYS, RANGES = "orders", "g", 37, 4
COORD_ARGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")
WAIT_S = 120  # only how long to wait before calling it a failure; each wait ends on its condition


class Handled:
    """Every record the workers handled, as (member id, offset), in the order they were handled — one
    list for all workers, appended under a lock, so that it is a global order."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int]] = []
        self._changed = threading.Condition()

    def __call__(self, worker: Worker, records: list[ConsumedRecord]) -> None:
        with self._changed:
            self.records.extend((worker.member_id, r.offset) for r in records)
            self._changed.notify_all()

    def wait_for(self, count: int) -> None:
        """Until ``count`` distinct records were handled."""
        with self._changed:
            done = self._changed.wait_for(lambda: len({o for _, o in self.records}) >= count, WAIT_S)
            assert done, f"{len({o for _, o in self.records})} of {count} records handled"


@dataclass
class Running:
    """A consumer whose `run(handler)` runs in a thread of the test."""

    consumer: Consumer
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self, handler: Handled) -> Running:
        def run() -> None:
            try:
                self.consumer.run(handler, stop=self.stop, batch=50, timeout=0.2)
            except BaseException as e:
                self.errors.append(e)

        self.thread = threading.Thread(target=run, name=f"run-{self.consumer.member_id}")
        self.thread.start()
        return self

    def wait_ended(self) -> None:
        assert self.thread is not None
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive() and not self.errors, self.errors


@dataclass
class Cluster:
    server: ServerProc
    log_dir: Path
    keys: list[str] = field(default_factory=list)  # offset -> key

    def produce(self, n: int) -> None:
        log = open_log(str(self.log_dir))
        try:
            keys = [f"key-{i % KEYS}" for i in range(len(self.keys), len(self.keys) + n)]
            log.produce(TOPIC, 0, [LogRecord(k.encode(), b"v", 0) for k in keys])
            self.keys += keys
        finally:
            log.close()

    def consumer(self, name: str, workers: int) -> Consumer:
        return Consumer(GROUP, coordinator=self.server.address, log=str(self.log_dir), topics=[TOPIC],
                        member_id=name, workers=workers, rebalance_timeout_ms=20_000)

    def wait_stable(self, members: set[str]) -> dict[str, list[Shard]]:
        """The ranges of each member once the group is stable with exactly ``members``, all ranges held."""
        want = sorted(range_shards(TOPIC, 0, RANGES))
        deadline = time.monotonic() + WAIT_S
        with CoordinatorClient(self.server.address) as c:
            while time.monotonic() < deadline:
                d = c.describe_group(GROUP).description
                held = {m.member_id: sorted(m.assigned) for m in d.members}
                if (d.state.value == "stable" and set(held) == members
                        and sorted(s for ss in held.values() for s in ss) == want):
                    return held
                time.sleep(0.2)  # the coordinator's state is polled: there is no push to wait on
        raise AssertionError(f"not stable with members {sorted(members)} within {WAIT_S} s")

    def range_for(self, offset: int) -> Shard:
        r = range_of(range_shards(TOPIC, 0, RANGES), key_hash(self.keys[offset].encode(), offset))
        assert r is not None
        return r


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, 1)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), *COORD_ARGS)
    try:
        with CoordinatorClient(server.address) as c:
            assert c.set_parallelism(GROUP, TOPIC, RANGES).error is ErrorCode.NONE
        yield Cluster(server, log_dir)
    finally:
        server.proc.kill()


def test_workers_own_ranges_and_hand_them_off_cleanly_exactly_once_in_key_order(cluster: Cluster) -> None:
    handled = Handled()
    a = Running(cluster.consumer("a", 4)).start(handler=handled)
    b: Running | None = None
    try:
        held = cluster.wait_stable({f"a-w{i}" for i in range(4)})
        assert sorted(map(len, held.values())) == [1, 1, 1, 1]  # four members, one range each
        cluster.produce(2_000)
        handled.wait_for(2_000)
        owners: dict[Shard, set[str]] = collections.defaultdict(set)
        for m, o in handled.records:
            owners[cluster.range_for(o)].add(m)
        assert owners == {s[0]: {m} for m, s in held.items()}  # each range handled by its one worker
        assert_exactly_once_in_order(cluster, handled)

        b = Running(cluster.consumer("b", 2)).start(handler=handled)
        cluster.wait_stable({f"a-w{i}" for i in range(4)} | {"b-w0", "b-w1"})
        cluster.produce(3_000)
        a.consumer.close()  # from another thread than its run(): each worker commits its batch, leaves
        a.wait_ended()
        held = cluster.wait_stable({"b-w0", "b-w1"})
        assert sorted(map(len, held.values())) == [2, 2]
        cluster.produce(2_000)
        handled.wait_for(7_000)
        b.stop.set()
        b.wait_ended()
        b.consumer.close()
    finally:
        for r in (a, b):
            if r is not None:
                r.consumer.close()
    assert_exactly_once_in_order(cluster, handled)
    by_range: dict[Shard, set[str]] = collections.defaultdict(set)
    for m, o in handled.records:
        by_range[cluster.range_for(o)].add(m[0])
    assert all(ms == {"a", "b"} for ms in by_range.values()), "every range moved from a to b"


def assert_exactly_once_in_order(cluster: Cluster, handled: Handled) -> None:
    counts = collections.Counter(o for _, o in handled.records)
    lost = len(cluster.keys) - len(counts)
    dups = sum(n - 1 for n in counts.values())
    assert lost == 0 and dups == 0, f"{lost} lost, {dups} duplicated of {len(cluster.keys)}"
    by_worker: dict[str, dict[str, int]] = collections.defaultdict(dict)  # member -> key -> last offset
    by_range: dict[Shard, tuple[str, int]] = {}  # range -> (worker, offset) handled last
    for m, o in handled.records:
        key, last = cluster.keys[o], by_worker[m]
        assert last.get(key, -1) < o, f"{m}: {key} at offset {o} after offset {last[key]}"
        last[key] = o
        r = cluster.range_for(o)
        before = by_range.get(r)
        assert before is None or before[1] < o, f"{r}: {m} handled {o} after {before} (two workers at once?)"
        by_range[r] = (m, o)
