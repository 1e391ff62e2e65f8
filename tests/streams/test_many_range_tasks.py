"""A member holding more range tasks than one offset commit's metadata can name (K = 200 on one
partition: 200 entries are ~5,800 characters, over the coordinator's 4,096): its commits are split into
several requests and all succeed, and another member taking every task over reads them back and
resumes each task exactly where it was committed. Real member processes, a real coordinator process,
the embedded log."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.messages import OffsetFetchRequest
from regroup.protocol.streams.topology import TaskId
from regroup.streams.changelog import resume_point
from tests.streams.cluster import kill_all, running
from tests.streams.test_end_to_end import actives, wait_until
from tests.streams.test_key_range_tasks import RangeCluster

K = 200
TASKS = [TaskId("count", 0, r, K) for r in range(K)]
KEYS = [b"key-%d" % i for i in range(4 * K)]


class ManyRanges(RangeCluster):
    OUTPUT_PARTITIONS = K
    KEYS = KEYS

    def committed_metadata(self) -> dict[TaskId, str]:
        """Each task's committed metadata, as an operator reads it (no member id)."""
        shards = tuple(t.shard("orders") for t in TASKS)
        resp = self.client.fetch_offsets(OffsetFetchRequest("counts", "", -1, shards))
        by_shard = {s: c.metadata for s, c in resp.offsets.items()}
        return {t: by_shard[t.shard("orders")] for t in TASKS if t.shard("orders") in by_shard}


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[ManyRanges]:
    # Each range task writes its own partition of the outputs.
    with running(tmp_path, {"orders": 1, "counts": K}) as (log, server, client):
        c = ManyRanges(tmp_path, log, server, client, Counter(), [])
        try:
            yield c
        finally:
            kill_all(c.members)


@pytest.mark.slow  # about a minute: 200 stores, changelog partitions and reads of the partition, twice
def test_a_member_with_200_range_tasks_commits_them_all_and_a_take_over_reads_them_back(
        cluster: ManyRanges) -> None:
    cluster.produce(len(KEYS))
    a = cluster.member("a", parallelism=K)
    wait_until(lambda: sum(actives(cluster.describe()).values()) == K, "a to run all 200 range tasks",
               show=cluster.describe)
    # (Before commits were split, a died here of its first commit: its metadata was too long.)
    wait_until(lambda: cluster.caught_up() or a.poll() is not None, "a to count every record", timeout=180)
    assert a.poll() is None, (cluster.tmp / "a.log").read_text()[-3000:]

    # Every task's offsets were committed with metadata naming its COMMIT, in strings under the limit.
    def all_committed() -> bool:
        return len(cluster.committed_metadata()) == K
    wait_until(all_committed, "every range task to have committed offsets", timeout=120)
    metadata = cluster.committed_metadata()
    assert all(resume_point([m], t) is not None for t, m in metadata.items())
    assert max(map(len, metadata.values())) <= CoordinatorConfig().max_offset_metadata_length
    assert len(set(metadata.values())) > 1  # several requests

    a.send_signal(signal.SIGTERM)  # a clean leave: a last commit of all 200 tasks
    assert a.wait(timeout=120) == 0, (cluster.tmp / "a.log").read_text()
    assert "refused" not in (cluster.tmp / "a.log").read_text()
    a_last = {k: emitted[-1][1] for k, emitted in cluster.outputs().items()}

    # b, with an empty state directory, takes every task over from the changelog at the COMMITs the
    # metadata names, and continues each key's count where a left it: exactly once.
    cluster.produce(len(KEYS), start=len(KEYS))
    cluster.member("b", parallelism=K)
    wait_until(cluster.caught_up, "b to count the second round", timeout=180, show=cluster.describe)
    for key, emitted in cluster.outputs().items():
        by_b = [n for _, n, name in emitted if name == "b"]
        assert by_b == list(range(a_last[key] + 1, cluster.produced[key] + 1)), key
