"""The durable store: group commit, durability before the answer, compaction, exact recovery."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from regroup.coordinator import store as store_mod
from regroup.coordinator.history import HistoryOp
from regroup.coordinator.store import DurableStore, SqliteLog, StoreError
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.records import GroupEpochRecord, OffsetRecord, Record
from regroup.protocol.shard import Shard
from regroup.rpc.types import EpochChange
from tests.coordinator.workload import RecordingGroup, run_workload


def offsets(n: int, start: int = 0) -> list[Record]:
    return [OffsetRecord("g", Shard("t", i % 4), start + i) for i in range(n)]


def count_rows(data_dir: Path, table: str) -> int:
    db = sqlite3.connect(data_dir / store_mod.DB_FILE)
    try:
        (n,) = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        return int(n)
    finally:
        db.close()


def test_records_are_on_disk_when_durable_returns(tmp_path: Path) -> None:
    async def main() -> None:
        s = DurableStore(str(tmp_path))
        assert s.open().records == []
        s.start(asyncio.get_running_loop())
        seq = s.append(offsets(3))
        assert seq == 3
        await s.durable(seq)
        assert count_rows(tmp_path, "records") == 3  # visible to another connection: committed
        await s.close()

    asyncio.run(main())
    db = sqlite3.connect(tmp_path / store_mod.DB_FILE)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    loaded = DurableStore(str(tmp_path)).open()
    assert loaded.records == offsets(3) and loaded.last_seq == 3


class SlowLog(SqliteLog):
    """Each transaction waits until the test opens ``gate``, like a slow fsync that lasts exactly as
    long as the test needs (no timing assumption)."""

    calls: list[int]
    gate: threading.Event

    def append(self, rows: Sequence[tuple[int, str]], history: Sequence[HistoryOp]) -> None:
        self.calls.append(len(rows))
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        super().append(rows, history)


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def test_group_commit_batches_everything_that_arrived_during_the_last_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SlowLog.calls, SlowLog.gate = [], threading.Event()
    monkeypatch.setattr(store_mod, "SqliteLog", SlowLog)

    async def main() -> None:
        s = DurableStore(str(tmp_path))
        s.open()
        s.start(asyncio.get_running_loop())
        first = s.append(offsets(1))
        await _until(lambda: SlowLog.calls == [1], "the first transaction to be running")
        seqs = [s.append(offsets(2, 100 + 2 * i)) for i in range(200)]
        SlowLog.gate.set()
        await asyncio.gather(*(s.durable(q) for q in seqs), s.durable(first))
        assert s.durable_seq == 401
        await s.close()

    asyncio.run(main())
    assert SlowLog.calls == [1, 400]  # one transaction for the 200 appends that queued meanwhile


def test_answers_wait_for_their_own_and_all_earlier_records(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    SlowLog.calls, SlowLog.gate = [], threading.Event()
    monkeypatch.setattr(store_mod, "SqliteLog", SlowLog)

    async def main() -> None:
        s = DurableStore(str(tmp_path))
        s.open()
        s.start(asyncio.get_running_loop())
        seq = s.append(offsets(1))
        waiter = asyncio.create_task(s.durable(seq))
        await _until(lambda: SlowLog.calls == [1], "the transaction to be running")
        assert not waiter.done()  # still being written
        SlowLog.gate.set()
        await waiter
        await s.durable(s.tail)  # nothing pending: returns at once
        await s.close()

    asyncio.run(main())


def test_history_is_persisted_and_dropped_with_its_group(tmp_path: Path) -> None:
    async def main() -> None:
        s = DurableStore(str(tmp_path))
        s.open()
        s.start(asyncio.get_running_loop())
        e1, e2 = EpochChange(1, "group", 1, "member a joined"), EpochChange(2, "group", 1, "x")
        s.append([GroupEpochRecord("g", 1)], [HistoryOp("g", e1)])
        s.append([GroupEpochRecord("h", 1)], [HistoryOp("h", e2)])
        await s.durable(s.append([GroupEpochRecord("h", None)], [HistoryOp("h", None)]))
        await s.close()

    asyncio.run(main())
    loaded = DurableStore(str(tmp_path)).open()
    assert loaded.history == [HistoryOp("g", EpochChange(1, "group", 1, "member a joined"))]


def test_compaction_bounds_the_log_and_recovery_is_exact(tmp_path: Path) -> None:
    """A random workload, persisted with frequent snapshots, recovers to the very same state."""
    live: list[RecordingGroup] = []

    async def main() -> tuple[int, int]:
        s = DurableStore(str(tmp_path), snapshot_every=40, history_limit=5)
        s.open()
        s.start(asyncio.get_running_loop())
        g = RecordingGroup.create({})
        live.append(g)

        def sink(records: tuple[Record, ...]) -> None:
            s.append(records)
            if s.compaction_due():
                s.compact(g.coordinator.snapshot())

        g.sink = sink
        run_workload(g, seed=11, steps=80)
        await s.durable(s.tail)
        await s.close()
        return s.stats.compactions, s.tail

    compactions, tail = asyncio.run(main())
    assert compactions >= 3
    loaded = DurableStore(str(tmp_path)).open()
    assert loaded.last_seq == tail
    assert loaded.snapshot_records > 0 and loaded.tail_records < tail
    assert count_rows(tmp_path, "records") == loaded.tail_records
    recovered = Coordinator.recover(loaded.records, 0)
    assert recovered.groups == live[0].coordinator.groups
    assert recovered.snapshot() == live[0].coordinator.snapshot()


def test_a_second_coordinator_cannot_open_the_same_data_dir(tmp_path: Path) -> None:
    first = DurableStore(str(tmp_path))
    first.open()
    with pytest.raises(StoreError, match="in use by another coordinator"):
        DurableStore(str(tmp_path)).open()
    asyncio.run(first.close())
    DurableStore(str(tmp_path)).open()  # released


def test_another_store_format_is_refused(tmp_path: Path) -> None:
    SqliteLog(str(tmp_path / store_mod.DB_FILE)).close()
    db = sqlite3.connect(tmp_path / store_mod.DB_FILE)
    db.execute("UPDATE meta SET value='99' WHERE key='format'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="format 99"):
        DurableStore(str(tmp_path)).open()


class BrokenLog(SqliteLog):
    def append(self, rows: Sequence[tuple[int, str]], history: Sequence[HistoryOp]) -> None:
        raise sqlite3.OperationalError("disk I/O error")


def test_a_failed_write_fails_every_waiter_and_stops_the_store(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod, "SqliteLog", BrokenLog)
    failures: list[BaseException] = []

    async def main() -> None:
        s = DurableStore(str(tmp_path))
        s.open()
        s.on_failure = failures.append
        s.start(asyncio.get_running_loop())
        with pytest.raises(StoreError, match="disk I/O error"):
            await s.durable(s.append(offsets(1)))
        with pytest.raises(StoreError):
            s.append(offsets(1))
        await s.close()

    asyncio.run(main())
    assert len(failures) == 1
    assert not any(t.name == "regroup-store-writer" for t in threading.enumerate())
