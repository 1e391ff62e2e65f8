"""Streams tasks as key ranges, end to end: real member processes of a streams group whose one
subtopology cuts a 1-partition topic into 2 key ranges, against a real coordinator process and the
embedded log. Each member ends up with one range task and processes exactly that half of the keys,
with its own state (a per-key count that moved with the task through a warm-up), every key's records
in order and exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from regroup.log.base import LogRecord, PartitionedLog
from regroup.protocol.keyrange import key_hash, ranges
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.streams.state import StreamsGroupState
from regroup.protocol.streams.topology import TaskId
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable, RequestRejected
from tests.coordinator.server_proc import ServerProc
from tests.streams.cluster import kill_all, running
from tests.streams.test_end_to_end import wait_until

K = 2
KEYS = [b"k%d" % i for i in range(40)]
TASKS = [TaskId("count", 0, r, K) for r in range(K)]


def range_of(key: bytes) -> int:
    point = key_hash(key, 0)
    return next(r for r, (lo, hi) in enumerate(ranges(K)) if lo <= point < hi)


@dataclass
class RangeCluster:
    tmp: Path
    log: PartitionedLog
    server: ServerProc
    client: CoordinatorClient
    produced: Counter[bytes]
    members: list[subprocess.Popen[str]]
    #: Partitions of the output topic: one per range task.
    OUTPUT_PARTITIONS: ClassVar[int] = K
    #: The keys produced, in turn.
    KEYS: ClassVar[list[bytes]] = KEYS

    def produce(self, n: int, start: int = 0) -> None:
        records = []
        for i in range(start, start + n):
            key = self.KEYS[i % len(self.KEYS)]
            records.append(LogRecord(key, b"x", 0))
            self.produced[key] += 1
        self.log.produce("orders", 0, records)  # one hot partition

    def member(self, name: str, parallelism: int = K) -> subprocess.Popen[str]:
        out = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115 - the child writes to it
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.streams.counting_member", self.server.address,
             str(self.tmp / "log"), str(self.tmp / f"state-{name}"), "--parallelism", str(parallelism),
             "--name", name],
            stdout=subprocess.PIPE, stderr=out, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out.close()
        ready = proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert ready, (self.tmp / f"{name}.log").read_text()
        self.members.append(proc)
        return proc

    def outputs(self) -> dict[bytes, list[tuple[int, int, str]]]:
        """Per key, every ``(output partition, count, member)`` emitted, in each partition's order."""
        out: dict[bytes, list[tuple[int, int, str]]] = {}
        for p in range(self.OUTPUT_PARTITIONS):
            offset = 0
            while batch := self.log.read("counts", p, offset, 10_000):
                for r in batch:
                    assert r.key is not None and r.value is not None
                    n, name = r.value.split(b" ")
                    out.setdefault(r.key, []).append((p, int(n), name.decode()))
                offset = batch[-1].offset + 1
        return out

    def caught_up(self) -> bool:
        seen = self.outputs()
        return all(seen.get(k, [(0, 0, "")])[-1][1] == n for k, n in self.produced.items())

    def describe(self) -> StreamsGroupDescription | None:
        try:
            return self.client.describe_streams_group("counts")
        except (CoordinatorUnavailable, RequestRejected):
            return None


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[RangeCluster]:
    with running(tmp_path, {"orders": 1, "counts": K}, "--acceptable-recovery-lag", "100") as (log, server,
                                                                                             client):
        c = RangeCluster(tmp_path, log, server, client, Counter(), [])
        try:
            yield c
        finally:
            kill_all(c.members)


def test_two_members_split_one_partition_by_key_range_each_with_its_own_state(cluster: RangeCluster) -> None:
    assert {range_of(k) for k in KEYS} == set(range(K))  # both halves have keys
    cluster.produce(1_000)
    cluster.member("a")
    wait_until(cluster.caught_up, "member a to count every record of both ranges")
    first = cluster.describe()
    assert first is not None and set(first.members[0].assigned.active) == set(TASKS)

    cluster.member("b")
    def split() -> bool:
        d = cluster.describe()
        return (d is not None and d.state is StreamsGroupState.STABLE
                and sorted(len(m.assigned.active) for m in d.members) == [1, 1])
    wait_until(split, "the two range tasks to spread over a and b", show=cluster.describe)
    cluster.produce(1_000, start=1_000)
    wait_until(cluster.caught_up, "both members to count the second half", show=cluster.describe)

    d = cluster.describe()
    assert d is not None
    owner = {t: m.process_id for m in d.members for t in m.assigned.active}
    name_of = {(cluster.tmp / f"state-{n}" / "process-id").read_text().strip(): n for n in ("a", "b")}
    moved = {name_of[owner[t]] for t in TASKS}
    assert moved == {"a", "b"}  # one range each
    for key, emitted in cluster.outputs().items():
        r = range_of(key)
        # Every record of the key went to its range's task: one output partition, counts 1..n in
        # order (per-key order, exactly once across the hand-off: the state moved with the task).
        assert {p for p, _, _ in emitted} == {TASKS[r].changelog_partition}, key
        assert [n for _, n, _ in emitted] == list(range(1, cluster.produced[key] + 1)), key
        # After the split, only the range's owner counts it.
        assert emitted[-1][2] == name_of[owner[TASKS[r]]], key
    # Each process keeps the state of its own range task (b's restored from the changelog).
    b_task = next(t for t in TASKS if name_of[owner[t]] == "b")
    assert (cluster.tmp / "state-b" / f"counts-count-changelog.{b_task.changelog_partition}.sqlite3").exists()

    # A member declaring another cut of the keys is refused: the group's state is cut in 2.
    c = cluster.member("c", parallelism=4)
    assert c.wait(timeout=60) != 0
    assert "has parallelism 2 (key ranges per partition), and this member declares 4" in \
        (cluster.tmp / "c.log").read_text()
    after = cluster.describe()
    assert after is not None and len(after.members) == 2 and after.epoch == d.epoch
