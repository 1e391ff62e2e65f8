"""Task mode with real PySpark: stateful pipelines whose state (the task query's checkpoint, in
Spark's RocksDB state store) moves with their tasks between members of a streams group.

Members here are `StreamsPipeline`s sharing the test session's SparkSession (each is its own
process to the coordinator: its own process id, member id and state), against a real coordinator
process; `test_tasks_processes.py` runs members as separate processes for kill -9 and zombies.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regroup.log import open_log
from regroup.spark import streams
from tests.coordinator.server_proc import ServerProc, start_server
from tests.spark.tasks_harness import TOPIC, Producer, Sink, build, roles, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

PARTITIONS = 4
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.fixture
def rocksdb(spark: Any) -> Iterator[Any]:
    """The recommended state store: RocksDB with changelog checkpointing (SQL confs, per query)."""
    confs = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
             "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
             "spark.sql.session.timeZone": "UTC"}
    before = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    yield spark
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


class Group:
    def __init__(self, tmp: Path, spark: Any, *coordinator_flags: str) -> None:
        self.tmp, self.spark = tmp, spark
        self.log_dir = tmp / "log"
        self.log = open_log(str(self.log_dir))
        self.log.create_topic(TOPIC, PARTITIONS)
        self.producer = Producer(self.log, PARTITIONS)
        self.server: ServerProc = start_server(
            tmp / "coord", "--log", str(self.log_dir), "--session-timeout-ms", "6000",
            "--heartbeat-interval-ms", "300", *coordinator_flags)
        self.pipelines: list[Any] = []

    def member(self, kind: str, sink: Sink, instance: str | None = None) -> Any:
        fn, mode = build(kind)
        p = streams(self.spark, group="pipeline", topology={"s": [TOPIC]}, build=fn, sink=sink,
                    output_mode=mode, coordinator=self.server.address, log=str(self.log_dir),
                    state=str(self.tmp / "state"), instance_id=instance, trigger_ms=300,
                    session_timeout_ms=6000, heartbeat_interval_ms=300)
        self.pipelines.append(p.start())
        return p

    def close(self) -> None:
        for p in self.pipelines:
            p.stop()
        self.server.proc.kill()
        self.log.close()


@pytest.fixture
def group_factory(tmp_path: Path, rocksdb: Any) -> Iterator[Any]:
    made: list[Group] = []

    def make(*flags: str) -> Group:
        g = Group(tmp_path / f"g{len(made)}", rocksdb, *flags)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def _actives(p: Any) -> int:
    return sum(1 for r in p.tasks.values() if r == "active")


def _balanced(*ps: Any) -> bool:
    counts = [_actives(p) for p in ps]
    return sum(counts) == PARTITIONS and max(counts) - min(counts) <= 1


@pytest.mark.parametrize("kind", ["count", "window", "dedup"])
def test_scale_out_by_warm_ups_and_back_in_match_the_batch_job(group_factory: Any, kind: str) -> None:
    """1 -> 2 members (tasks move through warm-ups, promoted in place), then 2 -> 1: the output,
    read through an idempotent sink, is the batch job's over every record, with no gap and no
    overlap in any partition."""
    g = group_factory("--acceptable-recovery-lag", "0")
    sink = Sink(kind)
    g.producer.produce(60)
    a = g.member(kind, sink)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "the first member to process everything")
    b = g.member(kind, sink)
    wait_for(lambda: (g.producer.produce(3) or True) and _balanced(a, b), 300,
             f"the tasks to spread over two members ({roles([a, b])})", poll=0.4)
    assert b.starts["promoted active"] >= 1, f"no task reached b through a warm-up: {dict(b.starts)}"
    assert b.starts["copied warm-up"] >= 1, dict(b.starts)
    g.producer.produce(20)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "both members to catch up")
    b.stop()
    g.producer.produce(20)
    wait_for(lambda: _actives(a) == PARTITIONS and sink.processed() == g.producer.total, 300,
             f"a to take every task back and process everything ({roles([a])})")
    sink.check(g.producer.produced)


def test_cold_move_copies_the_checkpoint_and_continues(group_factory: Any) -> None:
    """With every copy counted caught up (no warm-ups), a task moves cold: the new owner copies the
    batch of record and continues from it — its state included."""
    g = group_factory("--max-warmups", "0", "--acceptable-recovery-lag", str(2**62))
    sink = Sink("count")
    g.producer.produce(50)
    a = g.member("count", sink)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "a to process everything")
    b = g.member("count", sink)
    wait_for(lambda: (g.producer.produce(2) or True) and _balanced(a, b), 300,
             f"a cold move to b ({roles([a, b])})", poll=0.4)
    assert b.starts["copied active"] >= 1 and b.starts["promoted active"] == 0, dict(b.starts)
    g.producer.produce(10)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "everything processed after the move")
    sink.check(g.producer.produced)


def test_static_restart_resumes_its_own_checkpoints_in_place(group_factory: Any) -> None:
    """A static member restarted with its instance id gets its tasks back and runs their
    checkpoints where they are: nothing copied, nothing moved."""
    g = group_factory()
    sink = Sink("count")
    g.producer.produce(40)
    a = g.member("count", sink, instance="a")
    wait_for(lambda: sink.processed() == g.producer.total, 300, "a to process everything")
    a.stop()
    g.producer.produce(10)
    again = g.member("count", sink, instance="a")
    wait_for(lambda: sink.processed() == g.producer.total, 300, "the restarted member to catch up")
    assert again.process_id == a.process_id
    assert dict(again.starts) == {"resumed active": PARTITIONS}, dict(again.starts)
    sink.check(g.producer.produced)


def test_a_failed_standby_query_is_started_again_and_later_takes_over(group_factory: Any) -> None:
    """A copy's query that fails (here: stopped behind the member's back, as Spark does on trouble)
    is started again after a back-off while the coordinator still wants it — a copy dropped for
    good would leave a warm-up that never catches up — and it takes over when the active leaves."""
    g = group_factory("--standby-replicas", "1", "--acceptable-recovery-lag", "0")
    sink = Sink("count")
    g.producer.produce(40)
    a = g.member("count", sink)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "a to process everything")
    b = g.member("count", sink)

    def standbys(p: Any) -> list[Any]:
        return [t for t, r in p.tasks.items() if r == "standby"]

    wait_for(lambda: (g.producer.produce(2) or True) and _balanced(a, b) and len(standbys(b)) == 2, 300,
             f"two actives and two standbys on each member ({roles([a, b])})", poll=0.4)
    task = standbys(b)[0]
    failed = b._queries[task]
    started = sum(n for how, n in b.starts.items() if how.endswith("standby"))
    failed.handle.stop()  # the query ends without the member asking: to the member, a failure
    wait_for(lambda: b.tasks.get(task) == "standby" and b._queries[task] is not failed
             and b._queries[task].running, 120, f"b to start the standby of {task} again ({roles([b])})")
    assert sum(n for how, n in b.starts.items() if how.endswith("standby")) == started + 1, dict(b.starts)
    g.producer.produce(20)
    wait_for(lambda: sink.processed() == g.producer.total, 300, "both members to catch up")
    a.stop()
    g.producer.produce(10)
    wait_for(lambda: _actives(b) == PARTITIONS and sink.processed() == g.producer.total, 300,
             f"b to take every task over ({roles([b])})")
    assert b.starts["promoted active"] >= 2, dict(b.starts)
    sink.check(g.producer.produced)
