"""End to end: a partition split and merged on the producer side while a producer writes and a
consumer group reads it — real processes (a coordinator, a producer, consumer workers, the
`regroup topics split/merge` commands) over real sockets and the embedded log.

The group's own key ranges change too (parallelism 1 → 2 → 1), so the consumers read across every
combination: a whole partition over several pieces (one lane per piece), ranges that match the
pieces, a range over two pieces, sealed pieces read together after a merge. Every record is
processed exactly once (every hand-off here is clean) and each process sees every key's records in
the order they were produced.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.errors import ErrorCode
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server
from tests.e2e.worker_proc import start_worker, stop_worker

pytestmark = pytest.mark.slow

TOPIC, GROUP, KEYS = "orders", "g", 53
COORD_ARGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")
REPO = Path(__file__).resolve().parents[2]


class SplitRun:
    def __init__(self, tmp: Path, server: ServerProc, log_dir: Path) -> None:
        self.tmp, self.server, self.log_dir = tmp, server, log_dir
        self.stop_file, self.count_file = tmp / "stop", tmp / "produced"
        self.producer = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.split_producer", str(log_dir), TOPIC, str(KEYS),
             str(self.stop_file), str(self.count_file)],
            cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stderr=open(tmp / "producer.err", "ab"))  # noqa: SIM115 - the child keeps writing to it
        self.workers = {name: start_worker(server.address, str(log_dir), GROUP, tmp / f"{name}.out",
                                           "--topic", TOPIC, "--values") for name in ("a", "b")}

    def produced(self) -> int:
        try:
            return int((self.count_file.with_suffix(".progress")).read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_produced(self, more: int, timeout: float = 60) -> None:
        want = self.produced() + more
        deadline = time.monotonic() + timeout
        while self.produced() < want:
            assert self.producer.poll() is None, (self.tmp / "producer.err").read_text()
            assert time.monotonic() < deadline, f"the producer did not reach {want} records"
            time.sleep(0.05)

    def topics(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "regroup.cli", "topics", *args, "--log", str(self.log_dir)],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr + done.stdout
        return done.stdout

    def parallelism(self, n: int) -> None:
        with CoordinatorClient(self.server.address) as c:
            assert c.set_parallelism(GROUP, TOPIC, n).error is ErrorCode.NONE

    def wait_stable(self, ranges: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with CoordinatorClient(self.server.address) as c:
            while time.monotonic() < deadline:
                if GROUP not in {g for g, _, _ in c.list_groups()}:
                    time.sleep(0.2)
                    continue
                d = c.describe_group(GROUP).description
                held = [s for m in d.members for s in m.assigned]
                if d.state.value == "stable" and len(d.members) == 2 and len(held) == ranges:
                    return
                time.sleep(0.2)
        raise AssertionError(f"the group did not settle on {ranges} range(s)")

    def processed(self) -> dict[str, list[int]]:
        return {f.stem: [int(ln.split()[2]) for ln in f.read_text().split("\n")[:-1]]
                for f in self.tmp.glob("*.out")}

    def finish(self) -> int:
        self.stop_file.touch()
        assert self.producer.wait(timeout=60) == 0, (self.tmp / "producer.err").read_text()
        total = int(self.count_file.read_text())
        deadline = time.monotonic() + 90
        while len({v for vs in self.processed().values() for v in vs}) < total:
            assert time.monotonic() < deadline, "the group did not process everything"
            time.sleep(0.2)
        for name in list(self.workers):
            stop_worker(self.workers.pop(name), self.tmp / f"{name}.out")
        return total


@pytest.fixture
def split_run(tmp_path: Path) -> Iterator[SplitRun]:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic(TOPIC, 1)
    log.close()
    server = start_server(tmp_path / "coord", "--log", str(log_dir), *COORD_ARGS)
    run = SplitRun(tmp_path, server, log_dir)
    yield run
    run.stop_file.touch()
    for proc in [run.producer, *run.workers.values()]:
        proc.kill()
    server.proc.kill()


def test_split_and_merge_under_load_lose_repeat_and_reorder_nothing(split_run: SplitRun) -> None:
    r = split_run
    r.wait_stable(1)
    r.wait_produced(2000)
    r.topics("split", TOPIC, "--partition", "0", "--into", "2")  # one member reads two lanes
    r.wait_produced(2000)
    r.parallelism(2)  # one range per piece: each member reads only its own piece
    r.wait_stable(2)
    r.wait_produced(2000)
    with EmbeddedLog(r.log_dir) as log:
        first = log.layout(TOPIC, 0).open_pieces()[0]
    # the lower range now has two pieces: its member reads two lanes again
    r.topics("split", TOPIC, "--partition", "0", "--into", "2", "--piece", str(first.id))
    r.wait_produced(2000)
    r.topics("merge", TOPIC, "--partition", "0")  # whole again: sealed pieces read together
    r.wait_produced(2000)
    r.parallelism(1)
    r.wait_stable(1)
    r.wait_produced(1000)
    total = r.finish()

    done = r.processed()
    counts = collections.Counter(v for vs in done.values() for v in vs)
    lost = total - len(counts)
    dups = sum(n - 1 for n in counts.values())
    assert lost == 0 and dups == 0, f"{lost} lost, {dups} duplicated of {total}"
    assert set(counts) == set(range(total))
    for name, values in done.items():
        last: dict[int, int] = {}
        for v in values:
            k = v % KEYS
            assert last.get(k, -1) < v, f"{name}: key-{k} record {v} after {last[k]}"
            last[k] = v
    assert all(done.get(n) for n in ("a", "b")), "a member processed nothing"
