"""A streams group whose source partition is split on the producer side, end to end: real member
processes of a 1-task streams group (a per-key count), a real coordinator process, the embedded log.
While records flow, the source partition is split into 2 pieces, the task moves from member a to
member b (b resumes from the lanes a committed on their own), and the partition is merged back
whole. Every key's counts come out 1..n in order: nothing lost, nothing twice, per-key order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.messages import OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import CoordinatorUnavailable, RequestRejected
from tests.coordinator.server_proc import ServerProc
from tests.streams.cluster import kill_all, running
from tests.streams.test_end_to_end import wait_until

KEYS = [b"k%d" % i for i in range(50)]


@dataclass
class SplitCluster:
    tmp: Path
    log: EmbeddedLog
    server: ServerProc
    client: CoordinatorClient
    produced: Counter[bytes] = field(default_factory=Counter)
    members: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def produce(self, n: int) -> None:
        with self._lock:
            start = sum(self.produced.values())
            for i in range(start, start + n):
                key = KEYS[i % len(KEYS)]
                self.log.produce("orders", 0, [LogRecord(key, b"x", 0)])
                self.produced[key] += 1

    def member(self, name: str) -> subprocess.Popen[str]:
        out = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115 - the child writes to it
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.streams.counting_member", self.server.address,
             str(self.tmp / "log"), str(self.tmp / f"state-{name}")],
            stdout=subprocess.PIPE, stderr=out, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out.close()
        ready = proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert ready, (self.tmp / f"{name}.log").read_text()
        self.members[name] = proc
        return proc

    def outputs(self) -> dict[bytes, list[int]]:
        """Per key, every count emitted, in order."""
        out: dict[bytes, list[int]] = {}
        offset = 0
        while batch := self.log.read("counts", 0, offset, 10_000):
            for r in batch:
                assert r.key is not None and r.value is not None
                out.setdefault(r.key, []).append(int(r.value))
            offset = batch[-1].offset + 1
        return out

    def caught_up(self) -> bool:
        with self._lock:
            produced = dict(self.produced)
        seen = self.outputs()
        return all(seen.get(k, [0])[-1] == n for k, n in produced.items())

    def committed(self) -> dict[Shard, int]:
        """The group's committed source offsets (its task's part, or the lanes of it)."""
        try:
            got = self.client.fetch_offsets(OffsetFetchRequest("counts", "", -1, None))
        except (CoordinatorUnavailable, RequestRejected):
            return {}
        return {s: c.offset for s, c in got.offsets.items() if s.topic == "orders"}

    def show(self) -> str:
        logs = {n: (self.tmp / f"{n}.log").read_text()[-2000:] for n in self.members}
        return f"committed {self.committed()}; pieces {self.log.key_pieces('orders', 0)}; logs {logs}"


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[SplitCluster]:
    with running(tmp_path, {"orders": 1, "counts": 1}) as (log, server, client):
        assert isinstance(log, EmbeddedLog)
        c = SplitCluster(tmp_path, log, server, client)
        try:
            yield c
        finally:
            kill_all(c.members.values())


def test_a_streams_task_reads_its_split_source_as_lanes_across_a_hand_off_and_a_merge(
    cluster: SplitCluster,
) -> None:
    stop = threading.Event()

    def under_load() -> threading.Thread:  # records keep flowing while the layout changes
        stop.clear()
        def load() -> None:
            while not stop.is_set():
                cluster.produce(20)

        t = threading.Thread(target=load, daemon=True)
        t.start()
        return t

    cluster.produce(500)
    a = cluster.member("a")
    wait_until(cluster.caught_up, "member a to count the first records", show=cluster.show)
    producer = under_load()
    cluster.log.split_partition("orders", 0, 2)
    cluster.produce(200)
    stop.set()
    producer.join()
    wait_until(cluster.caught_up, "a to count every record across the split", show=cluster.show)
    # a reads the split partition as two lanes and commits each on its own.
    lanes = [Shard("orders", 0, lo, hi) for lo, hi in cluster.log.key_pieces("orders", 0)]
    wait_until(lambda: sorted(cluster.committed()) == lanes, "a to commit the two lanes of its task",
               show=cluster.show)

    cluster.member("b")
    a.send_signal(signal.SIGTERM)  # a commits and leaves; the task moves to b, resuming from the lanes
    assert a.wait(timeout=60) == 0, cluster.show()
    cluster.produce(300)
    wait_until(cluster.caught_up, "b to take the task over from its lanes", show=cluster.show)

    producer = under_load()
    cluster.log.merge_partition("orders", 0)
    cluster.produce(200)
    stop.set()
    producer.join()
    cluster.produce(100)  # after the merge: one piece again
    wait_until(cluster.caught_up, "b to count every record across the merge", show=cluster.show)
    # The lanes were joined back into one: the task's part is committed whole again.
    wait_until(lambda: sorted(cluster.committed()) == [Shard("orders", 0)],
               "b to commit its task as one lane after the merge", show=cluster.show)

    seen = cluster.outputs()
    assert set(seen) == set(cluster.produced)
    for key, n in cluster.produced.items():
        assert seen[key] == list(range(1, n + 1)), key  # nothing lost, nothing twice, in order
