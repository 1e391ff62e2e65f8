"""Streams members as real processes against a real coordinator process and the embedded log: a
stateful per-key count whose state follows its tasks — scale-out through warm-ups promoted by event,
and a kill -9 failing over to standbys — with every key's count exact at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from regroup.log.base import LogRecord, PartitionedLog
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.streams.state import StreamsGroupState
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable, RequestRejected
from tests.coordinator.server_proc import ServerProc
from tests.streams.cluster import kill_all, running

PARTITIONS = 4
KEYS = [b"k%d" % i for i in range(40)]


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 90,
               show: Callable[[], object] = lambda: "") -> None:
    """Poll ``cond``; the timeout only turns a hang into a failure naming what never happened."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {show()}")
        time.sleep(0.05)


@dataclass
class Cluster:
    tmp: Path
    log: PartitionedLog
    server: ServerProc
    client: CoordinatorClient
    produced: Counter[bytes]
    members: list[subprocess.Popen[str]]

    def produce(self, n: int, start: int = 0) -> None:
        by_partition: dict[int, list[LogRecord]] = {}
        for i in range(start, start + n):
            key = KEYS[i % len(KEYS)]
            by_partition.setdefault(zlib.crc32(key) % PARTITIONS, []).append(LogRecord(key, b"x", 0))
            self.produced[key] += 1
        for p, records in sorted(by_partition.items()):
            self.log.produce("orders", p, records)

    def member(self, name: str, *extra: str) -> subprocess.Popen[str]:
        out = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115 - the child writes to it
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.streams.counting_member", self.server.address,
             str(self.tmp / "log"), str(self.tmp / f"state-{name}"), *extra],
            stdout=subprocess.PIPE, stderr=out, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out.close()
        ready = proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert ready, (self.tmp / f"{name}.log").read_text()
        self.members.append(proc)
        return proc

    def counts(self) -> dict[bytes, int]:
        """The newest count emitted per key (the outputs are at least once: take the largest)."""
        latest: dict[bytes, int] = {}
        for p in range(PARTITIONS):
            offset = 0
            while batch := self.log.read("counts", p, offset, 10_000):
                for r in batch:
                    assert r.key is not None and r.value is not None
                    latest[r.key] = max(latest.get(r.key, 0), int(r.value))
                offset = batch[-1].offset + 1
        return latest

    def caught_up(self) -> bool:
        return self.counts() == dict(self.produced)

    def describe(self) -> StreamsGroupDescription | None:
        try:
            return self.client.describe_streams_group("counts")
        except (CoordinatorUnavailable, RequestRejected):
            return None


@pytest.fixture()
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    flags = getattr(request, "param", ())
    with running(tmp_path, {"orders": PARTITIONS, "counts": PARTITIONS}, "--acceptable-recovery-lag", "100",
                 *flags) as (log, server, client):
        c = Cluster(tmp_path, log, server, client, Counter(), [])
        try:
            yield c
        finally:
            kill_all(c.members)


def actives(d: StreamsGroupDescription | None) -> dict[str, int]:
    return {} if d is None else {m.process_id: len(m.assigned.active) for m in d.members}


def test_scale_out_moves_tasks_through_warm_ups_and_every_count_stays_exact(cluster: Cluster) -> None:
    cluster.produce(2_000)
    a = cluster.member("a")
    wait_until(cluster.caught_up, "member a to count every record")

    cluster.member("b")
    # b first restores copies (warm-ups, at most 2 at a time), which are promoted once caught up.
    def balanced() -> bool:
        d = cluster.describe()
        return d is not None and d.state is StreamsGroupState.STABLE and sorted(actives(d).values()) == [2, 2]
    wait_until(balanced, "the tasks to spread 2/2 over a and b")
    cluster.produce(2_000, start=2_000)
    wait_until(cluster.caught_up, "both members to count the second half")

    # b's state directory holds the stores of the tasks it took over, restored from the changelog.
    assert len(list((cluster.tmp / "state-b").glob("*.sqlite3"))) >= 2
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=60) == 0, (cluster.tmp / "a.log").read_text()
    wait_until(lambda: actives(cluster.describe()).get(_process_id(cluster, "b")) == PARTITIONS,
               "b to run every task after a left", show=cluster.describe)
    cluster.produce(400, start=4_000)
    wait_until(cluster.caught_up, "b to count everything after taking a's tasks over")


@pytest.mark.parametrize("cluster", [("--standby-replicas", "1")], indirect=True)
def test_kill_9_fails_over_to_standbys_with_exact_state(cluster: Cluster) -> None:
    cluster.produce(2_000)
    cluster.member("a")
    cluster.member("b")
    def with_standbys() -> bool:
        d = cluster.describe()
        return (d is not None and d.state is StreamsGroupState.STABLE
                and sorted(actives(d).values()) == [2, 2]
                and all(len(m.assigned.standby) == 2 for m in d.members))
    wait_until(with_standbys, "2 actives and 2 standbys on each member")
    wait_until(cluster.caught_up, "the members to count every record")

    victim = cluster.members[1]
    victim.kill()  # SIGKILL: no leave, no last commit
    victim.wait()
    cluster.produce(2_000, start=2_000)
    survivor = _process_id(cluster, "a")
    wait_until(lambda: actives(cluster.describe()).get(survivor) == PARTITIONS,
               "a to take over every task once b's session expired")
    wait_until(cluster.caught_up, "a to count everything, state exact after the failover")


def _process_id(cluster: Cluster, name: str) -> str:
    return (cluster.tmp / f"state-{name}" / "process-id").read_text().strip()


def test_a_static_member_restarts_with_its_state_and_gets_its_tasks_back(cluster: Cluster) -> None:
    cluster.produce(2_000)
    cluster.member("a", "--instance", "counter-a")
    b = cluster.member("b", "--instance", "counter-b")
    def spread() -> bool:
        d = cluster.describe()
        return d is not None and d.state is StreamsGroupState.STABLE and sorted(actives(d).values()) == [2, 2]
    wait_until(spread, "the tasks to spread 2/2 over a and b")
    wait_until(cluster.caught_up, "the members to count every record")
    before = cluster.describe()
    assert before is not None
    b_tasks = next(m.assigned.active for m in before.members if m.instance_id == "counter-b")

    b.send_signal(signal.SIGTERM)  # a static member steps out (epoch -2): its tasks wait for it
    assert b.wait(timeout=60) == 0, (cluster.tmp / "b.log").read_text()
    cluster.produce(1_000, start=2_000)
    cluster.member("b", "--instance", "counter-b")  # same instance id, same state directory
    def back() -> bool:
        d = cluster.describe()
        return d is not None and d.state is StreamsGroupState.STABLE and any(
            m.instance_id == "counter-b" and m.assigned.active == b_tasks for m in d.members)
    wait_until(back, "b to get its own tasks back", show=cluster.describe)
    wait_until(cluster.caught_up, "b to count what was produced while it was away")
    after = cluster.describe()
    assert after is not None and after.epoch == before.epoch  # nothing was reassigned
