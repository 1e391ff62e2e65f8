"""Regression tests for a coordinator rule that refused a legitimate commit (`_check_range_forward`,
regroup/protocol/offsets.py), found by the model in tests/protocol/test_microbatch_lanes.py: when a
partition's fragments do not cover a shard (a part of it never committed: its resume there is the
reset policy's offset, 0 under ``earliest``), the shard begins below the fragments that do exist and
could not commit until it passed the lowest of them — "behind every committed offset of its key
range", although the uncovered part's records below were processed. A revocation's commit was then
refused too, and the next owner repeated those records.

The rule now (offsets.py's docstring): a commit is behind only below the owned shard's *floor*, the
lowest point its owner can have begun at — no floor while some of its keys have no fragment. An
accepted commit never lowers a fragment (keyrange rule 3), so the fragments above it stay, as skip
pieces of the next resume. The property at the end drives an owner through any legal commits, over
any fragments with gaps, read whole or in lanes, and checks that every commit is accepted and that
each key's resume is exactly what was done: never backwards, never past what was processed."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.driver import OffsetReset, resumes
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import KEY_SPACE, Resume, range_shards
from regroup.protocol.messages import OffsetFetchRequest, OffsetResetRequest
from regroup.protocol.microbatch import clip
from regroup.protocol.shard import Shard
from tests.protocol.harness import Harness
from tests.protocol.test_parallelism import Members, commit

HALF = KEY_SPACE // 2
WHOLE, LOW, HIGH = Shard("t", 0), Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)


def fragments(h: Harness) -> dict[Shard, int]:
    return {s: c.offset for s, c in h.group().offsets.items()}


def resume_of(h: Harness, member: str, epoch: int, shard: Shard) -> Resume:
    """Where ``shard`` resumes for ``member`` (``earliest``), from what the coordinator answers."""
    got = h.coord.fetch_offsets(OffsetFetchRequest("g", member, epoch, (shard,)))
    assert got.error is ErrorCode.NONE, got.message
    return resumes({shard}, {s: c.offset for s, c in got.offsets.items()}, OffsetReset.EARLIEST, {})[shard]


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
    # The lower half keeps its higher progress, the upper half gets what the owner did.
    assert fragments(h) == {LOW: 10, HIGH: 5}
    assert resume_of(h, "a", ms.epoch["a"], WHOLE) == Resume(5, ((0, HALF, 10),))


def test_once_every_key_has_a_fragment_a_commit_below_them_all_is_refused() -> None:
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    assert commit(h, "a", ms.epoch["a"], {LOW: 10}) is ErrorCode.NONE
    assert commit(h, "a", ms.epoch["a"], {WHOLE: 5}) is ErrorCode.NONE
    assert commit(h, "a", ms.epoch["a"], {WHOLE: 4}) is ErrorCode.OFFSET_OUT_OF_ORDER
    assert commit(h, "a", ms.epoch["a"], {HIGH: 4}) is ErrorCode.OFFSET_OUT_OF_ORDER  # a lane of it too
    assert fragments(h) == {LOW: 10, HIGH: 5}
    # At the floor, or a lane below its own fragment but not below the floor: accepted, lowering nothing.
    assert commit(h, "a", ms.epoch["a"], {WHOLE: 5, LOW: 7}) is ErrorCode.NONE
    assert fragments(h) == {LOW: 10, HIGH: 5}


def test_lanes_of_a_shard_with_a_gap_commit_from_the_reset_offset() -> None:
    """Read in lanes (a partition split on the producer side): the lane of the keys with no fragment
    begins at 0, the other where its own fragment is (`microbatch.clip`); both commit in one request."""
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    assert commit(h, "a", ms.epoch["a"], {LOW: 10}) is ErrorCode.NONE
    r = resume_of(h, "a", ms.epoch["a"], WHOLE)
    assert (clip(r, 0, HALF).start, clip(r, HALF, KEY_SPACE).start) == (10, 0)
    assert commit(h, "a", ms.epoch["a"], {LOW: 12, HIGH: 3}) is ErrorCode.NONE
    assert fragments(h) == {LOW: 12, HIGH: 3}


def test_a_revocation_commits_the_uncovered_keys_and_the_next_owner_repeats_nothing() -> None:
    h = Harness(topics={"t": 1})
    ms = Members(h, ["a"])
    ms.settle()
    assert commit(h, "a", ms.epoch["a"], {LOW: 10}) is ErrorCode.NONE
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    ms.join("b")
    ms.beat("a")  # told to revoke the whole partition: its final commit first
    assert WHOLE in h.group().current["a"].pending_revocation
    assert commit(h, "a", ms.epoch["a"], {WHOLE: 6}) is ErrorCode.NONE
    ms.settle()
    owner = {s: m for m, owned in ms.owned.items() for s in owned}
    assert set(owner) == set(range_shards("t", 0, 2))
    # Each half resumes exactly where the former owner stopped: nothing repeated, nothing lost.
    assert resume_of(h, owner[LOW], ms.epoch[owner[LOW]], LOW) == Resume(10)
    assert resume_of(h, owner[HIGH], ms.epoch[owner[HIGH]], HIGH) == Resume(6)


def test_a_range_with_a_gap_inside_it_commits_below_the_fragment_of_its_other_part() -> None:
    """The owned shard is a key range (parallelism 2) of which the middle has a fragment (an
    operator's); the keys on either side of it began at 0."""
    h = Harness(topics={"t": 1})
    quarter = Shard("t", 0, HALF + KEY_SPACE // 8, HALF + 3 * KEY_SPACE // 8)
    assert h.keep(h.coord.reset_offsets(OffsetResetRequest("g", {quarter: 40}), h.now)).response.error \
        is ErrorCode.NONE
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    ms = Members(h, ["a"])
    ms.settle()
    assert resume_of(h, "a", ms.epoch["a"], HIGH) == Resume(0, ((quarter.lo, quarter.hi, 40),))
    assert commit(h, "a", ms.epoch["a"], {HIGH: 25}) is ErrorCode.NONE
    assert fragments(h) == {Shard("t", 0, HALF, quarter.lo): 25, quarter: 40,
                            Shard("t", 0, quarter.hi, KEY_SPACE): 25}
    assert commit(h, "a", ms.epoch["a"], {HIGH: 20}) is ErrorCode.OFFSET_OUT_OF_ORDER
    assert commit(h, "a", ms.epoch["a"], {HIGH: 50}) is ErrorCode.NONE
    assert fragments(h) == {HIGH: 50}


# ------------------------------------------------------------------------------- the property

POINTS = st.integers(1, KEY_SPACE - 1)


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, dict[Shard, int], list[int], list[tuple[int, int, bool]]]:
    """A parallelism, fragments an operator left (with gaps), where the owner's shards are cut into
    lanes, and steps (lane index, how far it reads on, whether it commits every lane or that one)."""
    n = draw(st.sampled_from([1, 2, 4]))
    cuts = sorted(set(draw(st.lists(POINTS, max_size=5))))
    bounds = [0, *cuts, KEY_SPACE]
    frags = {}
    for lo, hi in itertools.pairwise(bounds):
        offset = draw(st.one_of(st.none(), st.integers(0, 60)))
        if offset is not None:
            frags[Shard("t", 0, lo, hi)] = offset
    lane_cuts = sorted(set(draw(st.lists(POINTS, max_size=3))))
    steps = draw(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 15), st.booleans()), max_size=12))
    return n, frags, lane_cuts, steps


def _done_at(frags: dict[Shard, int], point: int) -> int:
    """The offset below which the key at ``point`` is done: its fragment's, else the reset's (0)."""
    return next((o for f, o in frags.items() if f.lo <= point < f.hi), 0)


def _resume_at(r: Resume, point: int) -> int:
    """Where the key at ``point`` of a shard resumed by ``r`` begins (its skip piece's offset, or start)."""
    return next((max(r.start, o) for lo, hi, o in r.skip if lo <= point < hi), r.start)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_an_owner_always_commits_and_no_key_resumes_backwards_or_past_what_was_done(
        history: tuple[int, dict[Shard, int], list[int], list[tuple[int, int, bool]]]) -> None:
    n, initial, lane_cuts, steps = history
    h = Harness(topics={"t": 1})
    if initial:
        assert h.keep(h.coord.reset_offsets(OffsetResetRequest("g", initial), h.now)).response.error \
            is ErrorCode.NONE
    if n > 1:
        h.keep(h.coord.set_parallelism("g", "t", n, h.now))
    ms = Members(h, ["a"])
    ms.settle()
    owned = sorted(ms.owned["a"])
    assert owned == sorted(range_shards("t", 0, n))
    # Each owned shard resumes as a consumer would; its lanes each from where their own keys resume.
    lanes: dict[Shard, Shard] = {}  # lane -> the owned shard it is part of
    position: dict[Shard, int] = {}
    began: dict[Shard, Resume] = {}
    for s in owned:
        r = began[s] = resume_of(h, "a", ms.epoch["a"], s)
        edges = [s.lo, *(c for c in lane_cuts if s.lo < c < s.hi), s.hi]
        for lo, hi in itertools.pairwise(edges):
            lane = s if (lo, hi) == (s.lo, s.hi) else Shard("t", 0, lo, hi)
            lanes[lane] = s
            position[lane] = clip(r, lo, hi).start
    order = sorted(lanes)
    # One point per interval the fragments, ranges and lanes are constant on: every key's fate.
    edges = sorted({0, KEY_SPACE, *(b for f in initial for b in (f.lo, f.hi)),
                    *(b for x in lanes for b in (x.lo, x.hi))})
    points = edges[:-1]
    lane_at = {p: next(x for x in order if x.lo <= p < x.hi) for p in points}
    # What the owner has done for each key: below the fragment it inherited, or below its lane's position.
    before = {p: _resume_at(began[lanes[lane_at[p]]], p) for p in points}
    assert before == {p: _done_at(initial, p) for p in points}
    for which, forward, every in steps:
        lane = order[which % len(order)]
        position[lane] += forward
        offsets = dict(position) if every else {lane: position[lane]}
        assert commit(h, "a", ms.epoch["a"], offsets) is ErrorCode.NONE, (offsets, fragments(h))
        frags = fragments(h)
        now = {p: _done_at(frags, p) for p in points}
        for p in points:
            assert now[p] >= before[p], f"key at {p:#x} went back from {before[p]} to {now[p]}"
            # Exactly what was done: the inherited fragment or the lane's position, whichever is higher.
            want = max(_done_at(initial, p), position[lane_at[p]]) if lane_at[p] in offsets else before[p]
            assert now[p] == want, f"key at {p:#x}: committed {now[p]}, done below {want}"
        before = now
        # A stale commit (an earlier position sent again) never changes anything.
        stale = {lane: position[lane] - forward}
        assert commit(h, "a", ms.epoch["a"], stale) in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_ORDER)
        assert fragments(h) == frags
    # The next owner of each shard resumes every key exactly where it was done.
    for s in owned:
        r = resume_of(h, "a", ms.epoch["a"], s)
        for p in points:
            if s.lo <= p < s.hi:
                assert _resume_at(r, p) == before[p]
