"""Producer-side split and merge in the simulator: pieces, records in pieces, lanes, the sweep."""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Callable, Mapping
from itertools import pairwise

import pytest

from regroup.log.embedded import layout as layout_mod
from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.sim import lanes as lanes_mod
from regroup.sim.check import run_seed, sweep
from regroup.sim.engine import Engine
from regroup.sim.faults import make_plan
from regroup.sim.invariants import AT_LEAST_ONCE, KEY_ORDER, OFFSETS_MONOTONIC
from regroup.sim.key_invariants import KeyRangeChecker
from regroup.sim.keyranges import RecordKeys
from regroup.sim.kip848 import Kip848System
from regroup.sim.lanes import LaneProcessor, change_layout, lane_processor
from regroup.sim.member_node import MemberSettings
from regroup.sim.network import Network, NetworkConfig
from regroup.sim.pieces import PieceKeys, PieceLog

T = "orders"


def split_log(seed: int = 3, partitions: int = 1) -> tuple[PieceKeys, PieceLog]:
    keys = PieceKeys(seed)
    log = PieceLog(keys)
    log.create(T, partitions, 0)
    return keys, log


# ------------------------------------------------------------------------------ the log's pieces
def test_a_partition_never_split_has_the_records_of_a_key_range_run() -> None:
    keys, log = split_log(7, partitions=2)
    plain = RecordKeys(7)
    for k in range(plain.keys_per_partition):
        assert keys.offsets(T, 1, k, 2_000) == plain.offsets(T, 1, k, 2_000)
    assert log.piece_ends((T,), 30_000) == {Shard(T, 0): 600, Shard(T, 1): 600}
    assert log.end_at(T, 0, 12345, 30_000) == log.end_offset(Shard(T, 0), 30_000) == 600


def test_split_and_merge_follow_the_layout_and_each_keys_offsets_only_grow() -> None:
    keys, log = split_log()
    half = log.split(T, 0, 0, 2, 10_000)  # at 200 records
    assert [(p.id, p.end) for p in half.sealed] == [(0, 200)]
    assert [(p.lo, p.hi, p.start) for p in half.opened] == [(0, KEY_SPACE // 2, 200),
                                                            (KEY_SPACE // 2, KEY_SPACE, 200)]
    log.split(T, 0, 1, 3, 20_000)  # the upper half into three
    ends = log.piece_ends((T,), 30_000)
    assert len(ends) == 4 and sorted(s.lo for s in ends) == [0, *(c for c in log.layout(T, 0).cuts())]
    # each piece grows with its keys' share of the traffic: the partition's 20 records/s, shared out
    since = sum(end - log.end_at(T, 0, s.lo, 20_000) for s, end in ends.items())
    assert 200 - len(ends) <= since <= 200
    merged = log.merge(T, 0, 0, True, 30_000)
    assert merged is not None and len(merged.sealed) == 4
    assert merged.opened[0].start == max(p.end for p in merged.sealed if p.end is not None)
    assert not merged.behind
    assert log.merge(T, 0, 0, True, 31_000) is None  # one open piece: nothing to merge
    for k in range(keys.keys_per_partition):
        offs = keys.offsets(T, 0, k, 5_000)
        assert offs == sorted(set(offs))  # ascending, one record per offset per key
        point = keys.points(T, 0)[k]
        for o in offs:  # every record lies in a piece that held its key when that offset was written
            assert any(p.lo <= point < p.hi and p.start <= o < (p.end if p.end is not None else 5_000)
                       for p in log.layout(T, 0).pieces)
    # several records share an offset number in different pieces
    later = [o for k in range(keys.keys_per_partition) for o in keys.offsets(T, 0, k, 5_000)
             if 200 <= o < 300]
    assert len(later) > len(set(later))


def test_where_a_reader_gets_to_is_asked_of_the_layout_at_the_fetch() -> None:
    _, log = split_log()
    log.split(T, 0, 0, 2, 10_000)
    low, high = 0, KEY_SPACE - 1
    assert log.end_at(T, 0, low, 9_999) == 199  # before the split: piece 0
    assert log.end_at(T, 0, low, 10_000) == log.end_at(T, 0, high, 10_000) == 200
    assert log.piece_at(T, 0, high, 15_000)[:2] == (KEY_SPACE // 2, KEY_SPACE)
    assert log.end_at(T, 0, low, 50_000) != log.end_at(T, 0, high, 50_000)  # each piece its own offsets
    merged = log.merge(T, 0, 0, False, 50_000)
    assert merged is not None
    assert log.end_at(T, 0, low, 50_000) == log.end_at(T, 0, high, 50_000) == merged.opened[0].start


def merge_at_lowest(self: layout_mod.Layout, ends: Mapping[int, int]) -> layout_mod.Layout:
    """A mutation of `Layout.merge`: the merged piece starts at the lowest end, not the highest."""
    merging = sorted((self.piece(i) for i in ends), key=lambda p: p.lo)
    merged = layout_mod.Piece(max(p.id for p in self.pieces) + 1, merging[0].lo, merging[-1].hi,
                              min(ends.values()))
    sealed = {p.id: layout_mod.Piece(p.id, p.lo, p.hi, p.start, ends[p.id]) for p in merging}
    return layout_mod.Layout((*(sealed.get(p.id, p) for p in self.pieces), merged), self.generation + 1)


def test_a_merge_that_starts_below_a_keys_records_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _, log = split_log()
    log.split(T, 0, 0, 2, 10_000)
    monkeypatch.setattr(layout_mod.Layout, "merge", merge_at_lowest)
    merged = log.merge(T, 0, 0, True, 60_000)
    assert merged is not None and merged.behind
    assert merged.opened[0].start == min(p.end for p in merged.sealed if p.end is not None)


# ------------------------------------------------------------------------------ members reading lanes
def steady_group(changes: list[tuple[int, Callable[[Kip848System], None]]], until: int, members: int = 3,
                 partitions: int = 2, seed: int = 1) -> tuple[Kip848System, KeyRangeChecker, PieceLog]:
    """A group under steady load, no faults, whose log's layout (and parallelism) change at the given
    times; run to ``until``, then every record produced until shortly before must have been processed."""
    engine = Engine()
    rng = random.Random(seed)
    keys = PieceKeys(seed)
    log = PieceLog(keys)
    log.create(T, partitions, 0)
    checker = KeyRangeChecker(keys)
    network = Network(engine, rng, NetworkConfig(), faults_until=0)
    system = Kip848System(engine, rng, network, log, nudges=True, settings=MemberSettings(topics=(T,)),
                          checker=checker, keys=keys, make_processor=lane_processor)
    for i in range(members):
        system.add_member(f"m{i}")
    for at, change in changes:
        engine.at(at, "change", lambda change=change: change(system))  # type: ignore[misc]
    engine.run(until)
    for m in system.live_members():
        assert m.processor is not None
        m.processor.report_all(engine.now)
    checker.all_processed(engine.now, log.piece_ends((T,), engine.now - 2_000))
    return system, checker, log


def split(partition: int, piece: int, into: int) -> Callable[[Kip848System], None]:
    return lambda s: change_layout(s, "split", T, partition, piece, into)


def merge(partition: int, piece: int, every: bool = False) -> Callable[[Kip848System], None]:
    return lambda s: change_layout(s, "merge", T, partition, piece, 0 if every else 2)


def parallelism(n: int) -> Callable[[Kip848System], None]:
    return lambda s: s.set_parallelism(T, n)


STEADY = [(8_000, split(0, 0, 2)), (12_000, split(1, 0, 3)), (20_000, parallelism(3)),
          (27_000, split(0, 1, 4)), (33_000, merge(1, 0)), (40_000, parallelism(1)),
          (46_000, merge(0, 0, every=True)), (52_000, split(0, 0, 2)), (58_000, parallelism(4))]


def test_under_steady_load_splits_and_merges_lose_nothing_and_duplicate_nothing() -> None:
    """Issue 11 in the simulator: splits (nested), merges (a pair, and all) and parallelism changes
    while three members consume: every record once, in order per key; every hand-off clean; the
    owners' lanes were cut at the splits and shared merged pieces."""
    system, checker, log = steady_group(STEADY, 90_000)
    assert checker.ok, checker.violations[:5]
    assert (log.splits, log.merges, system.parallelism_changes) == (4, 2, 3)
    assert log.cuts > 0 and system.settled()
    assert checker.duplicates == 0 and checker.unclean_handoffs == 0 and checker.clean_handoffs > 10
    produced = sum(log.piece_ends((T,), 88_000).values())
    assert checker.records_processed > 3_000 and produced > 0
    lanes = [p for m in system.live_members() for p in [m.processor] if isinstance(p, LaneProcessor)]
    assert any(len(ls) > 1 for p in lanes for ls in p.lanes.values())  # shards read in several lanes


def test_the_checker_catches_lanes_not_cut_at_a_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes_mod, "cut_at_split", lambda lane, pieces: (lane,))
    _, checker, log = steady_group(STEADY, 90_000)
    assert log.cuts == 0 and not checker.ok  # a lane reads the piece of its first key only, and
    assert any(v.invariant == OFFSETS_MONOTONIC and "not processed" in v.message  # commits past the rest
               for v in checker.violations)


def test_the_checker_catches_a_piece_read_from_its_lanes_highest_position(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes_mod, "read_from", max)
    _, checker, _ = steady_group(STEADY, 90_000)
    assert AT_LEAST_ONCE in {v.invariant for v in checker.violations}


def test_the_checker_catches_a_merged_piece_starting_at_the_lowest_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout_mod.Layout, "merge", merge_at_lowest)
    _, checker, _ = steady_group(STEADY, 90_000)
    assert {KEY_ORDER, AT_LEAST_ONCE} <= {v.invariant for v in checker.violations}


# ------------------------------------------------------------------------------ plans and the sweep
def test_split_plans_are_the_key_range_plans_plus_splits_and_merges() -> None:
    merges = 0
    for seed in range(30):
        ranged = make_plan(seed, 120_000, 12, key_ranges=True)
        split_plan = make_plan(seed, 120_000, 12, splits=True)
        assert split_plan.key_ranges and split_plan.splits and split_plan.parallelism == ranged.parallelism
        assert tuple(e for e in split_plan.events if e.kind not in ("split", "merge")) == ranged.events
        layout = [e for e in split_plan.events if e.kind in ("split", "merge")]
        assert len(layout) >= 2 and layout[0].kind == "split"
        assert all(2 <= e.value <= 4 for e in layout if e.kind == "split")
        pieces: dict[int, int] = {}
        for e in layout:  # a merge is of a partition split before, of pieces it has
            n = pieces.get(e.partition, 1)
            if e.kind == "split":
                assert e.piece < n
                pieces[e.partition] = n + e.value - 1
            else:
                merges += 1
                assert n > 1 and (e.value == 0 or e.piece < n - 1)
                pieces[e.partition] = 1 if e.value == 0 else n - 1
        assert any("splits and merges" in line for line in split_plan.describe())
    assert merges > 10


def test_a_short_split_sweep_holds_every_invariant() -> None:
    summary = sweep(12, start_seed=0, splits=True)
    assert not summary.failed, [(r.seed, list(map(str, r.violations[:3])), r.replay) for r in summary.failed]
    t = summary.totals
    assert t["splits"] >= 24 and t["merges"] >= 3 and t["lanes_cut"] > 0
    assert t["parallelism_changes"] > 0 and t["records_processed"] > 100_000


def test_a_split_seed_replays_event_for_event() -> None:
    a, b = run_seed(5, record=True, splits=True), run_seed(5, record=True, splits=True)
    assert a.digest == b.digest and a.log == b.log
    assert a.digest != run_seed(5, key_ranges=True).digest
    assert a.replay == "regroup sim check --seed 5 --duration 120 --events 12 --splits"
    assert any("log: split orders:" in line for line in a.log)


def test_keys_are_drawn_per_piece_whatever_order_they_are_asked_in() -> None:
    def build(order: list[int]) -> list[list[int]]:
        keys, log = split_log(11)
        for k in order:  # drawn ahead of the production (to 500): the split seals piece 0 at 200
            keys.offsets(T, 0, k, 500)
        log.split(T, 0, 0, 4, 10_000)
        log.merge(T, 0, 1, False, 20_000)
        for k in order:
            keys.offsets(T, 0, k, 350)
        return [keys.offsets(T, 0, k, 3_000) for k in range(keys.keys_per_partition)]

    a = build([0, 5, 31])
    assert a == build([])
    assert a == build(list(range(31, -1, -1)))
    assert all(x < y for offs in a for x, y in pairwise(offs))
    assert sum(bisect_left(offs, 200) for offs in a) == 200  # below the split: one record per offset
