"""Streaming queries as group members: splitting, joining without stopping others, static restarts,
leaving on stop, fencing a zombie. Real Spark, a real coordinator process, the embedded log."""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Callable

import pytest

from regroup.rpc.errors import CoordinatorUnavailable
from tests.spark.conftest import PARTITIONS, SESSION_MS, Cluster, Query, expected_records, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


def assert_exactly_once(c: Cluster) -> None:
    counts = c.wait_processed()
    missing = expected_records(c) - set(counts)
    dups = {r: n for r, n in counts.items() if n > 1}
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    assert not dups, f"{len(dups)} records processed twice, e.g. {sorted(dups)[:5]}"


def test_two_queries_split_the_partitions_and_a_third_joins_without_stopping_them(cluster: Cluster) -> None:
    c = cluster
    c.produce(6_000)
    a, b = c.start("a"), c.start("b")
    owners = c.wait_stable(2)
    assert sorted(len(s) for s in owners.values()) == [PARTITIONS // 2, PARTITIONS // 2]
    assert_exactly_once(c)
    # The first query may have read everything until the second joined; once the group is stable
    # and every finished batch is committed, the two read disjoint halves.
    wait_all_committed(c)
    split_at = time.monotonic()
    c.produce(1_200)
    assert_exactly_once(c)
    after = [{p for p, _ in c.records_of(q, since=split_at)} for q in (a, b)]
    assert after[0] and after[1] and after[0].isdisjoint(after[1]), f"not a split: {after}"
    assert after[0] | after[1] == set(range(PARTITIONS))
    epoch_before = c.describe().epoch

    # Keep producing while a third query joins: a and b must go on completing batches meanwhile
    # (no group-wide barrier). Each round of records waits for both a and b to complete a batch
    # after it was produced; the rounds go on until the group is stable with three members. At
    # every round, a and b still hold partitions: nothing is taken from everyone to be handed out
    # again, as an eager rebalance would.
    before = {m.member_id for m in c.describe().members}
    joined_at = time.monotonic()
    third = c.start("c")
    rounds = 0
    while rounds < 4 or not _stable(c, 3):
        assert rounds < 60, "the third query never got its partitions"
        next_batches(c, (a, b), lambda: c.produce(300), "a and b to go on while the third joins")
        rounds += 1
        held = _held(c, before)
        assert held is None or all(held.values()), f"round {rounds}: a query held nothing: {held}"
    settled_at = time.monotonic()
    for _ in range(4):
        next_batches(c, (a, b, third), lambda: c.produce(300), "all three to complete batches")
    assert_exactly_once(c)
    assert c.describe().epoch == epoch_before + 1, "one join, one epoch bump"
    assert third.partitions(), "the third query read nothing"
    for q in (a, b):
        during = [t for t in q.batch_times(since=joined_at) if t <= settled_at]
        assert len(during) >= rounds >= 4, \
            f"query {q.name} completed {len(during)} batches in {rounds} rounds while the third joined"
    owners = c.wait_stable(3)
    assert sorted(len(s) for s in owners.values()) == [2, 2, 2]


def next_batches(c: Cluster, queries: tuple[Query, ...], produce: Callable[[], None], what: str) -> None:
    """Run ``produce`` and wait (60 s at most, a failure guard) until each query completed a batch
    after it."""
    counts = {q.name: len(q.batch_times()) for q in queries}
    produce()
    wait_until(lambda: all(len(q.batch_times()) > counts[q.name] for q in queries), 60, what)


def wait_all_committed(c: Cluster) -> None:
    """Wait until every partition's committed offset is its log end: every finished batch was
    committed at a boundary, so no query holds anything in flight."""
    per = collections.Counter(i % PARTITIONS for i in range(c.produced))
    ends = {p: per[p] for p in range(PARTITIONS)}
    wait_until(lambda: c.committed() == ends, 60, "every finished batch to be committed")


def _held(c: Cluster, members: set[str]) -> dict[str, int] | None:
    """How many partitions each of ``members`` holds now (None: the coordinator did not answer)."""
    try:
        d = c.describe()
    except CoordinatorUnavailable:
        return None
    return {m.member_id: len(m.assigned | m.pending_revocation) for m in d.members if m.member_id in members}


def _stable(c: Cluster, members: int) -> bool:
    try:
        d = c.describe()
    except CoordinatorUnavailable:  # a loaded machine: ask again on the next round
        return False
    return d.state.value == "stable" and len(d.members) == members and \
        sum(len(m.assigned) for m in d.members) == PARTITIONS


# A static member's partitions wait for it as long as its session timeout: the restart must come back
# within it, which a loaded 2-core machine cannot promise in 6 s — hence a session that no restart
# here comes near (the test never waits for it to expire).
@pytest.mark.session_ms(120_000)
def test_a_static_query_restarts_without_a_rebalance(cluster: Cluster) -> None:
    c = cluster
    c.produce(3_000)
    c.start("a", instance="a")
    b = c.start("b", instance="b")
    owners = c.wait_stable(2)
    assert_exactly_once(c)
    epoch = c.describe().epoch
    b_shards = next(s for mid, s in owners.items()
                    if next(m for m in c.describe().members if m.member_id == mid).instance_id == "b")

    b.stop()  # a temporary leave: b's partitions wait for it
    d = c.describe()
    assert d.epoch == epoch
    # Records arrive while b is away; it restarts at once: its partitions wait for it only as long
    # as the session timeout (a wait here would only bring the restart closer to that bound).
    c.produce(3_000)
    first_b = b
    b = c.start("b", instance="b")  # same instance id, same checkpoint
    owners = c.wait_stable(2)
    counts = c.wait_processed()
    assert not expected_records(c) - set(counts), "records lost"
    # query.stop() between a finished batch and the next trigger (or inside a batch, on a busy
    # machine) leaves that batch uncommitted (docs/spark.md, "Stopping cleanly"): only b's last
    # batch before the stop may be processed again, by b itself after its restart.
    with first_b.lock:
        last = set(first_b.batches[-1].records) if first_b.batches else set()
    dups = {r for r, n in counts.items() if n > 1}
    assert dups <= last, f"{len(dups - last)} duplicates beyond b's last batch before its stop"
    d = c.describe()
    assert d.epoch == epoch, "the static restart caused a rebalance"
    assert next(m.assigned for m in d.members if m.instance_id == "b") == b_shards


def test_query_stop_leaves_the_group_and_the_partitions_move(cluster: Cluster) -> None:
    c = cluster
    c.produce(3_000)
    a, b = c.start("a"), c.start("b")
    c.wait_stable(2)
    assert_exactly_once(c)
    fenced_before = c.metric("regroup_fenced_members_total")
    b.stop()
    # The member left (it was not fenced after its session timed out), and a now owns everything.
    wait_until(lambda: len(c.describe().members) == 1, SESSION_MS / 1000 + 30, "b to leave")
    assert c.metric("regroup_fenced_members_total") == fenced_before, "b was fenced instead of leaving"
    owners = c.wait_stable(1, timeout=20)
    assert len(next(iter(owners.values()))) == PARTITIONS
    c.produce(3_000)
    counts = c.wait_processed()
    assert not expected_records(c) - set(counts), "records lost"
    assert a.partitions() == set(range(PARTITIONS))
    # A stop between a finished batch and the next trigger leaves that batch uncommitted
    # (docs/spark.md, "Stopping cleanly"): only b's last batch may be read again.
    with b.lock:
        last = set(b.batches[-1].records) if b.batches else set()
    dups = {r for r, n in counts.items() if n > 1}
    assert dups <= last, f"{len(dups - last)} duplicates beyond b's last batch"


def test_a_zombie_query_is_fenced_and_cannot_commit(cluster: Cluster) -> None:
    c = cluster
    c.produce(3_000)
    c.start("a"), c.start("b")
    c.wait_stable(2)
    assert_exactly_once(c)
    zombie_id = c.describe().members[0].member_id
    pid = c.reader_pid(zombie_id)
    os.kill(pid, signal.SIGSTOP)  # the member goes silent: a GC pause, a frozen VM...
    try:
        wait_until(lambda: zombie_id not in {m.member_id for m in c.describe().members},
                   SESSION_MS / 1000 + 10, "the coordinator to fence the silent member")
        c.wait_stable(1, timeout=20)
        c.produce(3_000)
        wait_until(lambda: min(c.committed().values()) >= c.produced // PARTITIONS, 60,
                   "the other query to take over and commit everything")
        committed = c.committed()
    finally:
        os.kill(pid, signal.SIGCONT)
    # The zombie wakes up with its old epoch: it learns it was fenced (a commit of a batch it had
    # not committed yet is refused; with nothing left to commit it sends none), drops its
    # partitions and joins again, with the same member id at a new epoch.
    wait_until(lambda: zombie_id in {m.member_id for m in c.describe().members}, 30,
               "the zombie to join again")
    assert c.reader_pid(zombie_id) == pid
    c.wait_stable(2, timeout=60)
    assert c.committed() == committed, "a zombie moved offsets"
    counts = c.wait_processed()
    assert expected_records(c) <= set(counts), "records lost"


def test_a_second_query_with_a_live_instance_id_waits_and_takes_over_as_a_standby(cluster: Cluster) -> None:
    """The coordinator refuses a second live holder of an instance id; the source then waits (the
    first holder may be a crashed process whose session has not expired yet) instead of failing."""
    c = cluster
    c.produce(600)
    a = c.start("a", instance="same")
    c.wait_stable(1)
    assert_exactly_once(c)
    epoch = c.describe().epoch
    def refused_joins() -> float:
        return c.metric("regroup_heartbeats_total", error="UNRELEASED_INSTANCE_ID")

    refused_before = refused_joins()
    twin = c.start("twin", instance="same")
    # The twin asks to join again and again and is refused each time while a lives.
    wait_until(lambda: refused_joins() >= refused_before + 3, 60, "the twin's joins to be refused")
    d = c.describe()
    assert len(d.members) == 1 and d.epoch == epoch, "the twin displaced the live holder"
    assert twin.handle.isActive and not twin.records()
    a.stop()  # a temporary leave: the standby inherits the instance and its partitions
    c.produce(600)
    assert_exactly_once(c)
    assert twin.partitions() == set(range(PARTITIONS))
    assert c.describe().epoch == epoch, "taking over a static identity is not a rebalance"
