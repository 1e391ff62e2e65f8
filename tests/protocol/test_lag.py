"""`regroup.protocol.lag`: lag per fragment and per partition, exact for split partitions."""

from __future__ import annotations

from regroup.protocol.lag import fragment_lag, group_lag, partition_lag, whole_span
from regroup.protocol.shard import KEY_SPACE, Shard

HALF = KEY_SPACE // 2
WHOLE, LEFT, RIGHT = Shard("t", 0), Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)
# Split at 10 into two pieces: the left one ends at 15, the right one at 30.
SPLIT = ((0, KEY_SPACE, 0, 10), (0, HALF, 10, 15), (HALF, KEY_SPACE, 10, 30))


def test_a_partition_never_split_lags_by_end_minus_committed() -> None:
    assert fragment_lag(whole_span(50), WHOLE, 42) == 8
    assert fragment_lag(whole_span(50), LEFT, 60) == 0
    assert group_lag({WHOLE: 42, Shard("t", 1): 3}, {WHOLE: 50, Shard("t", 1): 3}, {}) == 8


def test_each_lane_lags_behind_its_own_piece() -> None:
    assert fragment_lag(SPLIT, LEFT, 12) == 3
    assert fragment_lag(SPLIT, RIGHT, 25) == 5
    assert partition_lag(SPLIT, {LEFT: 12, RIGHT: 25}) == 8
    # What the partition's end alone would say: 30 - 12 + 30 - 25.
    assert group_lag({LEFT: 12, RIGHT: 25}, {WHOLE: 30}, {WHOLE: SPLIT}) == 8


def test_a_position_before_the_split_counts_the_sealed_piece_once() -> None:
    # Both lanes at 4, in the sealed whole piece: 6 records there, then 5 and 20 in the pieces.
    assert partition_lag(SPLIT, {LEFT: 4, RIGHT: 4}) == 6 + 5 + 20
    assert partition_lag(SPLIT, {WHOLE: 4}) == 6 + 5 + 20
    assert fragment_lag(SPLIT, LEFT, 4) == 6 + 5  # a fragment alone: an upper bound, the sealed piece whole


def test_keys_nobody_committed_count_nothing() -> None:
    assert partition_lag(SPLIT, {}) is None
    assert partition_lag(SPLIT, {RIGHT: 25}) == 5
    assert group_lag({}, {WHOLE: 30}, {WHOLE: SPLIT}) is None
