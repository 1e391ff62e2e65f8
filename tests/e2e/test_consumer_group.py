"""End to end: a real coordinator process, real consumer processes, the embedded log on disk.

Every test checks the counts that matter: every produced record processed at least once, and exactly
once when every hand-off was clean.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord
from regroup.protocol.messages import OffsetCommitRequest
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server
from tests.e2e.worker_proc import start_worker, stop_worker

pytestmark = pytest.mark.slow

PARTITIONS = 8
COORD_ARGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")


@dataclass
class Cluster:
    tmp: Path
    server: ServerProc
    log_dir: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    produced: int = 0

    @property
    def client(self) -> CoordinatorClient:
        return CoordinatorClient(self.server.address)

    def produce(self, n: int) -> None:
        log = open_log(str(self.log_dir))
        try:
            batches: dict[int, list[LogRecord]] = collections.defaultdict(list)
            for i in range(self.produced, self.produced + n):
                batches[i % PARTITIONS].append(LogRecord(f"k{i}".encode(), f"v{i}".encode(), 0))
            for p, recs in batches.items():
                log.produce("orders", p, recs)
        finally:
            log.close()
        self.produced += n

    def start(self, name: str, instance: str | None = None) -> None:
        options = ["--instance", instance] if instance else []
        self.workers[name] = start_worker(self.server.address, str(self.log_dir), "g",
                                          self.tmp / f"{name}.out", *options)

    def stop(self, name: str) -> None:
        stop_worker(self.workers.pop(name), self.tmp / f"{name}.out")

    def kill9(self, name: str) -> None:
        proc = self.workers.pop(name)
        proc.kill()
        proc.wait(timeout=10)

    def processed(self) -> collections.Counter[tuple[int, int]]:
        counts: collections.Counter[tuple[int, int]] = collections.Counter()
        for f in self.tmp.glob("*.out"):
            # A worker may be mid-write: only complete (newline-terminated) lines count.
            for line in f.read_text().split("\n")[:-1]:
                p, o = line.split()
                counts[(int(p), int(o))] += 1
        return counts

    def events(self, name: str) -> str:
        path = self.tmp / f"{name}.out.events"
        return path.read_text() if path.exists() else ""

    def wait_stable(self, members: int, timeout: float = 40) -> dict[str, frozenset[Shard]]:
        deadline = time.monotonic() + timeout
        with self.client as c:
            while time.monotonic() < deadline:
                d = c.describe_group("g").description if "g" in {g for g, _, _ in c.list_groups()} else None
                if d is not None and d.state.value == "stable" and len(d.members) == members and \
                        sum(len(m.assigned) for m in d.members) == PARTITIONS:
                    return {m.member_id: m.assigned for m in d.members}
                time.sleep(0.2)
        raise AssertionError(f"group did not become stable with {members} members in {timeout} s")

    def wait_all_processed(self, timeout: float = 40) -> collections.Counter[tuple[int, int]]:
        deadline = time.monotonic() + timeout
        while True:
            counts = self.processed()
            if len(counts) >= self.produced or time.monotonic() > deadline:
                return counts
            time.sleep(0.2)

    def group_epoch(self) -> int:
        with self.client as c:
            return c.describe_group("g").description.epoch


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(*coord_args: str) -> Cluster:
        log_dir = tmp_path / "log"
        log = open_log(str(log_dir))
        log.create_topic("orders", PARTITIONS)
        log.close()
        server = start_server(tmp_path / "coord", "--log", str(log_dir), *(coord_args or COORD_ARGS))
        made.append(Cluster(tmp_path, server, log_dir))
        return made[-1]

    yield make
    for c in made:
        for proc in c.workers.values():
            proc.kill()
        c.server.proc.kill()


@pytest.fixture
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster()


def assert_exactly_once(c: Cluster) -> None:
    counts = c.wait_all_processed()
    missing = c.produced - len(counts)
    dups = sum(n - 1 for n in counts.values())
    assert missing == 0 and dups == 0, f"{missing} lost, {dups} duplicated of {c.produced}"


def assert_at_least_once(c: Cluster) -> int:
    counts = c.wait_all_processed()
    assert len(counts) == c.produced, f"{c.produced - len(counts)} of {c.produced} records never processed"
    return sum(n - 1 for n in counts.values())


def test_scale_out_and_in_is_exactly_once(cluster: Cluster) -> None:
    cluster.produce(5_000)
    for n in ("a", "b", "c"):
        cluster.start(n)
    cluster.wait_stable(3)
    cluster.produce(5_000)
    cluster.start("d")
    cluster.wait_stable(4)
    cluster.produce(5_000)
    cluster.stop("a")
    cluster.stop("b")
    cluster.wait_stable(2)
    cluster.produce(5_000)
    assert_exactly_once(cluster)
    assert "revoke" in cluster.events("a") and "assign" in cluster.events("d")


def test_kill9_member_is_fenced_and_its_partitions_move(cluster: Cluster) -> None:
    cluster.produce(5_000)
    for n in ("a", "b", "c"):
        cluster.start(n)
    before = cluster.wait_stable(3)
    epoch = cluster.group_epoch()
    cluster.kill9("c")
    after = cluster.wait_stable(2, timeout=30)  # after the 6 s session timeout
    assert cluster.group_epoch() > epoch
    assert set(after) < set(before)
    cluster.produce(5_000)
    assert_at_least_once(cluster)  # c's uncommitted tail is read again: at least once


def test_static_restart_gets_its_partitions_back_without_rebalance(cluster: Cluster) -> None:
    cluster.produce(3_000)
    cluster.start("a", instance="alpha")
    cluster.start("b", instance="beta")
    before = cluster.wait_stable(2)
    epoch = cluster.group_epoch()
    b_events = len(cluster.events("b"))
    cluster.stop("a")  # leaves with -2: its partitions stay reserved for "alpha"
    cluster.produce(2_000)
    cluster.start("a2", instance="alpha")
    after = cluster.wait_stable(2)
    assert cluster.group_epoch() == epoch, "a static restart must not bump the group epoch"
    assert sorted(after.values(), key=sorted) == sorted(before.values(), key=sorted)
    assert "revoke" not in cluster.events("b")[b_events:], "b must not notice a's restart"
    assert_exactly_once(cluster)


def test_coordinator_kill9_and_restart(make_cluster: Callable[..., Cluster]) -> None:
    # A realistic ratio: the coordinator is back well within the members' session timeout, so they
    # never consider their partitions lost. (Down for longer, they would: at-least-once then.)
    cluster = make_cluster("--session-timeout-ms", "20000", "--heartbeat-interval-ms", "1000")
    cluster.produce(3_000)
    for n in ("a", "b"):
        cluster.start(n)
    before = cluster.wait_stable(2)
    epoch = cluster.group_epoch()
    cluster.server.kill9()
    cluster.produce(2_000)  # members keep reading their partitions while the coordinator is down
    time.sleep(2)
    cluster.server = cluster.server.restart()
    after = cluster.wait_stable(2)
    assert after == before and cluster.group_epoch() == epoch
    cluster.produce(2_000)
    assert_exactly_once(cluster)


def test_zombie_commit_is_refused(cluster: Cluster) -> None:
    cluster.produce(2_000)
    cluster.start("a")
    cluster.start("z")
    members = cluster.wait_stable(2)
    with cluster.client as c:
        d = c.describe_group("g").description
    zombie = cluster.workers["z"]
    zombie.send_signal(signal.SIGSTOP)  # frozen: no heartbeats; fenced after the session timeout
    cluster.wait_stable(1, timeout=30)
    cluster.produce(2_000)
    zid = next(m.member_id for m in d.members if m.member_id in members and
               m.member_id != next(iter(cluster.wait_stable(1))))
    zepoch = next(m.epoch for m in d.members if m.member_id == zid)
    with cluster.client as c:  # what the zombie would send: refused
        ack = c.commit_offsets(OffsetCommitRequest("g", zid, zepoch, {Shard("orders", 0): 10**9}))
    assert ack.error.value in ("UNKNOWN_MEMBER_ID", "STALE_MEMBER_EPOCH")
    zombie.send_signal(signal.SIGCONT)  # wakes up: its own commit is refused, it loses its partitions
    deadline = time.monotonic() + 20
    while "lost" not in cluster.events("z") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "lost" in cluster.events("z")
    assert_at_least_once(cluster)
    with cluster.client as c:
        offsets = c.describe_group("g").offsets
    assert all((o.committed or 0) < 10**9 for o in offsets)
