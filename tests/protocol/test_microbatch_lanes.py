"""Micro-batch planning over partitions split on the producer side: a shard read as lanes, one per open
piece (`Boundary` rule 6) — taken, cut at a split, joined after a merge, planned to its piece's end,
committed and released with its shard — and a model of a query through random splits, merges and
hand-offs, against a log whose pieces each have their own offsets (`regroup.log.embedded.layout`)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.log.embedded.layout import Layout
from regroup.protocol.driver import OffsetReset, held_when_lost, resumes
from regroup.protocol.keyrange import KEY_SPACE, Resume, commit_fragments, key_hash
from regroup.protocol.member import Lost
from regroup.protocol.messages import CommittedOffset
from regroup.protocol.microbatch import (
    WHOLE,
    BatchOffset,
    Boundary,
    ShardRange,
    Skip,
    batch_ranges,
    clip,
    lane_ends,
    lanes_of,
)
from regroup.protocol.shard import Shard

HALF = KEY_SPACE // 2
S = Shard("t", 0)
L, R = Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)
PK = ("t", 0)
HALVES = ((0, HALF), (HALF, KEY_SPACE))


def test_lanes_cut_a_shard_at_the_pieces_inside_it() -> None:
    assert lanes_of(S, WHOLE) == (S,)
    assert lanes_of(S, HALVES) == (L, R)
    assert lanes_of(L, HALVES) == (L,)  # a range inside one piece is its own lane
    mid = Shard("t", 0, HALF - 10, HALF + 10)
    assert lanes_of(mid, HALVES) == (Shard("t", 0, HALF - 10, HALF), Shard("t", 0, HALF, HALF + 10))


def test_clip_keeps_what_a_resume_says_of_some_keys_and_begins_at_their_laggard() -> None:
    r = Resume(10, ((HALF, KEY_SPACE, 30),))
    assert clip(r, 0, HALF) == Resume(10)
    assert clip(r, HALF, KEY_SPACE) == Resume(30)  # every key of it was done to 30: begin there
    assert clip(Resume(10, ((HALF, HALF + 5, 30),)), HALF, KEY_SPACE) == Resume(10, ((HALF, HALF + 5, 30),))
    assert clip(Resume(10, ((0, 5, 20), (5, 10, 40))), 0, 10) == Resume(20, ((5, 10, 40),))
    assert clip(Resume(10, ((0, 5, 20), (5, 10, 40))), 3, 7) == Resume(20, ((5, 7, 40),))


def test_a_lane_ends_where_its_piece_ends() -> None:
    pieces = {PK: {(0, HALF): 7, (HALF, KEY_SPACE): 9}}
    assert lane_ends([L, R, Shard("u", 0)], pieces) == {L: 7, R: 9}
    assert lane_ends([S], pieces) == {S: 7}  # across pieces (cut before any plan): the lowest


def test_a_shard_over_two_pieces_is_taken_as_two_lanes_each_from_its_own_resume() -> None:
    b = Boundary().taken({S: Resume(10, ((HALF, KEY_SPACE, 30),))}, {}, {PK: HALVES})
    assert b.assigned == {S} and b.owned == {L, R} and b.lanes == {S: (L, R)}
    assert (b.holdings[L].begin, b.holdings[R].begin) == (10, 30)
    b, end = b.plan_pieces(BatchOffset(), {PK: {(0, HALF): 50, (HALF, KEY_SPACE): 40}}, None, 3)
    assert end == BatchOffset({L: 50, R: 40}, {L: 10, R: 30}, 3)
    assert b.ranges(BatchOffset(), end) == [ShardRange(L, 10, 50), ShardRange(R, 30, 40)]
    # The shard's revocation commits every lane, and releases them all; a Lost drops them.
    assert b.to_commit(end, {S}) == {L: 50, R: 40} == b.to_commit(end)
    assert b.released({S}) == Boundary()
    assert b.released(held_when_lost(Lost(frozenset(), "fenced"), b.assigned)).owned == frozenset()
    # The checkpoint holds the lanes as key ranges: the format is the one key ranges brought.
    assert set(end.to_json()["ends"]) == {"t:0:0-2147483648", "t:0:2147483648-4294967296"}  # type: ignore[call-overload]
    assert BatchOffset.from_json(end.to_json()) == end


def test_a_lane_a_split_reaches_is_cut_where_its_next_batch_begins() -> None:
    b = Boundary().taken({S: 5}, {S: 5})
    b, end1 = b.plan_pieces(BatchOffset(), {PK: {WHOLE[0]: 20}}, None, 1)
    assert end1 == BatchOffset({S: 20}, {S: 5}, 1)
    b = b.with_committed(b.to_commit(end1))  # the boundary commits the finished batch first
    # The partition was split at 20 (no record in it since): the low piece has nothing new yet.
    b2, end2 = b.plan_pieces(end1, {PK: {(0, HALF): 20, (HALF, KEY_SPACE): 26}}, None, 1)
    assert b2.lanes == {S: (L, R)} and b2.owned == {L, R}
    assert end2 == BatchOffset({L: 20, R: 26}, {L: 20, R: 20}, 1)  # both begin where S's batch would
    assert b2.ranges(end1, end2) == [ShardRange(R, 20, 26)]
    assert b2.to_commit(end2) == {R: 26}  # S's commit at 20 covers L's keys: nothing new to send
    # A replay from the checkpoint alone, by a process that took S again with the same pieces.
    again = Boundary().taken({S: Resume(20)}, {}, {PK: HALVES})
    assert again.ranges(end1, BatchOffset.from_json(end2.to_json())) == b2.ranges(end1, end2)
    # The next boundary: nothing to cut, the lanes go on from where the batch ended them.
    b3, end3 = b2.plan_pieces(end2, {PK: {(0, HALF): 24, (HALF, KEY_SPACE): 26}}, None, 1)
    assert end3 == BatchOffset({L: 24, R: 26}, {}, 1) and b3.ranges(end2, end3) == [ShardRange(L, 20, 24)]


def test_a_cut_lane_keeps_the_skips_each_part_needs() -> None:
    # A whole partition taken after a merge of key ranges (skip pieces in both halves), read with a
    # limit, then split: each part keeps the pieces of its keys that still drop records.
    r = Resume(10, ((0, 100, 40), (HALF, HALF + 100, 30)))
    b = Boundary().taken({S: r}, {})
    b, end1 = b.plan_pieces(BatchOffset(), {PK: {WHOLE[0]: 100}}, 10, 1)
    assert end1 == BatchOffset({S: 20}, {S: 10}, 1, {S: r.skip})
    b, end2 = b.plan_pieces(end1, {PK: {(0, HALF): 100, (HALF, KEY_SPACE): 100}}, None, 1)
    assert end2 == BatchOffset({L: 100, R: 100}, {L: 20, R: 20}, 1,
                               {L: ((0, 100, 40),), R: ((HALF, HALF + 100, 30),)})
    assert b.ranges(end1, end2) == [ShardRange(L, 20, 100, ((0, 100, 40),)),
                                    ShardRange(R, 20, 100, ((HALF, HALF + 100, 30),))]
    # A part whose every key a former owner did further on begins there (nothing below is read).
    b = Boundary().taken({S: Resume(10, ((HALF, KEY_SPACE, 50),))}, {})
    b, end1 = b.plan_pieces(BatchOffset(), {PK: {WHOLE[0]: 60}}, 5, 1)
    _, end2 = b.plan_pieces(end1, {PK: {(0, HALF): 60, (HALF, KEY_SPACE): 60}}, None, 1)
    assert end2.starts == {L: 15, R: 50} and end2.skips == {}


def test_lanes_that_share_a_piece_again_are_joined_once_they_begin_at_one_offset() -> None:
    b = Boundary().taken({S: 0}, {S: 0}, {PK: HALVES})
    b, end1 = b.plan_pieces(BatchOffset(), {PK: {(0, HALF): 45, (HALF, KEY_SPACE): 40}}, None, 1)
    b = b.with_committed(b.to_commit(end1))
    # Merged back whole: the merged piece starts at 45 (the highest end). L at 45 and R at 40 go on
    # as two lanes of one piece until they are at one offset...
    merged = {PK: {WHOLE[0]: 60}}
    b, end2 = b.plan_pieces(end1, merged, None, 1)
    assert end2 == BatchOffset({L: 60, R: 60}, {}, 1) and b.owned == {L, R}
    assert b.ranges(end1, end2) == [ShardRange(L, 45, 60), ShardRange(R, 40, 60)]
    b = b.with_committed(b.to_commit(end2))
    # ...then they are the shard again, from there (a batch with no records: the key changes).
    b, end3 = b.plan_pieces(end2, merged, None, 1)
    assert end3 == BatchOffset({S: 60}, {S: 60}, 1) and b.lanes == {S: (S,)}
    assert b.committed() == {S: 60} and b.to_commit(end3) == {}
    assert b.plan_pieces(end3, merged, None, 1)[1] is end3  # nothing to read: no batch
    # Lanes of two assigned shards are never joined (each commits and goes with its own shard).
    two = Boundary().taken({L: 0, R: 0}, {}, {PK: WHOLE})
    two, e = two.plan_pieces(BatchOffset(), merged, None, 1)
    assert two.plan_pieces(e, merged, None, 1)[0].owned == {L, R}


def test_an_unsplit_partition_plans_as_before() -> None:
    b = Boundary().taken({S: 4, Shard("t", 1): 0}, {S: 4})
    ends = {S: 10, Shard("t", 1): 3}
    by_piece = {(s.topic, s.partition): {WHOLE[0]: e} for s, e in ends.items()}
    assert b.plan_pieces(BatchOffset(), by_piece, 7, 2) == b.plan(BatchOffset(), ends, 7, 2)
    assert b.relaned(BatchOffset(), {PK: WHOLE}) is b


# ---------------------------------------------------------------------------------------------------
# The model: one partition, its layout changing under a query and another member.

KEYS = [f"k{i}".encode() for i in range(16)]


class Rec(NamedTuple):
    offset: int
    point: int
    key: bytes
    seq: int  # the order produced: per key, also the order of its offsets (layout rule 2)


class LogModel:
    """A split partition as the layout rules define it: each open piece appends at its own offsets."""

    def __init__(self) -> None:
        self.layout = Layout()
        self.next = {0: 0}
        self.records: list[Rec] = []

    def produce(self, keys: list[int]) -> None:
        for k in keys:
            key = KEYS[k]
            point = key_hash(key, 0)
            piece = self.layout.open_piece_at(point)
            self.records.append(Rec(self.next[piece.id], point, key, len(self.records)))
            self.next[piece.id] += 1

    def change(self, op: tuple[str, int, int]) -> None:
        opened = self.layout.open_pieces()
        kind, i, into = op
        if kind == "split":
            p = opened[i % len(opened)]
            new = self.layout.split(p.id, into, self.next[p.id])
        elif len(opened) > 1:
            a, b = opened[i % (len(opened) - 1)], opened[i % (len(opened) - 1) + 1]
            new = self.layout.merge({a.id: self.next[a.id], b.id: self.next[b.id]})
        else:
            return
        for q in new.pieces:
            self.next.setdefault(q.id, q.start)
        self.layout = new

    def pieces(self) -> tuple[tuple[int, int], ...]:
        return tuple((p.lo, p.hi) for p in self.layout.open_pieces())

    def piece_ends(self) -> dict[tuple[int, int], int]:
        return {(p.lo, p.hi): self.next[p.id] for p in self.layout.open_pieces()}

    def read(self, lane: Shard, start: int, end: int, skip: Skip = ()) -> list[Rec]:
        """What an executor keeps of ``lane`` [start, end): its keys' records at those offsets, less
        the skipped ones (whichever pieces hold them: layout rule 2)."""
        rule = Resume(start, skip)
        return sorted((r for r in self.records if lane.lo <= r.point < lane.hi and start <= r.offset < end
                       and not rule.skips(r.point, r.offset)), key=lambda r: r.seq)


class Step(NamedTuple):
    keys: list[int]
    change: tuple[str, int, int] | None
    who: str  # keep, self (revoked and taken back), other (another member reads a while), lose
    other_reads: int
    other_cut: int  # the other member reads key ranges cut there too (0: by piece only)
    limit: int | None


@st.composite
def runs(draw: st.DrawFn) -> tuple[bool, list[Step]]:
    clean = draw(st.booleans())
    who = st.sampled_from(["keep", "keep", "self", "other", "other"] + ([] if clean else ["lose"]))
    change = st.one_of(st.none(), st.tuples(st.sampled_from(["split", "split", "merge"]), st.integers(0, 7),
                                            st.integers(2, 3)))
    cuts = st.sampled_from([0, HALF, KEY_SPACE // 5, KEY_SPACE * 3 // 7])
    limits = st.one_of(st.none(), st.integers(0, 8), st.integers(1, 8))
    steps = [Step(draw(st.lists(st.integers(0, len(KEYS) - 1), max_size=20)), draw(change), draw(who),
                  draw(st.integers(0, 15)), draw(cuts), draw(limits))
             for _ in range(draw(st.integers(1, 16)))]
    return clean, steps


@settings(max_examples=400, deadline=None)
@given(runs())
def test_a_query_through_splits_merges_and_hand_offs_reads_every_record_once(
    run: tuple[bool, list[Step]],
) -> None:
    """Model: a query (`Boundary` as `QueryMember` drives it: commit the finished batch, do the
    coordinator's actions, plan with the log's open pieces and their ends) owns one partition, whose
    layout is split and merged between boundaries; at times it hands the partition to itself or to
    another member that reads some of it by piece and commits, or (unclean runs) loses it without
    committing. The group keeps fragments (`commit_fragments`); new owners resume from them.

    * every lane of a planned batch lies in one open piece, and ends at most where that piece ends;
    * no commit is behind where its keys resume (the lowest fragment of them, 0 where none) — the
      coordinator's own floor (`regroup.protocol.offsets`; tests/protocol/test_commit_gap.py);
    * each batch reads from its checkpoint JSON alone what it planned, and a process restarted now
      (the shard taken from the group's fragments, with the pieces of now) replays a subset of it;
    * every record is processed at least once, and in a clean run exactly once, each key in order.
    """
    clean, steps = run
    log = LogModel()
    frags: dict[Shard, CommittedOffset] = {}
    processed: Counter[int] = Counter()
    order: dict[bytes, list[int]] = {}
    b, finished = Boundary(), BatchOffset()

    def commit(offsets: dict[Shard, int]) -> None:
        for s, o in offsets.items():  # never behind where its keys resume (the laggard fragment, or 0)
            floor = resumes({s}, {f: c.offset for f, c in frags.items()}, OffsetReset.EARLIEST, {})[s].start
            assert o >= floor, f"commit of {s} at {o} behind where its keys resume ({floor})"
        for s, o in sorted(offsets.items()):
            gone, written = commit_fragments(frags, s, CommittedOffset(o))
            for f in gone:
                del frags[f]
            frags.update(written)

    def process(recs: list[Rec]) -> None:
        for r in recs:
            processed[r.seq] += 1
            order.setdefault(r.key, []).append(r.seq)

    def resume_now() -> Resume:
        return resumes({S}, {f: c.offset for f, c in frags.items()}, OffsetReset.EARLIEST, {})[S]

    def take() -> Boundary:
        own = {S: frags[S].offset} if S in frags else {}
        return b.taken({S: resume_now()}, own, {PK: log.pieces()})

    def other_reads(n: int, cut: int = 0) -> None:
        """Another member takes the partition (as key ranges cut at ``cut``, if not 0), reads up to
        ``n`` offsets of each lane — one per piece of each range; a third of that in the upper range,
        so that its keys are done to other offsets — from where the fragments say, and commits each
        lane."""
        where = resume_now()
        ends = log.piece_ends()
        ranges = [Shard("t", 0, 0, cut), Shard("t", 0, cut, KEY_SPACE)] if cut else [S]
        for i, s in enumerate(ranges):
            for lane in lanes_of(s, log.pieces()):
                r = clip(where, lane.lo, lane.hi)
                upto = min(lane_ends([lane], {PK: ends})[lane], r.start + (n if i == 0 else n // 3))
                if upto > r.start:
                    process(log.read(lane, r.start, upto, r.skip))
                    commit({lane: upto})

    b = take()
    for keys, change, who, n_other, other_cut, limit in steps:
        log.produce(keys)
        if change is not None:
            log.change(change)
        # the boundary: commit the finished batch, then the coordinator's actions
        done = b.to_commit(finished)
        commit(done)
        b = b.with_committed(done)
        if who in ("self", "other") and S in b.assigned:
            revoked = b.to_commit(finished, {S})
            commit(revoked)
            for lane in b.owned:
                assert lane not in finished.ends or frags_cover(frags, lane, finished.ends[lane]), \
                    "unclean hand-off"
            b = b.released({S})
            if who == "other":
                other_reads(n_other, other_cut)
            b = take()
        elif who == "lose":
            b = b.released(held_when_lost(Lost(frozenset(), "fenced"), b.assigned))
            other_reads(n_other, other_cut)
            b = take()
        b, end = b.plan_pieces(finished, {PK: log.piece_ends()}, limit, 1)
        pieces, ends = log.pieces(), log.piece_ends()
        for lane, e in end.ends.items():
            assert lanes_of(lane, pieces) == (lane,), f"{lane} spans open pieces {pieces}"
            assert e <= ends[next((lo, hi) for lo, hi in pieces if lo <= lane.lo < hi)]
        if end == finished:
            continue
        ranges = b.ranges(finished, end)
        assert batch_ranges(finished, BatchOffset.from_json(end.to_json()), b.owned) == ranges
        if limit is not None:
            assert sum(r.count for r in ranges) <= limit
        kept = [x for r in ranges for x in log.read(r.shard, r.start, r.end, r.skip)]
        restarted = Boundary().taken({S: resume_now()}, {}, {PK: pieces}).replayed(finished, end)
        again = [x for r in restarted.ranges(finished, end)
                 for x in log.read(r.shard, r.start, r.end, r.skip)]
        assert set(again) <= set(kept), "a restarted replay read what the batch did not"
        if clean and restarted.owned == b.owned:
            assert sorted(again) == sorted(kept), "a restarted replay with the same lanes read less"
        process(kept)
        finished = end
    # Finally the query commits and leaves; another member reads everything left.
    commit(b.to_commit(finished))
    other_reads(len(log.records) + 1)
    everything = Counter(range(len(log.records)))
    assert set(processed) == set(everything), "records lost"
    if clean:
        assert processed == everything, "records processed twice in a clean run"
        for key, seqs in order.items():
            assert seqs == sorted(seqs), f"{key!r} out of order"


def frags_cover(frags: dict[Shard, CommittedOffset], lane: Shard, offset: int) -> bool:
    """Whether every fragment of ``lane``'s keys is at ``offset`` or beyond (its commit landed)."""
    hit = [c.offset for f, c in frags.items() if f.lo < lane.hi and lane.lo < f.hi]
    covered = sum(min(f.hi, lane.hi) - max(f.lo, lane.lo) for f in frags if f.lo < lane.hi and lane.lo < f.hi)
    return covered == lane.hi - lane.lo and min(hit) >= offset


def test_the_model_log_holds_each_record_in_one_open_piece_lane() -> None:
    log = LogModel()
    log.produce(list(range(len(KEYS))) * 3)
    log.change(("split", 0, 3))
    log.produce(list(range(len(KEYS))))
    lanes = [Shard("t", 0, lo, hi) for lo, hi in log.pieces()]
    every = [x for lane in lanes for x in log.read(lane, 0, 10**6)]
    assert sorted(every) == sorted(log.records) and len(set(every)) == len(every)
    for a, c in itertools.pairwise(log.pieces()):
        assert a[1] == c[0]
