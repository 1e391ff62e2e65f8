"""Task mode on key ranges, with real PySpark: a streams group whose subtopology cuts its one hot
partition into 2 key ranges runs one query per range task; a second member takes one range over
through a warm-up, its state (the range query's checkpoint) with it. Each range's batches tile the
partition's offsets, each key is counted only by its range's task, and the counts are the batch
job's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regroup.log import open_log
from regroup.protocol.keyrange import key_hash
from regroup.protocol.streams.topology import TaskId
from regroup.spark import streams
from tests.coordinator.server_proc import start_server
from tests.spark.tasks_harness import (
    KEYS,
    TOPIC,
    Producer,
    Sink,
    _tiling,
    build,
    expected,
    parse_key,
    roles,
    wait_for,
)
from tests.spark.test_tasks import rocksdb  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

K = 2
TASKS = [TaskId("s", 0, r, K) for r in range(K)]


def task_of_key(key: str) -> TaskId:
    point = key_hash(key.encode(), 0)
    return next(t for t in TASKS if t.key_range[0] <= point < t.key_range[1])


@pytest.fixture
def hot(tmp_path: Path, rocksdb: Any) -> Iterator[tuple[Any, Producer, Any]]:  # noqa: F811
    log = open_log(str(tmp_path / "log"))
    log.create_topic(TOPIC, 1)
    server = start_server(tmp_path / "coord", "--log", str(tmp_path / "log"), "--session-timeout-ms", "6000",
                          "--heartbeat-interval-ms", "300", "--acceptable-recovery-lag", "0")
    pipelines: list[Any] = []
    sink = Sink("count")
    fn, mode = build("count")

    def member() -> Any:
        p = streams(rocksdb, group="hot", topology={"s": [TOPIC]}, parallelism={"s": K}, build=fn, sink=sink,
                    output_mode=mode, coordinator=server.address, log=str(tmp_path / "log"),
                    state=str(tmp_path / "state"), trigger_ms=300, session_timeout_ms=6000,
                    heartbeat_interval_ms=300)
        pipelines.append(p.start())
        return p

    try:
        yield member, Producer(log, 1), sink
    finally:
        for p in pipelines:
            p.stop()
        server.proc.kill()
        log.close()


def _actives(p: Any) -> set[TaskId]:
    return {t for t, r in p.tasks.items() if r == "active"}


def test_range_tasks_of_one_partition_spread_over_members_and_count_like_the_batch_job(
        hot: tuple[Any, Producer, Any], tmp_path: Path) -> None:
    member, producer, sink = hot
    assert {task_of_key(f"k{i}") for i in range(KEYS)} == set(TASKS)  # both ranges have keys
    producer.produce(60)
    a = member()
    # Each range task reads the whole partition (keeping its own keys): K times the records in offsets.
    wait_for(lambda: sink.processed() == K * producer.total, 300, "a to run both range tasks to the end")
    assert _actives(a) == set(TASKS)
    b = member()
    def spread() -> bool:
        producer.produce(3)  # a warm-up catches up with a moving end
        return len(_actives(a)) == len(_actives(b)) == 1

    wait_for(spread, 300, f"one range task on each member ({roles([a, b])})", poll=0.4)
    assert b.starts["promoted active"] >= 1, f"the range did not reach b through a warm-up: {dict(b.starts)}"
    producer.produce(20)
    wait_for(lambda: sink.processed() == K * producer.total, 300, "both members to catch up")

    n = producer.total
    final: dict[tuple[int, str], int] = {}
    for task in TASKS:
        batches = [(a_, b_, key) for key in sink.batches for t, _, a_, b_ in [parse_key(key)]
                   if t == str(task) and a_ < b_]
        chain = _tiling(sorted(batches), n)
        assert chain is not None, f"the batches of {task} do not tile [0, {n}): {sorted(batches)}"
        for _, _, key in chain:
            for row in sink.batches[key]:
                assert task_of_key(row["key"]) == task, f"{task} counted {row['key']}, a key of another range"
                final[(0, row["key"])] = row["count"]
    assert final == expected("count", producer.produced)
    # A range task's checkpoints live under its own name; a whole-partition task's would be s_0.
    assert {d.name for d in (tmp_path / "state" / "hot" / "tasks").iterdir()} == {str(t) for t in TASKS}
