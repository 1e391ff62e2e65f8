"""The PySpark source on a partition split on the producer side, without Spark: `QueryMember` (the
driver side, as the source's ``latestOffset``/``partitions`` call it) with the coordinator faked out
— a group that keeps committed fragments by the coordinator's rules — and `read_range` (what an
executor runs) on a real embedded log that is split and merged while the query reads it.

What Spark adds on top (the checkpoint written before a batch runs, the late commit) is modelled by
the test's loop: each planned end offset goes through its JSON, and a sink keeps rows per batch id
(a replayed batch overwrites its own). tests/spark/test_source_split.py runs the same with Spark."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from regroup.client.errors import CommitFailedError
from regroup.client.membership import Membership
from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.log.embedded.layout import Layout
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import KEY_SPACE, commit_fragments, key_hash
from regroup.protocol.member import Action, Assign, Lost, MemberState, Revoke
from regroup.protocol.messages import CommittedOffset
from regroup.protocol.microbatch import BatchOffset, split_ranges
from regroup.protocol.shard import Shard, ShardSet
from regroup.spark import member as member_module
from regroup.spark.member import QueryMember
from regroup.spark.options import parse_options
from regroup.spark.read import SPARK_ARROW_SCHEMA, read_range

S = Shard("t", 0)
KEYS = 13

#: Rows (offset, key, value) a sink keeps per (query, batch id): a replayed batch overwrites its own.
Sink = dict[tuple[str, int], list[tuple[int, bytes, int]]]


class Group:
    """The coordinator's side as one query sees it: committed fragments (keyrange rules 3–5)."""

    def __init__(self) -> None:
        self.frags: dict[Shard, CommittedOffset] = {}
        self.commits: list[dict[Shard, int]] = []

    def commit(self, offsets: dict[Shard, int]) -> None:
        for s, o in offsets.items():
            hit = [c.offset for f, c in self.frags.items() if f.lo < s.hi and s.lo < f.hi]
            if hit and o < min(hit):
                raise CommitFailedError(f"{s} at {o} is behind {hit}", ErrorCode.OFFSET_OUT_OF_ORDER)
        for s, o in sorted(offsets.items()):
            gone, written = commit_fragments(self.frags, s, CommittedOffset(o))
            for f in gone:
                del self.frags[f]
            self.frags.update(written)
        self.commits.append(dict(offsets))

    def offsets(self) -> dict[Shard, int]:
        return {f: c.offset for f, c in sorted(self.frags.items())}


class FakeMembership(Membership):
    """A member of `Group` that the test hands actions to; always stable, never cut off."""

    def __init__(self, group: Group) -> None:  # no threads, no client
        self.group = group
        self.actions: list[Action] = []
        self.acks: list[tuple[str, ShardSet]] = []

    @property
    def epoch(self) -> int:
        return 1

    @property
    def state(self) -> Any:
        return MemberState.STABLE

    def take_actions(self) -> list[Action]:
        out, self.actions = self.actions, []
        return out

    def fetch_committed(self, shards: Collection[Shard]) -> dict[Shard, int]:
        return {f: o for f, o in self.group.offsets().items()
                if any(f.topic == s.topic and f.partition == s.partition and f.lo < s.hi and s.lo < f.hi
                       for s in shards)}

    def commit(self, offsets: dict[Shard, int], metadata: str = "") -> None:
        self.group.commit(offsets)

    def revocation_done(self, shards: ShardSet) -> None:
        self.acks.append(("revoked", shards))

    def assignment_done(self, shards: ShardSet) -> None:
        self.acks.append(("assigned", shards))

    def cut_off(self) -> bool:
        return False

    def leave(self, timeout: float, on_actions: Any = None, *, permanent: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


class Query:
    """One streaming query's driver (a `QueryMember`) and what Spark does around it: the offsets it
    checkpoints, the tasks it runs (`read_range`, each range cut in splits) and a sink that keeps
    each batch's rows by batch id."""

    def __init__(self, log_dir: Path, group: Group, monkeypatch: pytest.MonkeyPatch, sink: Sink,
                 checkpoint: list[dict[str, Any]], name: str, **options: str) -> None:
        monkeypatch.setattr(member_module, "Membership", lambda client, machine: FakeMembership(group))
        monkeypatch.setattr(member_module, "CoordinatorClient", lambda *a, **k: None)
        self.spec = str(log_dir)
        self.member = QueryMember(parse_options({"group": "g", "topics": "t", "coordinator": "unused:1",
                                                 "log": self.spec, **options}))
        m = self.member.membership
        assert isinstance(m, FakeMembership)
        self.fake = m
        # the query's checkpoint: its planned end offsets, by batch id; the sink: rows by (query, batch id)
        self.sink, self.checkpoint, self.name = sink, checkpoint, name

    @property
    def finished(self) -> BatchOffset:
        return BatchOffset.from_json(self.checkpoint[-1]) if self.checkpoint else BatchOffset()

    def run(self, batch_id: int, start: BatchOffset, end: BatchOffset) -> None:
        rows: list[tuple[int, bytes, int]] = []
        for r in split_ranges(self.member.ranges(start, end), 7):
            for batch in read_range(self.spec, r.shard, r.start, r.end, r.skip):
                assert batch.schema == SPARK_ARROW_SCHEMA
                rows += [(o, bytes(k), int(v)) for o, k, v in zip(
                    batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                    batch.column("value").to_pylist(), strict=True)]
        self.sink[(self.name, batch_id)] = rows

    def step(self, limit: int | None = None) -> bool:
        """One trigger: plan the next batch and run it; False when there was nothing to read."""
        finished = self.finished
        end = self.member.plan(finished, limit)
        if end == finished:
            return False
        self.checkpoint.append(end.to_json())
        assert BatchOffset.from_json(self.checkpoint[-1]) == end
        self.run(len(self.checkpoint) - 1, finished, end)
        return True

    def drain(self, limit: int | None = None) -> None:
        while self.step(limit):
            pass


class Setup:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dir = tmp_path / "log"
        self.log = EmbeddedLog(self.dir, fsync="never")
        self.log.create_topic("t", 1)
        self.group = Group()
        self.sink: Sink = {}
        self.checkpoints: dict[str, list[dict[str, Any]]] = {}
        self.monkeypatch = monkeypatch
        self.n = 0

    def produce(self, count: int) -> None:
        self.log.produce("t", 0, [LogRecord(f"k{i % KEYS}".encode(), str(i).encode(), 0)
                                  for i in range(self.n, self.n + count)])
        self.n += count

    def query(self, name: str = "a", **options: str) -> Query:
        """A query (a restarted one, if ``name`` was used before: it has that query's checkpoint)."""
        checkpoint = self.checkpoints.setdefault(name, [])
        return Query(self.dir, self.group, self.monkeypatch, self.sink, checkpoint, name, **options)

    def split(self, into: int, piece: int | None = None) -> Layout:
        return self.log.split_partition("t", 0, into, piece=piece, timeout_s=5)

    def values(self) -> list[int]:
        return [v for rows in self.sink.values() for _, _, v in rows]  # in the order batches ran

    def assert_exactly_once_in_order(self) -> None:
        values = self.values()
        assert sorted(values) == list(range(self.n)), (
            f"lost {sorted(set(range(self.n)) - set(values))[:5]}, "
            f"twice {[v for v in set(values) if values.count(v) > 1][:5]}")
        last: dict[int, int] = {}
        for v in values:  # batches in order, each key's records in offset order within a batch
            assert last.get(v % KEYS, -1) < v, f"k{v % KEYS}: {v} after {last[v % KEYS]}"
            last[v % KEYS] = v


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    s = Setup(tmp_path, monkeypatch)
    yield s
    s.log.close()


def keys_of(entry: dict[str, Any]) -> set[str]:
    return set(entry["ends"])


def test_a_query_reads_a_partition_split_split_again_and_merged_each_record_once_in_order(
        setup: Setup) -> None:
    s = setup
    q = s.query()
    q.fake.actions = [Assign(frozenset({S}))]
    s.produce(40)
    q.step(25)  # the query lags: a split reaches records it has not read
    s.split(2)
    s.produce(40)
    q.step(20)
    assert keys_of(s.checkpoints["a"][-1]) == {"t:0:0-2147483648", "t:0:2147483648-4294967296"}
    lanes = keys_of(s.checkpoints["a"][-1])
    assert s.checkpoints["a"][-1]["starts"] == dict.fromkeys(lanes, 25)  # each where S stopped
    assert q.member.owned == {S}  # still one shard to the coordinator
    s.split(3, piece=s.log.layout("t", 0).open_pieces()[1].id)
    s.produce(40)
    q.step(30)
    assert len(s.checkpoints["a"][-1]["ends"]) == 4  # the upper lane cut in three
    s.log.merge_partition("t", 0, timeout_s=5)
    s.produce(40)
    q.drain(30)
    s.produce(10)
    q.drain()
    s.assert_exactly_once_in_order()
    # Caught up on one piece again: the lanes are the shard again, committed as one fragment.
    assert keys_of(s.checkpoints["a"][-1]) == {"t:0"}
    q.step()  # the boundary commits the last batch
    assert s.group.offsets() == {S: s.log.piece_ends("t", 0)[(0, KEY_SPACE)]}
    # Every commit was of the shard or of lanes inside it, and none was refused.
    assert all(lane.partition == 0 for c in s.group.commits for lane in c)


def test_a_revocation_commits_every_lane_and_the_next_owner_reads_on_from_there(setup: Setup) -> None:
    s = setup
    q = s.query()
    q.fake.actions = [Assign(frozenset({S}))]
    s.produce(30)
    q.step(10)
    s.split(2)
    s.produce(30)
    q.step(30)
    lanes = {Shard("t", 0, 0, KEY_SPACE // 2), Shard("t", 0, KEY_SPACE // 2, KEY_SPACE)}
    assert q.member.boundary.owned == lanes
    finished = q.finished
    q.fake.actions = [Revoke(frozenset({S}))]
    q.step()  # the boundary: the finished batch committed, the lanes committed and released
    assert q.fake.acks[-1] == ("revoked", frozenset({S})) and q.finished.ends == {}
    assert s.group.offsets() == {lane: finished.ends[lane] for lane in lanes}
    assert q.member.owned == frozenset() and q.member.boundary.owned == frozenset()
    s.produce(20)
    other = s.query("b")
    other.fake.actions = [Assign(frozenset({S}))]
    other.drain(15)
    s.assert_exactly_once_in_order()


def test_a_lost_shard_drops_its_lanes_without_committing(setup: Setup) -> None:
    s = setup
    q = s.query()
    q.fake.actions = [Assign(frozenset({S}))]
    s.produce(20)
    s.split(2)
    s.produce(20)
    q.step()
    committed = len(s.group.commits)
    q.fake.actions = [Lost(frozenset(), "fenced")]
    q.member.plan(q.finished, None)
    assert q.member.boundary.owned == frozenset() and q.member.owned == frozenset()
    assert len(s.group.commits) == committed + 1  # the finished batch, committed before the Lost


def test_a_batch_replayed_after_a_restart_reads_what_the_first_run_read(setup: Setup) -> None:
    """A query planned a batch with lanes (cut by a split), ran it, and died before the next boundary
    committed it. Restarted, Spark replays that batch from the checkpoint: the new process takes the
    shard with the same pieces, so it reads the very same records (the sink's batch is rewritten
    identically), then goes on where that batch ended."""
    s = setup
    q = s.query()
    q.fake.actions = [Assign(frozenset({S}))]
    s.produce(30)
    q.step(20)
    s.split(2)
    s.produce(30)
    q.step(20)  # the batch with the lanes: its commit waits for the next boundary, which never comes
    first = list(s.sink[("a", len(s.checkpoints["a"]) - 1)])
    restarted = s.query()
    restarted.fake.actions = [Assign(frozenset({S}))]
    start = BatchOffset.from_json(s.checkpoints["a"][-2])
    end = BatchOffset.from_json(s.checkpoints["a"][-1])
    restarted.run(len(s.checkpoints["a"]) - 1, start, end)  # Spark's first call after a restart
    assert s.sink[("a", len(s.checkpoints["a"]) - 1)] == first
    s.produce(15)
    restarted.drain(20)
    s.assert_exactly_once_in_order()


def test_a_batch_replayed_after_the_layout_changed_under_it_loses_nothing(setup: Setup) -> None:
    """The query died during a batch of the whole partition; the partition was split before it came
    back. The restarted process takes the partition as two lanes, which the replayed batch does not
    carry: it reads nothing of it (the sink's batch is rewritten empty), and the next batch reads the
    lanes from the group's committed offset — every record once (with a sink idempotent by batch id)."""
    s = setup
    q = s.query()
    q.fake.actions = [Assign(frozenset({S}))]
    s.produce(30)
    q.step(20)
    q.step(20)  # batch 1: S from 20; the next boundary, which would commit it, never comes
    assert s.sink[("a", 1)] and s.group.offsets() == {S: 20}
    s.split(2)
    s.produce(10)
    restarted = s.query()
    restarted.fake.actions = [Assign(frozenset({S}))]
    batch0, batch1 = (BatchOffset.from_json(x) for x in s.checkpoints["a"])
    restarted.run(1, batch0, batch1)  # Spark's first call after the restart: replay batch 1
    assert s.sink[("a", 1)] == []
    restarted.drain()
    s.assert_exactly_once_in_order()


def test_read_range_reads_a_range_planned_before_a_split_and_refuses_a_short_log(setup: Setup) -> None:
    s = setup
    s.produce(20)
    before = list(read_range(str(s.dir), S, 5, 20))  # unsplit: the columnar path
    s.split(2)
    s.produce(10)
    # Planned as one range before the split (its records are in the sealed piece): read by piece now.
    after = list(read_range(str(s.dir), S, 5, 20))
    values = sorted(v for b in after for v in b.column("value").to_pylist())
    assert values == sorted(v for b in before for v in b.column("value").to_pylist())
    assert all(b.schema == SPARK_ARROW_SCHEMA for b in after)
    # A lane of the upper piece read across the gap a merge leaves below the merged piece's start.
    upper = Shard("t", 0, KEY_SPACE // 2, KEY_SPACE)
    s.log.merge_partition("t", 0, timeout_s=5)
    s.produce(10)
    merged = s.log.piece_ends("t", 0)[(0, KEY_SPACE)]
    got = [int(v) for b in read_range(str(s.dir), upper, 20, merged) for v in b.column("value").to_pylist()]
    assert got == [v for v in range(20, s.n) if key_hash(f"k{v % KEYS}".encode(), 0) >= upper.lo]
    # A range planned beyond what the log holds: records were lost, so the read fails loudly.
    with pytest.raises(RuntimeError, match=r"have no records at offset .* planned past the end of its piece"):
        list(read_range(str(s.dir), upper, merged, merged + 5))


def test_read_range_on_a_split_partition_keeps_only_what_no_skip_piece_drops(setup: Setup) -> None:
    s = setup
    s.split(2)
    s.produce(40)
    lower = Shard("t", 0, 0, KEY_SPACE // 2)
    end = s.log.piece_ends("t", 0)[(lower.lo, lower.hi)]
    every = [int(v) for b in read_range(str(s.dir), lower, 0, end) for v in b.column("value").to_pylist()]
    skip = ((0, KEY_SPACE // 4, 10),)  # a former owner did these keys below 10
    kept = [int(v) for b in read_range(str(s.dir), lower, 0, end, skip)
            for v in b.column("value").to_pylist()]
    dropped = set(every) - set(kept)
    assert dropped and kept and all(v < 40 for v in every)
    for v in every:
        point = key_hash(f"k{v % KEYS}".encode(), 0)
        offset = s.log.read_keys("t", 0, point, point + 1, 0, 100).records
        at = next(r.offset for r in offset if int(r.value or b"") == v)
        assert (v in dropped) == (point < KEY_SPACE // 4 and at < 10)


def test_a_split_between_the_layout_check_and_the_columnar_read_falls_back_to_reading_by_key(
        setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    s = setup
    s.produce(20)
    s.split(2)
    s.produce(10)
    from regroup.spark import read as read_module

    log = read_module._log(str(s.dir))
    assert isinstance(log, EmbeddedLog)
    real = log.layout
    calls = iter([Layout()])  # unsplit when read_range looks, split by the time it reads
    monkeypatch.setattr(log, "layout", lambda t, p: next(calls, None) or real(t, p))
    batches: list[pa.RecordBatch] = list(read_range(str(s.dir), S, 0, 20))
    values = sorted(int(v) for b in batches for v in b.column("value").to_pylist())
    assert values == list(range(20))


def test_lanes_are_planned_to_their_own_piece_end(setup: Setup) -> None:
    s = setup
    q = s.query()
    q.fake.actions = [Assign(frozenset({S}))]
    s.produce(10)
    q.step()
    s.split(2)
    s.produce(25)
    q.step()
    end = BatchOffset.from_json(s.checkpoints["a"][-1])
    ends = s.log.piece_ends("t", 0)
    assert {(lane.lo, lane.hi): e for lane, e in end.ends.items()} == ends
    assert len(set(ends.values())) == 2, "the test wants pieces with different ends"
    assert s.log.end_offsets("t")[0] == max(ends.values())
    assert list(itertools.chain.from_iterable(s.sink.values()))


def test_starting_offsets_latest_on_a_split_partition_reads_every_record_produced_after_the_start(
        setup: Setup) -> None:
    s = setup
    s.split(2)
    lower = next(k for k in (f"k{i}".encode() for i in range(100)) if key_hash(k, 0) < KEY_SPACE // 2)
    upper = next(k for k in (f"k{i}".encode() for i in range(100)) if key_hash(k, 0) >= KEY_SPACE // 2)
    s.log.produce("t", 0, [LogRecord(upper, b"-1", 0)] * 50)  # the upper piece ends at 50, the lower at 0
    q = s.query(startingOffsets="latest")
    q.fake.actions = [Assign(frozenset({S}))]
    q.step()  # takes the partition "at its end"
    s.log.produce("t", 0, [LogRecord(lower, str(i).encode(), 0) for i in range(5)]
                  + [LogRecord(upper, str(i).encode(), 0) for i in range(5, 10)])
    q.drain()
    assert sorted(s.values()) == list(range(10))
