"""The coordinator runtime: one step of the core turned into effects, with an in-memory store."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from regroup.coordinator.history import HistoryOp
from regroup.coordinator.memory_store import MemoryStore
from regroup.coordinator.runtime import Runtime
from regroup.protocol.causes import Fence, FenceReason
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetFetchRequest
from regroup.protocol.records import Record
from regroup.protocol.shard import EMPTY
from regroup.protocol.topics import TopicMetadata


class SpyStore(MemoryStore):
    """Remembers what each append carried, so tests can see the order of effects."""

    def __init__(self, snapshot_every: int | None = None) -> None:
        super().__init__(snapshot_every=snapshot_every)
        self.appends: list[tuple[tuple[Record, ...], tuple[HistoryOp, ...]]] = []
        self.snapshots: list[list[Record]] = []

    def append(self, records: Sequence[Record], history: Sequence[HistoryOp] = ()) -> int:
        self.appends.append((tuple(records), tuple(history)))
        return super().append(records, history)

    def compact(self, snapshot: list[Record]) -> None:
        self.snapshots.append(snapshot)
        super().compact(snapshot)


def join(gid: str, mid: str) -> HeartbeatRequest:
    return HeartbeatRequest(gid, mid, 0, rebalance_timeout_ms=10_000, subscribed_topics=("t",), owned=EMPTY)


def runtime(store: SpyStore | None = None) -> tuple[Runtime, SpyStore]:
    store = store or SpyStore()
    config = CoordinatorConfig(session_timeout_ms=30_000, heartbeat_interval_ms=1_000)
    coord = Coordinator(config, topics=TopicMetadata({"t": 4}))
    return Runtime(coord, store, lambda: 1_700_000_000_000), store


def test_records_are_appended_before_the_answer_names_them() -> None:
    rt, store = runtime()
    eff = rt.step(lambda c: c.heartbeat(join("g", "a"), 0), ("g", "a"))
    assert eff.response.member_epoch == 1
    # The step's records are in the store, and the answer waits for the last of them.
    assert store.appends == [(eff.records, eff.history)] and eff.records
    assert eff.durable_seq == store.tail == len(eff.records)
    # A step that writes nothing waits for what is already appended (it may show it).
    steady = rt.step(lambda c: c.heartbeat(HeartbeatRequest("g", "a", 1), 0), ("g", "a"))
    assert steady.records == () and steady.durable_seq == store.tail and len(store.appends) == 1
    # So does a read: one door, no handler has to remember it.
    read = rt.read(lambda c: c.fetch_offsets(OffsetFetchRequest("g")))
    assert read.response.error is ErrorCode.NONE and read.durable_seq == store.tail


def test_the_requester_is_not_nudged_but_the_others_are() -> None:
    rt, _ = runtime()
    rt.step(lambda c: c.heartbeat(join("g", "a"), 0), ("g", "a"))
    owned = rt.coord.groups["g"].current["a"].assigned
    rt.step(lambda c: c.heartbeat(HeartbeatRequest("g", "a", 1, owned=owned), 0), ("g", "a"))
    eff = rt.step(lambda c: c.heartbeat(join("g", "b"), 10), ("g", "b"))
    # b's join gives b a target and makes a revoke: the core wakes both, the runtime drops b.
    assert ("g", "a") in eff.nudges and ("g", "b") not in eff.nudges
    # Without a requester (a timer, new topics), every woken member is nudged.
    rt2, _ = runtime()
    rt2.step(lambda c: c.heartbeat(join("g", "a"), 0), ("g", "a"))
    eff2 = rt2.step(lambda c: c.heartbeat(join("g", "b"), 10))
    assert ("g", "a") in eff2.nudges


def test_each_step_names_the_next_deadline() -> None:
    rt, _ = runtime()
    eff = rt.step(lambda c: c.heartbeat(join("g", "a"), 0), ("g", "a"))
    assert eff.next_deadline == 30_000
    eff = rt.step(lambda c: c.heartbeat(HeartbeatRequest("g", "a", 1), 5_000), ("g", "a"))
    assert eff.next_deadline == 35_000  # re-armed by the heartbeat
    expired = rt.step(lambda c: c.expire(35_000))
    assert expired.next_deadline is None
    assert expired.fences == (Fence("g", "a", FenceReason.SESSION_TIMEOUT),)
    assert expired.departed == (("g", "a"),)
    assert expired.fence_lines() == ["group 'g': member 'a' fenced (session timeout)"]


def test_compaction_hands_the_store_a_snapshot_when_due() -> None:
    rt, store = runtime(SpyStore(snapshot_every=5))
    first = rt.step(lambda c: c.heartbeat(join("g", "a"), 0), ("g", "a"))
    assert len(first.records) > 5
    assert store.snapshots == [rt.coord.snapshot()] and store.records == rt.coord.snapshot()
    quiet = rt.step(lambda c: c.heartbeat(HeartbeatRequest("g", "a", 1), 1), ("g", "a"))
    assert quiet.records == () and len(store.snapshots) == 1  # nothing written, nothing compacted
    # What the store holds rebuilds the same state.
    assert Coordinator.recover(store.records, 1).groups == rt.coord.groups


def test_history_is_worded_from_the_causes_the_core_reported() -> None:
    rt, store = runtime()
    eff = rt.step(lambda c: c.heartbeat(join("g", "a"), 0), ("g", "a"))
    assert [(op.entry.kind, op.entry.epoch, op.entry.cause) for op in eff.history if op.entry] == [
        ("group", 0, "group created"),
        ("group", 1, "member a joined; subscribed topics now t=4"),
        ("target", 1, "assignor uniform; 1 member target(s) changed")]
    assert all(op.entry is not None and op.entry.at_unix_ms == 1_700_000_000_000 for op in eff.history)
    rt.step(lambda c: c.heartbeat(join("g", "b"), 0), ("g", "b"))
    fenced = rt.step(lambda c: c.expire(10**9))
    causes = [op.entry.cause for op in fenced.history if op.entry is not None and op.entry.kind == "group"]
    assert causes[0] == "member a fenced (session timeout)"
    assert causes[1].startswith("member b fenced (session timeout)")
    assert store.history.of("g")[-len(fenced.history):] == tuple(op.entry for op in fenced.history)


def test_a_core_exception_appends_nothing() -> None:
    rt, store = runtime()

    def boom(c: Coordinator) -> object:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        rt.step(boom)  # type: ignore[arg-type]
    assert store.appends == [] and store.tail == 0
