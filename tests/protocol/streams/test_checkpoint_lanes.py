"""`regroup.protocol.streams.checkpoints` rule 6: a task query's lanes (a split source partition)
compared key by key with the committed fragments, which the coordinator may fold together."""

from __future__ import annotations

from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.protocol.streams.checkpoints import (
    LocalCopy,
    StartFrom,
    batch_key,
    caught_up,
    lane_start,
    limit_of,
    plan_start,
    reached,
)

HALF = KEY_SPACE // 2
WHOLE, LEFT, RIGHT = Shard("t", 0), Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)


def test_whole_partitions_compare_by_shard_as_before() -> None:
    assert caught_up({WHOLE: 5}, {WHOLE: 5}) and not caught_up({WHOLE: 4}, {WHOLE: 5})
    assert caught_up({}, {}) and not caught_up({}, {WHOLE: 5})
    assert reached({WHOLE: 6}, {WHOLE: 5}) and not reached({WHOLE: 4}, {WHOLE: 5})
    assert limit_of({WHOLE: 9}, WHOLE, 3) == 9 and limit_of({}, WHOLE, 3) == 3
    assert batch_key("s_0", {WHOLE: 3}, {WHOLE: 9}) == "s_0:t/0@3-9"


def test_lanes_are_caught_up_with_fragments_folded_into_one() -> None:
    assert caught_up({LEFT: 7, RIGHT: 7}, {WHOLE: 7})
    assert not caught_up({LEFT: 7, RIGHT: 6}, {WHOLE: 7})
    assert caught_up({LEFT: 9, RIGHT: 7}, {LEFT: 9, RIGHT: 7})
    assert not caught_up({WHOLE: 7}, {LEFT: 9, RIGHT: 7})  # a lane not cut yet is not at 9 for its left keys


def test_a_copy_never_reads_a_lane_past_any_fragment_over_its_keys() -> None:
    assert limit_of({LEFT: 9, RIGHT: 7}, WHOLE, 0) == 7
    assert limit_of({LEFT: 9, RIGHT: 7}, LEFT, 0) == 9
    assert limit_of({WHOLE: 8}, RIGHT, 0) == 8
    local = LocalCopy("tasks/s_0/p.1", {LEFT: 9, RIGHT: 8}, running=True)
    assert plan_start(committed={WHOLE: 8}, record=None, process_id="p", local=local).how is StartFrom.FRESH
    local = LocalCopy("tasks/s_0/p.1", {LEFT: 8, RIGHT: 8}, running=True)
    assert plan_start(committed={WHOLE: 8}, record=None, process_id="p", local=local).how is StartFrom.PROMOTE


def test_a_lane_cut_at_a_split_begins_where_its_parent_was_and_names_its_keys() -> None:
    assert lane_start({WHOLE: 10}, LEFT) == 10 and lane_start({LEFT: 12}, LEFT) == 12
    assert lane_start({LEFT: 12}, RIGHT) == 0
    assert batch_key("s_0", {WHOLE: 10}, {LEFT: 12, RIGHT: 15}) == \
        f"s_0:t/0[0-{HALF})@10-12,t/0[{HALF}-{KEY_SPACE})@10-15"
