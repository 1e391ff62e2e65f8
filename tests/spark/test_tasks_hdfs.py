"""Task mode with the state root on a real HDFS (a MiniDFSCluster, tests/spark/hdfs_fixture.py):
Spark keeps the task queries' checkpoints (RocksDB state store) on HDFS, and a task that moves is
copied there through Hadoop's FileSystem API — with nothing lost and nothing output twice."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regroup.spark import streams
from regroup.spark.tasks.statepath import StateRootError, open_state_root
from tests.spark.hdfs_fixture import Hdfs, hdfs  # noqa: F401 - fixture
from tests.spark.tasks_harness import TOPIC, Sink, build, roles, wait_for
from tests.spark.test_tasks import PARTITIONS, Group, rocksdb  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


class HdfsGroup(Group):
    """`test_tasks.Group` with its members' state root at ``state`` (a URI)."""

    def __init__(self, tmp: Path, spark: Any, state: str, *coordinator_flags: str) -> None:
        super().__init__(tmp, spark, *coordinator_flags)
        self.state = state

    def member(self, kind: str, sink: Sink, instance: str | None = None) -> Any:
        fn, mode = build(kind)
        p = streams(self.spark, group="pipeline", topology={"s": [TOPIC]}, build=fn, sink=sink,
                    output_mode=mode, coordinator=self.server.address, log=str(self.log_dir),
                    state=self.state, instance_id=instance, trigger_ms=300,
                    session_timeout_ms=6000, heartbeat_interval_ms=300)
        self.pipelines.append(p.start())
        return p


@pytest.fixture
def hdfs_group(tmp_path: Path, rocksdb: Any, hdfs: Hdfs) -> Iterator[Any]:  # noqa: F811 - fixtures
    made: list[HdfsGroup] = []

    def make(*flags: str) -> HdfsGroup:
        state = f"{hdfs.uri}/regroup-tests/{uuid.uuid4().hex}"
        g = HdfsGroup(tmp_path / f"g{len(made)}", rocksdb, state, *flags)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()
        open_state_root(rocksdb, g.state).remove()


def _actives(p: Any) -> int:
    return sum(1 for r in p.tasks.values() if r == "active")


def test_tasks_move_cold_between_members_with_their_state_on_hdfs(hdfs_group: Any) -> None:
    """1 -> 2 members with every copy counted caught up (so tasks move cold: the new owner copies
    the batch of record on HDFS and continues from it, its RocksDB state included), then 2 -> 1
    (copied back). The output, read through an idempotent sink, is the batch job's over every
    record: no gap and no overlap in any partition."""
    g = hdfs_group("--max-warmups", "0", "--acceptable-recovery-lag", str(2**62))
    sink = Sink("count")
    g.producer.produce(50)
    a = g.member("count", sink)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "a to process everything")
    b = g.member("count", sink)
    wait_for(lambda: (g.producer.produce(2) or True) and _actives(a) + _actives(b) == PARTITIONS
             and min(_actives(a), _actives(b)) >= 1 and abs(_actives(a) - _actives(b)) <= 1, 300,
             f"cold moves to b ({roles([a, b])})", poll=0.4)
    assert b.starts["copied active"] >= 1 and b.starts["promoted active"] == 0, dict(b.starts)
    g.producer.produce(10)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "everything processed after the move")
    b.stop()
    g.producer.produce(10)
    wait_for(lambda: _actives(a) == PARTITIONS and sink.processed() == g.producer.total, 300,
             f"a to take every task back and process everything ({roles([a])})")
    assert a.starts["copied active"] >= 1, dict(a.starts)  # b's checkpoints copied back
    sink.check(g.producer.produced)
    # The state is on HDFS, every copy a directory of its own; nothing of it on local disk.
    tasks = open_state_root(g.spark, g.state) / "pipeline" / "tasks"
    copies = {t.name: sorted(d.name for d in t.iterdir()) for t in tasks.iterdir()}
    assert set(copies) == {f"s_{p}" for p in range(PARTITIONS)}, copies
    assert sum(len(c) for c in copies.values()) >= PARTITIONS + 2, copies
    assert not any(name.endswith(".copying") for c in copies.values() for name in c), copies
    assert not (g.tmp / "state").exists()


def test_streams_fails_at_once_naming_a_root_no_filesystem_serves(spark: Any, tmp_path: Path) -> None:
    fn, mode = build("count")
    with pytest.raises(StateRootError, match=r"^state root nosuchfs://bucket/state: .*No FileSystem"):
        streams(spark, group="pipeline", topology={"s": [TOPIC]}, build=fn, sink=Sink("count"),
                output_mode=mode, coordinator="127.0.0.1:1", log=str(tmp_path / "log"),
                state="nosuchfs://bucket/state")
