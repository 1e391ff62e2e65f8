"""`split_commit_metadata`: any number of tasks' COMMITs cut into offset-commit requests whose
metadata each stays under the coordinator's limit, every task named exactly once, in the request
that carries its offsets."""

from __future__ import annotations

import itertools

import pytest

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.streams.topology import TaskId
from regroup.streams.changelog import format_commit_metadata, parse_commit_metadata, split_commit_metadata

LIMIT = CoordinatorConfig().max_offset_metadata_length


def test_few_tasks_are_one_request_as_before() -> None:
    commits = {TaskId("count", 0): 12, TaskId("count", 1, 1, 4): 7}
    assert split_commit_metadata(commits) == [(sorted(commits), format_commit_metadata(commits))]
    assert split_commit_metadata({}) == []


@pytest.mark.parametrize("k", [160, 1024])
def test_many_range_tasks_are_cut_into_requests_under_the_limit(k: int) -> None:
    commits = {TaskId("count_words", p, r, k): 10**9 + p * k + r for p in range(3) for r in range(k)}
    with pytest.raises(ValueError, match="over the limit"):
        format_commit_metadata(commits)
    groups = split_commit_metadata(commits)
    assert len(groups) > 1
    named: dict[TaskId, int] = {}
    for tasks, metadata in groups:
        assert len(metadata) <= LIMIT
        assert parse_commit_metadata(metadata) == {t: commits[t] for t in tasks}
        assert not named.keys() & set(tasks)
        named.update(parse_commit_metadata(metadata))
    assert named == commits
    # As few requests as fit: the first task of each request would not have fitted in the one before.
    for (before, _), (tasks, _) in itertools.pairwise(groups):
        with pytest.raises(ValueError, match="over the limit"):
            format_commit_metadata({t: commits[t] for t in [*before, tasks[0]]})


def test_a_small_limit_and_a_task_too_long_for_any_request() -> None:
    commits = {TaskId("s", p): p for p in range(10)}
    groups = split_commit_metadata(commits, max_length=40)
    assert all(len(m) <= 40 for _, m in groups) and sum(len(ts) for ts, _ in groups) == 10
    with pytest.raises(ValueError, match="over the limit of 20"):
        split_commit_metadata(commits, max_length=20)
