"""`microbatch.relaned`: the lanes a process reads a shard as, brought to the open pieces of its
partition between batches — cut at a split, joined at a merge — by the rules a new owner follows."""

from __future__ import annotations

from regroup.protocol.keyrange import KEY_SPACE, Resume
from regroup.protocol.microbatch import relaned
from regroup.protocol.shard import Shard

HALF = KEY_SPACE // 2
WHOLE = Shard("t", 0)
LEFT, RIGHT = Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)


def test_lanes_that_match_the_pieces_stay_as_they_are() -> None:
    lanes = {LEFT: (7, Resume(7)), RIGHT: (9, Resume(9))}
    assert relaned(WHOLE, lanes, ((0, HALF), (HALF, KEY_SPACE))) == lanes


def test_a_split_cuts_a_lane_each_part_from_where_it_was() -> None:
    assert relaned(WHOLE, {WHOLE: (12, Resume(12))}, ((0, HALF), (HALF, KEY_SPACE))) == {
        LEFT: (12, Resume(12)), RIGHT: (12, Resume(12))}


def test_a_split_part_whose_keys_were_all_done_further_begins_there() -> None:
    skip = Resume(12, ((HALF, KEY_SPACE, 20),))  # a former owner did the right half up to 20
    got = relaned(WHOLE, {WHOLE: (12, skip)}, ((0, HALF), (HALF, KEY_SPACE)))
    assert got == {LEFT: (12, Resume(12)), RIGHT: (20, Resume(20))}


def test_a_merge_joins_lanes_at_the_slowest_skipping_what_the_faster_did() -> None:
    got = relaned(WHOLE, {LEFT: (30, Resume(30)), RIGHT: (20, Resume(20))}, ((0, KEY_SPACE),))
    assert got == {WHOLE: (20, Resume(20, ((0, HALF, 30),)))}


def test_a_merge_keeps_what_a_lane_still_skipped() -> None:
    q = HALF // 2
    left = Resume(10, ((0, q, 25),))  # the left lane still skips its first quarter below 25
    got = relaned(WHOLE, {LEFT: (10, left), RIGHT: (15, Resume(15))}, ((0, KEY_SPACE),))
    assert got == {WHOLE: (10, Resume(10, ((0, q, 25), (HALF, KEY_SPACE, 15))))}
