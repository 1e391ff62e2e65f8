"""End to end: key ranges — a real coordinator process, real consumer processes, the embedded log.

Parallelism beyond the partition count: one partition spread over several consumer processes, and a
live group whose parallelism an operator changes (split, merge, back to whole partitions) while
records are produced and members come and go. Every record is processed exactly once (every
hand-off here is clean), and every key's records are processed in offset order by each process.
"""

from __future__ import annotations

import collections
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import range_shards
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server
from tests.e2e.worker_proc import start_worker, stop_worker

pytestmark = pytest.mark.slow

TOPIC, GROUP, KEYS = "orders", "g", 37
COORD_ARGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")


@dataclass
class RangeCluster:
    tmp: Path
    server: ServerProc
    log_dir: Path
    partitions: int
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    keys: dict[tuple[int, int], str] = field(default_factory=dict)  # (partition, offset) -> key
    ends: dict[int, int] = field(default_factory=dict)

    def client(self) -> CoordinatorClient:
        return CoordinatorClient(self.server.address)

    def produce(self, n: int) -> None:
        log = open_log(str(self.log_dir))
        try:
            batches: dict[int, list[LogRecord]] = collections.defaultdict(list)
            for i in range(len(self.keys), len(self.keys) + n):
                key = f"key-{i % KEYS}"  # a key lives in one partition, as a partitioner would put it
                batches[i % KEYS % self.partitions].append(LogRecord(key.encode(), f"v{i}".encode(), 0))
            for p, recs in batches.items():
                log.produce(TOPIC, p, recs)
                for r in recs:
                    self.keys[(p, self.ends.get(p, 0))] = r.key.decode()  # type: ignore[union-attr]
                    self.ends[p] = self.ends.get(p, 0) + 1
        finally:
            log.close()

    def start(self, name: str) -> None:
        self.workers[name] = start_worker(self.server.address, str(self.log_dir), GROUP,
                                          self.tmp / f"{name}.out", "--topic", TOPIC)

    def stop(self, name: str) -> None:
        stop_worker(self.workers.pop(name), self.tmp / f"{name}.out")

    def parallelism(self, n: int) -> None:
        with self.client() as c:
            assert c.set_parallelism(GROUP, TOPIC, n).error is ErrorCode.NONE

    def wait_stable(self, members: int, ranges: int, timeout: float = 60) -> list[int]:
        """Shards per member once the group is stable with ``members`` members, each partition in
        ``ranges`` key ranges."""
        want = sorted(s for p in range(self.partitions) for s in range_shards(TOPIC, p, ranges))
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while time.monotonic() < deadline:
                if GROUP in {g for g, _, _ in c.list_groups()}:
                    d = c.describe_group(GROUP).description
                    held = sorted(s for m in d.members for s in m.assigned)
                    if d.state.value == "stable" and len(d.members) == members and held == want:
                        return sorted(len(m.assigned) for m in d.members)
                time.sleep(0.2)
        raise AssertionError(f"not stable with {members} members in {ranges} ranges within {timeout} s")

    def processed(self) -> dict[str, list[tuple[int, int]]]:
        """Each process's records in the order it processed them (complete lines only)."""
        return {f.stem: [(int(p), int(o)) for p, o in (ln.split() for ln in f.read_text().split("\n")[:-1])]
                for f in self.tmp.glob("*.out")}

    def wait_all_processed(self, timeout: float = 60) -> dict[str, list[tuple[int, int]]]:
        deadline = time.monotonic() + timeout
        while True:
            done = self.processed()
            if len({r for rs in done.values() for r in rs}) >= len(self.keys) or time.monotonic() > deadline:
                return done
            time.sleep(0.2)

    def assert_exactly_once_in_key_order(self) -> None:
        done = self.wait_all_processed()
        counts = collections.Counter(r for rs in done.values() for r in rs)
        missing = len(self.keys) - len(counts)
        dups = sum(n - 1 for n in counts.values())
        assert missing == 0 and dups == 0, f"{missing} lost, {dups} duplicated of {len(self.keys)}"
        for name, rs in done.items():
            last: dict[str, int] = {}
            for p, o in rs:
                key = self.keys[(p, o)]
                assert last.get(key, -1) < o, f"{name}: {key} at offset {o} after offset {last[key]}"
                last[key] = o


@pytest.fixture
def ranges_cluster(tmp_path: Path) -> Iterator[RangeCluster]:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, 2)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), *COORD_ARGS)
    cluster = RangeCluster(tmp_path, server, log_dir, 2)
    yield cluster
    for proc in cluster.workers.values():
        proc.kill()
    server.proc.kill()


def test_one_partition_spread_over_more_processes_than_partitions(ranges_cluster: RangeCluster) -> None:
    c = ranges_cluster
    c.parallelism(3)  # before anyone joins: 2 partitions, 6 shards
    c.produce(3_000)
    for name in ("a", "b", "c"):
        c.start(name)
    assert c.wait_stable(3, 3) == [2, 2, 2]
    c.produce(3_000)
    done = c.wait_all_processed()
    assert all(done.get(n) for n in ("a", "b", "c")), "a process got no records"
    c.assert_exactly_once_in_key_order()


def test_live_split_merge_and_back_to_whole_partitions_lose_and_repeat_nothing(
        ranges_cluster: RangeCluster) -> None:
    c = ranges_cluster
    c.produce(2_000)
    for name in ("a", "b"):
        c.start(name)
    c.wait_stable(2, 1)
    c.produce(2_000)
    c.parallelism(4)  # split: each partition's progress goes to its four ranges
    c.start("c")
    c.produce(2_000)
    c.wait_stable(3, 4)
    c.produce(2_000)
    c.parallelism(3)  # ranges of another parallelism: each new range resumes at the laggard it overlaps
    c.produce(2_000)
    c.wait_stable(3, 3)
    c.stop("a")
    c.produce(2_000)
    c.wait_stable(2, 3)
    c.parallelism(1)  # merge back: whole partitions resume at the lowest fragment and skip the rest
    c.produce(2_000)
    c.wait_stable(2, 1)
    c.produce(2_000)
    c.assert_exactly_once_in_key_order()
    # once the whole partitions pass every fragment, each partition has one committed offset again
    want = {(p, end) for p, end in c.ends.items()}
    deadline = time.monotonic() + 30
    with c.client() as client:
        while True:
            offsets = client.describe_group(GROUP).description.offsets
            got = {(s.partition, o.offset) for s, o in offsets.items() if s.whole}
            if (got == want and all(s.whole for s in offsets)) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert got == want and all(s.whole for s in offsets), offsets
