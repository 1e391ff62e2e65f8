"""The durable record store: SQLite in WAL mode with group commit, and snapshot compaction.

Layout of ``<data dir>/coordinator.db``::

    meta(key, value)            format version
    records(seq, data)          the record log after the last snapshot, seq = global record number
    snapshot(pos, data)         Coordinator.snapshot() as of meta.snapshot_seq
    history(id, group_id, ...)  epoch history entries (bounded per group at each compaction)

Writes happen on one writer thread. Group commit: every append that arrived while the previous
transaction was being committed (fsynced: ``synchronous=FULL``) goes into the next single transaction.
An append is acknowledged (its ``seq`` becomes durable) only once that transaction committed; appends
commit in the order they were made, so "seq N is durable" means every record up to N is.

Compaction: when the records since the last snapshot outnumber ``max(snapshot_every, size of the last
snapshot)``, the service hands over ``Coordinator.snapshot()`` taken at sequence number S; one
transaction replaces the snapshot table, deletes the records up to S and trims the history. Recovery
reads the snapshot and then the records after S. The amortised cost of compaction stays constant per
record written, and recovery reads at most about twice the live state.

A write that fails (disk full, I/O error) stops the store for good: the in-memory state is ahead of
the disk, so the service must stop and recover from what is durable (fail-stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import heapq
import itertools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

from regroup.coordinator import codec
from regroup.coordinator.history import HistoryOp
from regroup.protocol.outcome import AnyRecord
from regroup.rpc.types import EpochChange

DB_FILE = "coordinator.db"
LOCK_FILE = "LOCK"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot (pos INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, group_id TEXT NOT NULL, at_unix_ms INTEGER NOT NULL,
    kind TEXT NOT NULL, epoch INTEGER NOT NULL, cause TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS history_by_group ON history (group_id, id);
"""


class StoreError(Exception):
    """The store cannot be used: locked by another process, another format, or a failed write."""


@dataclass
class Loaded:
    """What recovery reads: the snapshot followed by the tail, and the persisted history."""

    records: list[AnyRecord]
    snapshot_records: int
    tail_records: int
    last_seq: int
    history: list[HistoryOp]
    seconds: float


class SqliteLog:
    """The database file. Not thread-safe: one thread at a time (recovery, then the writer)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{path}: SQLite refused WAL mode (got {mode!r}); use a local file system")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('format', ?), ('snapshot_seq', '0')",
                             (str(codec.FORMAT),))
        elif row[0] != str(codec.FORMAT):
            raise StoreError(f"{path} was written in store format {row[0]}, this version reads format "
                             f"{codec.FORMAT}")

    def _meta_int(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def load(self, upto_seq: int | None = None) -> Loaded:
        """Everything recovery reads. ``upto_seq``: only the records up to that sequence number (the
        state as it was then; StoreError if a snapshot already covers more than that)."""
        t0 = time.perf_counter()
        snapshot_seq = self._meta_int("snapshot_seq")
        if upto_seq is not None and upto_seq < snapshot_seq:
            raise StoreError(f"{self.path}: the snapshot covers records up to {snapshot_seq}; the state as "
                             f"of record {upto_seq} is gone")
        records = [codec.decode(d) for (d,) in self._db.execute("SELECT data FROM snapshot ORDER BY pos")]
        n_snapshot = len(records)
        last_seq = snapshot_seq
        last = 2**63 - 1 if upto_seq is None else upto_seq
        tail = "SELECT seq, data FROM records WHERE seq > ? AND seq <= ? ORDER BY seq"
        for seq, data in self._db.execute(tail, (snapshot_seq, last)):
            records.append(codec.decode(data))
            last_seq = seq
        rows = self._db.execute("SELECT group_id, at_unix_ms, kind, epoch, cause FROM history ORDER BY id")
        history = [HistoryOp(g, EpochChange(at, kind, epoch, cause)) for g, at, kind, epoch, cause in rows]
        return Loaded(records, n_snapshot, len(records) - n_snapshot, last_seq, history,
                      time.perf_counter() - t0)

    def append(self, rows: Sequence[tuple[int, str]], history: Sequence[HistoryOp]) -> None:
        """One transaction; durable when this returns."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO records (seq, data) VALUES (?, ?)", rows)
            for op in history:
                if op.entry is None:
                    db.execute("DELETE FROM history WHERE group_id=?", (op.group_id,))
                else:
                    e = op.entry
                    db.execute("INSERT INTO history (group_id, at_unix_ms, kind, epoch, cause) VALUES "
                               "(?, ?, ?, ?, ?)", (op.group_id, e.at_unix_ms, e.kind, e.epoch, e.cause))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def compact(self, snapshot: Sequence[str], upto_seq: int, groups: set[str], history_limit: int) -> None:
        """Replace the snapshot by ``snapshot`` (state as of ``upto_seq``) in one transaction."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM snapshot")
            db.executemany("INSERT INTO snapshot (pos, data) VALUES (?, ?)", enumerate(snapshot))
            db.execute("DELETE FROM records WHERE seq <= ?", (upto_seq,))
            db.execute("UPDATE meta SET value=? WHERE key='snapshot_seq'", (str(upto_seq),))
            known = {g for (g,) in db.execute("SELECT DISTINCT group_id FROM history")}
            db.executemany("DELETE FROM history WHERE group_id=?", [(g,) for g in sorted(known - groups)])
            db.execute("DELETE FROM history WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER "
                       "(PARTITION BY group_id ORDER BY id DESC) AS n FROM history) WHERE n > ?)",
                       (history_limit,))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        with contextlib.suppress(sqlite3.Error):  # shrink the WAL after a big rewrite
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def counts(self) -> tuple[int, int]:
        """(snapshot records, tail records) on disk."""
        (s,) = self._db.execute("SELECT COUNT(*) FROM snapshot").fetchone()
        (t,) = self._db.execute("SELECT COUNT(*) FROM records").fetchone()
        return int(s), int(t)

    def close(self) -> None:
        self._db.close()


# ------------------------------------------------------------------------------------ group commit


@dataclass
class _Append:
    first_seq: int
    records: Sequence[AnyRecord]
    history: Sequence[HistoryOp]


@dataclass
class _Compact:
    upto_seq: int
    snapshot: list[AnyRecord]


@dataclass
class _Stop:
    pass


_Item = _Append | _Compact | _Stop


@dataclass
class StoreStats:
    """Counters the writer thread updates (read by the metrics)."""

    transactions: int = 0
    records_written: int = 0
    compactions: int = 0
    last_commit_seconds: float = 0.0
    on_commit: Callable[[int, int, float], None] | None = field(default=None, repr=False)
    on_compact: Callable[[int, float], None] | None = field(default=None, repr=False)


class _Writer(threading.Thread):
    def __init__(self, log: SqliteLog, history_limit: int, stats: StoreStats,
                 on_durable: Callable[[int], None], on_failed: Callable[[BaseException], None],
                 max_batch: int = 20_000) -> None:
        super().__init__(name="regroup-store-writer", daemon=True)
        self.queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._log, self._history_limit, self._stats = log, history_limit, stats
        self._on_durable, self._on_failed, self._max_batch = on_durable, on_failed, max_batch

    def run(self) -> None:
        held: _Item | None = None
        try:
            while True:
                item = held if held is not None else self.queue.get()
                held = None
                if isinstance(item, _Stop):
                    return
                if isinstance(item, _Compact):
                    self._compact(item)
                    continue
                batch, n = [item], len(item.records)
                while n < self._max_batch:  # everything that queued up during the last commit
                    try:
                        nxt = self.queue.get_nowait()
                    except queue.Empty:
                        break
                    if not isinstance(nxt, _Append):
                        held = nxt
                        break
                    batch.append(nxt)
                    n += len(nxt.records)
                self._write(batch)
        except BaseException as e:  # reported to the service, which stops (fail-stop)
            self._on_failed(e)
        finally:
            self._log.close()

    def _write(self, batch: list[_Append]) -> None:
        rows = [(a.first_seq + i, codec.encode(r)) for a in batch for i, r in enumerate(a.records)]
        history = [op for a in batch for op in a.history]
        t0 = time.perf_counter()
        self._log.append(rows, history)
        took = time.perf_counter() - t0
        st = self._stats
        st.transactions += 1
        st.records_written += len(rows)
        st.last_commit_seconds = took
        if st.on_commit is not None:
            st.on_commit(len(batch), len(rows), took)
        last = batch[-1]
        self._on_durable(last.first_seq + len(last.records) - 1)

    def _compact(self, item: _Compact) -> None:
        t0 = time.perf_counter()
        encoded = codec.encode_all(item.snapshot)
        groups = {r.group_id for r in item.snapshot}
        self._log.compact(encoded, item.upto_seq, groups, self._history_limit)
        self._stats.compactions += 1
        if self._stats.on_compact is not None:
            self._stats.on_compact(len(encoded), time.perf_counter() - t0)


class DurableStore:
    """The asyncio face of the store: append records, await their durability, compact now and then.

    `append` and `durable` must be called on the event loop thread; the writing happens on a thread.
    """

    def __init__(self, data_dir: str, *, snapshot_every: int = 50_000, history_limit: int = 100) -> None:
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.data_dir = data_dir
        self.snapshot_every = snapshot_every
        self.history_limit = history_limit
        self.stats = StoreStats()
        self._lock_file: IO[str] | None = None
        self._log: SqliteLog | None = None
        self._writer: _Writer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_seq = 1
        self._durable_seq = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tiebreak = itertools.count()
        self._since_snapshot = 0
        self._last_snapshot_size = 0
        self.failure: BaseException | None = None
        self.on_failure: Callable[[BaseException], None] | None = None

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> Loaded:
        """Lock the data dir, open the database and read everything back (before `start`)."""
        os.makedirs(self.data_dir, exist_ok=True)
        lock = open(os.path.join(self.data_dir, LOCK_FILE), "a+")  # noqa: SIM115 - held until close
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            lock.close()
            raise StoreError(f"{self.data_dir} is in use by another coordinator process (cannot lock "
                             f"{LOCK_FILE}); stop it or use another --data-dir") from e
        self._lock_file = lock
        self._log = SqliteLog(os.path.join(self.data_dir, DB_FILE))
        loaded = self._log.load()
        self._next_seq = self._durable_seq = loaded.last_seq
        self._next_seq += 1
        self._since_snapshot = loaded.tail_records
        self._last_snapshot_size = loaded.snapshot_records
        return loaded

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._log is None:
            raise StoreError("open() the store before start()")
        self._loop = loop

        def durable(seq: int) -> None:
            loop.call_soon_threadsafe(self._advance, seq)

        def failed(exc: BaseException) -> None:
            loop.call_soon_threadsafe(self._fail, exc)

        self._writer = _Writer(self._log, self.history_limit, self.stats, durable, failed)
        self._writer.start()

    async def close(self) -> None:
        """Write what is queued, stop the writer, release the lock."""
        writer = self._writer
        if writer is not None and writer.is_alive():
            writer.queue.put(_Stop())
            await asyncio.get_running_loop().run_in_executor(None, writer.join)
        elif writer is None and self._log is not None:
            self._log.close()
        self._writer = None
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # ---------------------------------------------------------------- writing
    @property
    def tail(self) -> int:
        """Sequence number of the last record appended (durable or not)."""
        return self._next_seq - 1

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    @property
    def records_since_snapshot(self) -> int:
        return self._since_snapshot

    def append(self, records: Sequence[AnyRecord], history: Sequence[HistoryOp] = ()) -> int:
        """Queue records (and history entries) for the next transaction; returns the seq to await."""
        if self.failure is not None:
            raise StoreError(f"the record store failed earlier: {self.failure}")
        if self._writer is None:
            raise StoreError("the record store is not started")
        if records:
            self._writer.queue.put(_Append(self._next_seq, records, history))
            self._next_seq += len(records)
            self._since_snapshot += len(records)
        elif history:
            raise ValueError("history entries travel with the records of the same step")
        return self.tail

    async def durable(self, seq: int) -> None:
        """Return once every record up to ``seq`` is on disk (raise StoreError if writing failed)."""
        if self.failure is not None:
            raise StoreError(f"the record store failed: {self.failure}")
        if seq <= self._durable_seq:
            return
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._waiters, (seq, next(self._tiebreak), fut))
        await fut

    def compaction_due(self) -> bool:
        return self._since_snapshot > max(self.snapshot_every, self._last_snapshot_size)

    def compact(self, snapshot: list[AnyRecord]) -> None:
        """Queue a compaction with ``snapshot`` = the state after every record appended so far."""
        if self._writer is None or self.failure is not None:
            return
        self._writer.queue.put(_Compact(self.tail, snapshot))
        self._since_snapshot = 0
        self._last_snapshot_size = len(snapshot)

    # ---------------------------------------------------------------- completion (event loop)
    def _advance(self, seq: int) -> None:
        self._durable_seq = max(self._durable_seq, seq)
        waiters = self._waiters
        while waiters and waiters[0][0] <= self._durable_seq:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc
        err = StoreError(f"the record store failed: {exc}")
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(err)
        self._waiters.clear()
        if self.on_failure is not None:
            self.on_failure(exc)
