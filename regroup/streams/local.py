"""One task copy's local state: a SQLite file holding the key-value state and where it stands.

Rules of this module:

1. Why SQLite: it is in the standard library (no new dependency), one file per task is easy to
   wipe, and a transaction makes the state, the changelog position and the source offsets (inside
   the applied COMMIT marker) change together, so a crash leaves the file at one consistent point,
   never between two. WAL mode lets a transaction commit with one sequential append.
   ``synchronous=NORMAL``: a power loss may undo the last transactions, which only leaves the copy
   at an *earlier* consistent point that the changelog brings forward again; the changelog, not
   this file, is what must be durable. ``locking_mode=EXCLUSIVE``: only one connection (process or
   store) uses a task's file at a time; a second one gets `StoreLockedError`.
2. The file is a cache of the changelog. Whatever is wrong with it — not a database, an older
   schema, a failed integrity check — is answered by wiping it (`wiped` says why) and restoring
   from the changelog, never by an error the member cannot act on.
3. This module knows segments only as offsets and opaque marker bytes; what the markers mean and
   when a segment is final is `regroup.streams.changelog`'s (its rules 4 and 5) and the store's.
   Segment states: PENDING (read, staged, not applied), OWN (written and applied by this copy as
   active, with undo rows, not yet known final), FINAL (applied and final; only the latest is kept,
   as the point a new active may resume from).
4. Every change of state happens inside `transaction()`; the checkpoint row (position, generation)
   is written by the transaction's commit, so it can never disagree with the tables.
5. Not thread-safe: a task copy is driven by one thread at a time.
6. The file records the name of the task whose state it holds (``meta``), written when the file is
   created: the file's name (the changelog partition) alone does not say which cut of the
   subtopology wrote it. Files written before it was recorded have none (`task` is None).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from regroup.streams.errors import StateStoreError, StoreLockedError

__all__ = ["FINAL", "OWN", "PENDING", "LocalState"]

SCHEMA_VERSION = 1
PENDING, OWN, FINAL = 0, 1, 2
#: The staging "segment" of changes read after the last COMMIT of the current generation.
OPEN = -1
#: How long to wait for another connection's lock before saying the file is taken.
_LOCK_WAIT_S = 0.2
_SCAN_PAGE = 1_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoint (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    topic TEXT NOT NULL, partition INTEGER NOT NULL,
    position INTEGER NOT NULL, gen INTEGER NOT NULL, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS staged (
    seg INTEGER NOT NULL, key BLOB NOT NULL, value BLOB, PRIMARY KEY (seg, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS segments (
    commit_offset INTEGER PRIMARY KEY, marker BLOB NOT NULL, state INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS undo (
    seg INTEGER NOT NULL, key BLOB NOT NULL, value BLOB, PRIMARY KEY (seg, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""


def _locked(e: sqlite3.OperationalError) -> bool:
    return "locked" in str(e)


class LocalState:
    """The SQLite file of one task copy (see the module rules)."""

    def __init__(self, path: Path, topic: str, partition: int, *, task: str | None = None,
                 check_integrity: bool = False) -> None:
        self.path = path
        self.topic = topic
        self.partition = partition
        #: The task whose state the file holds, as written in it (a new file gets ``task``); None for
        #: a file written before the task was recorded (before key-range tasks existed).
        self.task: str | None = None
        self._new_task = task
        #: Why the file was wiped when it was opened (None: it was not).
        self.wiped: str | None = None
        #: Next changelog offset to read, and the generation (BEGIN offset, epoch) followed there.
        self.position = 0
        self.gen = -1
        self.epoch = -1
        #: The newest applied COMMIT (OWN or FINAL) and its marker bytes; the newest FINAL one.
        self.applied: int | None = None
        self.applied_marker: bytes | None = None
        self.final: int | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = self._open(check_integrity)
        except sqlite3.OperationalError as e:  # locked, cannot open, I/O: not the content's fault
            if _locked(e):
                raise self._taken() from e
            raise
        except sqlite3.DatabaseError as e:  # not a database, malformed, another schema
            self._remove_files()
            self.wiped = f"the file could not be used as a state store ({e})"
            self._conn = self._open(False)

    def _taken(self) -> StoreLockedError:
        return StoreLockedError(
            f"the state file {self.path} of {self.topic}/{self.partition} is open elsewhere (another "
            "process, or another TaskStore of this one); one copy of a task per state directory")

    def _open(self, check_integrity: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=_LOCK_WAIT_S)
        try:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"schema version {version}, this code writes {SCHEMA_VERSION}")
            if check_integrity:
                verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
                if verdict != "ok":
                    raise sqlite3.DatabaseError(f"integrity check: {verdict}")
            conn.execute("BEGIN IMMEDIATE")  # takes the exclusive lock now: a second opener fails here
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            row = conn.execute("SELECT topic, partition, position, gen, epoch FROM checkpoint").fetchone()
            if row is None:
                conn.execute("INSERT INTO checkpoint VALUES (0, ?, ?, 0, -1, -1)",
                             (self.topic, self.partition))
                if self._new_task is not None:
                    conn.execute("INSERT INTO meta VALUES ('task', ?)", (self._new_task,))
            elif (row[0], row[1]) != (self.topic, self.partition):
                raise StateStoreError(
                    f"the state file {self.path} holds the state of changelog {row[0]}/{row[1]}, not "
                    f"{self.topic}/{self.partition}; was it copied or renamed? Move it away to rebuild")
            else:
                self.position, self.gen, self.epoch = row[2], row[3], row[4]
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._load_task()
        self._load_chain()
        return conn

    def _remove_files(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _load_task(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE name = 'task'").fetchone()
        self.task = None if row is None else str(row[0])

    def _load_chain(self) -> None:
        row = self._conn.execute(
            "SELECT commit_offset, marker FROM segments WHERE state != ? ORDER BY commit_offset DESC LIMIT 1",
            (PENDING,)).fetchone()
        self.applied, self.applied_marker = (None, None) if row is None else (row[0], row[1])
        self.final = self._conn.execute("SELECT MAX(commit_offset) FROM segments WHERE state = ?",
                                        (FINAL,)).fetchone()[0]

    def close(self) -> None:
        self._conn.close()

    # ------------------------------------------------------------------------------------ reading

    def get(self, key: bytes) -> bytes | None:
        row = self._conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def scan(self, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` with ``start <= key < stop``, in key order, a page at a time (no statement
        stays open between pages, so a flush during the iteration is safe)."""
        after, inclusive = start or b"", True
        while True:
            op = ">=" if inclusive else ">"
            if stop is None:
                rows = self._conn.execute(f"SELECT key, value FROM kv WHERE key {op} ? ORDER BY key LIMIT ?",
                                          (after, _SCAN_PAGE)).fetchall()
            else:
                rows = self._conn.execute(
                    f"SELECT key, value FROM kv WHERE key {op} ? AND key < ? ORDER BY key LIMIT ?",
                    (after, stop, _SCAN_PAGE)).fetchall()
            for k, v in rows:
                yield bytes(k), bytes(v)
            if len(rows) < _SCAN_PAGE:
                return
            after, inclusive = rows[-1][0], False

    def segment_state(self, commit_offset: int) -> int | None:
        row = self._conn.execute("SELECT state FROM segments WHERE commit_offset = ?",
                                 (commit_offset,)).fetchone()
        return None if row is None else int(row[0])

    def pending(self) -> list[int]:
        return [r[0] for r in self._conn.execute(
            "SELECT commit_offset FROM segments WHERE state = ? ORDER BY commit_offset", (PENDING,))]

    # -------------------------------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One SQLite transaction; the checkpoint is written with it, and a failure rolls back both
        the file and this object's idea of it."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("UPDATE checkpoint SET position = ?, gen = ?, epoch = ?",
                               (self.position, self.gen, self.epoch))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            row = self._conn.execute("SELECT position, gen, epoch FROM checkpoint").fetchone()
            self.position, self.gen, self.epoch = row
            self._load_chain()
            self._load_task()
            raise

    # The operations below run inside `transaction()`.

    def _write(self, changes: Iterable[tuple[bytes, bytes | None]]) -> None:
        puts: list[tuple[bytes, bytes]] = []
        deletes: list[tuple[bytes]] = []
        for k, v in changes:
            if v is None:
                deletes.append((k,))
            else:
                puts.append((k, v))
        self._conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", puts)
        self._conn.executemany("DELETE FROM kv WHERE key = ?", deletes)

    def stage(self, changes: list[tuple[bytes, bytes | None]]) -> None:
        """Changes read from the changelog for the open segment (the last one of a key wins)."""
        self._conn.executemany("INSERT OR REPLACE INTO staged (seg, key, value) VALUES (-1, ?, ?)", changes)

    def drop_open(self) -> None:
        """Forget the staged changes no COMMIT closed (a generation ended mid-batch)."""
        self._conn.execute("DELETE FROM staged WHERE seg = ?", (OPEN,))

    def close_segment(self, commit_offset: int, marker: bytes) -> None:
        """The open changes become the PENDING segment ending at ``commit_offset``."""
        self._conn.execute("UPDATE staged SET seg = ? WHERE seg = ?", (commit_offset, OPEN))
        self._conn.execute("INSERT INTO segments VALUES (?, ?, ?)", (commit_offset, marker, PENDING))

    def finalize(self, commit_offset: int) -> bool:
        """Segment ``commit_offset`` and every one before it are final: apply the pending ones, drop
        the undo rows of OWN ones. False if no such segment is known (nor older than the final one)."""
        if self.segment_state(commit_offset) is None:
            return self.final is not None and commit_offset < self.final
        pending = [c for c in self.pending() if c <= commit_offset]
        if pending:
            latest: dict[bytes, bytes | None] = {}
            for k, v in self._conn.execute(
                    "SELECT key, value FROM staged WHERE seg BETWEEN 0 AND ? ORDER BY seg", (pending[-1],)):
                latest[k] = v
            self._write(latest.items())
            self._conn.execute("DELETE FROM staged WHERE seg BETWEEN 0 AND ?", (pending[-1],))
        self._conn.execute("DELETE FROM undo WHERE seg <= ?", (commit_offset,))
        self._conn.execute("UPDATE segments SET state = ? WHERE commit_offset <= ?", (FINAL, commit_offset))
        self._conn.execute("DELETE FROM segments WHERE commit_offset < ?", (commit_offset,))
        self._load_chain()
        return True

    def resume(self, commit_offset: int | None) -> bool:
        """A BEGIN: the state becomes the state at ``commit_offset`` (None: empty). Pending segments
        after it are void, OWN ones are undone. False if that segment is unknown here."""
        self.drop_open()
        if commit_offset is None:
            self.wipe_state()
            return True
        if self.segment_state(commit_offset) is None:
            return False
        self._conn.execute("DELETE FROM staged WHERE seg > ?", (commit_offset,))
        before: dict[bytes, bytes | None] = {}
        for k, v in self._conn.execute("SELECT key, value FROM undo WHERE seg > ? ORDER BY seg DESC",
                                       (commit_offset,)):
            before[k] = v  # the oldest undone segment's row, written last, is the value before them all
        self._write(before.items())
        self._conn.execute("DELETE FROM undo WHERE seg > ?", (commit_offset,))
        self._conn.execute("DELETE FROM segments WHERE commit_offset > ?", (commit_offset,))
        return self.finalize(commit_offset)

    def apply_own(self, commit_offset: int, marker: bytes, changes: Mapping[bytes, bytes | None]) -> None:
        """The active's flushed segment: applied at once, with undo rows in case it never becomes final."""
        self._conn.executemany(
            "INSERT INTO undo (seg, key, value) VALUES (?, ?, (SELECT value FROM kv WHERE key = ?))",
            ((commit_offset, k, k) for k in changes))
        self._write(changes.items())
        self._conn.execute("INSERT INTO segments VALUES (?, ?, ?)", (commit_offset, marker, OWN))
        self._load_chain()

    def set_task(self, task: str) -> None:
        """Record the task whose state the file holds from now on."""
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('task', ?)", (task,))
        self.task = task

    def wipe_state(self) -> None:
        """Empty state, no segments (the position and generation are the caller's to set)."""
        for table in ("kv", "staged", "segments", "undo"):
            self._conn.execute(f"DELETE FROM {table}")
        self._load_chain()
