"""The durable record store: SQLite in WAL mode with group commit, and snapshot compaction.

Layout of ``<data dir>/coordinator.db``::

    meta(key, value)                 store format (`FORMAT`), snapshot_seq
    records(seq, data, crc)          the record log after the last snapshot, seq = global record number
    snapshot(pos, data, crc)         Coordinator.snapshot() as of meta.snapshot_seq
    history(id, group_id, ..., crc)  epoch history entries (bounded per group at each compaction)

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

Integrity (store format 2). SQLite keeps no checksum of its pages by default, and a changed digit of a
committed offset still decodes as a valid offset, so every row carries its own: ``crc`` is the CRC-32
(`checksum`) of the row's key and text — ``seq`` and ``data`` for a record, ``pos`` and ``data`` for a
snapshot row (so a row moved to another place does not pass either), the fields for a history entry.
It is computed when the row is written and verified when recovery reads it. CRC-32 (``zlib.crc32``:
C code in the standard library, as the embedded log's frames use; CRC32C is no better against random
damage and would need a package) catches every damage within 32 consecutive bits — a flipped bit,
a changed digit or letter — and all but 2^-32 of the rest: enough for the failure model (flipped bits,
torn or zeroed sectors). It is no defence against deliberate changes, which whoever can write the file
can make consistent anyway. Besides the checksums, recovery checks what rows cannot show one by one:
the records follow the snapshot without a gap, none is left at or below ``snapshot_seq``, the
snapshot rows are numbered without a gap. Anything wrong — a row that fails its checksum or does not
decode, a missing row, or SQLite's own "file is not a database" / "database disk image is malformed"
— is a `StoreError` naming the file, the row and what was wrong, and the coordinator refuses to start
(never starts on state it cannot trust). The cost is one CRC-32 per row written, about a microsecond,
next to a commit that fsyncs (milliseconds) or shares its fsync with a thousand rows.

A data dir written before checksums existed (store format 1: the same tables without ``crc``) is
upgraded at its first open by this version, in one transaction: the column is added, the checksum of
every existing row computed and the format set to 2. Those old rows are thereby trusted as they are
(nothing earlier can tell whether they changed); every row written later is checked from its first
write. An older regroup refuses a format-2 store ("written in store format 2") instead of adding rows
without checksums to it. The ``crc`` column is nullable in both (``ALTER TABLE`` cannot add a NOT NULL
column without a default), so one schema serves both; in format 2 a NULL checksum is damage.

Read-only (``SqliteLog(path, read_only=True)``, for tools that inspect a stopped coordinator's data
dir, such as `regroup.chaos.replay`): first it takes a *shared* lock on the data dir's ``LOCK`` file
(``flock(LOCK_SH | LOCK_NB)``), held until `close`, and refuses ("a coordinator is running on DIR")
when a coordinator holds it: the coordinator's lock is exclusive, so while a reader holds its shared
one no coordinator starts on the dir and nothing writes the files being read (readers do not exclude
each other). A database file with no ``LOCK`` beside it (a copy, not a data dir a coordinator ran on)
is read without one, since creating it would change the dir. The file is opened through SQLite's
read-only URI (``mode=ro``): no table is created and a format-1 store is not upgraded (each row's
checksum is computed as the upgrade would store it, in the query that reads it, so the rows are read
and checked exactly as after an upgrade). With no ``-wal`` file beside the database (a coordinator that
stopped cleanly) it is also opened ``immutable``, and nothing in the dir changes: SQLite creates no
``-wal``/``-shm`` file. A ``-wal`` file left by a coordinator that was killed is read through SQLite's
index of it, the ``-shm`` file, which SQLite rebuilds (or creates, when it is missing) even on a
read-only open: the database and the ``-wal`` stay byte for byte as they were, the ``-shm`` may not
(it holds no data of its own: a coordinator rebuilds it from the ``-wal`` when it starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import heapq
import itertools
import json
import logging
import os
import queue
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from regroup.coordinator import codec
from regroup.coordinator.history import HistoryOp
from regroup.coordinator.streams_codec import shown
from regroup.protocol.outcome import AnyRecord
from regroup.rpc.types import EpochChange

log = logging.getLogger("regroup.coordinator")

DB_FILE = "coordinator.db"
LOCK_FILE = "LOCK"

#: The store's format, kept in ``meta.format``: 1 = records in `codec` format 1 without checksums
#: (upgraded at open), 2 = the same with a checksum per row (written by this version).
FORMAT = 2
_UPGRADABLE = 1
if codec.FORMAT != 1:  # a programming error: the stored text changes, so the store format must too
    raise ImportError(f"codec.FORMAT is {codec.FORMAT}: give the store a new FORMAT and an upgrade for it")

#: Each table's checksum as a query reads it: the stored column (format 2), or computed from the row as
#: the upgrade stores it (format 1: the upgrade's UPDATE, and a read-only open that may not upgrade).
_CRC_STORED = {"records": "crc", "snapshot": "crc", "history": "crc"}
_CRC_AS_UPGRADED = {"records": "regroup_checksum(seq, data)", "snapshot": "regroup_checksum(pos, data)",
                    "history": "regroup_history_checksum(group_id, at_unix_ms, kind, epoch, cause)"}

# Tables as an upgraded format-1 store has them too: ``crc`` nullable (see the module docstring).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, data TEXT NOT NULL, crc INTEGER);
CREATE TABLE IF NOT EXISTS snapshot (pos INTEGER PRIMARY KEY, data TEXT NOT NULL, crc INTEGER);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, group_id TEXT NOT NULL, at_unix_ms INTEGER NOT NULL,
    kind TEXT NOT NULL, epoch INTEGER NOT NULL, cause TEXT NOT NULL, crc INTEGER);
CREATE INDEX IF NOT EXISTS history_by_group ON history (group_id, id);
"""

#: What an operator can do about a damaged file (the end of every such refusal).
_WHAT_TO_DO = ("restore the data dir from a backup (sqlite3 coordinator.db \".backup copy.db\" makes one), "
               "or move it away to start with an empty store (every group and committed offset is then lost)")


class StoreError(Exception):
    """The store cannot be used: locked by another process, another format, damaged, or a failed write."""


def checksum(key: int, text: str) -> int:
    """The CRC-32 stored beside a record (``key`` its seq) or a snapshot row (``key`` its pos)."""
    return zlib.crc32(f"{key}:{text}".encode())


def history_checksum(group_id: object, at_unix_ms: object, kind: object, epoch: object,
                     cause: object) -> int:
    """The CRC-32 stored beside an epoch-history entry: of its fields as a JSON array (so that a
    field read back with another type, ``"5"`` for ``5``, fails it too)."""
    return zlib.crc32(json.dumps([group_id, at_unix_ms, kind, epoch, cause], separators=(",", ":"),
                                 default=repr).encode())


def _sql_checksum(key: object, text: object) -> int | None:
    """`checksum` as an SQL function for the upgrade: NULL for a row already damaged (load refuses it)."""
    return checksum(key, text) if isinstance(key, int) and isinstance(text, str) else None


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
    """The database file. Not thread-safe: one thread at a time (recovery, then the writer).

    A file SQLite cannot read, or one in another format, is a `StoreError` here already. ``read_only``:
    read it without changing anything (module docstring), a missing file a `StoreError` too."""

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._crc = _CRC_STORED
        self._shared_lock: IO[str] | None = None
        try:
            if read_only:
                self._shared_lock = _lock_shared(path)
                self._db = self._connect_read_only(path)
            else:
                self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except BaseException as e:
            self._unlock()
            if isinstance(e, sqlite3.Error):
                raise self._refused(e) from e
            raise
        try:
            if read_only:
                self._open_read_only()
            else:
                self._open()
        except sqlite3.Error as e:
            self.close()
            raise self._refused(e) from e
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        path = self.path
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{path}: SQLite refused WAL mode (got {mode!r}); use a local file system")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('format', ?), ('snapshot_seq', '0')", (str(FORMAT),))
        elif row[0] == str(_UPGRADABLE):
            self._upgrade()
        elif row[0] != str(FORMAT):
            raise StoreError(f"{path} was written in store format {row[0]}, this version reads format "
                             f"{FORMAT} (and upgrades format {_UPGRADABLE})")

    @staticmethod
    def _connect_read_only(path: str) -> sqlite3.Connection:
        if not os.path.isfile(path):
            raise StoreError(f"{path}: no coordinator store to read (no such file)")
        uri = f"{Path(path).absolute().as_uri()}?mode=ro"
        if not os.path.exists(path + "-wal"):  # nothing beyond the file to read: no -wal/-shm created
            uri += "&immutable=1"
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)

    def _open_read_only(self) -> None:
        """The format, checked as `_open` does, without writing: a format-1 store is read as if upgraded."""
        path = self.path
        tables = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        if self._db.execute(tables).fetchone() is None:
            raise StoreError(f"{path} holds no coordinator store (no meta table)")
        row = self._db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        if row is not None and row[0] == str(_UPGRADABLE):
            self._checksum_functions()
            self._crc = _CRC_AS_UPGRADED
        elif row is None or row[0] != str(FORMAT):
            raise StoreError(f"{path} was written in store format {row[0] if row else 'unknown'}, this "
                             f"version reads format {FORMAT} (and format {_UPGRADABLE})")

    def _checksum_functions(self) -> None:
        self._db.create_function("regroup_checksum", 2, _sql_checksum, deterministic=True)
        self._db.create_function("regroup_history_checksum", 5, history_checksum, deterministic=True)

    def _upgrade(self) -> None:
        """Format 1 -> 2: add the checksums, in one transaction (module docstring)."""
        db = self._db
        self._checksum_functions()
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("records", "snapshot", "history"):
                columns = {c for (_, c, *_) in db.execute(f"PRAGMA table_info({table})")}
                if "crc" not in columns:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
            n = db.execute(f"UPDATE records SET crc = {_CRC_AS_UPGRADED['records']}").rowcount
            n += db.execute(f"UPDATE snapshot SET crc = {_CRC_AS_UPGRADED['snapshot']}").rowcount
            h = db.execute(f"UPDATE history SET crc = {_CRC_AS_UPGRADED['history']}").rowcount
            db.execute("UPDATE meta SET value=? WHERE key='format'", (str(FORMAT),))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        log.info("%s: store format %d upgraded to %d: checksums added to %d records and snapshot rows "
                 "and %d history entries as they were (checked from now on)", self.path, _UPGRADABLE,
                 FORMAT, n, h)

    def _damaged(self, what: str) -> StoreError:
        return StoreError(f"{self.path} is damaged: {what}; {_WHAT_TO_DO}")

    def _refused(self, e: sqlite3.Error) -> StoreError:
        """SQLite's own error at open or recovery: damage when SQLite says so (SQLITE_CORRUPT,
        SQLITE_NOTADB), otherwise a file it cannot use here (permissions, a full or failing disk)."""
        if getattr(e, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return self._damaged(f"SQLite cannot read it ({e})")
        return StoreError(f"{self.path}: SQLite cannot use it ({e}); check the data dir's permissions and "
                          f"its disk")

    def _meta_int(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            return 0
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise self._damaged(f"meta.{key} must be a number, found {shown(row[0])}") from None

    def load(self, upto_seq: int | None = None) -> Loaded:
        """Everything recovery reads, each row checked (module docstring). ``upto_seq``: only the records
        up to that sequence number (the state as it was then; StoreError if a snapshot already covers
        more than that)."""
        try:
            return self._load(upto_seq)
        except sqlite3.Error as e:
            raise self._refused(e) from e

    def _load(self, upto_seq: int | None) -> Loaded:
        t0 = time.perf_counter()
        db = self._db
        snapshot_seq = self._meta_int("snapshot_seq")
        if upto_seq is not None and upto_seq < snapshot_seq:
            raise StoreError(f"{self.path}: the snapshot covers records up to {snapshot_seq}; the state as "
                             f"of record {upto_seq} is gone")
        crc_of = self._crc
        records = []
        for expected, (pos, data, crc) in enumerate(db.execute(f"SELECT pos, data, {crc_of['snapshot']} "
                                                               "FROM snapshot ORDER BY pos")):
            if pos != expected:
                raise self._damaged(f"snapshot row {expected} is missing (the next row has pos {shown(pos)})")
            records.append(self._record("snapshot row", pos, data, crc))
        n_snapshot = len(records)
        (first,) = db.execute("SELECT MIN(seq) FROM records").fetchone()
        if first is not None and first <= snapshot_seq:
            raise self._damaged(f"record {first} is still there though the snapshot covers every record up "
                                f"to {snapshot_seq} (meta.snapshot_seq or the records table changed)")
        last_seq = snapshot_seq
        last = 2**63 - 1 if upto_seq is None else upto_seq
        tail = f"SELECT seq, data, {crc_of['records']} FROM records WHERE seq > ? AND seq <= ? ORDER BY seq"
        for seq, data, crc in db.execute(tail, (snapshot_seq, last)):
            if seq != last_seq + 1:
                raise self._damaged(f"record {last_seq + 1} is missing (the row after record {last_seq} "
                                    f"has seq {shown(seq)})")
            records.append(self._record("record", seq, data, crc))
            last_seq = seq
        history = []
        rows = db.execute(f"SELECT id, group_id, at_unix_ms, kind, epoch, cause, {crc_of['history']} "
                          "FROM history ORDER BY id")
        for hid, g, at, kind, epoch, cause, crc in rows:
            actual = history_checksum(g, at, kind, epoch, cause)
            if crc != actual:
                fields = shown([g, at, kind, epoch, cause], 160)
                raise self._damaged(f"history entry {hid} {fields} fails its checksum: stored "
                                    f"{_hex(crc)}, computed {actual:08x}")
            history.append(HistoryOp(g, EpochChange(at, kind, epoch, cause)))
        return Loaded(records, n_snapshot, len(records) - n_snapshot, last_seq, history,
                      time.perf_counter() - t0)

    def _record(self, what: str, key: int, data: object, crc: object) -> AnyRecord:
        """The record of one row, once its checksum matched; StoreError naming the row otherwise."""
        if not isinstance(data, str):
            raise self._damaged(f"{what} {key} reads as {_as_read(data)}, not as the text of a record")
        actual = checksum(key, data)
        if crc != actual:
            raise self._damaged(f"{what} {key} {shown(data, 160)} fails its checksum: stored {_hex(crc)}, "
                                f"computed {actual:08x} (the row changed after it was written)")
        try:
            return codec.decode(data)
        except codec.CodecError as e:  # written like this (its checksum matched): not damage on disk
            raise StoreError(f"{self.path}: {what} {key} cannot be read by this version though its checksum "
                             f"is right (written by a newer regroup?): {e}") from e

    def append(self, rows: Sequence[tuple[int, str]], history: Sequence[HistoryOp]) -> None:
        """One transaction; durable when this returns. ``rows``: (seq, encoded record)."""
        self._writable("append")
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO records (seq, data, crc) VALUES (?, ?, ?)",
                           [(seq, text, checksum(seq, text)) for seq, text in rows])
            for op in history:
                if op.entry is None:
                    db.execute("DELETE FROM history WHERE group_id=?", (op.group_id,))
                else:
                    e = op.entry
                    fields = (op.group_id, e.at_unix_ms, e.kind, e.epoch, e.cause)
                    db.execute("INSERT INTO history (group_id, at_unix_ms, kind, epoch, cause, crc) VALUES "
                               "(?, ?, ?, ?, ?, ?)", (*fields, history_checksum(*fields)))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def compact(self, snapshot: Sequence[str], upto_seq: int, groups: set[str], history_limit: int) -> None:
        """Replace the snapshot by ``snapshot`` (state as of ``upto_seq``) in one transaction."""
        self._writable("compact")
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM snapshot")
            db.executemany("INSERT INTO snapshot (pos, data, crc) VALUES (?, ?, ?)",
                           [(pos, text, checksum(pos, text)) for pos, text in enumerate(snapshot)])
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

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only: cannot {what}")

    def counts(self) -> tuple[int, int]:
        """(snapshot records, tail records) on disk."""
        (s,) = self._db.execute("SELECT COUNT(*) FROM snapshot").fetchone()
        (t,) = self._db.execute("SELECT COUNT(*) FROM records").fetchone()
        return int(s), int(t)

    def close(self) -> None:
        self._db.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._shared_lock is not None:
            self._shared_lock.close()  # closing the descriptor releases the flock
            self._shared_lock = None


def _lock_shared(db_path: str) -> IO[str] | None:
    """A read-only open's shared lock on the data dir of ``db_path`` (module docstring), or None when
    there is no ``LOCK`` file beside it (not a data dir a coordinator ran on)."""
    data_dir = os.path.dirname(os.path.abspath(db_path))
    try:
        lock = open(os.path.join(data_dir, LOCK_FILE))  # noqa: SIM115 - held until close
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"{data_dir}: cannot open {LOCK_FILE} to lock it for reading ({e})") from e
    return _flocked(lock, fcntl.LOCK_SH, f"a coordinator is running on {data_dir} (it holds {LOCK_FILE}); "
                    "stop it before reading its store, or read a copy of the data dir")


def _flocked(lock: IO[str], how: int, refusal: str) -> IO[str]:
    """``lock`` locked ``how`` (shared or exclusive) without waiting; closed, and `StoreError`
    ``refusal``, when someone else holds it the other way."""
    try:
        fcntl.flock(lock.fileno(), how | fcntl.LOCK_NB)
    except OSError as e:
        lock.close()
        raise StoreError(refusal) from e
    return lock


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


def _hex(crc: object) -> str:
    return f"{crc:08x}" if isinstance(crc, int) else _as_read(crc)


def _as_read(value: object) -> str:
    """A value SQLite gave back, for a message: NULL, or its Python type and (cut) repr."""
    return "NULL" if value is None else f"{type(value).__name__} {shown(value)}"


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
        """Lock the data dir, open the database and read everything back, checked (before `start`);
        `StoreError` if it cannot be used (module docstring)."""
        os.makedirs(self.data_dir, exist_ok=True)
        lock = open(os.path.join(self.data_dir, LOCK_FILE), "a+")  # noqa: SIM115 - held until close
        _flocked(lock, fcntl.LOCK_EX, f"{self.data_dir} is in use by another coordinator process, or a tool "
                 f"reading its store (cannot lock {LOCK_FILE}); stop it or use another --data-dir")
        try:
            sqlite_log = SqliteLog(os.path.join(self.data_dir, DB_FILE))
            try:
                loaded = sqlite_log.load()
            except BaseException:
                sqlite_log.close()
                raise
        except BaseException:  # refused (damaged, another format): nothing stays open or locked
            lock.close()
            raise
        self._lock_file, self._log = lock, sqlite_log
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
