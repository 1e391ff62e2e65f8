"""The Consumer shell around the member driver, with the coordinator faked out (a unit test of
`regroup.client.consumer` alone): what it commits, releases, drops and where it starts, in which order.
The real thing, with processes and a coordinator, is in tests/e2e/test_consumer_group.py."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from regroup import TopicPartition
from regroup.client import consumer as consumer_module
from regroup.client.errors import CommitFailedError, FatalConsumerError, OffsetFetchError
from regroup.client.membership import Membership
from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import Action, Assign, Fatal, Lost, Revoke
from regroup.protocol.shard import Shard, ShardSet

A, B = Shard("t", 0), Shard("t", 1)


class FakeMembership(Membership):
    """The coordinator side as a script: actions to hand out, committed offsets, refusals."""

    def __init__(self, *_: Any) -> None:  # no threads, no client
        self.actions: list[Action] = []
        self.commits: list[dict[Shard, int]] = []
        self.committed: dict[Shard, int] = {}
        self.acks: list[tuple[str, ShardSet]] = []
        self.failing_fetches = 0
        self.refuse_commits = False
        self.cut = False  # cut off from the coordinator (regroup.protocol.failover rule 7)

    @property
    def epoch(self) -> int:
        return 1

    def take_actions(self) -> list[Action]:
        out, self.actions = self.actions, []
        return out

    def fetch_committed(self, shards: Collection[Shard]) -> dict[Shard, int]:
        if self.failing_fetches:
            self.failing_fetches -= 1
            raise OffsetFetchError("coordinator unavailable")
        return {s: self.committed[s] for s in shards if s in self.committed}

    def commit(self, offsets: dict[Shard, int]) -> None:
        if self.refuse_commits:
            raise CommitFailedError("refused", ErrorCode.STALE_MEMBER_EPOCH)
        self.commits.append(dict(offsets))
        self.committed.update(offsets)

    def revocation_done(self, shards: ShardSet) -> None:
        self.acks.append(("revoked", shards))

    def assignment_done(self, shards: ShardSet) -> None:
        self.acks.append(("assigned", shards))

    def cut_off(self) -> bool:
        return self.cut

    @property
    def failover_grace_ms(self) -> int:
        return 2_000

    def close(self) -> None:
        pass


def make(log: PartitionedLog, monkeypatch: pytest.MonkeyPatch, events: list[tuple[str, set[Any]]],
         **kwargs: Any) -> tuple[consumer_module.Consumer, FakeMembership]:
    monkeypatch.setattr(consumer_module, "Membership", FakeMembership)
    monkeypatch.setattr(consumer_module, "CoordinatorClient", lambda *a, **k: None)
    c = consumer_module.Consumer(
        "g", coordinator="unused:1", log=log, topics=["t"], max_batch_records=3,
        on_assign=lambda _, s: events.append(("assign", s)),
        on_revoke=lambda _, s: events.append(("revoke", s)),
        on_lost=lambda _, s: events.append(("lost", s)), **kwargs)
    m = c._membership
    assert isinstance(m, FakeMembership)
    return c, m


def test_new_partitions_start_at_the_committed_offset_else_per_the_reset_policy(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, set[Any]]] = []
    c, m = make(log, monkeypatch, events, auto_offset_reset="latest")
    m.committed = {A: 4}
    m.actions = [Assign(frozenset({A, B}))]
    records = c.consume(10, timeout=0.5)
    assert {(r.partition, r.offset) for r in records} <= {(0, o) for o in range(4, 10)}
    assert records and records[0].offset == 4  # A from its committed offset; B at the log's end
    assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert all(type(p) is TopicPartition for p in c.assignment())
    assert events == [("assign", {TopicPartition("t", 0), TopicPartition("t", 1)})]
    assert m.acks == [("assigned", frozenset({A, B}))]

    earliest, m2 = make(log, monkeypatch, [])
    m2.actions = [Assign(frozenset({B}))]
    assert earliest.consume(1, timeout=0.5)[0].offset == 0


def test_a_revocation_commits_what_was_read_then_releases_and_drops_buffered_records(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, set[Any]]] = []
    c, m = make(log, monkeypatch, events)
    m.committed = {A: 2, B: 0}
    m.actions = [Assign(frozenset({A, B}))]
    read = [(r.partition, r.offset) for r in c.consume(2, timeout=0.5)]
    assert read == [(0, 2), (0, 3)]  # partitions are read in order; a batch of 3 leaves A's 4 buffered
    m.actions = [Revoke(frozenset({A}))]
    after = c.consume(20, timeout=0.2)
    assert all(r.partition == 1 for r in after), "a buffered record of the revoked partition was returned"
    assert events[-1] == ("revoke", {TopicPartition("t", 0)})
    # Committed before the release — where this member stopped, not what it had buffered — and only A.
    assert m.commits[0] == {A: 4}
    assert m.acks.index(("revoked", frozenset({A}))) == 1  # after the assignment's ack, once committed
    assert c.assignment() == {TopicPartition("t", 1)}
    # A refused commit does not hold the release back: the coordinator decides what is safe.
    m.refuse_commits = True
    m.actions = [Revoke(frozenset({B}))]
    c.consume(1, timeout=0.1)
    assert m.acks[-1] == ("revoked", frozenset({B})) and c.assignment() == set()


def test_an_assignment_waits_while_offsets_cannot_be_read_unless_a_later_loss_supersedes_it(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, set[Any]]] = []
    c, m = make(log, monkeypatch, events)
    m.committed = {A: 5}
    m.failing_fetches = 10**6  # the coordinator does not answer fetches
    m.actions = [Assign(frozenset({A}))]
    assert c.consume(1, timeout=0.1) == []
    assert c.assignment() == set() and m.acks == []  # never "no committed offset" -> offset 0
    m.failing_fetches = 0
    assert c.consume(1, timeout=0.5)[0].offset == 5  # taken at the next poll, where it was committed
    assert m.acks == [("assigned", frozenset({A}))]

    # Deferred again, then the member is fenced: the Lost supersedes the waiting Assign.
    c2, m2 = make(log, monkeypatch, events)
    m2.failing_fetches = 1
    m2.actions = [Assign(frozenset({A})), Lost(frozenset({A}), "fenced"), Assign(frozenset({B}))]
    m2.committed = {B: 7}
    c2.consume(1, timeout=0.3)
    assert m2.acks == [("assigned", frozenset({B}))], "the superseded Assign was carried out"
    assert c2.assignment() == {TopicPartition("t", 1)} and m2.commits == []


def test_a_loss_drops_everything_without_committing_and_fatal_is_raised(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, set[Any]]] = []
    c, m = make(log, monkeypatch, events)
    m.committed = {A: 0, B: 0}
    m.actions = [Assign(frozenset({A, B}))]
    c.consume(4, timeout=0.5)
    m.actions = [Lost(frozenset({A}), "fenced")]
    assert c.consume(1, timeout=0.1) == []
    assert c.assignment() == set() and m.commits == []
    assert events[-1] == ("lost", {TopicPartition("t", 0), TopicPartition("t", 1)})
    m.actions = [Fatal(ErrorCode.FENCED_INSTANCE_ID, "another process took instance i1")]
    with pytest.raises(FatalConsumerError, match="instance i1"):
        c.consume(1, timeout=0.1)


def test_a_member_cut_off_from_the_coordinator_hands_out_nothing_but_still_gives_partitions_up(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, set[Any]]] = []
    c, m = make(log, monkeypatch, events)
    m.committed = {A: 0, B: 0}
    m.actions = [Assign(frozenset({A, B}))]
    assert [(r.partition, r.offset) for r in c.consume(2, timeout=0.5)] == [(0, 0), (0, 1)]
    m.cut = True  # its connection broke and no heartbeat was answered for the grace
    assert c.consume(10, timeout=0.1) == [] and c.paused
    m.actions = [Revoke(frozenset({A}))]  # what the member must do is still done (a commit may fail)
    assert c.consume(10, timeout=0.1) == [] and m.acks[-1] == ("revoked", frozenset({A}))
    m.cut = False  # a heartbeat was answered: the coordinator still has it as a member
    after = c.consume(10, timeout=0.5)
    assert not c.paused and after and {r.partition for r in after} == {1}
    assert after[0].offset == 0, "records read before the pause are handed out after it, none skipped"


def test_key_ranges_read_the_partition_once_keep_their_keys_in_order_and_commit_per_range(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from regroup.protocol.keyrange import key_hash, range_shards
    lg = open_log(str(tmp_path / "ranged"))
    lg.create_topic("t", 1)
    keys = [f"k{i % 7}".encode() for i in range(40)]
    lg.produce("t", 0, [LogRecord(k, str(i).encode(), 0) for i, k in enumerate(keys)])
    lo, mid, hi = range_shards("t", 0, 3)
    events: list[tuple[str, set[Any]]] = []
    c, m = make(lg, monkeypatch, events)
    m.committed = {Shard("t", 0): 10}  # the whole partition was done up to 10 before the split
    # the coordinator answers a range's fetch with the fragments overlapping it
    monkeypatch.setattr(m, "fetch_committed", lambda shards: dict(m.committed))
    m.actions = [Assign(frozenset({lo, hi}))]
    got = []
    while batch := c.consume(100, 0.2):
        got += batch
    mine = [o for o in range(10, 40) if not mid.lo <= key_hash(keys[o], o) < mid.hi]
    assert [r.offset for r in got] == mine  # offset order, so every key in order; nothing of mid
    assert c.shards() == {lo, hi} and c.assignment() == {TopicPartition("t", 0)}
    c.commit()
    assert m.commits[-1] == {lo: 40, hi: 40}  # both ranges moved past what the read covered
    lg.close()


def test_a_read_timeout_is_no_reason_to_end_the_poll_loop(
        log: PartitionedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    from regroup.log.errors import LogTimeoutError
    c, m = make(log, monkeypatch, [])
    m.actions = [Assign(frozenset({A}))]
    real, calls = log.read, []

    def slow_once(*a: Any) -> Any:
        calls.append(a)
        if len(calls) == 1:
            raise LogTimeoutError("no fetch answer in 30 s")
        return real(*a)

    monkeypatch.setattr(log, "read", slow_once)
    assert [r.offset for r in c.consume(3, 5.0)] == [0, 1, 2]  # the timeout is logged, the read retried
    assert len(calls) == 2


def test_a_partition_split_and_merged_while_owned_is_read_in_lanes_each_key_once_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Producer-side split and merge while a shard is owned and its reader lags: the shard is cut into
    one lane per piece, each from where the shard was; after the merge its lanes share the merged
    piece from different positions. Every record comes out once, every key in order; a revocation
    commits each lane, and a later owner resumes from those parts with nothing to read again."""
    from regroup.log.embedded import EmbeddedLog

    lg = EmbeddedLog(tmp_path / "split", fsync="never")
    lg.create_topic("t", 1)
    n = 0

    def produce(count: int) -> None:
        nonlocal n
        lg.produce("t", 0, [LogRecord(f"k{i % 11}".encode(), str(i).encode(), 0)
                            for i in range(n, n + count)])
        n += count

    def take(count: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < count:
            out += c.consume(count - len(out), 0.2)
        return out

    events: list[tuple[str, set[Any]]] = []
    c, m = make(lg, monkeypatch, events)
    monkeypatch.setattr(m, "fetch_committed", lambda shards: dict(m.committed))
    produce(30)
    m.actions = [Assign(frozenset({A}))]
    got = take(5)
    lg.split_partition("t", 0, 2)
    produce(30)
    got += take(10)
    lg.split_partition("t", 0, 3, piece=lg.layout("t", 0).open_pieces()[1].id)
    produce(30)
    got += take(7)
    lg.merge_partition("t", 0)
    produce(30)
    while batch := c.consume(100, 0.2):
        got += batch
    values = [int(r.value or b"") for r in got]
    assert sorted(values) == list(range(n))
    by_key: dict[bytes | None, list[int]] = {}
    for r in got:
        by_key.setdefault(r.key, []).append(int(r.value or b""))
    assert all(v == sorted(v) for v in by_key.values())
    assert c.shards() == {A}
    m.actions = [Revoke(frozenset({A}))]
    c.consume(1, 0.05)
    lanes = m.commits[-1]
    assert len(lanes) > 1 and all(s.partition == 0 and not s.whole for s in lanes)
    assert sorted((s.lo, s.hi) for s in lanes)[0][0] == 0 and max(s.hi for s in lanes) == 1 << 32
    # another owner of the whole partition resumes from the lanes' parts: nothing to read again
    c2, m2 = make(lg, monkeypatch, events)
    monkeypatch.setattr(m2, "fetch_committed", lambda shards: dict(m.committed))
    m2.actions = [Assign(frozenset({A}))]
    assert c2.consume(100, 0.3) == []
    produce(10)
    rest = []
    while batch := c2.consume(100, 0.2):
        rest += batch
    assert sorted(int(r.value or b"") for r in rest) == list(range(n - 10, n))
    lg.close()


@pytest.mark.parametrize("shard", [A, Shard("t", 0, 1 << 30, 3 << 30)], ids=["whole", "key-range"])
def test_latest_on_a_split_partition_begins_each_piece_at_its_own_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard: Shard) -> None:
    """``auto_offset_reset='latest'`` on a partition split on the producer side: each piece (lane)
    begins at its own end, not at the highest piece's, so a piece that ends lower loses nothing
    produced after the assignment — and nothing produced before it is read."""
    from regroup.log.embedded import EmbeddedLog
    from regroup.protocol.keyrange import KEY_SPACE, key_hash

    lg = EmbeddedLog(tmp_path / "split", fsync="never")
    lg.create_topic("t", 1)
    lg.split_partition("t", 0, 2)
    keys = [f"k{i}".encode() for i in range(200)]
    lower = next(k for k in keys if shard.lo <= key_hash(k, 0) < KEY_SPACE // 2)
    upper = next(k for k in keys if KEY_SPACE // 2 <= key_hash(k, 0) < shard.hi)
    lg.produce("t", 0, [LogRecord(upper, b"-1", 0)] * 50)  # the upper piece ends at 50, the lower at 0
    c, m = make(lg, monkeypatch, [], auto_offset_reset="latest")
    m.actions = [Assign(frozenset({shard}))]
    assert c.consume(10, 0.1) == []  # takes the shard "at the end" of each piece
    lg.produce("t", 0, [LogRecord(lower, str(i).encode(), 0) for i in range(5)]
               + [LogRecord(upper, str(i).encode(), 0) for i in range(5, 10)])
    got: list[Any] = []
    while batch := c.consume(100, 0.3):
        got += batch
    assert sorted(int(r.value or b"") for r in got) == list(range(10))
    m.actions = [Revoke(frozenset({shard}))]
    c.consume(1, 0.05)
    assert {(s.lo, s.hi): o for s, o in m.commits[-1].items()} == {
        (shard.lo, KEY_SPACE // 2): 5, (KEY_SPACE // 2, shard.hi): 55}  # each lane past its own
    lg.close()


def test_where_a_shard_begins_asks_a_log_for_piece_ends_only_of_its_split_partitions() -> None:
    """The Kafka path is unchanged: one end-offsets call per topic, no piece asked for; a split
    partition of the embedded log is asked for its pieces' ends, and nothing else is."""
    from regroup.client.membership import _log_ends
    from regroup.protocol.driver import OffsetReset
    from regroup.protocol.keyrange import KEY_SPACE

    calls: list[tuple[Any, ...]] = []

    class Log:
        def end_offsets(self, topic: str) -> dict[int, int]:
            calls.append(("end_offsets", topic))
            return {0: 50, 1: 7}

        def key_pieces(self, topic: str, p: int) -> tuple[tuple[int, int], ...]:
            return ((0, 5), (5, KEY_SPACE)) if p == 0 and split else ((0, KEY_SPACE),)

        def piece_ends(self, topic: str, p: int) -> dict[tuple[int, int], int]:
            calls.append(("piece_ends", topic, p))
            return {(0, 5): 3, (5, KEY_SPACE): 50}

    log: Any = Log()
    split = False
    assert _log_ends({A, B}, {}, OffsetReset.LATEST, log) == {A: 50, B: 7}
    assert calls == [("end_offsets", "t")]
    calls.clear()
    split = True
    assert _log_ends({A, B}, {}, OffsetReset.LATEST, log) == {
        Shard("t", 0, 0, 5): 3, Shard("t", 0, 5, KEY_SPACE): 50, B: 7}
    assert calls == [("end_offsets", "t"), ("piece_ends", "t", 0)]
    calls.clear()
    assert _log_ends({A, B}, {}, OffsetReset.EARLIEST, log) == {} and calls == []
