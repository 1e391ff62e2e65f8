"""The state root's file layer (`regroup.spark.tasks.statepath`, `.hadoop`) and the checkpoint work
on top of it (`regroup.spark.tasks.checkpoint`), written once and run on every kind of root:

* ``local``: a local directory (Python's file calls; no JVM);
* ``hadoop-file``: a ``file://`` URI through Hadoop's FileSystem API in Spark's JVM (Hadoop's
  checksummed local filesystem: each file gets a hidden ``.crc`` that listings leave out);
* ``hdfs``: a real HDFS (a MiniDFSCluster, tests/spark/hdfs_fixture.py) through the same API.

Checkpoints here are synthetic, laid out like a task query's (RocksDB with changelog
checkpointing) and written through the layer itself; `test_task_checkpoint_files.py` covers the
copy rules in more detail on local directories, and `test_tasks_hdfs.py` runs real queries on HDFS.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from regroup.protocol.shard import Shard
from regroup.spark.tasks.checkpoint import (
    CheckpointError,
    batch_ends,
    copy_batch,
    last_committed_batch,
    lineage_begin,
)
from regroup.spark.tasks.hadoop import HadoopPath, open_hadoop_root
from regroup.spark.tasks.incarnation import process_id as _process_id
from regroup.spark.tasks.statepath import (
    LocalPath,
    StatePath,
    StateRootError,
    local_run_directory,
    open_state_root,
    state_path,
)
from tests.spark.hdfs_fixture import Hdfs, hdfs  # noqa: F401 - fixture

ORDERS0, CLICKS0 = Shard("orders", 0), Shard("clicks", 0)
SOURCE_ID = "8b0e6a52-3c1f-4f57-9a8e-0d6d3c3b8e11"
TMP = "9c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f.tmp"
SST = "000008-4f6a7c1e-2d3b-4a5c-9e8f-0a1b2c3d4e5f.sst"
JVM = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


@pytest.fixture(params=["local", pytest.param("hadoop-file", marks=JVM), pytest.param("hdfs", marks=JVM)])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> StatePath:
    """A fresh, empty directory on one kind of state root."""
    if request.param == "local":
        return open_state_root(None, tmp_path / "root")
    spark = request.getfixturevalue("spark")
    if request.param == "hadoop-file":
        made = open_hadoop_root(spark, f"file://{tmp_path}/root")  # open_state_root: local
    else:
        cluster: Hdfs = request.getfixturevalue("hdfs")
        made = open_state_root(spark, f"{cluster.uri}/regroup-tests/{uuid.uuid4().hex}")
        request.addfinalizer(made.remove)
    assert isinstance(made, HadoopPath)
    return made


def ends_of(batch: int) -> dict[Shard, int]:
    return {ORDERS0: 10 * (batch + 1), CLICKS0: batch}


def offset_entry(ends: dict[Shard, int], begin: dict[Shard, int] | None = None) -> str:
    """An offset-log entry as Spark writes it for the task source (a Python data source: the
    offset is a JSON string holding the JSON object)."""
    def keyed(offsets: dict[Shard, int]) -> dict[str, int]:
        return {f"{s.topic}:{s.partition}": o for s, o in sorted(offsets.items())}

    offset: dict[str, Any] = {"v": 1, "ends": keyed(ends)}
    if begin is not None:
        offset["begin"] = keyed(begin)
    return 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1700000000000}\n' + json.dumps(json.dumps(offset))


def make_checkpoint(root: StatePath, *, offsets: int, commits: int | None, versions: int) -> StatePath:
    """Offsets 0..``offsets``, commits 0..``commits``, state versions 1..``versions`` of two store
    partitions (a snapshot every 10 and its shared SST), and the temporaries of a batch in flight."""
    (root / "metadata").write_text(json.dumps({"id": SOURCE_ID, "extra": [1, 2]}))
    for b in range(offsets + 1):
        (root / "offsets" / str(b)).write_text(offset_entry(ends_of(b), begin={ORDERS0: 0, CLICKS0: 0}))
    (root / "commits").mkdir()
    for b in range((commits + 1) if commits is not None else 0):
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "sources" / "0" / "0").write_text("v1\n")
    (root / "state" / "0" / "_metadata" / "metadata").write_text('{"operatorInfo":{"operatorId":0}}')
    for partition in (0, 1):
        store = root / "state" / "0" / str(partition)
        (store / "_metadata" / "schema").write_text("schema")
        for v in range(1, versions + 1):
            (store / f"{v}.changelog").write_text(f"changelog {v} of {partition}")
            if v % 10 == 0:
                (store / f"{v}.zip").write_text(f"snapshot {v}")
        if versions >= 10:
            (store / "SSTs" / SST).write_text("sst")
    (root / "offsets" / f".{offsets + 1}.{TMP}").write_text("v1")  # being written by Spark
    (root / "state" / "0" / "0" / f".{versions + 1}.changelog.{TMP}").write_text("partial")
    return root


def names(directory: StatePath) -> set[str]:
    return {rel for rel, _ in directory.files()}


def expected_copy(*, batch: int, committed_up_to: int | None, versions: int) -> set[str]:
    out = {"metadata", "sources/0/0", "state/0/_metadata/metadata"}
    out |= {f"offsets/{b}" for b in range(batch + 1)}
    newest = (min(batch, committed_up_to) + 1) if committed_up_to is not None else 0
    out |= {f"commits/{b}" for b in range(newest)}
    for partition in (0, 1):
        store = f"state/0/{partition}"
        out.add(f"{store}/_metadata/schema")
        out |= {f"{store}/{v}.changelog" for v in range(1, min(newest, versions) + 1)}
        out |= {f"{store}/{v}.zip" for v in range(10, min(newest, versions) + 1, 10)}
        if versions >= 10:
            out.add(f"{store}/SSTs/{SST}")
    return out


# ---------------------------------------------------------------- the paths themselves


def test_a_path_writes_reads_lists_renames_and_removes(root: StatePath) -> None:
    f = root / "a" / "b" / "c.txt"
    f.write_text("hello ✓")  # parents made
    assert f.exists() and not f.is_dir() and f.name == "c.txt"
    assert (root / "a").is_dir() and (root / "a" / "b").exists()
    assert f.read_text() == "hello ✓"
    f.write_text("again")  # replaced
    assert f.read_text() == "again"
    (root / "a" / "d.txt").write_text("d")
    assert sorted(p.name for p in (root / "a").iterdir()) == ["b", "d.txt"]
    assert [rel for rel, _ in (root / "a").files()] == ["b/c.txt", "d.txt"]
    f.copy_to(root / "x" / "y" / "copy.txt")
    assert (root / "x" / "y" / "copy.txt").read_text() == "again"
    (root / "a").rename_to(root / "moved")
    assert not (root / "a").exists() and (root / "moved" / "b" / "c.txt").read_text() == "again"
    (root / "moved").remove()
    (root / "moved").remove()  # nothing left: no error
    assert not (root / "moved").exists()
    assert (root / "x").with_name("z").name == "z"


def test_a_missing_path_reads_as_missing(root: StatePath) -> None:
    missing = root / "nothing" / "here"
    assert not missing.exists() and not missing.is_dir()
    assert missing.files() == []
    with pytest.raises(FileNotFoundError):
        missing.iterdir()
    with pytest.raises(FileNotFoundError):
        missing.read_text()
    with pytest.raises(FileNotFoundError):
        missing.copy_to(root / "copy")


def test_the_uri_is_what_spark_is_given(root: StatePath, tmp_path: Path) -> None:
    uri = (root / "tasks" / "s_0").uri
    if isinstance(root, LocalPath):
        assert uri == f"file://{tmp_path}/root/tasks/s_0"
    elif uri.startswith("file:"):
        assert uri == f"file:{tmp_path}/root/tasks/s_0"  # Hadoop's qualified form
    else:
        assert uri.startswith("hdfs://127.0.0.1:") and uri.endswith("/tasks/s_0")
    assert str(root / "x") == (str(root).rstrip("/") + "/x")


# ---------------------------------------------------------------- reading a checkpoint


def test_the_last_committed_batch_is_the_highest_numbered_commit(root: StatePath) -> None:
    assert last_committed_batch(root / "missing") is None
    (root / "c" / "commits" / f".0.{TMP}").write_text("v1")  # a commit still being written
    assert last_committed_batch(root / "c") is None
    checkpoint = make_checkpoint(root / "d", offsets=12, commits=11, versions=12)
    assert last_committed_batch(checkpoint) == 11  # numerically (11 > 9), not by name


def test_batch_ends_and_the_lineage_begin_are_read_from_the_offset_log(root: StatePath) -> None:
    checkpoint = make_checkpoint(root / "c", offsets=3, commits=2, versions=3)
    for b in range(4):
        assert batch_ends(checkpoint, b) == ends_of(b)
        assert lineage_begin(checkpoint, b) == {ORDERS0: 0, CLICKS0: 0}
    assert batch_ends(checkpoint, 4) is None and batch_ends(root / "missing", 0) is None


def test_an_unreadable_offset_is_refused_naming_the_file(root: StatePath) -> None:
    entry = root / "c" / "offsets" / "5"
    entry.write_text('v1\n{}\n{"startingVersion":3,"reservoirId":"x"}')
    with pytest.raises(CheckpointError, match="offset is unreadable") as info:
        batch_ends(root / "c", 5)
    assert str(entry) in str(info.value)


# ---------------------------------------------------------------- copying a batch


def test_copying_a_batch_keeps_its_logs_and_the_state_versions_it_left(root: StatePath) -> None:
    source = make_checkpoint(root / "src", offsets=12, commits=10, versions=13)
    target = root / "tasks" / "s_0" / "me.1"
    copy_batch(source, target, 11)  # logged, not committed: state up to version 11 (batch 10's)
    assert names(target) == expected_copy(batch=11, committed_up_to=10, versions=13)
    assert {"state/0/0/10.zip", f"state/0/1/SSTs/{SST}", "state/0/0/11.changelog"} <= names(target)
    assert not {"state/0/0/12.changelog", "offsets/12", "commits/11"} & names(target)
    assert last_committed_batch(target) == 10
    assert batch_ends(target, 11) == ends_of(11) and batch_ends(target, 12) is None
    assert (target / "state" / "0" / "1" / "3.changelog").read_text() == "changelog 3 of 1"
    assert not (root / "tasks" / "s_0" / "me.1.copying").exists()


def test_a_copy_of_batch_0_before_any_commit_has_empty_logs_and_no_state_version(root: StatePath) -> None:
    source = make_checkpoint(root / "src", offsets=0, commits=None, versions=1)
    target = root / "copy"
    copy_batch(source, target, 0)
    assert names(target) == expected_copy(batch=0, committed_up_to=None, versions=1)
    assert (target / "commits").is_dir() and (target / "commits").iterdir() == []
    assert last_committed_batch(target) is None


def test_a_copy_gets_a_new_query_id_and_leaves_its_source_untouched(root: StatePath) -> None:
    source = make_checkpoint(root / "src", offsets=3, commits=3, versions=4)
    before = {rel: p.read_text() for rel, p in source.files()}
    copy_batch(source, root / "a", 3)
    copy_batch(source, root / "b", 3)
    meta_a, meta_b = (json.loads((root / d / "metadata").read_text()) for d in ("a", "b"))
    assert SOURCE_ID != meta_a["id"] != meta_b["id"] != SOURCE_ID
    assert meta_a["extra"] == [1, 2]
    assert {rel: p.read_text() for rel, p in source.files()} == before
    for rel, p in (root / "a").files():
        if rel != "metadata":
            assert p.read_text() == (source / rel).read_text(), rel


def test_a_copy_refuses_an_existing_target_and_a_missing_batch_leaving_nothing(root: StatePath) -> None:
    source = make_checkpoint(root / "src", offsets=2, commits=2, versions=3)
    (root / "taken" / "keep").write_text("mine")
    with pytest.raises(CheckpointError, match="it exists") as info:
        copy_batch(source, root / "taken", 2)
    assert str(root / "taken") in str(info.value) and names(root / "taken") == {"keep"}
    with pytest.raises(CheckpointError, match="has no batch 7 in its offset log") as info:
        copy_batch(source, root / "copy", 7)
    assert str(source) in str(info.value)
    assert not (root / "copy").exists() and not (root / "copy.copying").exists()


def test_a_copy_replaces_the_leftovers_of_an_interrupted_copy(root: StatePath) -> None:
    source = make_checkpoint(root / "src", offsets=2, commits=2, versions=3)
    (root / "copy.copying" / "offsets" / "9").write_text("from a copy that crashed")
    copy_batch(source, root / "copy", 2)
    assert names(root / "copy") == expected_copy(batch=2, committed_up_to=2, versions=3)
    assert not (root / "copy.copying").exists()


def test_a_copy_starts_again_when_spark_removes_a_file_under_it(root: StatePath,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's maintenance removes an old changelog between the copy's listing and its copy of that
    file: on every filesystem that is a missing file, and the copy starts again without it."""
    source = make_checkpoint(root / "src", offsets=4, commits=4, versions=5)
    vanishing = source / "state" / "0" / "1" / "1.changelog"
    cls = type(root)
    real_copy_to = cls.copy_to  # type: ignore[attr-defined]
    copied: list[str] = []

    def copy_to(self: Any, target: Any) -> None:
        copied.append(str(self))
        if str(self) == str(vanishing) and vanishing.exists():
            vanishing.remove()
        real_copy_to(self, target)

    monkeypatch.setattr(cls, "copy_to", copy_to)
    copy_batch(source, root / "copy", 4)
    assert copied.count(str(vanishing)) == 1  # the second attempt no longer lists it
    assert names(root / "copy") == \
        expected_copy(batch=4, committed_up_to=4, versions=5) - {"state/0/1/1.changelog"}


# ---------------------------------------------------------------- the pipeline's files


def test_a_static_member_keeps_its_process_id_in_the_root(root: StatePath) -> None:
    first = _process_id(root, "billing-1")
    assert _process_id(root, "billing-1") == first
    assert _process_id(root, "billing-2") != first
    assert _process_id(root, None) != _process_id(root, None)  # dynamic: new every time
    [name] = [n for n in names(root / "members") if (root / "members" / n).read_text().strip() == first]
    (root / "members" / name).write_text("")  # emptied by a crash while it was written
    again = _process_id(root, "billing-1")
    assert again != first and _process_id(root, "billing-1") == again


def test_control_files_stay_local(root: StatePath, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The member and its queries' readers share control files on the driver's machine: under a
    local root in its ``run/``, else in Spark's local scratch directory, never in the root."""
    group = root / "billing"
    if isinstance(root, LocalPath):
        assert local_run_directory(None, group) == tmp_path / "root" / "billing" / "run"
        return
    run = local_run_directory(request.getfixturevalue("spark"), group)
    assert run.is_absolute() and run.parts[-2:] == ("regroup-run", "billing")
    assert str(tmp_path) not in str(run)  # not under the root, even for a file:// root


# ---------------------------------------------------------------- opening a root


def test_a_plain_path_and_a_file_uri_are_the_same_local_directory(tmp_path: Path) -> None:
    plain = open_state_root(None, tmp_path / "s")
    uri = open_state_root(None, f"file://{tmp_path}/s")
    short = open_state_root(None, f"file:{tmp_path}/s")
    assert plain == uri == short == LocalPath(tmp_path / "s") and (tmp_path / "s").is_dir()
    assert state_path(str(tmp_path)) == LocalPath(tmp_path)


def test_a_local_root_that_cannot_be_made_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StateRootError, match="cannot make the directory") as info:
        open_state_root(None, tmp_path / "file" / "state")
    assert str(tmp_path / "file" / "state") in str(info.value)
    with pytest.raises(StateRootError, match="not a host"):
        open_state_root(None, "file://elsewhere/state")


def test_a_remote_root_needs_a_jvm() -> None:
    with pytest.raises(StateRootError, match=r"hdfs://nn:8020/state: .*driver's JVM"):
        open_state_root(object(), "hdfs://nn:8020/state")


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize(("uri", "says"), [
    ("nosuchfs://bucket/state", r"No FileSystem for scheme \"nosuchfs\".*spark\.jars\.packages"),
    ("s3a://bucket/state", r"(ClassNotFoundException|No FileSystem for scheme).*hadoop-aws"),
])
def test_a_uri_no_filesystem_serves_fails_naming_it(spark: Any, uri: str, says: str) -> None:
    with pytest.raises(StateRootError, match=says) as info:
        open_state_root(spark, uri)
    assert str(info.value).startswith(f"state root {uri}: ")


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_an_unreachable_hdfs_fails_naming_it(spark: Any) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"hdfs://127.0.0.1:{port}/state"
    started = time.monotonic()
    with pytest.raises(StateRootError, match="cannot make or reach the directory") as info:
        open_state_root(spark, uri)
    assert str(info.value).startswith(f"state root {uri}: ") and "Connection refused" in str(info.value)
    assert time.monotonic() - started < 120
