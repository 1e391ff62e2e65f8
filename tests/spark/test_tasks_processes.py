"""Task mode with members as separate processes (each its own JVM): kill -9 of an active whose
tasks have standbys, and a paused member (a zombie) whose commits are fenced when it wakes up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.tasks_harness import Sink, wait_for
from tests.spark.test_tasks import PARTITIONS, Group, rocksdb  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


class MemberProc:
    def __init__(self, g: Group, out: Path, instance: str | None = None) -> None:
        args = [sys.executable, "-m", "tests.spark.task_member", g.server.address, str(g.log_dir),
                str(g.tmp / "state"), str(out)]
        if instance:
            args += ["--instance", instance]
        self.stderr = open(g.tmp / f"member-{len(list(g.tmp.glob('member-*')))}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.status_path = out.parent / f"{self.proc.pid}.status"
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"member did not start: {line!r}"

    def status(self) -> dict[str, Any]:
        try:
            return json.loads(self.status_path.read_text())
        except (FileNotFoundError, ValueError):
            return {"tasks": {}, "starts": {}}

    def actives(self) -> int:
        return sum(1 for r in self.status()["tasks"].values() if r == "active")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.stderr.close()


@pytest.fixture
def procs() -> Iterator[list[MemberProc]]:
    made: list[MemberProc] = []
    yield made
    for m in made:
        m.close()


@pytest.fixture
def group(tmp_path: Path, rocksdb: Any) -> Iterator[Group]:  # noqa: F811
    made: list[Group] = []

    def make(*flags: str) -> Group:
        g = Group(tmp_path, rocksdb, *flags)
        made.append(g)
        return g

    yield make  # type: ignore[misc]
    for g in made:
        g.close()


def _actives(p: Any) -> int:
    return sum(1 for r in p.tasks.values() if r == "active")


def test_kill_9_of_an_active_its_standbys_take_over_without_restoring(
        group: Any, procs: list[MemberProc]) -> None:
    g = group("--standby-replicas", "1")
    out = g.tmp / "out"
    out.mkdir()
    sink = Sink("count", out)
    g.producer.produce(40)
    victim = MemberProc(g, out)
    procs.append(victim)
    wait_for(lambda: victim.actives() == PARTITIONS, 300, "the first member to run every task")
    survivor = g.member("count", sink)
    wait_for(lambda: (g.producer.produce(2) or True) and victim.actives() >= 1 and _actives(survivor) >= 1
             and sum(1 for r in survivor.tasks.values() if r == "standby") >= 1, 300,
             f"both members active with standbys ({victim.status()}, {survivor.tasks})", poll=0.5)
    victim.kill()
    g.producer.produce(20)
    wait_for(lambda: _actives(survivor) == PARTITIONS, 300,
             f"the survivor to take every task ({survivor.tasks})")
    assert survivor.starts["promoted active"] >= 1, dict(survivor.starts)
    sink.load()
    wait_for(lambda: sink.load() or sink.covers(g.producer.produced), 300, "everything processed")
    orphans = sink.check(g.producer.produced, orphans=PARTITIONS)
    print("batches of the killed member run again by the survivor:", orphans)


def test_a_paused_member_is_fenced_when_it_wakes(group: Any, procs: list[MemberProc]) -> None:
    """SIGSTOP past the session timeout: the other member takes the tasks over; on SIGCONT the
    zombie's commits are refused (its queries stop) and the committed offsets never go back."""
    g = group("--acceptable-recovery-lag", str(2**62))
    out = g.tmp / "out"
    out.mkdir()
    sink = Sink("count", out)
    g.producer.produce(40)
    zombie = MemberProc(g, out, instance="z")
    procs.append(zombie)
    wait_for(lambda: zombie.actives() == PARTITIONS, 300, "the first member to run every task")
    other = g.member("count", sink)
    wait_for(lambda: (g.producer.produce(2) or True) and zombie.actives() >= 1 and _actives(other) >= 1,
             180, "both members active", poll=0.5)
    zombie.proc.send_signal(signal.SIGSTOP)
    g.producer.produce(10)
    wait_for(lambda: _actives(other) == PARTITIONS, 300,
             f"the other member to take every task ({other.tasks})")
    g.producer.produce(10)
    wait_for(lambda: sink.load() or sink.covers(g.producer.produced), 300, "the other member to catch up")
    zombie.proc.send_signal(signal.SIGCONT)
    log = zombie.stderr.name

    def fenced() -> bool:
        text = Path(log).read_text()
        return "refused" in text or "lost tasks" in text

    wait_for(fenced, 300, "the zombie to learn it was fenced (a refused commit or lost tasks)")
    g.producer.produce(10)
    wait_for(lambda: sink.load() or sink.covers(g.producer.produced), 300, "everything processed")
    sink.check(g.producer.produced, orphans=PARTITIONS)
