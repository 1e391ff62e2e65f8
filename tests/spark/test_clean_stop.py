"""A query stopped between a finished batch and the next trigger commits that batch; a batch that did
not finish is never committed. Real Spark, a real coordinator process, the embedded log."""

from __future__ import annotations

import json
from typing import Any

import pytest

from regroup.protocol.microbatch import BatchOffset
from tests.spark.conftest import Cluster, Query, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


def start(c: Cluster, name: str, trigger: str, fail_batch: int | None = None) -> Query:
    """A query on the cluster's group (250 records per batch) with the given trigger; its
    ``foreachBatch`` raises on batch ``fail_batch``."""
    query = Query(name, None)

    def on_batch(df: Any, batch_id: int) -> None:
        if batch_id == fail_batch:
            raise RuntimeError(f"batch {batch_id} fails on purpose")
        df.count()

    reader = (c.spark.readStream.format("regroup").option("group", c.group).option("topics", "orders")
              .option("coordinator", c.server.address).option("log", str(c.log_dir))
              .option("maxRecordsPerTrigger", "250"))
    query.handle = (reader.load().writeStream.queryName(name).foreachBatch(on_batch)
                    .option("checkpointLocation", str(c.tmp / "checkpoints" / name))
                    .trigger(processingTime=trigger).start())
    c.queries[name] = query
    return query


def finished_batch(q: Query, batch_id: int) -> Any:
    """The progress of batch ``batch_id`` once it completed (None before)."""
    for p in q.handle.recentProgress:
        if p.batchId == batch_id and p.numInputRows > 0:
            return p
    return None


def ends_of(progress: Any) -> dict[int, int]:
    """The batch's end offset per partition, as the source planned it."""
    end = BatchOffset.from_json(json.loads(progress.sources[0].endOffset))
    return {s.partition: o for s, o in end.ends.items() if o > 0}


def committed(c: Cluster) -> dict[int, int]:
    return {p: o for p, o in c.committed().items() if o > 0}


def test_a_stop_right_after_a_batch_commits_that_batch(cluster: Cluster) -> None:
    c = cluster
    c.produce(600)
    # The first batch runs at once; the next trigger is an hour away, so no boundary commits it.
    q = start(c, "a", trigger="1 hour")
    wait_until(lambda: finished_batch(q, 0) is not None, 120, "the first batch to finish")
    progress = finished_batch(q, 0)
    assert progress.numInputRows == 250
    assert committed(c) == {}, "nothing is committed before the next trigger"
    q.stop()
    wait_until(lambda: not c.describe().members, 60, "the query to leave the group")
    assert committed(c) == ends_of(progress), "the finished batch was not committed on stop"


def test_a_batch_that_did_not_finish_is_not_committed_when_the_query_ends(cluster: Cluster) -> None:
    c = cluster
    c.produce(600)
    q = start(c, "a", trigger="200 milliseconds", fail_batch=1)
    wait_until(lambda: q.handle.exception() is not None, 120, "the query to fail in its second batch")
    wait_until(lambda: not c.describe().members, 60, "the query to leave the group")
    first = finished_batch(q, 0)
    assert first is not None and finished_batch(q, 1) is None
    # Batch 0 was committed when batch 1 was planned; batch 1 failed in its sink: not committed.
    assert committed(c) == ends_of(first)
