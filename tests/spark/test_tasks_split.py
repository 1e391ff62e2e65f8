"""Task mode on a source partition split on the producer side, with real PySpark: a 1-task streams
group counting per key while its partition is split into 2 pieces, moved to another member (whose
standby copy followed it lane by lane), and merged back whole. The task query reads the split
partition as lanes (one per open piece), commits each, and the counts are the batch job's: nothing
lost, nothing counted twice."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from regroup.log import open_log
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.streams.topology import TaskId
from regroup.spark import streams
from tests.coordinator.server_proc import start_server
from tests.spark.tasks_harness import TOPIC, Producer, Sink, build, expected, roles, wait_for
from tests.spark.test_tasks import rocksdb  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

TASK = TaskId("s", 0)


@pytest.fixture
def split(tmp_path: Path, rocksdb: Any) -> Iterator[tuple[Any, Producer, Sink, EmbeddedLog]]:  # noqa: F811
    log = open_log(str(tmp_path / "log"))
    assert isinstance(log, EmbeddedLog)
    log.create_topic(TOPIC, 1)
    server = start_server(tmp_path / "coord", "--log", str(tmp_path / "log"), "--session-timeout-ms", "6000",
                          "--heartbeat-interval-ms", "300", "--acceptable-recovery-lag", "0",
                          "--standby-replicas", "1")
    pipelines: list[Any] = []
    sink = Sink("count")
    fn, mode = build("count")

    def member() -> Any:
        p = streams(rocksdb, group="split", topology={"s": [TOPIC]}, build=fn, sink=sink,
                    output_mode=mode, coordinator=server.address, log=str(tmp_path / "log"),
                    state=str(tmp_path / "state"), trigger_ms=300, session_timeout_ms=6000,
                    heartbeat_interval_ms=300)
        pipelines.append(p.start())
        return p

    try:
        yield member, Producer(log, 1), sink, log
    finally:
        for p in pipelines:
            p.stop()
        server.proc.kill()
        log.close()


def _wait(cond: Callable[[], bool], what: Callable[[], str], poll: float = 0.2) -> None:
    """`wait_for`, naming what it waited for as things are when it gives up."""
    try:
        wait_for(cond, 300, "", poll)
    except AssertionError as e:
        raise AssertionError(f"{e}{what()}") from None


def _counts(sink: Sink) -> dict[tuple[int, str], int]:
    """The latest count of every key (counts only grow; a batch run again repeats its counts)."""
    out: dict[tuple[int, str], int] = {}
    with sink.lock:
        for rows in sink.batches.values():
            for row in rows:
                out[(0, row["key"])] = max(row["count"], out.get((0, row["key"]), 0))
    return out


def test_a_task_query_reads_its_split_source_as_lanes_across_a_move_and_a_merge(
        split: tuple[Any, Producer, Sink, EmbeddedLog]) -> None:
    member, producer, sink, log = split
    producer.produce(60)
    a = member()
    wait_for(lambda: _counts(sink) == expected("count", producer.produced), 300,
             "a to count the first records")

    log.split_partition(TOPIC, 0, 2)
    producer.produce(40)  # into both pieces
    wait_for(lambda: _counts(sink) == expected("count", producer.produced), 300,
             f"a to count across the split ({roles([a])})")
    assert any("[" in key for key in sink.batches), f"no batch read lanes: {list(sink.batches)}"

    b = member()  # one member keeps a standby copy of the task, reading its lanes up to the commits
    def roles_settled() -> bool:
        producer.produce(2)  # a standby catches up with a moving end
        return {a.tasks.get(TASK), b.tasks.get(TASK)} == {"active", "standby"}

    _wait(roles_settled, lambda: f"an active and a standby of the task ({roles([a, b])})", poll=0.4)
    active, standby = (a, b) if a.tasks.get(TASK) == "active" else (b, a)
    active.stop()  # the task moves: the standby, caught up lane by lane, is promoted in place
    producer.produce(30)
    _wait(lambda: _counts(sink) == expected("count", producer.produced),
          lambda: f"the standby to take the task over and count on ({roles([standby])})")
    assert {t for t, r in standby.tasks.items() if r == "active"} == {TASK}
    assert standby.starts["promoted active"] >= 1, f"the standby was not promoted: {dict(standby.starts)}"

    log.merge_partition(TOPIC, 0)
    producer.produce(30)
    _wait(lambda: _counts(sink) == expected("count", producer.produced),
          lambda: f"the new active to count across the merge ({roles([standby])})")
