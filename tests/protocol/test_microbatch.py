"""Micro-batch planning: checkpoint format, fair limits, and the invariants of a sequence of batches;
key ranges: their checkpoint keys, their skip pieces, and a model of a query through parallelism changes."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.driver import OffsetReset, resumes
from regroup.protocol.keyrange import KEY_SPACE, Resume, commit_fragments, kept, key_hash, range_shards
from regroup.protocol.messages import CommittedOffset
from regroup.protocol.microbatch import (
    BatchOffset,
    Boundary,
    OffsetFormatError,
    ShardRange,
    batch_ranges,
    finished_positions,
    merge_skips,
    parse_shard_key,
    plan_next,
    shard_key,
    split_ranges,
)
from regroup.protocol.shard import Shard

A, B, C = Shard("t", 0), Shard("t", 1), Shard("u", 0)


def test_json_round_trip_and_stable_serialisation() -> None:
    off = BatchOffset({B: 5, A: 3}, {A: 1}, epoch=4)
    js = off.to_json()
    assert js == {"v": 1, "epoch": 4, "ends": {"t:0": 3, "t:1": 5}, "starts": {"t:0": 1}}
    assert list(js["ends"]) == ["t:0", "t:1"]  # type: ignore[call-overload]
    assert BatchOffset.from_json(js) == off
    assert BatchOffset().to_json() == {"v": 1, "epoch": 0, "ends": {}}


@pytest.mark.parametrize(("raw", "message"), [
    ([], "must be a JSON object"),
    ({"ends": {}}, "format None"),
    ({"v": 2, "ends": {}}, "format 2"),
    ({"v": 1, "ends": {"t0": 1}}, "malformed shard key"),
    ({"v": 1, "ends": {"t:x": 1}}, "malformed shard key"),
    ({"v": 1, "ends": {"t:0": -1}}, "is not an offset"),
    ({"v": 1, "ends": {"t:0": True}}, "is not an offset"),
    ({"v": 1, "ends": {"t:0": 3}, "starts": {"t:1": 0}}, "no end for it"),
    ({"v": 1, "ends": {"t:0": 3}, "starts": {"t:0": 4}}, "after its end"),
    ({"v": 1, "ends": [], "epoch": 0}, "must be an object"),
    ({"v": 1, "ends": {}, "epoch": "x"}, "non-integer epoch"),
])
def test_bad_checkpoint_offsets_are_refused_clearly(raw: object, message: str) -> None:
    with pytest.raises(OffsetFormatError, match=message):
        BatchOffset.from_json(raw)


def test_topic_names_with_colons_round_trip() -> None:
    s = Shard("a:b", 7)
    assert BatchOffset.from_json(BatchOffset({s: 1}).to_json()).ends == {s: 1}


def test_new_shards_begin_at_their_committed_offset() -> None:
    end = plan_next(BatchOffset({A: 10}), {A, B}, {B: 4}, {A: 20, B: 9}, None, 3)
    assert end == BatchOffset({A: 20, B: 9}, {B: 4}, 3)
    assert batch_ranges(BatchOffset({A: 10}), end, {A, B}) == [ShardRange(A, 10, 20), ShardRange(B, 4, 9)]


def test_nothing_to_do_returns_the_finished_offset_itself() -> None:
    done = BatchOffset({A: 10, B: 3}, epoch=2)
    assert plan_next(done, {A, B}, {}, {A: 10, B: 3}, None, 5) is done


def test_a_revoked_shard_leaves_the_next_batch_even_without_data() -> None:
    end = plan_next(BatchOffset({A: 10, B: 3}), {A}, {}, {A: 10, B: 3}, None, 5)
    assert end.ends == {A: 10} and end is not BatchOffset({A: 10, B: 3})


def test_a_shard_taken_back_continues_from_the_further_position() -> None:
    # This query read A up to 10 long ago; another owner went on to 15 and committed it.
    end = plan_next(BatchOffset({A: 10}), {A}, {A: 15}, {A: 30}, None, 1)
    assert end.starts == {A: 15} and end.ends == {A: 30}
    # Committed behind this query's finished position (it had not committed yet): keep going.
    end = plan_next(BatchOffset({A: 10}), {A}, {A: 7}, {A: 30}, None, 1)
    assert end.starts == {} and end.ends == {A: 30}


def test_a_shard_without_any_position_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="no position"):
        plan_next(BatchOffset(), {A}, {}, {A: 3}, None, 1)


def test_limit_is_shared_fairly_and_never_exceeded() -> None:
    end = plan_next(BatchOffset({A: 0, B: 0, C: 0}), {A, B, C}, {}, {A: 100, B: 2, C: 100}, 50, 1)
    assert end.ends == {A: 24, B: 2, C: 24}


def test_replay_skips_moved_shards_and_what_others_committed() -> None:
    start, end = BatchOffset({A: 10, B: 5}), BatchOffset({A: 20, B: 9})
    assert batch_ranges(start, end, {A}) == [ShardRange(A, 10, 20)]
    assert batch_ranges(start, end, {A, B}, {A: 14, B: 9}) == [ShardRange(A, 14, 20)]


def test_finished_positions_only_for_owned_shards() -> None:
    assert finished_positions(BatchOffset({A: 3, B: 4}), {B, C}) == {B: 4}


def test_split_ranges() -> None:
    assert split_ranges([ShardRange(A, 0, 5), ShardRange(B, 3, 4)], 2) == [
        ShardRange(A, 0, 2), ShardRange(A, 2, 4), ShardRange(A, 4, 5), ShardRange(B, 3, 4)]
    with pytest.raises(ValueError):
        split_ranges([], 0)


SHARDS = [Shard("t", p) for p in range(4)]


@st.composite
def scenarios(draw: st.DrawFn) -> list[tuple[frozenset[Shard], dict[Shard, int], int | None]]:
    """A sequence of batch boundaries: what is owned, how much the log grew, the limit."""
    steps = []
    for _ in range(draw(st.integers(1, 25))):
        owned = frozenset(draw(st.sets(st.sampled_from(SHARDS))))
        grow = {s: draw(st.integers(0, 30)) for s in SHARDS}
        steps.append((owned, grow, draw(st.one_of(st.none(), st.integers(0, 60)))))
    return steps


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_sequence_of_batches_reads_every_owned_record_once_and_respects_limits(
    steps: list[tuple[frozenset[Shard], dict[Shard, int], int | None]],
) -> None:
    """Model: a single query; the group's committed offset of a shard is where this query stopped
    (it commits at every boundary). Every record of a shard is read exactly once across the batches
    while owned; batches stay within the log and the limit; no batch reads an unowned shard."""
    log_end = dict.fromkeys(SHARDS, 0)
    committed = dict.fromkeys(SHARDS, 0)
    finished, owned = BatchOffset(), frozenset[Shard]()
    read: dict[Shard, list[int]] = {s: [] for s in SHARDS}
    for new_owned, grow, limit in steps:
        for s in SHARDS:
            log_end[s] += grow[s]
        # boundary: commit what finished for shards still owned, then the assignment changes
        committed.update(finished_positions(finished, owned))
        beginnings = {s: committed[s] for s in new_owned - owned}
        owned = new_owned
        end = plan_next(finished, owned, beginnings, log_end, limit, 1)
        assert set(end.ends) == set(owned)
        if end == finished:
            continue  # Spark runs no batch when the offset did not move
        ranges = batch_ranges(finished, end, owned)
        total = sum(r.count for r in ranges)
        if limit is not None:
            assert total <= limit
        for r in ranges:
            assert r.shard in owned and 0 <= r.start < r.end <= log_end[r.shard]
            read[r.shard].extend(range(r.start, r.end))
        assert BatchOffset.from_json(end.to_json()) == end
        finished = end
    committed.update(finished_positions(finished, owned))
    for s in SHARDS:
        assert read[s] == sorted(set(read[s])), f"{s} read twice"
        assert read[s] == list(range(committed[s])), f"{s}: gap or overrun"


# ---------------------------------------------------------------------------------------------------
# The Boundary: one query's knowledge of its shards, replaced at each batch boundary.

KEEP, REVOKE, LOSE, TAKE, OTHER = "keep", "revoke", "lose", "take", "other"


class Step(NamedTuple):
    grow: dict[Shard, int]
    what: dict[Shard, str]
    other_reads: int
    limit: int | None
    accepted: bool
    revoke_accepted: bool
    ahead: dict[Shard, int]


def test_the_boundary_begins_a_taken_shard_once_and_keeps_its_floor() -> None:
    b = Boundary().taken({A: 4, B: 0}, {A: 4})
    assert b.owned == {A, B} and b.committed() == {A: 4}
    b2, end = b.plan(BatchOffset(), {A: 10, B: 2}, None, 7)
    assert end == BatchOffset({A: 10, B: 2}, {A: 4, B: 0}, 7)
    assert all(h.begin is None for h in b2.holdings.values()) and b.holdings[A].begin == 4  # b unchanged
    assert b2.ranges(BatchOffset(), end) == [ShardRange(A, 4, 10), ShardRange(B, 0, 2)]
    # A replay by a process that took A at 6 (another owner committed 6 meanwhile) reads from 6.
    assert Boundary().taken({A: 6}, {A: 6}).ranges(BatchOffset(), end) == [ShardRange(A, 6, 10)]


def test_a_shard_a_replay_skipped_and_taken_back_begins_at_its_committed_offset() -> None:
    # A restarted query replays batch N (A up to 8, B up to 9) owning only B: A is skipped. Another
    # owner read A from 3 and committed 5, then A comes back. Had the next batch started A at 8,
    # where the skipped batch says it ends, records 5..7 would be read by nobody.
    start, end_n = BatchOffset({A: 3, B: 4}), BatchOffset({A: 8, B: 9})
    b = Boundary().taken({B: 4}, {B: 4})
    b = b.replayed(start, end_n)
    assert b.ranges(start, end_n) == [ShardRange(B, 4, 9)]
    # A comes back at the first boundary after the replay.
    b, nxt = b.taken({A: 5}, {A: 5}).plan(end_n, {A: 12, B: 9}, None, 4)
    assert nxt.starts == {A: 5} and b.ranges(end_n, nxt) == [ShardRange(A, 5, 12)]
    assert b.skipped is None
    # Had it come back later, the batch planned in between no longer carries it: it begins at its
    # committed offset anyway.
    later, gap = Boundary().taken({B: 4}, {B: 4}).replayed(start, end_n).plan(end_n, {B: 9}, None, 3)
    assert gap.ends == {B: 9} and later.skipped is None
    _, back = later.taken({A: 5}, {A: 5}).plan(gap, {A: 12, B: 9}, None, 4)
    assert back.starts == {A: 5}
    # A shard the replay did read keeps going from the replayed batch's end (no duplicates).
    read = Boundary().taken({A: 3, B: 4}, {A: 3, B: 4}).replayed(start, end_n)
    assert read.skipped is None
    _, after = read.plan(end_n, {A: 8, B: 9}, None, 3)
    assert after.ends == {A: 8, B: 9} and after.starts == {}


def test_the_boundary_commits_only_what_moved_and_forgets_released_shards() -> None:
    b = Boundary().taken({A: 4, B: 0}, {A: 4})
    done = BatchOffset({A: 4, B: 3, C: 9})
    assert b.to_commit(done) == {B: 3}
    assert b.to_commit(done, {A}) == {}
    b = b.with_committed({B: 3, C: 9})
    assert b.committed() == {A: 4, B: 3} and b.to_commit(done) == {}
    assert b.released({B}).owned == {A} and b.released({B}).with_committed({B: 5}).committed() == {A: 4}


@st.composite
def boundary_runs(draw: st.DrawFn) -> tuple[bool, list[Step]]:
    """Boundaries of one query in a group: per shard an event (keep, revoke, lose, take, or another
    owner reading and committing ``n`` records while this query does not own it), how much the log
    grew, a record limit, whether the coordinator accepts the boundary's commit and the revocations'
    commits, and how far other owners go after the batch (for a replay by a restarted process).
    A clean run has no refused commit and no Lost."""
    clean = draw(st.booleans())
    events = st.sampled_from([KEEP, REVOKE, TAKE, OTHER] if clean else [KEEP, REVOKE, LOSE, TAKE, OTHER])
    steps = []
    for _ in range(draw(st.integers(1, 20))):
        grow = {s: draw(st.integers(0, 30)) for s in SHARDS}
        what = {s: draw(events) for s in SHARDS}
        ahead = {s: draw(st.integers(0, 30)) for s in SHARDS}
        limit = draw(st.one_of(st.none(), st.integers(0, 60)))
        steps.append(Step(grow, what, draw(st.integers(0, 20)), limit,
                          clean or draw(st.booleans()), clean or draw(st.booleans()), ahead))
    return clean, steps


@settings(max_examples=300, deadline=None)
@given(boundary_runs(), st.sets(st.sampled_from(SHARDS)))
def test_the_boundary_keeps_the_sources_guarantees(
    run: tuple[bool, list[Step]],
    restarted_with: set[Shard],
) -> None:
    """Model: the query's boundary loop as `QueryMember.plan` runs it (commit the finished batch; then
    revoke = commit then release, lose = release without commit, take = begin at the group's
    committed offset; then plan), next to other owners that read and commit shards this query does
    not own. Checks docs/spark.md's guarantees:

    * a batch reads only owned shards, within the log and the limit;
    * a revoked shard's committed offset is exactly where this query stopped (a clean hand-off)
      whenever the coordinator accepts the commit;
    * committed offsets never move backwards, and never past what was read;
    * a batch replayed by a restarted process skips shards it does not own and never re-reads below
      what the group had committed when it took them;
    * every record below the final committed offset was read (at least once), and exactly once in
      a clean run.
    """
    clean, steps = run
    log_end = dict.fromkeys(SHARDS, 0)
    group: dict[Shard, int] = {}  # the group's committed offsets
    reads: dict[Shard, list[int]] = {s: [] for s in SHARDS}
    b, finished = Boundary(), BatchOffset()

    def commit(offsets: dict[Shard, int], accepted: bool) -> Boundary:
        if not accepted or not offsets:
            return b
        for s, o in offsets.items():
            assert o >= group.get(s, 0), f"{s}: commit {o} behind the group's {group.get(s)}"
            assert o <= max(reads[s], default=-1) + 1, f"{s}: commit {o} past what was read"
        group.update(offsets)
        return b.with_committed(offsets)

    for grow, what, other_reads, limit, accepted, revoke_accepted, ahead in steps:
        for s in SHARDS:
            log_end[s] += grow[s]
        b = commit(b.to_commit(finished), accepted)
        for s in SHARDS:
            if what[s] == REVOKE and s in b.owned:
                b = commit(b.to_commit(finished, {s}), revoke_accepted)
                if revoke_accepted:
                    assert group.get(s, 0) == finished.ends[s], f"{s}: unclean hand-off"
                b = b.released({s})
            elif what[s] == LOSE and s in b.owned:
                b = b.released({s})
            elif what[s] == TAKE and s not in b.owned:
                at = group.get(s, 0)
                b = b.taken({s: at}, {s: group[s]} if s in group else {})
            elif what[s] == OTHER and s not in b.owned:
                at = group.get(s, 0)
                upto = min(log_end[s], at + other_reads)
                reads[s].extend(range(at, upto))
                group[s] = upto
        b, end = b.plan(finished, {s: log_end[s] for s in b.owned}, limit, 1)
        assert set(end.ends) == b.owned
        if end == finished:
            continue  # Spark runs no batch when the offset did not move
        ranges = b.ranges(finished, end)
        if limit is not None:
            assert sum(r.count for r in ranges) <= limit
        for r in ranges:
            assert r.shard in b.owned and 0 <= r.start < r.end <= log_end[r.shard]
            reads[r.shard].extend(range(r.start, r.end))
        # The same batch replayed by a process restarted with other shards, which it took at the
        # group's committed offsets once other owners had gone further (``ahead``): only those
        # shards, and never below what the group had committed.
        later = {s: min(log_end[s], group.get(s, 0) + ahead[s]) for s in restarted_with}
        restarted = Boundary().taken(later, later)
        for r in restarted.ranges(finished, end):
            assert r.shard in restarted_with and r.start >= later[r.shard]
        finished = end
    for s in SHARDS:
        below = set(range(group.get(s, 0)))
        assert below <= set(reads[s]), f"{s}: records below the committed offset never read"
        if clean:
            assert len(reads[s]) == len(set(reads[s])), f"{s}: read twice in a clean run"
            assert sorted(reads[s]) == list(range(len(reads[s]))), f"{s}: gap"


# ---------------------------------------------------------------------------------------------------
# Key ranges: checkpoint keys, skip pieces, and a query through changes of parallelism.

HALF = KEY_SPACE // 2
LO, HI = Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)


def test_range_shard_keys_round_trip_and_whole_partitions_keep_their_old_key() -> None:
    assert shard_key(Shard("t", 0)) == "t:0"
    assert shard_key(HI) == f"t:0:{HALF}-{KEY_SPACE}" == "t:0:2147483648-4294967296"
    for s in (Shard("t", 0), LO, HI, Shard("a:b", 7, 5, 9), Shard("a:1-2", 3), Shard("x:3", 7, 0, 1)):
        assert parse_shard_key(shard_key(s)) == s
    assert parse_shard_key("t:0") == Shard("t", 0) and parse_shard_key("t:0").whole


def test_a_checkpoint_written_before_key_ranges_reads_identically() -> None:
    old = {"v": 1, "epoch": 3, "ends": {"t:0": 5, "t:1": 7, "a:b:2": 1}, "starts": {"t:1": 2}}
    off = BatchOffset.from_json(old)
    assert off == BatchOffset({A: 5, B: 7, Shard("a:b", 2): 1}, {B: 2}, 3)
    assert off.skips == {} and off.to_json() == old  # and it writes back byte for byte


def test_range_offsets_and_their_skips_round_trip() -> None:
    whole = Shard("t", 1)
    off = BatchOffset({HI: 40, LO: 30, whole: 9}, {HI: 20}, 5,
                      {HI: ((HALF, HALF + 10, 25), (HALF + 10, KEY_SPACE, 35)), whole: ((0, 7, 4),)})
    js = off.to_json()
    assert js == {
        "v": 1, "epoch": 5,
        "ends": {"t:0:0-2147483648": 30, "t:0:2147483648-4294967296": 40, "t:1": 9},
        "starts": {"t:0:2147483648-4294967296": 20},
        "skips": {"t:0:2147483648-4294967296": [[HALF, HALF + 10, 25], [HALF + 10, KEY_SPACE, 35]],
                  "t:1": [[0, 7, 4]]},
    }
    assert BatchOffset.from_json(js) == off
    assert "skips" not in BatchOffset({HI: 4}, skips={HI: ()}).to_json()  # empty: not written


@pytest.mark.parametrize("key", [
    "t0", ":0", "t:", "t:x", "t:0:", "t:0:5-", "t:0:-5", "t:0:5", "t:0:1-2-3", "t:x:1-2", ":1-2", "0:1-2",
    "t:0:5-5", "t:0:6-5", "t:0:0-4294967297", "t:0:01-5", "t:0:0-4294967296", "t:0:a-b", "t:0:٣-5",
])
def test_malformed_shard_keys_are_refused_clearly(key: str) -> None:
    if key == "t:0:5":  # not malformed: topic "t:0", partition 5 — a colon in a topic name reads back
        assert parse_shard_key(key) == Shard("t:0", 5)
        return
    with pytest.raises(OffsetFormatError, match="shard key"):
        parse_shard_key(key)
    with pytest.raises(OffsetFormatError, match="shard key"):
        BatchOffset.from_json({"v": 1, "ends": {key: 1}})


R = "t:0:0-2147483648"


@pytest.mark.parametrize(("skips", "message"), [
    ([], "'skips' must be an object"),
    ({R: []}, "non-empty list"),
    ({R: [[0, 5]]}, "malformed piece"),
    ({R: [[0, 5, True]]}, "malformed piece"),
    ({R: [(0, 5, 3)]}, "malformed piece"),
    ({R: [[0, 5, 0]]}, "outside"),
    ({R: [[5, 5, 3]]}, "outside"),
    ({R: [[0, HALF + 1, 3]]}, "outside"),
    ({R: [[0, 5, 3], [4, 9, 3]]}, "sorted and disjoint"),
    ({R: [[5, 9, 3], [0, 5, 3]]}, "sorted and disjoint"),
    ({"t:1": [[0, 5, 3]]}, "no end for it"),
    ({"t:0:x": [[0, 5, 3]]}, "malformed shard key"),
])
def test_malformed_skips_are_refused_clearly(skips: object, message: str) -> None:
    with pytest.raises(OffsetFormatError, match=message):
        BatchOffset.from_json({"v": 1, "ends": {R: 10}, "skips": skips})


def test_merge_skips_keeps_the_highest_offset_where_pieces_overlap() -> None:
    assert merge_skips() == () and merge_skips((), ()) == ()
    assert merge_skips([(0, 10, 5), (10, 20, 5)]) == ((0, 20, 5),)  # neighbours with one offset coalesce
    assert merge_skips([(0, 10, 5)], [(5, 15, 8)]) == ((0, 5, 5), (5, 15, 8))
    assert merge_skips([(0, 10, 9)], [(5, 15, 8)]) == ((0, 10, 9), (10, 15, 8))
    assert merge_skips([(20, 30, 1), (0, 10, 4)], [(0, 10, 4)]) == ((0, 10, 4), (20, 30, 1))


def test_a_merged_range_carries_its_skips_until_it_passes_them() -> None:
    # The whole partition after a merge: LO was done to 10, HI to 30. It begins at 10 and skips HI's
    # records below 30; with 8 records a batch it passes them in the third batch.
    r = Resume(10, ((HALF, KEY_SPACE, 30),))
    whole = Shard("t", 0)
    b = Boundary().taken({whole: r}, {})
    b, end1 = b.plan(BatchOffset(), {whole: 100}, 8, 1)
    assert end1 == BatchOffset({whole: 18}, {whole: 10}, 1, {whole: ((HALF, KEY_SPACE, 30),)})
    assert b.ranges(BatchOffset(), end1) == [ShardRange(whole, 10, 18, ((HALF, KEY_SPACE, 30),))]
    b, end2 = b.plan(end1, {whole: 100}, 8, 1)
    b, end3 = b.plan(end2, {whole: 100}, 8, 1)
    assert end2.skips == end3.skips == {whole: ((HALF, KEY_SPACE, 30),)}  # 26..34 still has 26..29
    b, end4 = b.plan(end3, {whole: 100}, 8, 1)
    assert end4.skips == {} and b.ranges(end3, end4) == [ShardRange(whole, 34, 42)]
    assert b.to_commit(end4) == {whole: 42}  # committed at the batch's end, like any partition
    # A replay of batch 2 from the checkpoint alone skips the same records.
    assert Boundary().taken({whole: 10}, {}).ranges(end1, BatchOffset.from_json(end2.to_json())) == [
        ShardRange(whole, 18, 26, ((HALF, KEY_SPACE, 30),))]


def test_a_replay_by_a_process_that_took_the_range_later_adds_what_its_own_resume_skips() -> None:
    start, end = BatchOffset({HI: 10}), BatchOffset({HI: 40}, skips={HI: ((HALF, HALF + 100, 20),)})
    later = Boundary().taken({HI: Resume(15, ((HALF + 50, KEY_SPACE, 30),))}, {})
    assert later.ranges(start, end) == [
        ShardRange(HI, 15, 40, ((HALF, HALF + 50, 20), (HALF + 50, KEY_SPACE, 30)))]
    assert batch_ranges(start, end, {HI}, {HI: 12}) == [ShardRange(HI, 12, 40, ((HALF, HALF + 100, 20),))]


def test_a_range_taken_back_behind_its_finished_position_still_skips_what_others_did() -> None:
    # Finished batch: HI up to 20. HI comes back with Resume(18, skip up to 25 of a sub-range): it
    # continues from 20 (no re-read) and still skips the sub-range's records below 25.
    finished = BatchOffset({HI: 20})
    b = Boundary().taken({HI: Resume(18, ((HALF, HALF + 5, 25),))}, {})
    _, end = b.plan(finished, {HI: 30}, None, 2)
    assert end == BatchOffset({HI: 30}, {}, 2, {HI: ((HALF, HALF + 5, 25),)})


def test_split_ranges_keep_only_the_skips_each_piece_needs() -> None:
    r = ShardRange(HI, 0, 5, ((HALF, HALF + 1, 2), (HALF + 1, KEY_SPACE, 4)))
    assert split_ranges([r], 2) == [
        ShardRange(HI, 0, 2, r.skip), ShardRange(HI, 2, 4, ((HALF + 1, KEY_SPACE, 4),)), ShardRange(HI, 4, 5)]


def kept_records(ranges: list[ShardRange], keys: list[bytes | None]) -> list[int]:
    """The offsets the ranges keep, record by record by the rule (`key_hash`, `Resume.skips`)."""
    out = []
    for r in ranges:
        rule = Resume(r.start, r.skip)
        for o in range(r.start, r.end):
            pt = key_hash(keys[o], o)
            if r.shard.lo <= pt < r.shard.hi and not rule.skips(pt, o):
                out.append(o)
    return out


KEYS: list[bytes | None] = [b"a", b"b", b"c", b"d", b"e", b"f", b"g", None]
MINE, THEIRS = "query", "other"


class RangeStep(NamedTuple):
    keys: list[bytes | None]
    change: tuple[int, list[str]] | None
    other_reads: int
    limit: int | None


@st.composite
def range_runs(draw: st.DrawFn) -> list[RangeStep]:
    """Boundaries of one query sharing one partition with another member: at each, records arrive
    (keys drawn from a few, some keyless), the other member reads some of its ranges' records, and
    maybe the group's parallelism or assignment changes (every range to the query or the other)."""
    steps = []
    for _ in range(draw(st.integers(1, 14))):
        keys = draw(st.lists(st.sampled_from(KEYS), max_size=25))
        change = None
        if draw(st.booleans()):
            n = draw(st.sampled_from([1, 2, 3, 4]))
            change = (n, draw(st.lists(st.sampled_from([MINE, THEIRS]), min_size=n, max_size=n)))
        steps.append(RangeStep(keys, change, draw(st.integers(0, 30)),
                               draw(st.one_of(st.none(), st.integers(0, 40)))))
    return steps


@settings(max_examples=300, deadline=None)
@given(range_runs())
def test_a_query_through_changes_of_parallelism_reads_every_record_once(steps: list[RangeStep]) -> None:
    """Model: one partition; a query (`Boundary`, as `QueryMember` drives it) and another member
    share its key ranges; the group commits per range into fragments (`commit_fragments`) and new
    owners resume from them (`driver.resumes`, what `Membership.where_to_resume` returns). At a
    change everyone commits and releases before anyone takes a range (revoke-then-assign). The query's
    batches are read as executors read them: the partition's [start, end), kept by `keyrange.kept`
    with the batch's skips — checked against the record-by-record rule. Every record is processed
    exactly once, each batch replays from its checkpoint JSON alone, and each key keeps its order."""
    keys: list[bytes | None] = []
    frags: dict[Shard, CommittedOffset] = {}
    reads: Counter[int] = Counter()
    order: dict[bytes, list[int]] = {}
    b, finished = Boundary(), BatchOffset()
    other: dict[Shard, tuple[int, Resume]] = {}  # the other member's ranges: position, resume

    def commit(offsets: dict[Shard, int]) -> None:
        for s, o in offsets.items():
            gone, written = commit_fragments(frags, s, CommittedOffset(o))
            for f in gone:
                del frags[f]
            frags.update(written)

    def process(o: int) -> None:
        reads[o] += 1
        k = keys[o]
        if k is not None:
            order.setdefault(k, []).append(o)

    def other_reads(upto_of: dict[Shard, int]) -> None:
        for s, (pos, r) in sorted(other.items()):
            upto = max(pos, upto_of[s])
            for o in range(pos, upto):
                pt = key_hash(keys[o], o)
                if s.lo <= pt < s.hi and not r.skips(pt, o):
                    process(o)
            commit({s: upto})
            other[s] = (upto, r.passed(upto))

    def take(assigned: dict[Shard, str]) -> None:
        nonlocal b
        where = resumes(assigned, {f: c.offset for f, c in frags.items()}, OffsetReset.EARLIEST, {})
        mine = {s: where[s] for s, who in assigned.items() if who == MINE}
        b = b.taken(mine, {s: frags[s].offset for s in mine if s in frags})
        other.update({s: (where[s].start, where[s]) for s, who in assigned.items() if who == THEIRS})

    take({Shard("t", 0): MINE})
    for new_keys, change, n_other, limit in steps:
        keys.extend(new_keys)
        end_of_log = len(keys)
        # the boundary: the finished batch is committed, the other member reads and commits
        to_commit = b.to_commit(finished)
        commit(to_commit)
        b = b.with_committed(to_commit)
        other_reads({s: min(end_of_log, pos + n_other) for s, (pos, _) in other.items()})
        if change is not None:  # revoke everything (committed above), then assign the new ranges
            b = b.released(b.owned)
            other.clear()
            n, owners = change
            take(dict(zip(range_shards("t", 0, n), owners, strict=True)))
        b, end = b.plan(finished, dict.fromkeys(b.owned, end_of_log), limit, 1)
        if end == finished:
            continue
        ranges = b.ranges(finished, end)
        # The checkpoint alone says what the batch reads and skips (a replay knows nothing else)...
        assert batch_ranges(finished, BatchOffset.from_json(end.to_json()), b.owned) == ranges
        # ...and a process restarted now, taking the same ranges where the group's fragments say,
        # would keep the very same records of it.
        now = {f: c.offset for f, c in frags.items()}
        restarted = Boundary().taken(resumes(b.owned, now, OffsetReset.EARLIEST, {}), {})
        assert kept_records(restarted.ranges(finished, end), keys) == kept_records(ranges, keys)
        if limit is not None:
            assert sum(r.count for r in ranges) <= limit
        for r in ranges:
            assert all(a[1] <= c[0] for a, c in itertools.pairwise(r.skip)), "skip pieces overlap"
            offsets = np.arange(r.start, r.end, dtype=np.int64)
            mask = kept(keys[r.start:r.end], offsets, r.shard.lo, r.shard.hi, r.skip)
            expected = kept_records([r], keys)
            assert [o for o, k in zip(range(r.start, r.end), mask.tolist(), strict=True) if k] == expected, \
                "the executors' filter disagrees with the rule"
            for o in expected:
                process(o)
        finished = end
    # Finally everyone commits and leaves; one member takes the whole partition and reads the rest.
    commit(b.to_commit(finished))
    other_reads({s: pos for s, (pos, _) in other.items()})
    other.clear()
    b = Boundary()
    take({Shard("t", 0): THEIRS})
    other_reads({Shard("t", 0): len(keys)})
    assert reads == Counter(range(len(keys))), "lost or repeated records"
    for k, offsets in order.items():
        assert offsets == sorted(offsets), f"key {k!r} out of order"
