"""Key ranges (regroup.protocol.keyrange): the hash, the ranges of a parallelism, and the rules that
make any change of parallelism lose nothing and repeat nothing — checked against a model that
replays a partition through a random sequence of parallelisms, partial progress and commits."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from regroup.protocol.keyrange import (
    KEY_SPACE,
    MAX_PARALLELISM,
    Resume,
    commit_fragments,
    kept,
    key_hash,
    low_watermarks,
    range_of,
    range_shards,
    ranges,
    resume,
)
from regroup.protocol.messages import CommittedOffset
from regroup.protocol.shard import Shard, format_shards, overlap_any, overlaps


def test_key_hash_is_the_top_half_of_xxh64_seed_42() -> None:
    assert key_hash(b"customer-7", 0) == xxhash.xxh64_intdigest(b"customer-7", 42) >> 32
    assert key_hash(b"customer-7", 0) == key_hash(b"customer-7", 999)  # a key's point ignores the offset
    assert 0 <= key_hash(b"", 0) < KEY_SPACE


def test_keyless_records_spread_by_offset() -> None:
    points = {key_hash(None, o) for o in range(1000)}
    assert len(points) == 1000
    assert key_hash(None, 5) == key_hash(None, 5)
    per_range = Counter(range_of(range_shards("t", 0, 4), key_hash(None, o)).lo for o in range(4000))  # type: ignore[union-attr]
    assert min(per_range.values()) > 800  # roughly even: 1000 each


def test_keys_spread_evenly_over_ranges() -> None:
    shards = range_shards("t", 0, 8)
    per_range = Counter(range_of(shards, key_hash(f"k{i}".encode(), 0)) for i in range(80_000))
    assert len(per_range) == 8 and min(per_range.values()) > 9_000


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, MAX_PARALLELISM])
def test_ranges_tile_the_key_space(n: int) -> None:
    rs = ranges(n)
    assert len(rs) == n and rs[0][0] == 0 and rs[-1][1] == KEY_SPACE
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(rs))


@pytest.mark.parametrize("n", [0, -1, MAX_PARALLELISM + 1])
def test_ranges_refuse_a_parallelism_out_of_bounds(n: int) -> None:
    with pytest.raises(ValueError, match="parallelism must be"):
        ranges(n)


def test_parallelism_one_is_the_whole_partition() -> None:
    assert range_shards("t", 3, 1) == (Shard("t", 3),)
    assert Shard("t", 3).whole and str(Shard("t", 3)) == "t:3"
    half = Shard("t", 3, 0, KEY_SPACE // 2)
    assert not half.whole and str(half) == "t:3[00000000,80000000)"
    assert format_shards([half, Shard("t", 1)]) == "t[1,3:[00000000,80000000)]"


def test_overlaps() -> None:
    whole, a, b = Shard("t", 0), Shard("t", 0, 0, 100), Shard("t", 0, 100, 200)
    assert overlaps(whole, a) and overlaps(a, whole) and not overlaps(a, b)
    assert not overlaps(a, Shard("t", 1, 0, 100)) and not overlaps(a, Shard("u", 0, 0, 100))
    assert overlap_any(frozenset({whole}), frozenset({b}))
    assert not overlap_any(frozenset({a}), frozenset({b}))
    assert not overlap_any(frozenset({Shard("t", 0)}), frozenset({Shard("t", 1)}))


def test_a_split_resumes_both_halves_where_the_whole_stopped() -> None:
    done = {Shard("t", 0): 40}
    lo, hi = range_shards("t", 0, 2)
    assert resume(done, lo, 0) == Resume(40) and resume(done, hi, 0) == Resume(40)


def test_a_merge_resumes_at_the_laggard_and_skips_what_the_others_did() -> None:
    lo, hi = range_shards("t", 0, 2)
    r = resume({lo: 10, hi: 30}, Shard("t", 0), 0)
    assert r.start == 10 and r.skip == ((hi.lo, hi.hi, 30),)
    assert r.skips(hi.lo, 29) and not r.skips(hi.lo, 30) and not r.skips(lo.lo, 12)
    assert r.passed(30).skip == ()


def test_a_gap_without_a_fragment_begins_at_the_default() -> None:
    lo, hi = range_shards("t", 0, 2)
    r = resume({lo: 10}, Shard("t", 0), 50)  # 'latest' would say 50 for the uncommitted half
    assert r.start == 10 and r.skip == ((hi.lo, hi.hi, 50),)


def test_a_commit_raises_what_it_covers_and_keeps_what_it_cut() -> None:
    whole = Shard("t", 0)
    lo, hi = range_shards("t", 0, 2)
    old = CommittedOffset(40, "m", 3)
    gone, written = commit_fragments({whole: old}, lo, CommittedOffset(55, "n", 4))
    assert gone == [whole] and written == {lo: CommittedOffset(55, "n", 4), hi: old}


def test_fragments_coalesce_once_the_owner_passes_them() -> None:
    lo, hi = range_shards("t", 0, 2)
    frags = {lo: CommittedOffset(10), hi: CommittedOffset(30)}
    gone, written = commit_fragments(frags, Shard("t", 0), CommittedOffset(20, "m", 1))
    assert gone == [] and written == {lo: CommittedOffset(20, "m", 1)}  # hi keeps its higher 30
    frags = {lo: CommittedOffset(20, "m", 1), hi: CommittedOffset(30)}
    gone, written = commit_fragments(frags, Shard("t", 0), CommittedOffset(31, "m", 1))
    assert sorted(gone) == [lo, hi] and written == {Shard("t", 0): CommittedOffset(31, "m", 1)}


# ------------------------------------------------------------------- a column at a time: `kept`

@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"a", b"b", b""])), max_size=60),
    st.sampled_from([1, 2, 3, 4, 7]).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
    st.lists(st.integers(0, 80), max_size=4),
    st.integers(0, 1000),
)
def test_kept_is_the_rule_record_by_record(
    keys: list[bytes | None], which: tuple[int, int], stops: list[int], first: int,
) -> None:
    """`kept` (the executors' vectorised filter) agrees with `key_hash`, the range and `Resume.skips`
    for keyed and keyless records, with and without skip pieces."""
    n, i = which
    lo, hi = ranges(n)[i]
    # disjoint pieces of the range, each done below some offset (what a merge's Resume holds)
    cuts = sorted({lo + (hi - lo) * k // (len(stops) + 1) for k in range(len(stops) + 2)})
    skip = tuple((a, b, first + stop) for (a, b), stop in zip(itertools.pairwise(cuts), stops, strict=False))
    offsets = np.arange(first, first + len(keys), dtype=np.int64)
    rule = Resume(first, skip)
    want = [lo <= key_hash(k, o) < hi and not rule.skips(key_hash(k, o), o)
            for k, o in zip(keys, range(first, first + len(keys)), strict=True)]
    assert kept(keys, offsets, lo, hi, skip).tolist() == want
    assert kept(keys, offsets, lo, hi).tolist() == [lo <= key_hash(k, int(o)) < hi
                                                    for k, o in zip(keys, offsets, strict=True)]


def test_kept_of_a_whole_partition_keeps_all_but_what_is_skipped() -> None:
    keys: list[bytes | None] = [b"x", None, b"y"]
    offsets = np.array([7, 8, 9], dtype=np.int64)
    assert kept(keys, offsets, 0, KEY_SPACE).tolist() == [True, True, True]
    assert kept(keys, offsets, 0, KEY_SPACE, ((0, KEY_SPACE, 9),)).tolist() == [False, False, True]
    assert kept([], np.array([], dtype=np.int64), 0, KEY_SPACE).tolist() == []


def test_kept_refuses_overlapping_skip_pieces() -> None:
    with pytest.raises(ValueError, match="overlap"):
        kept([b"x"], np.array([1], dtype=np.int64), 0, KEY_SPACE, ((0, 10, 5), (5, 20, 5)))


# ------------------------------------------------------------------------------- the model

RECORDS = 80


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[bytes | None], list[tuple[int, list[int], list[int]]]]:
    """Keys of a partition's records and a history: steps of (parallelism, commit order of its ranges,
    how far each range gets), then a last step that finishes everything."""
    keys = draw(st.lists(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])),
                         min_size=RECORDS, max_size=RECORDS))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
        order = draw(st.permutations(list(range(n))))
        stops = draw(st.lists(st.integers(0, RECORDS), min_size=n, max_size=n))
        steps.append((n, list(order), stops))
    last = draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
    steps.append((last, list(range(last)), [RECORDS] * last))
    return keys, steps


@given(histories())
def test_any_history_of_parallelisms_processes_every_record_exactly_once(
        h: tuple[list[bytes | None], list[tuple[int, list[int], list[int]]]]) -> None:
    keys, steps = h
    points = [key_hash(k, o) for o, k in enumerate(keys)]
    committed: dict[Shard, CommittedOffset] = {}
    processed: Counter[int] = Counter()
    order_seen: dict[bytes | None, list[int]] = {}
    for n, commit_order, stops in steps:
        shards = range_shards("t", 0, n)
        for i in commit_order:  # each range of this parallelism: resume, process, commit cleanly
            s = shards[i]
            r = resume({f: c.offset for f, c in committed.items()}, s, 0)
            stop = max(r.start, stops[i])
            for o in range(r.start, stop):
                if s.lo <= points[o] < s.hi and not r.skips(points[o], o):
                    processed[o] += 1
                    if keys[o] is not None:
                        order_seen.setdefault(keys[o], []).append(o)
            gone, written = commit_fragments(committed, s, CommittedOffset(stop))
            for f in gone:
                del committed[f]
            committed.update(written)
            # the fragments stay disjoint and never leave a hole once every range committed
            spans = sorted((f.lo, f.hi) for f in committed)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert processed == Counter(range(RECORDS)), "lost or repeated records"
    for key, offsets in order_seen.items():
        assert offsets == sorted(offsets), f"key {key!r} out of order"
    # every fragment at the end, and together they tile the partition's key space
    assert {c.offset for c in committed.values()} == {RECORDS}
    spans = sorted((f.lo, f.hi) for f in committed)
    assert spans[0][0] == 0 and spans[-1][1] == KEY_SPACE and all(
        a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_a_partitions_low_watermark_is_the_lowest_of_its_ranges() -> None:
    lo, hi = range_shards("t", 0, 2)
    assert low_watermarks([(lo, 7), (hi, 3), (Shard("t", 1), 5), (Shard("u", 0, 0, 1 << 31), 9)]) == {
        Shard("t", 0): 3, Shard("t", 1): 5, Shard("u", 0): 9}
    assert low_watermarks([]) == {}
