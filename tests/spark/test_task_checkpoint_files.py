"""File work on Spark checkpoints (`regroup.spark.tasks.checkpoint`), on synthetic checkpoint
directories laid out like the ones a task query writes (RocksDB state store with changelog
checkpointing): no Spark needed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from regroup.protocol.shard import Shard
from regroup.protocol.streams.checkpoints import state_file_version
from regroup.spark.tasks import checkpoint as checkpoint_module
from regroup.spark.tasks.checkpoint import CheckpointError, batch_ends, copy_batch, last_committed_batch

ORDERS0, ORDERS1, CLICKS0 = Shard("orders", 0), Shard("orders", 1), Shard("clicks", 0)
SOURCE_ID = "8b0e6a52-3c1f-4f57-9a8e-0d6d3c3b8e11"
BATCH_METADATA = ('{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,'
                  '"conf":{"spark.sql.shuffle.partitions":"2"}}')
SST = "000008-4f6a7c1e-2d3b-4a5c-9e8f-0a1b2c3d4e5f.sst"
TMP = "9c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f.tmp"


def ends_of(batch: int) -> dict[Shard, int]:
    return {ORDERS0: 10 * (batch + 1), ORDERS1: 7 * (batch + 1), CLICKS0: batch}


def offset_line(ends: dict[Shard, int], *, as_string: bool = False) -> str:
    """The task source's offset as Spark logs it: a JSON object, or (Python data sources) a JSON
    string holding that object."""
    obj = json.dumps({"v": 1, "ends": {f"{s.topic}:{s.partition}": o for s, o in sorted(ends.items())}})
    return json.dumps(obj) if as_string else obj


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_checkpoint(root: Path, *, offsets: int, commits: int | None, versions: int,
                    as_string: bool = False, temporaries: bool = True) -> Path:
    """A checkpoint whose offset log holds batches 0..``offsets``, its commit log 0..``commits``
    (None: empty), and each of two state partitions versions 1..``versions`` (changelogs, and a
    snapshot every 10 versions), each file with its ``.crc`` like Hadoop's local filesystem writes."""
    def with_crc(path: Path, text: str) -> None:
        write(path, text)
        write(path.with_name(f".{path.name}.crc"), f"crc of {path.name}")

    with_crc(root / "metadata", json.dumps({"id": SOURCE_ID}))
    for b in range(offsets + 1):
        offset = offset_line(ends_of(b), as_string=as_string)
        with_crc(root / "offsets" / str(b), f"v1\n{BATCH_METADATA}\n{offset}")
    if commits is None:
        (root / "commits").mkdir()
    else:
        for b in range(commits + 1):
            with_crc(root / "commits" / str(b), 'v1\n{"nextBatchWatermarkMs":0}')
    write(root / "sources" / "0" / "0", "v1\n")
    with_crc(root / "state" / "0" / "_metadata" / "metadata", '{"operatorInfo":{"operatorId":0}}')
    for partition in (0, 1):
        store = root / "state" / "0" / str(partition)
        with_crc(store / "_metadata" / "schema", "schema")
        for v in range(1, versions + 1):
            with_crc(store / f"{v}.changelog", f"changelog {v}")
            if v % 10 == 0:
                with_crc(store / f"{v}.zip", f"snapshot {v}")
        if versions >= 10:
            with_crc(store / "SSTs" / SST, "sst")
    if temporaries:  # files Spark was writing when the copy looked: never complete
        write(root / f".metadata.{TMP}", "{")
        write(root / "offsets" / f".{offsets + 1}.{TMP}", "v1")
        write(root / "offsets" / f"..{offsets + 1}.{TMP}.crc", "crc")
        write(root / "commits" / f".{(commits or 0) + 1}.{TMP}", "v1")
        write(root / "state" / "0" / "0" / f".{versions + 1}.changelog.{TMP}", "partial")
        write(root / "state" / "0" / "0" / f"..{versions + 1}.changelog.{TMP}.crc", "crc")
        write(root / "state" / "0" / "1" / f"{versions + 1}.changelog.tmp", "partial")
        write(root / "state" / "0" / "1" / f"{versions + 1}.changelog.tmp.crc", "crc")
    return root


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def expected_copy(*, batch: int, committed_up_to: int | None, versions: int) -> set[str]:
    """The files a copy of ``batch`` must hold, whatever else the source holds."""
    def with_crc(rel: str) -> set[str]:
        head, _, name = rel.rpartition("/")
        return {rel, f"{head}/.{name}.crc" if head else f".{name}.crc"}

    out = {"metadata", "sources/0/0"} | with_crc("state/0/_metadata/metadata")
    for b in range(batch + 1):
        out |= with_crc(f"offsets/{b}")
    for b in range(min(batch, committed_up_to) + 1 if committed_up_to is not None else 0):
        out |= with_crc(f"commits/{b}")
    newest = (min(batch, committed_up_to) + 1) if committed_up_to is not None else 0
    for partition in (0, 1):
        store = f"state/0/{partition}"
        out |= with_crc(f"{store}/_metadata/schema")
        for v in range(1, min(newest, versions) + 1):
            out |= with_crc(f"{store}/{v}.changelog")
            if v % 10 == 0:
                out |= with_crc(f"{store}/{v}.zip")
        if versions >= 10:
            out |= with_crc(f"{store}/SSTs/{SST}")
    return out


def assert_copied(target: Path, expected: set[str]) -> set[str]:
    got = files(target)
    assert got == expected
    return got


# ---------------------------------------------------------------- last_committed_batch


def test_last_committed_batch_of_a_checkpoint_without_commits_is_none(tmp_path: Path) -> None:
    assert last_committed_batch(tmp_path / "missing") is None
    assert last_committed_batch(tmp_path) is None  # no commits/ directory
    (tmp_path / "commits").mkdir()
    write(tmp_path / "commits" / f".0.{TMP}", "v1")  # a commit still being written
    assert last_committed_batch(tmp_path) is None


def test_last_committed_batch_is_the_highest_numbered_commit(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "c", offsets=12, commits=11, versions=12)
    assert last_committed_batch(root) == 11  # numerically (11 > 9), not by name; .crc and temps ignored


def test_last_committed_batch_is_not_the_last_logged_offset(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "c", offsets=4, commits=2, versions=4)
    assert last_committed_batch(root) == 2


# ---------------------------------------------------------------- batch_ends


@pytest.mark.parametrize("as_string", [False, True], ids=["json-object", "json-string"])
def test_batch_ends_reads_the_task_source_offset_in_either_encoding(tmp_path: Path, as_string: bool) -> None:
    root = make_checkpoint(tmp_path / "c", offsets=3, commits=2, versions=3, as_string=as_string)
    for b in range(4):
        assert batch_ends(root, b) == ends_of(b)


def test_batch_ends_of_a_batch_not_logged_is_none(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "c", offsets=3, commits=2, versions=3)
    assert batch_ends(root, 4) is None
    assert batch_ends(tmp_path / "missing", 0) is None


def test_batch_ends_reads_only_the_first_source_and_ignores_a_trailing_newline(tmp_path: Path) -> None:
    write(tmp_path / "offsets" / "0", f"v1\n{BATCH_METADATA}\n{offset_line({ORDERS0: 5})}\n{{\"other\":1}}\n")
    assert batch_ends(tmp_path, 0) == {ORDERS0: 5}


def test_batch_ends_of_a_batch_that_read_nothing_yet(tmp_path: Path) -> None:
    write(tmp_path / "offsets" / "0", f"v1\n{BATCH_METADATA}\n" + '{"v":1,"ends":{}}')
    assert batch_ends(tmp_path, 0) == {}


def test_batch_ends_reads_topics_with_dots_dashes_and_underscores(tmp_path: Path) -> None:
    ends = {Shard("a.b-c_d", 12): 3, Shard("x", 0): 0}
    write(tmp_path / "offsets" / "7", f"v1\n{BATCH_METADATA}\n{offset_line(ends)}")
    assert batch_ends(tmp_path, 7) == ends


@pytest.mark.parametrize("text", [
    "",                                                            # empty
    "v1",                                                          # no metadata, no offset
    f"v1\n{BATCH_METADATA}",                                       # no offset
    f"x1\n{BATCH_METADATA}\n" + '{"v":1,"ends":{}}',               # not an offset log entry
    f"\n{BATCH_METADATA}\n" + '{"v":1,"ends":{}}',
], ids=["empty", "version-only", "no-offset", "bad-version-line", "blank-version-line"])
def test_batch_ends_refuses_what_is_not_an_offset_log_entry(tmp_path: Path, text: str) -> None:
    path = tmp_path / "offsets" / "2"
    write(path, text)
    with pytest.raises(CheckpointError, match="is not a Spark offset log entry") as info:
        batch_ends(tmp_path, 2)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("offset", [
    "{not json",                                 # not JSON
    '{"v":1}',                                   # no ends
    '{"v":1,"ends":[["orders:0",5]]}',           # ends not an object
    '{"v":1,"ends":"orders:0"}',
    '{"v":1,"ends":{"orders":5}}',               # shard key without a partition
    '{"v":1,"ends":{":0":5}}',                   # shard key without a topic
    '{"v":1,"ends":{"orders:x":5}}',             # partition not a number
    '{"v":1,"ends":{"orders:0":"five"}}',        # offset not a number
    '{"v":1,"ends":{"orders:0":null}}',
    '{"v":1,"ends":{"orders:0":[5]}}',
    "[1,2]",                                     # not an object
    "42",
    "null",
    json.dumps("{not json"),                     # a JSON string holding no JSON
    json.dumps('{"v":1}'),                       # a JSON string holding no ends
    json.dumps(json.dumps('{"v":1,"ends":{}}')),  # a string in a string
    '{"startingVersion":3,"reservoirId":"x"}',   # another source's offset (Delta's)
    '{"logOffset":42}',                          # (a file source's)
    '{"orders":{"0":5}}',                        # (Kafka's)
])
def test_batch_ends_refuses_an_unreadable_offset_naming_the_file(tmp_path: Path, offset: str) -> None:
    path = tmp_path / "offsets" / "5"
    write(path, f"v1\n{BATCH_METADATA}\n{offset}")
    with pytest.raises(CheckpointError, match="offset is unreadable") as info:
        batch_ends(tmp_path, 5)
    assert str(path) in str(info.value)
    assert "another query" in str(info.value)


@pytest.mark.parametrize("offset", ['{"v":2,"ends":{"orders:0":5}}', '{"ends":{"orders:0":5}}'])
def test_batch_ends_refuses_an_offset_of_another_version(tmp_path: Path, offset: str) -> None:
    write(tmp_path / "offsets" / "0", f"v1\n{BATCH_METADATA}\n{offset}")
    with pytest.raises(CheckpointError, match="offset is unreadable"):
        batch_ends(tmp_path, 0)


@pytest.mark.parametrize("value", ["5.9", "true", '"7"', "-3"])
def test_batch_ends_refuses_an_offset_that_is_not_a_non_negative_integer(tmp_path: Path, value: str) -> None:
    write(tmp_path / "offsets" / "0", f"v1\n{BATCH_METADATA}\n" + '{"v":1,"ends":{"orders:0":' + value + "}}")
    with pytest.raises(CheckpointError, match="offset is unreadable"):
        batch_ends(tmp_path, 0)


# ---------------------------------------------------------------- copy_batch: what is copied


def test_copying_a_committed_batch_keeps_its_logs_and_the_state_versions_it_left(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=9, commits=8, versions=9)
    target = tmp_path / "tasks" / "count_0" / "me.1"
    copy_batch(source, target, 5)
    got = assert_copied(target, expected_copy(batch=5, committed_up_to=8, versions=9))
    # spelled out: batches 0..5 of both logs, state versions 1..6, nothing newer
    assert {"offsets/5", "offsets/.5.crc", "commits/5", "commits/.5.crc"} <= got
    assert not {"offsets/6", "offsets/.6.crc", "commits/6", "commits/.6.crc"} & got
    assert {"state/0/0/6.changelog", "state/0/0/.6.changelog.crc", "state/0/1/6.changelog"} <= got
    assert not {"state/0/0/7.changelog", "state/0/0/.7.changelog.crc", "state/0/1/7.changelog"} & got


def test_copying_an_uncommitted_batch_keeps_its_offsets_but_only_the_state_before_it(tmp_path: Path) -> None:
    """Batch 6 logged but not committed (the active crashed, or committed at the coordinator
    before Spark's commit log): its offsets are copied, so the next owner re-runs it from the same
    offsets, on state version 6 (what batch 5 left); its own version 7 is left out."""
    source = make_checkpoint(tmp_path / "src", offsets=6, commits=5, versions=7)
    target = tmp_path / "copy"
    copy_batch(source, target, 6)
    got = assert_copied(target, expected_copy(batch=6, committed_up_to=5, versions=7))
    assert "offsets/6" in got and "commits/6" not in got
    assert "state/0/0/6.changelog" in got and "state/0/0/7.changelog" not in got
    assert last_committed_batch(target) == 5
    assert batch_ends(target, 6) == ends_of(6)


def test_copying_the_first_batch_before_any_commit_keeps_no_state_version(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=0, commits=None, versions=1)
    target = tmp_path / "copy"
    copy_batch(source, target, 0)
    got = assert_copied(target, expected_copy(batch=0, committed_up_to=None, versions=1))
    assert "state/0/0/1.changelog" not in got and "state/0/0/_metadata/schema" in got
    assert (target / "commits").is_dir() and not any((target / "commits").iterdir())


@pytest.mark.parametrize(("batch", "newest_version"), [(9, 10), (10, 11), (11, 11), (12, 11)])
def test_copying_around_a_snapshot_keeps_it_and_the_shared_sst_files(tmp_path: Path, batch: int,
                                                                     newest_version: int) -> None:
    """Commits 0..10 (state version 11 is the newest accepted one); batches 11 and 12 logged and
    running ahead (versions 12, 13 on disk, and the snapshot 20 is not there yet)."""
    source = make_checkpoint(tmp_path / "src", offsets=12, commits=10, versions=13)
    target = tmp_path / "copy"
    copy_batch(source, target, batch)
    got = assert_copied(target, expected_copy(batch=batch, committed_up_to=10, versions=13))
    versions = {state_file_version(p.rpartition("/")[2]) for p in got if p.startswith("state/0/")}
    assert max(v for v in versions if v is not None) == newest_version
    assert {"state/0/0/10.zip", "state/0/0/.10.zip.crc", f"state/0/0/SSTs/{SST}",
            f"state/0/1/SSTs/{SST}", f"state/0/0/SSTs/.{SST}.crc"} <= got


def test_copying_the_newest_committed_batch_copies_the_whole_accepted_checkpoint(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=4, commits=4, versions=5, temporaries=False)
    target = tmp_path / "copy"
    copy_batch(source, target, 4)
    assert_copied(target, files(source) - {".metadata.crc"})


def test_a_copy_skips_the_temporary_files_spark_is_writing(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=3, commits=3, versions=4)
    temporaries = {f for f in files(source) if ".tmp" in f}
    assert len(temporaries) == 8
    target = tmp_path / "copy"
    copy_batch(source, target, 3)
    assert not {f for f in files(target) if ".tmp" in f}


def test_a_copy_holds_the_same_bytes_and_keeps_every_unversioned_file(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=3, commits=3, versions=4)
    write(source / "state" / "0" / "0" / "logs" / "000005-abc.log", "rocksdb log")   # anything else
    write(source / "sources" / "0" / "1", "v1\n")
    write(source / "state" / "0" / "_stateSchema" / "default" / "0_abc", "schema v3")
    (source / "state" / "0" / "0" / "SSTs").mkdir(parents=True, exist_ok=True)
    (source / "state" / "0" / "0" / "SSTs" / "empty.sst").write_bytes(b"")
    target = tmp_path / "copy"
    copy_batch(source, target, 3)
    for rel in files(target) - {"metadata"}:
        assert (target / rel).read_bytes() == (source / rel).read_bytes(), rel
    assert {"state/0/0/logs/000005-abc.log", "sources/0/1", "state/0/_stateSchema/default/0_abc",
            "state/0/0/SSTs/empty.sst"} <= files(target)


def test_a_copy_reads_like_its_source_up_to_the_batch(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=7, commits=6, versions=7, as_string=True)
    target = tmp_path / "copy"
    copy_batch(source, target, 4)
    assert last_committed_batch(target) == 4
    for b in range(5):
        assert batch_ends(target, b) == batch_ends(source, b) == ends_of(b)
    assert batch_ends(target, 5) is None


def test_a_copy_leaves_its_source_untouched(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=5, commits=4, versions=6)
    before = {rel: (source / rel).read_bytes() for rel in files(source)}
    copy_batch(source, tmp_path / "copy", 3)
    assert {rel: (source / rel).read_bytes() for rel in files(source)} == before


def test_a_copy_keeps_the_checksum_of_the_state_operator_metadata(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    target = tmp_path / "copy"
    copy_batch(source, target, 2)
    assert "state/0/_metadata/.metadata.crc" in files(target)
    assert expected_copy(batch=2, committed_up_to=2, versions=3) == files(target)


# ---------------------------------------------------------------- copy_batch: metadata


def test_a_copy_gets_a_new_query_id_and_drops_the_old_checksum(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    write(source / "metadata", json.dumps({"id": SOURCE_ID, "extra": [1, 2]}))
    first, second = tmp_path / "a", tmp_path / "b"
    copy_batch(source, first, 2)
    copy_batch(source, second, 2)
    meta1, meta2 = (json.loads((d / "metadata").read_text()) for d in (first, second))
    assert meta1["id"] != SOURCE_ID and meta2["id"] != SOURCE_ID and meta1["id"] != meta2["id"]
    assert meta1["extra"] == [1, 2]  # everything else kept
    assert len(meta1["id"]) == 36 and meta1["id"].count("-") == 4
    assert not (first / ".metadata.crc").exists()
    assert json.loads((source / "metadata").read_text())["id"] == SOURCE_ID


def test_a_copy_of_a_checkpoint_without_metadata_has_none(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=1, commits=1, versions=2)
    (source / "metadata").unlink()
    copy_batch(source, tmp_path / "copy", 1)
    assert not (tmp_path / "copy" / "metadata").exists()


def test_a_copy_refuses_metadata_that_is_not_json(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=1, commits=1, versions=2)
    write(source / "metadata", "{truncated")
    with pytest.raises(CheckpointError, match="is not a Spark checkpoint's metadata") as info:
        copy_batch(source, tmp_path / "copy", 1)
    assert str(source / "metadata") in str(info.value)
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize("text", ["[]", '"x"', "null", "3"])
def test_a_copy_refuses_metadata_that_is_json_but_not_an_object(tmp_path: Path, text: str) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=1, commits=1, versions=2)
    write(source / "metadata", text)
    with pytest.raises(CheckpointError, match="is not a Spark checkpoint's metadata"):
        copy_batch(source, tmp_path / "copy", 1)


# ---------------------------------------------------------------- copy_batch: refusals, retries


def test_a_copy_refuses_an_existing_target(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    target = tmp_path / "copy"
    target.mkdir()
    write(target / "keep", "mine")
    with pytest.raises(CheckpointError, match="it exists") as info:
        copy_batch(source, target, 2)
    assert str(target) in str(info.value)
    assert files(target) == {"keep"}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="it exists"):
        copy_batch(source, empty, 2)
    assert not any(empty.iterdir())
    assert not (tmp_path / "copy.copying").exists() and not (tmp_path / "empty.copying").exists()


def test_a_copy_refuses_a_file_as_target(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    write(tmp_path / "copy", "a file")
    with pytest.raises(CheckpointError, match="it exists"):
        copy_batch(source, tmp_path / "copy", 2)


@pytest.mark.parametrize("batch", [3, 100])
def test_a_copy_of_a_batch_the_source_lacks_leaves_no_target(tmp_path: Path, batch: int) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    target = tmp_path / "tasks" / "t_0" / "me.1"
    with pytest.raises(CheckpointError, match=f"has no batch {batch} in its offset log") as info:
        copy_batch(source, target, batch)
    assert str(source) in str(info.value)
    assert not target.exists() and not target.with_name("me.1.copying").exists()
    assert not (tmp_path / "tasks").exists()


def test_a_copy_of_a_batch_already_removed_from_the_offset_log_leaves_no_target(tmp_path: Path) -> None:
    """Spark removes old offset-log entries; a record naming one of them cannot be copied."""
    source = make_checkpoint(tmp_path / "src", offsets=5, commits=5, versions=6)
    (source / "offsets" / "1").unlink()
    with pytest.raises(CheckpointError, match="has no batch 1"):
        copy_batch(source, tmp_path / "copy", 1)
    assert not (tmp_path / "copy").exists()


def test_a_copy_of_a_missing_source_leaves_no_target(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="has no batch 0"):
        copy_batch(tmp_path / "missing", tmp_path / "copy", 0)
    assert not (tmp_path / "copy").exists()


def test_a_copy_replaces_the_leftovers_of_an_interrupted_copy(tmp_path: Path) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    target = tmp_path / "copy"
    write(tmp_path / "copy.copying" / "offsets" / "9", "from a copy that crashed")
    copy_batch(source, target, 2)
    assert "offsets/9" not in files(target)
    assert not (tmp_path / "copy.copying").exists()


def test_a_copy_starts_again_when_a_file_vanishes_under_it(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's maintenance removes an old changelog while the copy runs: the copy starts again and
    holds what the source holds then."""
    source = make_checkpoint(tmp_path / "src", offsets=4, commits=4, versions=5)
    real_copy = shutil.copy2
    vanishing = source / "state" / "0" / "1" / "1.changelog"
    calls: list[str] = []

    def copy2(src: Any, dst: Any, **kw: Any) -> Any:
        calls.append(str(src))
        if Path(src) == vanishing and vanishing.exists():
            vanishing.unlink()  # removed between listing and copying
        return real_copy(src, dst, **kw)

    monkeypatch.setattr(shutil, "copy2", copy2)  # the module's shutil is this one
    target = tmp_path / "copy"
    copy_batch(source, target, 4)
    assert calls.count(str(vanishing)) == 1  # the second attempt no longer lists it
    assert_copied(target, expected_copy(batch=4, committed_up_to=4, versions=5) - {"state/0/1/1.changelog"})
    assert not (tmp_path / "copy.copying").exists()


def test_a_copy_gives_up_on_a_source_that_keeps_changing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    attempts: list[int] = []
    real_copy_once = checkpoint_module._copy_once

    def copy_once(src: Path, dst: Path, batch: int) -> None:
        attempts.append(batch)
        assert not dst.exists()  # every attempt starts from nothing
        real_copy_once(src, dst, batch)
        raise FileNotFoundError("vanished")

    monkeypatch.setattr(checkpoint_module, "_copy_once", copy_once)
    with pytest.raises(CheckpointError, match=r"kept changing while it was copied \(5 attempts\)"):
        copy_batch(source, tmp_path / "copy", 2)
    assert len(attempts) == 5
    assert not (tmp_path / "copy").exists()


def test_a_copy_that_vanishes_a_few_times_then_succeeds(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    source = make_checkpoint(tmp_path / "src", offsets=2, commits=2, versions=3)
    real_copy_once = checkpoint_module._copy_once
    failures = [FileNotFoundError("x")] * 4

    def copy_once(src: Path, dst: Path, batch: int) -> None:
        real_copy_once(src, dst, batch)
        if failures:
            raise failures.pop()

    monkeypatch.setattr(checkpoint_module, "_copy_once", copy_once)
    copy_batch(source, tmp_path / "copy", 2)
    assert_copied(tmp_path / "copy", expected_copy(batch=2, committed_up_to=2, versions=3))


def test_the_lineage_begin_survives_a_copy_of_an_unfinished_batch_0(tmp_path: Path) -> None:
    """Regression: a warm-up copied batch 0 before Spark logged it as committed; Spark then ran
    batch 0 again from the source's initial offset, which the copy had been given as the copied
    batch's end — so the warm-up's state lacked batch 0's records. The offset now carries where the
    lineage began, and the copy is started from there."""
    from regroup.spark.tasks.checkpoint import lineage_begin

    shard = Shard("orders", 1)
    source = tmp_path / "src"
    write(source / "metadata", json.dumps({"id": "q"}))
    write(source / "offsets" / "0", "v1\n{}\n" + json.dumps(json.dumps(
        {"v": 1, "ends": {"orders:1": 60}, "begin": {"orders:1": 0}})))
    (source / "commits").mkdir()
    copy_batch(source, tmp_path / "copy", 0)
    assert last_committed_batch(tmp_path / "copy") is None  # Spark will run batch 0 again
    assert batch_ends(tmp_path / "copy", 0) == {shard: 60}
    assert lineage_begin(tmp_path / "copy", 0) == {shard: 0}
    legacy = tmp_path / "legacy"
    write(legacy / "offsets" / "0", "v1\n{}\n" + json.dumps({"v": 1, "ends": {"orders:1": 60}}))
    assert lineage_begin(legacy, 0) is None
