"""A local store file is tied to its task, not only to its changelog partition: after a change of a
subtopology's parallelism K, the file a K = 1 task left at changelog partition 5 is not taken as the
state of the K = 4 task that now writes partition 5 (`count_1.1of4`); it is rebuilt from the
changelog, with a warning naming both. Real SQLite files, a real embedded log, a real `StreamsApp`."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.base import PartitionedLog
from regroup.protocol.streams.topology import TaskId
from regroup.streams.app import StreamsApp
from regroup.streams.store import TaskStore

GROUP = "shop"
TOPIC = "shop-count-changelog"
WHOLE = TaskId("count", 5)  # K = 1: changelog partition 5
RANGED = TaskId("count", 1, 1, 4)  # K = 4: changelog partition 1 * 4 + 1 = 5 as well


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionedLog]:
    lg = open_log(f"embedded://{tmp_path / 'log'}?fsync=never")
    yield lg
    lg.close()


def write_whole_task(state: Path, log: PartitionedLog) -> int:
    """Task count_5 (K = 1) keeps {x: 1} in ``state``; the COMMIT's offset."""
    with TaskStore(state, log, GROUP, WHOLE, partitions=8) as s:
        s.become_active(None, 1)
        s.put(b"x", b"1")
        commit = s.flush({"orders": 10})
        s.confirm(commit)
        assert s.path.name == f"{TOPIC}.5.sqlite3"
    return commit


def forget_task_name(path: Path) -> None:
    """Make the file look like one written before the task was recorded in it."""
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta")
    conn.commit()
    conn.close()


def test_the_file_of_another_cut_is_rebuilt_not_used(tmp_path: Path, log: PartitionedLog) -> None:
    write_whole_task(tmp_path / "a", log)
    with TaskStore(tmp_path / "a", log, GROUP, RANGED, partitions=16) as s:
        assert s.path.name == f"{TOPIC}.5.sqlite3"
        assert s.wiped is not None and "count_5" in s.wiped and "count_1.1of4" in s.wiped
        # Nothing of count_5's file is used: empty, from the changelog's start, as a missing file.
        assert dict(s.items()) == {} and s.source_offsets == {} and s.changelog_position == 0
    # From now on the file is count_1.1of4's: reopened as it, it is used as it is.
    with TaskStore(tmp_path / "a", log, GROUP, RANGED, partitions=16) as s:
        assert s.wiped is None
    with TaskStore(tmp_path / "a", log, GROUP, WHOLE, partitions=16) as s:
        assert s.wiped is not None and "count_1.1of4" in s.wiped


def test_its_own_file_is_kept(tmp_path: Path, log: PartitionedLog) -> None:
    write_whole_task(tmp_path / "a", log)
    with TaskStore(tmp_path / "a", log, GROUP, WHOLE, partitions=8) as s:
        assert s.wiped is None and s.get(b"x") == b"1" and s.source_offsets == {"orders": 10}


def test_a_file_without_a_task_name_is_the_whole_partitions_task(tmp_path: Path,
                                                                 log: PartitionedLog) -> None:
    """Files from before key ranges carry no task name: they are the K = 1 task of their partition."""
    write_whole_task(tmp_path / "a", log)
    path = tmp_path / "a" / f"{TOPIC}.5.sqlite3"
    forget_task_name(path)
    with TaskStore(tmp_path / "a", log, GROUP, WHOLE, partitions=8) as s:
        assert s.wiped is None and s.get(b"x") == b"1"
    conn = sqlite3.connect(path)  # and it is named from now on
    assert conn.execute("SELECT value FROM meta WHERE name = 'task'").fetchall() == [("count_5",)]
    conn.close()

    forget_task_name(path)
    with TaskStore(tmp_path / "a", log, GROUP, RANGED, partitions=16) as s:
        assert s.wiped is not None and "count_5" in s.wiped and "count_1.1of4" in s.wiped
        assert dict(s.items()) == {}


def test_a_member_started_with_another_k_rebuilds_the_old_files_and_warns(
        tmp_path: Path, log: PartitionedLog, caplog: pytest.LogCaptureFixture) -> None:
    """The member's scan of its state directory names the file's task with the current K: the K = 1
    file at partition 5 is opened as count_1.1of4, found to be count_5's, and rebuilt."""
    log.create_topic("orders", 2)
    write_whole_task(tmp_path / "state", log)
    caplog.set_level(logging.WARNING, logger="regroup.streams")
    # No coordinator is needed to build the member: it reports the copies it found on disk.
    app = StreamsApp(coordinator="127.0.0.1:1", log=log, group=GROUP, topology={"count": ["orders"]},
                     parallelism={"count": 4}, process=lambda record, ctx: None,
                     state_dir=tmp_path / "state")
    try:
        warned = [r.getMessage() for r in caplog.records if "count_1.1of4" in r.getMessage()]
        assert len(warned) == 1 and "rebuilt" in warned[0] and "count_5" in warned[0], caplog.text
        # The copy reported for count_1.1of4 is the rebuilt one: no source offsets of count_5's.
        assert app._dormant == {RANGED: {}}
    finally:
        app.close()
