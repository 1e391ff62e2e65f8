"""Reproduces a coordinator rule that refuses a legitimate commit (`_check_range_forward`,
regroup/protocol/offsets.py), found by the model in tests/protocol/test_microbatch_lanes.py: when a
partition's fragments do not cover a shard (a part of it never committed: its resume there is the
reset policy's offset, 0 under ``earliest``), the shard begins below the fragments that do exist and
cannot commit until it passes the lowest of them — "behind every committed offset of its key range",
although the uncovered part's records below were processed. A revocation's commit is then refused
too, and the next owner repeats those records: a clean hand-off that repeats records (KI-3's cousin)."""

from __future__ import annotations

import pytest

from regroup.protocol.driver import OffsetReset, resumes
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import KEY_SPACE, Resume
from regroup.protocol.shard import Shard
from tests.protocol.harness import Harness
from tests.protocol.test_parallelism import Members, commit

WHOLE, LOW = Shard("t", 0), Shard("t", 0, 0, KEY_SPACE // 2)


@pytest.mark.xfail(strict=True, reason=(
    "coordinator bug: a commit is checked against the lowest existing fragment of the owned shard, "
    "ignoring the parts of it no fragment covers (which begin at the reset policy's offset)"))
def test_a_shard_partly_without_fragments_commits_its_progress_below_the_others() -> None:
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    # Only the lower half has progress (its former owner committed it; the upper half's never did).
    assert commit(h, "a", ms.epoch["a"], {LOW: 10}) is ErrorCode.NONE
    where = resumes({WHOLE}, {LOW: 10}, OffsetReset.EARLIEST, {})[WHOLE]
    assert where == Resume(0, ((0, KEY_SPACE // 2, 10),))  # the upper half from 0, the lower skipped below 10
    # The owner read offsets 0..4 (the upper half's records; the lower half's are skipped) and commits.
    assert commit(h, "a", ms.epoch["a"], {WHOLE: 5}) is ErrorCode.NONE
