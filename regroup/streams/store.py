"""`TaskStore`: the key-value state of one copy of a task, kept in step with the task's changelog.

Rules of this module (the changelog's own rules are in `regroup.streams.changelog`):

1. A store is a *copy* or the task's *active*. A copy's state comes only from the changelog: it
   restores (`restore`, `restore_to_end`) and never writes. The active writes (`put`, `delete`)
   into an in-memory buffer, read back by `get` and `items`, until `flush`.
2. `become_active` turns a copy into the active: it restores to the end, checks that the COMMIT the
   coordinator's metadata names is a committed point of the history (a BEGIN that names anything
   else would poison every later restore, so it is refused before it is written), writes the BEGIN
   and restores past it. The state is then exactly the state at that COMMIT.
3. `flush(source_offsets)` writes the buffered changes, then the COMMIT marker in a produce call of
   its own, then commits one SQLite transaction holding the state, the segment and its undo rows.
   It returns the COMMIT's offset, for the member's offset-commit metadata; once the coordinator
   has accepted that commit, `confirm` it, which makes the segment final here and is written into
   the next COMMIT so that copies learn it. If any of this fails the store stops being the active
   and drops the unflushed changes: the member is then where a crash would leave it, and takes the
   task over again (nothing of the failed flush can reach a restore, rule 5 of the changelog).
4. The active's own segments are applied at once but stay undoable until final: if the coordinator
   never accepted them (the member died or was fenced in between), the next BEGIN resumes from an
   earlier COMMIT and this file rolls them back from its undo rows instead of being rebuilt.
5. The changelog position only advances past records this copy has read, or that it wrote itself
   back to back (checked by offset): a record another writer slipped in between (a newer active's
   BEGIN) is therefore always read.
6. The local file is rebuilt from the changelog when it cannot be trusted (`wiped` says why): it is
   not a usable database (`regroup.streams.local`), it holds another task's state (the file is
   named by changelog partition, which a change of the subtopology's parallelism gives to another
   task; a file without a task name is the K = 1 task of its partition), its position is beyond
   the changelog's end, or the record at its last applied COMMIT is not that COMMIT — the
   changelog was deleted and recreated, and the file describes a history that no longer exists.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from regroup.log.base import ConsumedRecord, PartitionedLog
from regroup.protocol.streams.topology import TaskId
from regroup.streams.changelog import (
    Begin,
    begin_record,
    change_gen,
    change_records,
    changelog_topic,
    check_source_offsets,
    commit_record,
    decode_marker,
    ensure_changelog,
    source_offsets_of,
)
from regroup.streams.errors import (
    ChangelogError,
    FencedError,
    NotActiveError,
    StateStoreError,
    StoreClosedError,
)
from regroup.streams.local import LocalState

__all__ = ["RestoreProgress", "Role", "TaskStore"]

#: Records read from the changelog per SQLite transaction while restoring.
READ_BATCH = 5_000
#: Change records per produce call of a flush.
PRODUCE_CHUNK = 10_000


class Role(enum.Enum):
    COPY = "copy"
    ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class RestoreProgress:
    """How far a copy got: the source offsets and changelog offset of its last applied COMMIT."""

    source_offsets: Mapping[str, int]
    #: Changelog offset of the last applied COMMIT (None: the state is the empty initial state).
    commit_offset: int | None
    #: Next changelog offset this copy reads.
    position: int
    #: The changelog's end when the call began.
    end_offset: int
    #: Segments read but not yet known final (a standby is normally one commit behind the active).
    pending: int = 0

    @property
    def at_end(self) -> bool:
        return self.position >= self.end_offset


def _check_bytes(value: object, what: str) -> bytes:
    if not isinstance(value, bytes):
        hint = " (convert it with bytes(...))" if isinstance(value, bytearray | memoryview) else ""
        raise TypeError(f"a state store {what} must be bytes, not {type(value).__name__}{hint}")
    return value


def _check_offset(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an int >= 0, got {value!r}")
    return value


class TaskStore:
    """The state of task ``task`` of streams group ``group_id`` on this member (module rules).

    ``state_dir`` holds one SQLite file per task; ``log`` holds the changelog topic, created (or
    grown) here to ``partitions`` partitions: the number of tasks of the subtopology. The store does
    not close ``log``. Not thread-safe: drive a store from one thread at a time.
    """

    def __init__(self, state_dir: str | os.PathLike[str], log: PartitionedLog, group_id: str, task: TaskId,
                 *, partitions: int, check_integrity: bool = False) -> None:
        if not (isinstance(task, tuple) and len(task) in (2, 4)
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in task[1:])
                and (len(task) == 2 or task[2] < task[3])):
            raise ValueError(f"task must be a TaskId(subtopology, partition >= 0), got {task!r}")
        self.task = TaskId(*task)
        # One changelog partition per task: the partition itself, or partition * K + range for a
        # key-range task (`TaskId.changelog_partition`), so a whole-partition task's file and
        # changelog partition are what they always were.
        self._p = self.task.changelog_partition
        if isinstance(partitions, int) and not isinstance(partitions, bool) and self._p >= partitions:
            raise ValueError(f"task {self.task} writes changelog partition {self._p}, but its subtopology "
                             f"has {partitions} tasks (changelog partitions 0..{partitions - 1})")
        self.topic = changelog_topic(group_id, self.task.subtopology)
        self._log = log
        ensure_changelog(log, self.topic, partitions)
        self._local = LocalState(Path(state_dir) / f"{self.topic}.{self._p}.sqlite3", self.topic, self._p,
                                 task=str(self.task), check_integrity=check_integrity)
        self._closed = False
        self._role = Role.COPY
        self._buffer: dict[bytes, bytes | None] = {}
        #: The newest COMMIT the coordinator accepted, as this active knows; written into each COMMIT.
        self._confirmed: int | None = None
        self._written_confirmed: int | None = None
        self._idle = False
        self._source_cache: tuple[int | None, dict[str, int]] = (None, {})
        #: Why the local file was wiped and rebuilt from the changelog (None: it was not).
        self.wiped: str | None = self._local.wiped
        try:
            self._check_task()
            self._check_against_changelog()
        except BaseException:
            self._local.close()
            raise

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._role.value
        return f"TaskStore({self.task}, {self.topic}/{self._p}, {state})"

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------- properties

    @property
    def path(self) -> Path:
        return self._local.path

    @property
    def role(self) -> Role:
        return self._role

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def source_offsets(self) -> Mapping[str, int]:
        """The source offsets of the last applied COMMIT (``{}`` before any): where this state stands."""
        self._check_open()
        applied, marker = self._local.applied, self._local.applied_marker
        if self._source_cache[0] != applied:
            self._source_cache = (applied, {} if marker is None else source_offsets_of(marker))
        return dict(self._source_cache[1])

    @property
    def applied_commit(self) -> int | None:
        """The changelog offset of the last applied COMMIT (None: the empty initial state)."""
        self._check_open()
        return self._local.applied

    @property
    def changelog_position(self) -> int:
        """The next changelog offset this copy reads."""
        self._check_open()
        return self._local.position

    @property
    def generation(self) -> int | None:
        """The offset of the BEGIN of the generation this copy follows (None: no BEGIN read yet)."""
        self._check_open()
        return None if self._local.gen < 0 else self._local.gen

    # ------------------------------------------------------------------------------------- reading

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, with the active's unflushed writes; None if absent."""
        self._check_open()
        _check_bytes(key, "key")
        if key in self._buffer:
            return self._buffer[key]
        return self._local.get(key)

    def items(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop`` in key order (bytes order), unflushed
        writes included as they were when the iteration began."""
        self._check_open()
        if start is not None:
            _check_bytes(start, "range start")
        if stop is not None:
            _check_bytes(stop, "range stop")
        return self._merged(start, stop)

    def _merged(self, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        buffered = sorted((k, v) for k, v in self._buffer.items()
                          if (start is None or k >= start) and (stop is None or k < stop))
        i = 0
        for key, value in self._local.scan(start, stop):
            while i < len(buffered) and buffered[i][0] <= key:
                k, v = buffered[i]
                i += 1
                if v is not None:
                    yield k, v
                if k == key:
                    break  # the unflushed write replaces the stored value
            else:
                yield key, value
        for k, v in buffered[i:]:
            if v is not None:
                yield k, v

    # ------------------------------------------------------------------------------------- writing

    def put(self, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value`` (buffered until `flush`); only the active writes."""
        self._check_active("put")
        self._buffer[_check_bytes(key, "key")] = _check_bytes(value, "value")

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (buffered until `flush`; a no-op if absent); only the active writes."""
        self._check_active("delete")
        self._buffer[_check_bytes(key, "key")] = None

    def flush(self, source_offsets: Mapping[str, int]) -> int:
        """Make the buffered writes durable as the state at ``source_offsets`` (rule 3).

        Returns the changelog offset of the COMMIT marker, to name in the offset commit's metadata
        (`regroup.streams.changelog.format_commit_metadata`). With nothing new to record it writes
        nothing and returns the last COMMIT's offset.
        """
        self._check_active("flush")
        source = check_source_offsets(source_offsets)
        previous = self.source_offsets
        behind = {t: (o, source[t]) for t, o in previous.items() if t in source and source[t] < o}
        if behind:
            raise ValueError(f"flush of task {self.task}: source offsets only move forward, but "
                             + ", ".join(f"{t} goes from {a} back to {b}" for t, (a, b) in behind.items()))
        applied = self._local.applied
        if (not self._buffer and applied is not None and source == previous
                and (self._confirmed == self._written_confirmed or self._idle)):
            # Nothing to record. A COMMIT that only carries a confirmation is written once: were its
            # own confirmation to trigger another, an idle task would write one per commit forever.
            return applied
        changes = dict(sorted(self._buffer.items()))
        gen, local = self._local.gen, self._local
        try:
            expected, contiguous = local.position, True
            records = change_records(gen, changes.items())
            for i in range(0, len(records), PRODUCE_CHUNK):
                chunk = records[i:i + PRODUCE_CHUNK]
                first = self._log.produce(self.topic, self._p, chunk)
                contiguous = contiguous and first == expected
                expected = first + len(chunk)
            marker = commit_record(gen, source, self._confirmed)
            commit = self._log.produce(self.topic, self._p, [marker])
            contiguous = contiguous and commit == expected
            assert marker.value is not None
            with local.transaction():
                local.apply_own(commit, marker.value, changes)
                if contiguous:
                    local.position = commit + 1
        except BaseException as e:
            self._role, self._buffer = Role.COPY, {}
            if not isinstance(e, Exception):
                raise
            raise StateStoreError(
                f"flushing task {self.task} to {self.topic}/{self._p} failed ({type(e).__name__}: {e}); its "
                "unflushed changes are dropped and this store is no longer the active. Nothing of this "
                "flush can reach a restore: take the task over again with become_active()") from e
        self._idle = not changes and source == previous
        self._buffer = {}
        self._written_confirmed = self._confirmed
        return commit

    def confirm(self, commit_offset: int) -> None:
        """The coordinator accepted the offset commit naming ``commit_offset`` (a COMMIT this store
        flushed, or one it read): that segment and the ones before it are final."""
        self._check_open()
        _check_offset(commit_offset, "commit_offset")
        with self._local.transaction():
            if not self._local.finalize(commit_offset):
                raise ValueError(f"{commit_offset} is not a COMMIT of {self.topic}/{self._p} that this copy "
                                 "flushed or read; confirm the offset that flush() returned")
        if self._confirmed is None or commit_offset > self._confirmed:
            self._confirmed = commit_offset

    def release(self) -> None:
        """Stop being the active (the task was revoked, or turns into a standby here); unflushed
        writes are dropped. The state stays, and the copy can restore from where it is."""
        self._check_open()
        self._role, self._buffer = Role.COPY, {}

    # ---------------------------------------------------------------------------------- taking over

    def become_active(self, resume_from: int | None, epoch: int, *,
                      committed_offsets: Mapping[str, int] | None = None) -> None:
        """Take the task over as its active, from the COMMIT at changelog offset ``resume_from``.

        ``resume_from`` comes from the coordinator's commit metadata
        (`regroup.streams.changelog.resume_point`); None starts from empty state (no commit yet, or
        an operator reset the offsets). ``epoch`` is the member epoch at which the coordinator
        granted the task as active; it must grow from one active to the next (changelog rule 3).
        With ``committed_offsets`` (the coordinator's), the COMMIT's source offsets must equal them.
        Raises `ChangelogError` when that COMMIT cannot be the committed state, and `FencedError`
        when a newer active began meanwhile.
        """
        self._check_open()
        if self._role is Role.ACTIVE:
            raise NotActiveError(f"task {self.task} is already active here (generation {self._local.gen}); "
                                 "release() it before taking it over again")
        if resume_from is not None:
            _check_offset(resume_from, "resume_from")
        _check_offset(epoch, "epoch")
        expected = None if committed_offsets is None else check_source_offsets(committed_offsets)
        progress = self.restore_to_end()
        if epoch < self._local.epoch:  # known fenced already: do not even write a BEGIN
            raise self._fenced(None)
        if resume_from is not None:
            self._check_resume_point(resume_from, progress.end_offset, expected)
        begin = self._log.produce(self.topic, self._p, [begin_record(resume_from, epoch)])
        self.restore_to_end()
        if self._local.gen != begin:
            raise self._fenced(begin)
        self._role, self._buffer, self._idle = Role.ACTIVE, {}, False
        self._confirmed = self._written_confirmed = resume_from

    def _fenced(self, begin: int | None) -> FencedError:
        ours = "" if begin is None else f", after this member's BEGIN at {begin}"
        return FencedError(
            f"task {self.task}: a newer active (epoch {self._local.epoch}) began at {self.topic}/{self._p} "
            f"offset {self._local.gen}{ours}; this member no longer owns the task")

    def _check_resume_point(self, resume_from: int, end: int, expected: dict[str, int] | None) -> None:
        where = f"{self.topic}/{self._p}"
        if resume_from >= end:
            raise ChangelogError(
                f"the coordinator's commit for task {self.task} names changelog offset {resume_from}, but "
                f"{where} ends at {end}: the changelog was deleted or recreated and the committed state "
                "is lost. Start over with become_active(None) (empty state) after resetting the offsets")
        record = self._log.read(self.topic, self._p, resume_from, 1)[0]
        marker = None if record.key is not None else decode_marker(record)
        if marker is None or isinstance(marker, Begin):
            raise ChangelogError(f"the coordinator's commit for task {self.task} names {where} offset "
                                 f"{resume_from}, which is not a COMMIT marker")
        if expected is not None and dict(marker.source_offsets) != expected:
            raise ChangelogError(
                f"the COMMIT at {where} offset {resume_from} records source offsets "
                f"{dict(marker.source_offsets)}, but the coordinator has {expected} for task {self.task}: "
                "the metadata points at the wrong state (was the changelog recreated?)")
        if self._local.segment_state(resume_from) is None:
            final = self._local.final
            if final is not None and resume_from < final:
                why = (f"older than the committed point {final} this copy already holds: the offsets were "
                       "moved back (an operator's reset?). Start over with become_active(None)")
            else:
                why = ("not a committed point of the history (its writer was fenced, or a BEGIN voided it); "
                       "the commit metadata does not belong to this changelog")
            raise ChangelogError(f"the coordinator's commit for task {self.task} names the COMMIT at {where} "
                                 f"offset {resume_from}, which is {why}")

    # ------------------------------------------------------------------------------------ restoring

    def restore(self, max_records: int = READ_BATCH, *, committed: int | None = None) -> RestoreProgress:
        """Read up to ``max_records`` changelog records and apply every segment known final.

        ``committed`` is the COMMIT offset the coordinator's metadata names now, if the caller has
        it (a warm-up catching up with the active): that segment is final as soon as it is read.
        """
        self._check_copy()
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        return self._restore(max_records, committed)

    def restore_to_end(self, *, committed: int | None = None) -> RestoreProgress:
        """Read up to the changelog's end as it is when called (see `restore`)."""
        self._check_copy()
        return self._restore(None, committed)

    def _restore(self, max_records: int | None, committed: int | None) -> RestoreProgress:
        if committed is not None:
            _check_offset(committed, "committed")
        local = self._local
        end = self._log.end_offsets(self.topic)[self._p]
        if local.position > end:
            self._rebuild(f"the checkpoint is at changelog offset {local.position}, beyond the end {end} "
                          "of the changelog: it was recreated")
        if committed is not None and local.segment_state(committed) is not None:
            with local.transaction():
                local.finalize(committed)
        remaining = end - local.position if max_records is None else min(max_records, end - local.position)
        while remaining > 0:
            records = self._log.read(self.topic, self._p, local.position, min(remaining, READ_BATCH))
            if not records:
                break
            with local.transaction():
                self._apply(records, committed)
            remaining -= len(records)
        return RestoreProgress(self.source_offsets, local.applied, local.position, end, len(local.pending()))

    def _apply(self, records: list[ConsumedRecord], committed: int | None) -> None:
        """Follow the changelog's rules 3 to 5 over ``records`` (inside a transaction)."""
        local = self._local
        gen = local.gen
        batch: list[tuple[bytes, bytes | None]] = []
        for rec in records:
            if rec.key is not None:
                if change_gen(rec) == gen:
                    batch.append((rec.key, rec.value))
                continue
            if batch:
                local.stage(batch)
                batch = []
            marker = decode_marker(rec)
            if isinstance(marker, Begin):
                if marker.epoch < local.epoch:
                    continue  # a fenced active's late BEGIN
                if not local.resume(marker.resume_from):
                    raise self._broken(rec, f"it resumes from offset {marker.resume_from}, which is not a "
                                            "committed point of the history read before it")
                local.gen, local.epoch = marker.offset, marker.epoch
                gen = marker.offset
                continue
            if marker.gen != gen:
                continue  # a zombie's COMMIT
            if local.applied is not None and marker.offset <= local.applied:
                local.drop_open()  # this copy's own segment, applied when it was flushed (rule 5)
            else:
                assert rec.value is not None
                local.close_segment(marker.offset, rec.value)
            if marker.confirmed is not None and not local.finalize(marker.confirmed):
                raise self._broken(rec, f"it confirms offset {marker.confirmed}, which is not a COMMIT of "
                                        "the history read before it")
            if committed == marker.offset:
                local.finalize(marker.offset)
        if batch:
            local.stage(batch)
        local.position = records[-1].offset + 1

    def _broken(self, rec: ConsumedRecord, why: str) -> ChangelogError:
        return ChangelogError(
            f"{self.topic}/{self._p} offset {rec.offset} contradicts the changelog protocol: {why}. The "
            "changelog was written by something else, or rewritten; this copy cannot restore past it")

    # ------------------------------------------------------------------------------ local file checks

    def _check_task(self) -> None:
        """Rule 6: the file holds this task's state, not another cut's of the same changelog partition."""
        local, mine = self._local, str(self.task)
        # A file without a task name predates key ranges: it is the whole partition's task (K = 1).
        held = local.task if local.task is not None else str(TaskId(self.task.subtopology, self._p))
        if held != mine:
            self._rebuild(f"it holds the state of task {held}, not of {mine} (the subtopology's "
                          "parallelism changed since it was written)")
        if local.task != mine:
            with local.transaction():
                local.set_task(mine)

    def _check_against_changelog(self) -> None:
        local = self._local
        end = self._log.end_offsets(self.topic)[self._p]
        if local.position > end:
            self._rebuild(f"its checkpoint is at changelog offset {local.position}, beyond the end {end} of "
                          "the changelog: it was recreated")
        elif local.applied is not None:
            records = self._log.read(self.topic, self._p, local.applied, 1)
            if not records or records[0].key is not None or records[0].value != local.applied_marker:
                self._rebuild(f"the changelog record at offset {local.applied} is not the COMMIT its state "
                              "was applied from: the changelog was recreated")

    def _rebuild(self, why: str) -> None:
        local = self._local
        with local.transaction():
            local.wipe_state()
            local.position, local.gen, local.epoch = 0, -1, -1
        self.wiped = why

    # ------------------------------------------------------------------------------------- closing

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the state store of task {self.task} is closed")

    def _check_active(self, what: str) -> None:
        self._check_open()
        if self._role is not Role.ACTIVE:
            raise NotActiveError(f"{what} on task {self.task}, which is a copy here: only the active writes; "
                                 "a copy's state comes from the changelog (become_active() first)")

    def _check_copy(self) -> None:
        self._check_open()
        if self._role is Role.ACTIVE:
            raise NotActiveError(f"task {self.task} is active here: an active writes the changelog and "
                                 "does not restore from it (release() it first)")

    def close(self) -> None:
        """Close the local file; unflushed writes are dropped, as in a crash. Idempotent."""
        if not self._closed:
            self._closed = True
            self._role, self._buffer = Role.COPY, {}
            self._local.close()
