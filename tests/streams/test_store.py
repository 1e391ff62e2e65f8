"""`TaskStore` on real SQLite files and a real embedded log: the key-value API, flushes, restores,
crashes and takeovers, zombies, and the local file's recovery."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.base import PartitionedLog
from regroup.log.errors import LogError
from regroup.protocol.streams.topology import TaskId
from regroup.streams.changelog import (
    begin_record,
    change_records,
    commit_record,
    format_commit_metadata,
    resume_point,
)
from regroup.streams.errors import (
    ChangelogError,
    FencedError,
    NotActiveError,
    StateStoreError,
    StoreClosedError,
    StoreLockedError,
)
from regroup.streams.store import Role, TaskStore

GROUP = "shop"
TASK = TaskId("count", 1)
TOPIC = "shop-count-changelog"


def make_log(directory: Path) -> PartitionedLog:
    return open_log(f"embedded://{directory}?fsync=never")


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionedLog]:
    lg = make_log(tmp_path / "log")
    yield lg
    lg.close()


class Members:
    """Opens stores in per-member state directories under one test's tmp_path."""

    def __init__(self, root: Path, log: PartitionedLog) -> None:
        self.root, self.log = root, log

    def store(self, member: str, task: TaskId = TASK, **kw: bool) -> TaskStore:
        return TaskStore(self.root / member, self.log, GROUP, task, partitions=3, **kw)

    def active(self, member: str, resume_from: int | None = None, epoch: int = 1) -> TaskStore:
        s = self.store(member)
        s.become_active(resume_from, epoch)
        return s

    def end(self) -> int:
        return self.log.end_offsets(TOPIC)[TASK.partition]


@pytest.fixture
def members(tmp_path: Path, log: PartitionedLog) -> Members:
    return Members(tmp_path, log)


def state(store: TaskStore) -> dict[bytes, bytes]:
    return dict(store.items())


def fresh_restore(members: Members, name: str,
                  committed: int | None) -> tuple[dict[bytes, bytes], dict[str, int]]:
    with members.store(name) as copy:
        copy.restore_to_end(committed=committed)
        return state(copy), dict(copy.source_offsets)


# ------------------------------------------------------------------------------- key-value API


def test_put_get_delete_and_items_in_bytes_order(members: Members) -> None:
    with members.active("a") as s:
        for k in (b"b", b"\xff", b"a", b"\x00", b"ab"):
            s.put(k, k * 2)
        s.delete(b"b")
        s.delete(b"never-there")
        assert s.get(b"a") == b"aa" and s.get(b"b") is None
        expected = [(b"\x00", b"\x00\x00"), (b"a", b"aa"), (b"ab", b"abab"), (b"\xff", b"\xff\xff")]
        assert list(s.items()) == expected
        s.flush({"orders": 5})
        assert list(s.items()) == expected
        # Unflushed writes over stored ones: a replaced value, a deleted key, a new key in between.
        s.put(b"a", b"new")
        s.delete(b"ab")
        s.put(b"aa", b"between")
        assert list(s.items()) == [(b"\x00", b"\x00\x00"), (b"a", b"new"), (b"aa", b"between"),
                                   (b"\xff", b"\xff\xff")]
        assert list(s.items(b"a", b"b")) == [(b"a", b"new"), (b"aa", b"between")]
        assert list(s.items(start=b"aa")) == [(b"aa", b"between"), (b"\xff", b"\xff\xff")]
        assert list(s.items(stop=b"a")) == [(b"\x00", b"\x00\x00")]
        assert s.get(b"ab") is None


def test_items_pages_through_a_large_store(members: Members) -> None:
    with members.active("a") as s:
        for i in range(2_500):
            s.put(b"k%05d" % i, b"v")
        s.flush({"t": 1})
        s.put(b"k00999x", b"w")
        keys = [k for k, _ in s.items()]
        assert keys == sorted(keys) and len(keys) == 2_501


def test_flush_then_reopen_keeps_state_position_and_source_offsets(members: Members) -> None:
    s = members.active("a")
    s.put(b"k", b"v")
    s.put(b"gone", b"x")
    s.delete(b"gone")
    commit = s.flush({"orders": 10, "clicks": 4})
    s.confirm(commit)
    position = s.changelog_position
    s.close()
    with members.store("a") as again:
        assert again.role is Role.COPY and again.wiped is None
        assert state(again) == {b"k": b"v"}
        assert again.source_offsets == {"clicks": 4, "orders": 10}
        assert again.applied_commit == commit and again.changelog_position == position == commit + 1


def test_unflushed_writes_are_lost_on_close_and_release(members: Members) -> None:
    s = members.active("a")
    s.put(b"k", b"v")
    s.release()
    assert s.role is Role.COPY and s.get(b"k") is None
    s.become_active(None, 2)
    s.put(b"k", b"v")
    s.close()
    with members.store("a") as again:
        assert state(again) == {}


# ------------------------------------------------------------------------------------ restoring


def test_a_fresh_copy_restores_the_actives_state(members: Members) -> None:
    with members.active("a") as s:
        for batch in range(5):
            for i in range(20):
                s.put(b"k%d" % ((batch * 7 + i) % 30), b"%d-%d" % (batch, i))
            s.delete(b"k%d" % batch)
            s.put(b"", b"")  # an empty key and an empty value are values, not nulls
            commit = s.flush({"orders": 100 * (batch + 1)})
            s.confirm(commit)
        assert state(s)[b""] == b""
        assert fresh_restore(members, "b", commit) == (state(s), {"orders": 500})


def test_without_the_coordinators_commit_a_copy_lags_by_one_commit(members: Members) -> None:
    with members.active("a") as s, members.store("b") as copy:
        s.put(b"x", b"1")
        c1 = s.flush({"t": 1})
        s.confirm(c1)
        progress = copy.restore_to_end()
        assert progress.commit_offset is None and progress.pending == 1 and state(copy) == {}
        s.put(b"x", b"2")
        c2 = s.flush({"t": 2})  # carries "confirmed: c1"
        progress = copy.restore_to_end()
        assert (progress.commit_offset, progress.source_offsets, state(copy)) == (c1, {"t": 1}, {b"x": b"1"})
        progress = copy.restore_to_end(committed=c2)  # the warm-up's way to catch up exactly
        assert (progress.commit_offset, progress.pending, state(copy)) == (c2, 0, {b"x": b"2"})
        assert progress.at_end


def test_incremental_restore_resumes_from_its_checkpoint(members: Members) -> None:
    snapshots: dict[int | None, dict[bytes, bytes]] = {None: {}}
    with members.active("a") as s:
        for batch in range(6):
            for i in range(5):
                s.put(b"k%d" % i, b"%d" % batch)
            commit = s.flush({"t": batch + 1})
            s.confirm(commit)
            snapshots[commit] = state(s)
        end = members.end()
    copy = members.store("b")
    positions = []
    while True:
        progress = copy.restore(max_records=4, committed=commit)
        assert state(copy) == snapshots[progress.commit_offset]
        positions.append(progress.position)
        if len(positions) == 3:  # a restart in the middle goes on from the checkpoint, not from 0
            copy.close()
            copy = members.store("b")
            assert copy.changelog_position == positions[-1]
        if progress.at_end:
            break
    assert positions == sorted(positions) and positions[-1] == end
    assert progress.commit_offset == commit and state(copy) == snapshots[commit]
    copy.close()


# ------------------------------------------------------------------------------ crashes, takeovers


def test_crash_after_flush_before_the_coordinator_commit_restarting_member(members: Members) -> None:
    s = members.active("a")
    s.put(b"x", b"committed")
    c1 = s.flush({"t": 10})
    s.confirm(c1)  # the coordinator accepted c1
    s.put(b"x", b"lost")
    s.put(b"y", b"lost")
    s.flush({"t": 20})  # in the changelog and the local file, but the process dies before committing
    s.close()
    with members.store("standby") as standby:
        standby.restore_to_end()  # it saw the lost segment's COMMIT, but must not have applied it
        assert state(standby) == {b"x": b"committed"}
        again = members.store("a")
        assert state(again) == {b"x": b"lost", b"y": b"lost"}  # the local file is ahead of the coordinator
        before = again.changelog_position
        again.become_active(c1, epoch=2)
        assert again.wiped is None and again.changelog_position > before  # rolled back, not rebuilt
        assert state(again) == {b"x": b"committed"} and again.source_offsets == {"t": 10}
        again.put(b"z", b"new")
        c3 = again.flush({"t": 15})
        again.confirm(c3)
        standby.restore_to_end()
        assert state(standby) == {b"x": b"committed"}  # c3 not yet known final here
        assert standby.restore_to_end(committed=c3).source_offsets == {"t": 15}
        assert state(standby) == {b"x": b"committed", b"z": b"new"}
        assert fresh_restore(members, "fresh", c3) == (state(again), {"t": 15})
        again.close()


def test_crash_after_flush_another_member_takes_over_and_the_old_file_rolls_back(members: Members) -> None:
    s = members.active("a")
    s.put(b"x", b"1")
    c1 = s.flush({"t": 1})  # committed, but the active never learned it (no confirm)
    s.put(b"x", b"2")
    s.flush({"t": 2})
    s.close()
    metadata = [format_commit_metadata({TASK: c1})]
    with members.store("b") as b:
        b.become_active(resume_point(metadata, TASK), epoch=2, committed_offsets={"t": 1})
        assert state(b) == {b"x": b"1"}
        b.put(b"y", b"b")
        c3 = b.flush({"t": 3})
        with members.store("a") as old:  # the crashed member comes back as a standby
            progress = old.restore_to_end(committed=c3)
            assert (state(old), progress.commit_offset, old.wiped) == ({b"x": b"1", b"y": b"b"}, c3, None)


def test_crash_mid_batch_before_the_commit_marker(members: Members) -> None:
    s = members.active("a")
    s.put(b"x", b"1")
    c1 = s.flush({"t": 1})
    s.confirm(c1)
    gen = s.generation
    assert gen is not None
    s.close()
    # The dead active's half-written batch: changes, no COMMIT (a Kafka produce is not atomic).
    members.log.produce(TOPIC, TASK.partition, change_records(gen, [(b"x", b"half"), (b"h", b"half")]))
    with members.store("standby") as standby:
        standby.restore_to_end()
        with members.store("b") as b:
            b.become_active(c1, epoch=2)
            assert state(b) == {b"x": b"1"}
            b.put(b"y", b"2")
            c2 = b.flush({"t": 2})
            b.confirm(c2)
            standby.restore_to_end(committed=c2)
            assert state(standby) == state(b) == {b"x": b"1", b"y": b"2"}
            assert fresh_restore(members, "fresh", c2) == (state(b), {"t": 2})


def test_a_takeover_before_any_commit_starts_from_empty_state(members: Members) -> None:
    s = members.active("a")
    s.put(b"x", b"never committed")
    s.flush({"t": 1})
    s.close()
    with members.active("b", None, epoch=2) as b:
        assert state(b) == {}
        assert fresh_restore(members, "fresh", None) == ({}, {})


def test_a_zombie_active_changes_nothing(members: Members) -> None:
    a = members.active("a")
    a.put(b"x", b"a1")
    c1 = a.flush({"t": 1})
    a.confirm(c1)
    with members.active("b", c1, epoch=2) as b:
        # "a" was fenced but does not know yet: it keeps writing to the same changelog partition.
        a.put(b"x", b"zombie")
        a.put(b"z", b"zombie")
        a.flush({"t": 9})
        b.put(b"y", b"b1")
        c2 = b.flush({"t": 2})
        b.confirm(c2)
        a.put(b"x", b"zombie again")
        a.flush({"t": 10})
        b.put(b"y", b"b2")
        c3 = b.flush({"t": 3})
        expected = {b"x": b"a1", b"y": b"b2"}
        assert state(b) == expected
        assert fresh_restore(members, "fresh", c3) == (expected, {"t": 3})
        a.release()  # it learns it lost the task: its own segments are undone as it restores
        a.restore_to_end(committed=c3)
        assert state(a) == expected and a.source_offsets == {"t": 3}
    a.close()


def test_a_late_begin_from_a_lower_epoch_is_ignored(members: Members) -> None:
    with members.active("a", None, epoch=5) as a:
        a.put(b"x", b"1")
        c1 = a.flush({"t": 1})
        a.confirm(c1)
        # A member granted the task at epoch 3 (then fenced) delivers its BEGIN late, and writes on.
        late = members.log.produce(TOPIC, TASK.partition, [begin_record(None, 3)])
        members.log.produce(TOPIC, TASK.partition, change_records(late, [(b"x", b"late")]))
        members.log.produce(TOPIC, TASK.partition, [commit_record(late, {"t": 50}, None)])
        a.put(b"y", b"2")
        c2 = a.flush({"t": 2})
        assert fresh_restore(members, "fresh", c2) == ({b"x": b"1", b"y": b"2"}, {"t": 2})
        with members.store("b") as b:
            with pytest.raises(FencedError, match="newer active"):
                b.become_active(c2, epoch=4)  # it knows epoch 5 began: it writes no BEGIN
            assert members.end() == c2 + 1 and b.role is Role.COPY


def test_a_standby_tails_while_the_active_keeps_writing(members: Members) -> None:
    snapshots: dict[int | None, dict[bytes, bytes]] = {None: {}}
    latest: list[int] = []
    errors: list[BaseException] = []
    batches = 40
    active = members.active("a")

    def write() -> None:
        try:
            for batch in range(batches):
                for i in range(25):
                    key = b"k%d" % ((batch * 13 + i) % 60)
                    if (batch + i) % 7 == 0:
                        active.delete(key)
                    else:
                        active.put(key, b"%d/%d" % (batch, i))
                commit = active.flush({"orders": batch + 1})
                snapshots[commit] = state(active)
                latest.append(commit)  # the coordinator accepted it ...
                active.confirm(commit)  # ... and the active learned so
        except BaseException as e:
            errors.append(e)

    writer = threading.Thread(target=write)
    standby = members.store("b")
    seen: set[int | None] = set()
    writer.start()
    deadline = time.monotonic() + 60
    while True:
        committed = latest[-1] if latest else None
        progress = standby.restore(max_records=37, committed=committed)
        assert state(standby) == snapshots[progress.commit_offset]
        seen.add(progress.commit_offset)
        if not writer.is_alive() and progress.at_end and progress.commit_offset == latest[-1]:
            break
        assert time.monotonic() < deadline, "the standby never caught up"
    writer.join()
    assert not errors
    assert len(seen) > 2  # it really followed the active, not only caught up at the end
    assert state(standby) == state(active) and standby.source_offsets == {"orders": batches}
    active.close()
    standby.close()


# --------------------------------------------------------------------------------- resume points


def test_a_resume_point_beyond_the_end_means_the_changelog_was_lost(members: Members) -> None:
    with members.store("a") as s, pytest.raises(ChangelogError, match="changelog was deleted or recreated"):
        s.become_active(40, 1)
    assert members.end() == 0  # refused before writing a BEGIN


def test_resume_points_that_cannot_be_the_committed_state_are_refused_before_any_begin(
        members: Members) -> None:
    a = members.active("a")
    a.put(b"x", b"1")
    c1 = a.flush({"t": 1})
    a.confirm(c1)
    a.put(b"x", b"2")
    c2 = a.flush({"t": 2})  # never accepted by the coordinator
    a.close()
    b = members.active("b", c1, epoch=2)  # voids c2
    b.put(b"x", b"3")
    c3 = b.flush({"t": 3})
    b.confirm(c3)
    b.close()
    end = members.end()
    with members.store("c") as c:
        with pytest.raises(ChangelogError, match="not a COMMIT marker"):
            c.become_active(c1 - 1, 3)  # a change record
        with pytest.raises(ChangelogError, match="not a committed point"):
            c.become_active(c2, 3)  # a voided COMMIT
        c.restore_to_end(committed=c3)  # c3 is final here
        with pytest.raises(ChangelogError, match="moved back"):
            c.become_active(c1, 3)  # behind c3, which this copy already holds as final
        with pytest.raises(ChangelogError, match="coordinator has"):
            c.become_active(c3, 3, committed_offsets={"t": 4})
        assert members.end() == end and c.role is Role.COPY
        c.become_active(c3, 3, committed_offsets={"t": 3})
        assert state(c) == {b"x": b"3"}


def test_become_active_with_none_starts_over_for_every_copy(members: Members) -> None:
    with members.active("a") as a, members.store("standby") as standby:
        a.put(b"x", b"1")
        c1 = a.flush({"t": 1})
        a.confirm(c1)
        standby.restore_to_end(committed=c1)
        assert state(standby) == {b"x": b"1"}
        a.release()
        a.become_active(None, 2)  # an operator reset the offsets: the state starts empty
        assert state(a) == {} and a.source_offsets == {}
        standby.restore_to_end()
        assert state(standby) == {} and standby.applied_commit is None


# ------------------------------------------------------------------------------ idle and failures


def test_an_idle_active_writes_no_commit_markers(members: Members) -> None:
    with members.active("a") as a:
        a.put(b"x", b"1")
        c1 = a.flush({"t": 1})
        a.confirm(c1)
        c2 = a.flush({"t": 1})  # one COMMIT carrying the confirmation, so copies learn c1 is final
        assert c2 > c1
        a.confirm(c2)
        end = members.end()
        assert a.flush({"t": 1}) == c2 and a.flush({"t": 1}) == c2
        assert members.end() == end


def test_a_failed_flush_demotes_the_store_and_loses_nothing_committed(tmp_path: Path) -> None:
    log = make_log(tmp_path / "log")
    a = TaskStore(tmp_path / "a", log, GROUP, TASK, partitions=3)
    a.become_active(None, 1)
    a.put(b"x", b"1")
    c1 = a.flush({"t": 1})
    a.confirm(c1)
    a.put(b"x", b"unflushed")
    log.close()  # the log goes away under the active
    with pytest.raises(StateStoreError, match="no longer the active") as e:
        a.flush({"t": 2})
    assert isinstance(e.value.__cause__, LogError)
    assert a.role is Role.COPY and a.get(b"x") == b"1"
    with pytest.raises(NotActiveError):
        a.put(b"x", b"2")
    a.close()
    log = make_log(tmp_path / "log")
    with TaskStore(tmp_path / "a", log, GROUP, TASK, partitions=3) as again:
        again.become_active(c1, 2)
        assert state(again) == {b"x": b"1"}
    log.close()


# --------------------------------------------------------------------------------- bad input


def test_bad_input_gets_clear_errors(members: Members) -> None:
    with members.active("a") as a:
        with pytest.raises(TypeError, match="key must be bytes, not str"):
            a.put("k", b"v")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"value must be bytes, not bytearray \(convert"):
            a.put(b"k", bytearray(b"v"))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="value must be bytes, not NoneType"):
            a.put(b"k", None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be bytes"):
            a.get(1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be bytes"):
            a.delete(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="range start"):
            a.items("a")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="source offset of 't' must be an int >= 0"):
            a.flush({"t": -1})
        with pytest.raises(ValueError, match="mapping of topic to offset"):
            a.flush([("t", 1)])  # type: ignore[arg-type]
        a.flush({"t": 5})
        with pytest.raises(ValueError, match="t goes from 5 back to 4"):
            a.flush({"t": 4})
        with pytest.raises(ValueError, match="not a COMMIT"):
            a.confirm(10_000)
        with pytest.raises(NotActiveError, match="already active"):
            a.become_active(None, 2)
        with pytest.raises(NotActiveError, match="does not restore"):
            a.restore_to_end()
        assert a.role is Role.ACTIVE  # none of this cost it the task
    with members.store("b") as b:
        with pytest.raises(NotActiveError, match="flush on task count_1, which is a copy"):
            b.flush({"t": 1})
        with pytest.raises(NotActiveError, match="put on task"):
            b.put(b"k", b"v")
        with pytest.raises(ValueError, match="max_records"):
            b.restore(0)
        with pytest.raises(ValueError, match="epoch must be an int >= 0"):
            b.become_active(None, -1)
        with pytest.raises(ValueError, match="resume_from"):
            b.become_active(True, 1)  # a bool is not an offset
    with pytest.raises(ValueError, match="has 3 tasks"):
        members.store("c", TaskId("count", 3))
    with pytest.raises(ValueError, match="TaskId"):
        members.store("c", ("count",))  # type: ignore[arg-type]


def test_a_closed_store_says_so(members: Members) -> None:
    s = members.store("a")
    s.close()
    s.close()  # idempotent
    for call in (lambda: s.get(b"k"), lambda: s.restore_to_end(), lambda: s.become_active(None, 1),
                 lambda: s.source_offsets, lambda: s.items(), lambda: s.put(b"k", b"v")):
        with pytest.raises(StoreClosedError, match="count_1 is closed"):
            call()


# ------------------------------------------------------------------------------- the local file


def test_one_store_per_task_file(members: Members) -> None:
    a = members.store("a")
    with pytest.raises(StoreLockedError, match="open elsewhere"):
        members.store("a")
    a.close()
    members.store("a").close()


def test_each_task_has_its_own_partition_and_file(members: Members) -> None:
    other = TaskId("count", 2)
    with members.active("m") as t1, members.store("m", other) as t2:
        t2.become_active(None, 1)
        t1.put(b"k", b"one")
        t2.put(b"k", b"two")
        t1.flush({"a": 1})
        t2.flush({"a": 2})
        assert t1.path != t2.path and state(t1) != state(t2)
    assert members.log.topic_partitions()[TOPIC] == 3
    assert all(n > 0 for p, n in members.log.end_offsets(TOPIC).items() if p in (1, 2))


def test_a_corrupt_file_is_wiped_and_rebuilt(members: Members) -> None:
    a = members.active("a")
    a.put(b"x", b"1")
    c1 = a.flush({"t": 1})
    a.confirm(c1)
    path = a.path
    a.close()
    path.write_bytes(b"this is not a SQLite database" * 100)
    with members.store("a") as again:
        assert again.wiped is not None and "could not be used" in again.wiped
        assert again.changelog_position == 0
        again.restore_to_end(committed=c1)
        assert state(again) == {b"x": b"1"}


def test_a_file_of_another_schema_version_is_wiped(members: Members) -> None:
    members.store("a").close()
    path = members.root / "a" / f"{TOPIC}.{TASK.partition}.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with members.store("a", check_integrity=True) as again:
        assert again.wiped is not None and "schema version 99" in again.wiped


def test_a_renamed_file_is_refused(members: Members) -> None:
    members.store("a").close()
    src = members.root / "a" / f"{TOPIC}.1.sqlite3"
    src.rename(members.root / "a" / f"{TOPIC}.2.sqlite3")
    with pytest.raises(StateStoreError, match="copied or renamed"):
        members.store("a", TaskId("count", 2))


def test_a_recreated_changelog_wipes_the_local_copy(tmp_path: Path, members: Members) -> None:
    a = members.active("a")
    for i in range(10):
        a.put(b"k%d" % i, b"v")
    c1 = a.flush({"t": 1})
    a.confirm(c1)
    a.close()
    # The changelog recreated (another log directory), with a longer, different history.
    recreated = make_log(tmp_path / "log2")
    with TaskStore(tmp_path / "b", recreated, GROUP, TASK, partitions=3) as b:
        b.become_active(None, 1)
        for i in range(30):
            b.put(b"other%d" % i, b"w")
        c = b.flush({"t": 7})
        b.confirm(c)
    # "a"'s position is within the new end, but the record at its last applied COMMIT is another one.
    with TaskStore(tmp_path / "a", recreated, GROUP, TASK, partitions=3) as s:
        assert s.wiped is not None and "not the COMMIT" in s.wiped and state(s) == {}
        s.restore_to_end(committed=c)
        assert state(s) == {b"other%d" % i: b"w" for i in range(30)}
    # "b"'s checkpoint is beyond the end of the original (shorter) changelog.
    with TaskStore(tmp_path / "b", members.log, GROUP, TASK, partitions=3) as s:
        assert s.wiped is not None and "beyond the end" in s.wiped and state(s) == {}
        s.restore_to_end(committed=c1)
        assert state(s) == {b"k%d" % i: b"v" for i in range(10)}
    recreated.close()


def test_a_key_range_task_keeps_its_own_changelog_partition_and_file(tmp_path: Path,
                                                                     log: PartitionedLog) -> None:
    """Task (s, i, r, K) writes changelog partition i*K + r, in a file of that number; a whole-partition
    task's partition and file stay its partition number."""
    ranged = TaskId("count", 1, 1, 2)
    with TaskStore(tmp_path / "a", log, GROUP, ranged, partitions=4) as s:
        s.become_active(None, 1)
        s.put(b"k", b"1")
        commit = s.flush({"orders": 5})
        assert s.path.name == f"{TOPIC}.3.sqlite3"
    assert log.end_offsets(TOPIC)[3] == commit + 1 and log.end_offsets(TOPIC).get(1, 0) == 0
    with TaskStore(tmp_path / "b", log, GROUP, ranged, partitions=4) as copy:
        copy.restore(committed=commit)
        assert copy.get(b"k") == b"1" and copy.source_offsets == {"orders": 5}
    with TaskStore(tmp_path / "c", log, GROUP, TASK, partitions=4) as whole:
        assert whole.path.name == f"{TOPIC}.1.sqlite3" and whole.get(b"k") is None
    with pytest.raises(ValueError, match="writes changelog partition 3, but its subtopology has 2 tasks"):
        TaskStore(tmp_path / "d", log, GROUP, ranged, partitions=2)
