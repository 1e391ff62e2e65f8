"""The changelog's naming, topic creation, marker records and the offset-commit metadata."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.log.base import ConsumedRecord
from regroup.log.embedded import EmbeddedLog
from regroup.log.errors import InvalidTopicError
from regroup.protocol.streams.topology import TaskId
from regroup.streams.changelog import (
    GEN_HEADER,
    MARKER_HEADER,
    METADATA_PREFIX,
    Begin,
    Commit,
    begin_record,
    change_gen,
    change_records,
    changelog_topic,
    commit_record,
    decode_marker,
    ensure_changelog,
    format_commit_metadata,
    parse_commit_metadata,
    resume_point,
)
from regroup.streams.errors import ChangelogError


def consumed(offset: int, key: bytes | None, value: bytes | None,
             headers: tuple[tuple[str, bytes], ...]) -> ConsumedRecord:
    return ConsumedRecord("g-s-changelog", 0, offset, key, value, 0, headers)


# ------------------------------------------------------------------------------------- the topic


def test_topic_name_is_group_subtopology_changelog() -> None:
    assert changelog_topic("orders-app", "count") == "orders-app-count-changelog"


@pytest.mark.parametrize("group, sub", [("g", "a b"), ("g/x", "s"), ("g", "x" * 250)])
def test_illegal_topic_names_are_refused_naming_the_name(group: str, sub: str) -> None:
    with pytest.raises(InvalidTopicError, match="topic name"):
        changelog_topic(group, sub)


@pytest.mark.parametrize("group, sub", [("", "s"), ("g", ""), (None, "s"), ("g", 3)])
def test_empty_or_non_string_ids_are_refused(group: object, sub: object) -> None:
    with pytest.raises(ValueError, match="non-empty str"):
        changelog_topic(group, sub)  # type: ignore[arg-type]


def test_ensure_creates_grows_and_never_shrinks(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log") as log:
        ensure_changelog(log, "g-s-changelog", 3)
        assert log.topic_partitions()["g-s-changelog"] == 3
        ensure_changelog(log, "g-s-changelog", 3)  # idempotent
        ensure_changelog(log, "g-s-changelog", 5)  # the source topics grew: so does the changelog
        assert log.topic_partitions()["g-s-changelog"] == 5
        ensure_changelog(log, "g-s-changelog", 2)  # more partitions than tasks: left alone
        assert log.topic_partitions()["g-s-changelog"] == 5


def test_ensure_refuses_a_bad_partition_count(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log") as log, pytest.raises(ValueError, match="changelog partition count"):
        ensure_changelog(log, "g-s-changelog", 0)


# ----------------------------------------------------------------------------------- the records


def test_markers_round_trip() -> None:
    b = begin_record(None, 7)
    assert decode_marker(consumed(4, b.key, b.value, b.headers)) == Begin(4, None, 7)
    c = commit_record(4, {"orders": 10, "clicks": 3}, 2)
    expected = Commit(9, 4, {"clicks": 3, "orders": 10}, 2)
    assert decode_marker(consumed(9, c.key, c.value, c.headers)) == expected


def test_change_records_carry_their_generation() -> None:
    recs = change_records(12, [(b"k", b"v"), (b"gone", None)])
    assert [(r.key, r.value) for r in recs] == [(b"k", b"v"), (b"gone", None)]
    assert all(change_gen(consumed(0, r.key, r.value, r.headers)) == 12 for r in recs)


@pytest.mark.parametrize("headers, match", [
    ((), "exactly one"),
    ((("other", b"1"),), "exactly one"),
    (((GEN_HEADER, b"x1"),), "not an offset"),
])
def test_a_foreign_change_record_is_a_changelog_error(
        headers: tuple[tuple[str, bytes], ...], match: str) -> None:
    with pytest.raises(ChangelogError, match=match):
        change_gen(consumed(5, b"k", b"v", headers))


@pytest.mark.parametrize("value, headers, match", [
    (b"{}", (), "begin' or 'commit"),
    (b"{}", ((MARKER_HEADER, b"end"),), "begin' or 'commit"),
    (b"not json", ((MARKER_HEADER, b"begin"),), "JSON object"),
    (b'{"v":2,"epoch":1}', ((MARKER_HEADER, b"begin"),), "JSON object"),
    (b'{"v":1,"epoch":-1}', ((MARKER_HEADER, b"begin"),), "epoch"),
    (b'{"v":1,"epoch":1,"resume_from":"3"}', ((MARKER_HEADER, b"begin"),), "resume_from"),
    (b'{"v":1,"source":{}}', ((MARKER_HEADER, b"commit"),), "generation"),
    (b'{"v":1,"gen":0,"source":{"t":-1}}', ((MARKER_HEADER, b"commit"),), "source offset"),
    (b'{"v":1,"gen":0,"source":[]}', ((MARKER_HEADER, b"commit"),), "mapping"),
])
def test_a_broken_marker_is_a_changelog_error_naming_the_offset(
        value: bytes, headers: tuple[tuple[str, bytes], ...], match: str) -> None:
    with pytest.raises(ChangelogError, match=match) as e:
        decode_marker(consumed(42, None, value, headers))
    assert "offset 42" in str(e.value)


# ------------------------------------------------------------------------------ commit metadata


def test_metadata_round_trips_several_tasks() -> None:
    commits = {TaskId("count", 0): 17, TaskId("join", 3): 0, TaskId("a;b=c", 1): 5}
    text = format_commit_metadata(commits)
    assert text.startswith(METADATA_PREFIX)
    assert parse_commit_metadata(text) == commits


SUBS = st.text(min_size=1, max_size=8)
TASKS = st.builds(TaskId, SUBS, st.integers(0, 999), st.just(0), st.just(1)) | st.integers(2, 8).flatmap(
    lambda k: st.builds(TaskId, SUBS, st.integers(0, 999), st.integers(0, k - 1), st.just(k)))


def test_whole_partition_tasks_keep_their_metadata_and_range_tasks_add_their_range() -> None:
    """Metadata written before key-range tasks reads the same; a range task's entry names its range."""
    text = format_commit_metadata({TaskId("s", 1): 7, TaskId("t", 0, 1, 2): 9})
    assert text.endswith('[["s",1,7],["t",0,9,1,2]]')
    assert parse_commit_metadata(text) == {TaskId("s", 1): 7, TaskId("t", 0, 1, 2): 9}
    assert resume_point([text], TaskId("t", 0, 1, 2)) == 9
    assert resume_point([text], TaskId("t", 0, 0, 2)) is None


@given(st.dictionaries(TASKS, st.integers(0, 2**62), max_size=8))
@settings(max_examples=200, deadline=None)
def test_metadata_round_trips_any_tasks(commits: dict[TaskId, int]) -> None:
    assert parse_commit_metadata(format_commit_metadata(commits, max_length=1 << 20)) == commits


def test_empty_metadata_means_no_commit() -> None:
    assert parse_commit_metadata("") == {}
    assert resume_point(["", ""], TaskId("s", 0)) is None


@pytest.mark.parametrize("text, match", [
    ("hello", "not written by a regroup streams member"),
    (METADATA_PREFIX + "{", "malformed"),
    (METADATA_PREFIX + '[["s",0]]', "malformed"),
    (METADATA_PREFIX + '[["s",0,-1]]', "malformed"),
    (METADATA_PREFIX + '[["s",true,1]]', "malformed"),
])
def test_foreign_or_malformed_metadata_is_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_commit_metadata(text)


def test_format_refuses_bad_entries_and_metadata_over_the_limit() -> None:
    with pytest.raises(ValueError, match="TaskId"):
        format_commit_metadata({("s",): 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="int >= 0"):
        format_commit_metadata({TaskId("s", 0): -1})
    many = {TaskId("subtopology", i): 10**12 for i in range(200)}
    with pytest.raises(ValueError, match="over the limit of 4096"):
        format_commit_metadata(many)


def test_resume_point_is_the_latest_commit_named_for_the_task() -> None:
    t, other = TaskId("s", 0), TaskId("s", 1)
    older = format_commit_metadata({t: 5, other: 9})
    newer = format_commit_metadata({t: 12})
    assert resume_point([older, newer], t) == 12
    assert resume_point([older, newer], other) == 9
    assert resume_point([newer], other) is None
    with pytest.raises(ValueError, match="not one string"):
        resume_point(newer, t)
