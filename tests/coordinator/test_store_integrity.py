"""The store's integrity checks: every row's checksum, the rows' numbering, and the upgrade of a store
written before checksums existed (store format 1), which must replay to the very same state."""

from __future__ import annotations

import asyncio
import fcntl
import re
import sqlite3
import zlib
from pathlib import Path

import pytest

from regroup.chaos.replay import core_state, replayed_state
from regroup.coordinator import codec
from regroup.coordinator import store as store_mod
from regroup.coordinator.history import HistoryOp
from regroup.coordinator.store import DurableStore, SqliteLog, StoreError
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.records import GroupEpochRecord, OffsetRecord, Record
from regroup.protocol.shard import Shard
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.rpc.types import EpochChange
from tests.coordinator.workload import RecordingGroup, run_workload

OFFSET = 123_456_789


def _sql(data_dir: Path, *statements: str) -> None:
    """Change the file behind the store's back, as damage would (no checksum recomputed)."""
    db = sqlite3.connect(data_dir / store_mod.DB_FILE)
    try:
        for s in statements:
            db.execute(s)
        db.commit()
    finally:
        db.close()


def _written(data_dir: Path, *, compact: bool) -> list[Record]:
    """A format-2 store: 6 records (an offset commit among them) and history; with ``compact`` the first
    4 are in the snapshot (pos 0..3) and records 5, 6 in the tail."""
    records: list[Record] = [GroupEpochRecord("g", 1), OffsetRecord("g", Shard("t", 0), OFFSET, "", 1),
                             OffsetRecord("g", Shard("t", 1), 7, "", 1), GroupEpochRecord("h", 1),
                             OffsetRecord("g", Shard("t", 0), OFFSET + 1, "", 1), GroupEpochRecord("g", 2)]

    async def main() -> None:
        s = DurableStore(str(data_dir))
        s.open()
        s.start(asyncio.get_running_loop())
        s.append(records[:4], [HistoryOp("g", EpochChange(1, "group", 1, "member 'alice' joined"))])
        if compact:
            s.compact(records[:4])
        bob = HistoryOp("g", EpochChange(2, "group", 2, "member 'bob' joined"))
        await s.durable(s.append(records[4:], [bob]))
        await s.close()

    asyncio.run(main())
    assert DurableStore(str(data_dir)).open().records == records  # the control: it reads back as written
    return records


def _refusal(data_dir: Path) -> str:
    with pytest.raises(StoreError) as e:
        DurableStore(str(data_dir)).open()
    text = str(e.value)
    assert str(data_dir / store_mod.DB_FILE) in text, text
    return text


#: (what, compacted first, the SQL that does it, what the refusal must say)
DAMAGE: list[tuple[str, bool, tuple[str, ...], str]] = [
    ("a digit of a committed offset", False,
     ("UPDATE records SET data=replace(data, '789', '780') WHERE seq=2",),
     r"is damaged: record 2 '\[\"O\",\"g\",\"t\",0,123456780,\"\",1\]' fails its checksum: "
     r"stored [0-9a-f]{8}, computed [0-9a-f]{8} \(the row changed after it was written\); "
     r"restore the data dir from a backup"),
    ("a letter of a group id in the snapshot", True,
     ("UPDATE snapshot SET data=replace(data, '\"h\"', '\"i\"') WHERE pos=3",),
     r"is damaged: snapshot row 3 '\[\"E\",\"i\",1\]' fails its checksum"),
    ("a letter of a member id in the history", False,
     ("UPDATE history SET cause=replace(cause, 'alice', 'alicf')",),
     r"is damaged: history entry 1 \[.*'alicf'.*\] fails its checksum"),
    ("two records swapped", False,
     ("UPDATE records SET seq=-seq WHERE seq IN (1, 4)",
      "UPDATE records SET seq=CASE seq WHEN -1 THEN 4 ELSE 1 END WHERE seq < 0"),
     r"record 1 '\[\"E\",\"h\",1\]' fails its checksum"),
    ("a record's checksum lost", False, ("UPDATE records SET crc=NULL WHERE seq=5",),
     r"record 5 .* fails its checksum: stored NULL, computed"),
    ("a record's text as a blob", False, ("UPDATE records SET data=x'00ff' WHERE seq=3",),
     r"record 3 reads as bytes b'\\x00\\xff', not as the text of a record"),
    ("a record in the middle gone", False, ("DELETE FROM records WHERE seq=3",),
     r"record 3 is missing \(the row after record 2 has seq 4\)"),
    ("a snapshot row gone", True, ("DELETE FROM snapshot WHERE pos=1",),
     r"snapshot row 1 is missing \(the next row has pos 2\)"),
    ("the snapshot's sequence number raised", True, ("UPDATE meta SET value='5' WHERE key='snapshot_seq'",),
     r"record 5 is still there though the snapshot covers every record up to 5"),
    ("the snapshot's sequence number lowered", True, ("UPDATE meta SET value='3' WHERE key='snapshot_seq'",),
     r"record 4 is missing \(the row after record 3 has seq 5\)"),
    ("the snapshot's sequence number unreadable", True,
     ("UPDATE meta SET value='4x' WHERE key='snapshot_seq'",),
     r"meta.snapshot_seq must be a number, found '4x'"),
]


@pytest.mark.parametrize(("compact", "statements", "said"), [d[1:] for d in DAMAGE],
                         ids=[d[0] for d in DAMAGE])
def test_damage_is_refused_naming_the_row_and_what_differs(tmp_path: Path, compact: bool,
                                                          statements: tuple[str, ...], said: str) -> None:
    _written(tmp_path, compact=compact)
    _sql(tmp_path, *statements)
    text = _refusal(tmp_path)
    assert re.search(said, text), text


def test_a_row_with_a_right_checksum_that_does_not_decode_is_not_called_damage(tmp_path: Path) -> None:
    """Written like this (a newer version's tag, say): refused, but without the advice for damage."""
    _written(tmp_path, compact=False)
    text = '["zz","g"]'
    _sql(tmp_path, f"UPDATE records SET data='{text}', crc={store_mod.checksum(6, text)} WHERE seq=6")
    said = _refusal(tmp_path)
    assert "record 6 cannot be read by this version though its checksum is right" in said, said
    assert "unknown record tag 'zz'" in said and "damaged" not in said, said


def test_sqlite_errors_at_open_are_store_errors_and_nothing_stays_locked(tmp_path: Path) -> None:
    _written(tmp_path, compact=False)
    db = tmp_path / store_mod.DB_FILE
    db.write_bytes(bytes(range(100)) + db.read_bytes()[100:])  # the header overwritten
    said = _refusal(tmp_path)
    assert "is damaged: SQLite cannot read it (file is not a database); restore the data dir" in said, said
    with open(tmp_path / store_mod.LOCK_FILE) as lock:  # released by the refused open
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


# ---------------------------------------------------------------------------------------- store format 1

_FORMAT_1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (seq INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE snapshot (pos INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, group_id TEXT NOT NULL, at_unix_ms INTEGER NOT NULL,
    kind TEXT NOT NULL, epoch INTEGER NOT NULL, cause TEXT NOT NULL);
CREATE INDEX history_by_group ON history (group_id, id);
"""


def _format_1_store(data_dir: Path, snapshot: list[Record], snapshot_seq: int, tail: list[Record],
                    history: list[tuple[str, EpochChange]]) -> None:
    """A data dir as the version before checksums wrote it, built with raw sqlite3."""
    data_dir.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(data_dir / store_mod.DB_FILE)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(_FORMAT_1_SCHEMA)
    db.execute("INSERT INTO meta VALUES ('format', '1'), ('snapshot_seq', ?)", (str(snapshot_seq),))
    db.executemany("INSERT INTO snapshot VALUES (?, ?)", enumerate(codec.encode_all(snapshot)))
    db.executemany("INSERT INTO records VALUES (?, ?)",
                   [(snapshot_seq + 1 + i, codec.encode(r)) for i, r in enumerate(tail)])
    db.executemany("INSERT INTO history (group_id, at_unix_ms, kind, epoch, cause) VALUES (?, ?, ?, ?, ?)",
                   [(g, e.at_unix_ms, e.kind, e.epoch, e.cause) for g, e in history])
    db.commit()
    db.close()


def _workload() -> tuple[Coordinator, list[Record], list[Record]]:
    """A real workload's state: (the live coordinator, a snapshot taken half-way, the records after it)."""
    g = RecordingGroup.create({})
    seen: list[Record] = []
    g.sink = seen.extend
    run_workload(g, seed=5, steps=30)
    snapshot, since = g.coordinator.snapshot(), len(seen)
    run_workload(g, seed=6, steps=30)
    return g.coordinator, snapshot, seen[since:]


def test_a_format_1_store_is_upgraded_and_replays_to_the_same_state(tmp_path: Path) -> None:
    live, snapshot, tail = _workload()
    assert snapshot and tail
    history = [("g", EpochChange(1, "group", 1, "member 'a' joined")),
               ("g", EpochChange(2, "target", 1, "assignment computed"))]
    _format_1_store(tmp_path, snapshot, 1000, tail, history)

    loaded = DurableStore(str(tmp_path)).open()  # (the lock is freed with the object)
    assert loaded.records == [*snapshot, *tail]
    assert (loaded.snapshot_records, loaded.tail_records, loaded.last_seq) == (len(snapshot), len(tail),
                                                                                 1000 + len(tail))
    assert loaded.history == [HistoryOp(g, e) for g, e in history]
    recovered = Coordinator.recover(loaded.records, 0)
    assert recovered.groups == live.groups and recovered.snapshot() == live.snapshot()

    db = sqlite3.connect(tmp_path / store_mod.DB_FILE)
    assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (str(store_mod.FORMAT),)
    for table in ("records", "snapshot", "history"):  # every old row got its checksum
        assert db.execute(f"SELECT COUNT(*) FROM {table} WHERE crc IS NULL").fetchone() == (0,), table
    db.close()
    assert DurableStore(str(tmp_path)).open().records == loaded.records  # and reads so again


def test_an_upgraded_store_takes_new_records_and_checks_old_and_new_rows(tmp_path: Path) -> None:
    _format_1_store(tmp_path, [GroupEpochRecord("g", 1)], 1, [OffsetRecord("g", Shard("t", 0), OFFSET)],
                    [("g", EpochChange(1, "group", 1, "member 'a' joined"))])

    async def main() -> None:
        s = DurableStore(str(tmp_path))
        assert s.open().last_seq == 2
        s.start(asyncio.get_running_loop())
        await s.durable(s.append([OffsetRecord("g", Shard("t", 0), OFFSET + 1)]))
        await s.close()

    asyncio.run(main())
    loaded = DurableStore(str(tmp_path)).open()
    assert loaded.records[1:] == [OffsetRecord("g", Shard("t", 0), OFFSET),
                                  OffsetRecord("g", Shard("t", 0), OFFSET + 1)]
    _sql(tmp_path, "UPDATE records SET data=replace(data, '789', '780') WHERE seq=2")  # an old row, after
    assert "record 2 " in _refusal(tmp_path)


def test_a_damaged_format_1_row_is_still_refused_after_the_upgrade(tmp_path: Path) -> None:
    """The upgrade cannot vouch for old rows, but a row that does not even read as text gets no
    checksum and is refused like any damage."""
    _format_1_store(tmp_path, [], 0, [GroupEpochRecord("g", 1), GroupEpochRecord("g", 2)], [])
    _sql(tmp_path, "UPDATE records SET data=x'00' WHERE seq=2")
    assert "record 2 reads as bytes b'\\x00'" in _refusal(tmp_path)


def test_a_store_of_a_later_format_is_refused(tmp_path: Path) -> None:
    _written(tmp_path, compact=False)
    _sql(tmp_path, "UPDATE meta SET value='3' WHERE key='format'")
    said = _refusal(tmp_path)
    assert "written in store format 3, this version reads format 2 (and upgrades format 1)" in said, said


def test_checksums_are_pinned() -> None:
    """The checksums are part of the store format: a change here breaks every store already written.
    A record's is the CRC-32 of ``"<seq>:<text>"``; a history entry's of its fields as a JSON array."""
    assert store_mod.checksum(2, '["O","g","t",0,123456789,"",1]') == 4224396545
    assert store_mod.history_checksum("g", 1, "group", 1, "member 'alice' joined") == 3143192636
    assert zlib.crc32(b'2:["O","g","t",0,123456789,"",1]') == 4224396545


def test_a_file_sqlite_cannot_open_is_refused_without_calling_it_damaged(tmp_path: Path) -> None:
    (tmp_path / store_mod.DB_FILE).mkdir()  # not damage: the operator's to fix (permissions, a wrong path)
    said = _refusal(tmp_path)
    assert "SQLite cannot use it (unable to open database file); check the data dir's" in said, said
    assert "damaged" not in said, said


# ---------------------------------------------------------------------------------------- read-only


def _files(data_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data_dir.iterdir())}


def test_a_replay_of_a_format_1_dir_reads_it_without_changing_a_byte(tmp_path: Path) -> None:
    """`regroup chaos replay` inspects a data dir: it must not upgrade it (nor create a file in it)."""
    live, snapshot, tail = _workload()
    history = [("g", EpochChange(1, "group", 1, "member 'a' joined"))]
    _format_1_store(tmp_path, snapshot, 1000, tail, history)
    before = _files(tmp_path)

    state, replayed = replayed_state(tmp_path, None, dict(live.topics), CoordinatorConfig(), StreamsConfig())
    assert _files(tmp_path) == before  # the same files, byte for byte: still format 1
    assert replayed == len(snapshot) + len(tail)
    assert state == core_state(live)
    ro = SqliteLog(str(tmp_path / store_mod.DB_FILE), read_only=True)
    try:
        assert ro.load().history == [HistoryOp(g, e) for g, e in history]
    finally:
        ro.close()
    assert _files(tmp_path) == before
    assert DurableStore(str(tmp_path)).open().records == [*snapshot, *tail]  # the coordinator upgrades it


def test_a_read_only_open_checks_rows_refuses_writes_and_reads_a_killed_coordinators_wal(
        tmp_path: Path) -> None:
    records = _written(tmp_path, compact=False)
    path = str(tmp_path / store_mod.DB_FILE)
    ro = SqliteLog(path, read_only=True)
    try:
        assert ro.load().records == records
        with pytest.raises(StoreError, match="is open read-only: cannot append"):
            ro.append([(7, codec.encode(GroupEpochRecord("g", 3)))], [])
    finally:
        ro.close()
    # A writer that did not close (killed): its rows are in the -wal file, which the read must see.
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        text = codec.encode(GroupEpochRecord("g", 3))
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("INSERT INTO records (seq, data, crc) VALUES (7, ?, ?)",
                       (text, store_mod.checksum(7, text)))
        ro = SqliteLog(path, read_only=True)
        try:
            assert ro.load().records == [*records, GroupEpochRecord("g", 3)]
        finally:
            ro.close()
    finally:
        writer.close()
    _sql(tmp_path, "UPDATE records SET data=replace(data, '789', '780') WHERE seq=2")
    with pytest.raises(StoreError, match=r"is damaged: record 2 .* fails its checksum"):
        SqliteLog(path, read_only=True).load()
    with pytest.raises(StoreError, match="no coordinator store to read"):
        SqliteLog(str(tmp_path / "elsewhere.db"), read_only=True)


def test_a_damaged_format_1_row_is_refused_by_a_read_only_open_too(tmp_path: Path) -> None:
    _format_1_store(tmp_path, [], 0, [GroupEpochRecord("g", 1), GroupEpochRecord("g", 2)], [])
    _sql(tmp_path, "UPDATE records SET data=x'00' WHERE seq=2")
    before = _files(tmp_path)
    with pytest.raises(StoreError, match=r"record 2 reads as bytes b'\\x00'"):
        SqliteLog(str(tmp_path / store_mod.DB_FILE), read_only=True).load()
    assert _files(tmp_path) == before


def test_a_read_only_open_shares_the_data_dirs_lock_and_never_beside_a_coordinator(tmp_path: Path) -> None:
    """A reader takes a shared lock on ``LOCK`` for as long as it is open: refused while a coordinator
    holds the dir (its lock is exclusive), and no coordinator starts on the dir while it reads, so a
    coordinator cannot start writing between the reader's look at ``-wal`` and its reads. Readers
    share the dir with each other."""
    records = _written(tmp_path, compact=False)
    path = str(tmp_path / store_mod.DB_FILE)
    running = DurableStore(str(tmp_path))
    running.open()
    with pytest.raises(StoreError, match=f"a coordinator is running on {re.escape(str(tmp_path))}"):
        SqliteLog(path, read_only=True)
    asyncio.run(running.close())
    first, second = SqliteLog(path, read_only=True), SqliteLog(path, read_only=True)
    try:
        assert first.load().records == second.load().records == records
        with pytest.raises(StoreError, match="in use by another coordinator process, or a tool reading"):
            DurableStore(str(tmp_path)).open()
    finally:
        first.close()
        second.close()
    with open(tmp_path / store_mod.LOCK_FILE) as lock:  # released at close: a coordinator may start
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
