"""Key ranges in the simulator: records' keys, range processing, the key-level checker, the sweep."""

from __future__ import annotations

import json
import random
from bisect import bisect_left
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from regroup.protocol.keyrange import Resume, key_hash, range_shards, resume
from regroup.protocol.records import CurrentAssignment, CurrentAssignmentRecord, MemberStatus, OffsetRecord
from regroup.protocol.shard import KEY_SPACE, Shard, overlaps
from regroup.sim.check import run_seed, sweep
from regroup.sim.commands import sim_app
from regroup.sim.engine import Engine
from regroup.sim.faults import make_plan
from regroup.sim.invariants import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    KEY_ORDER,
    OFFSETS_MONOTONIC,
    REVOKE_BEFORE_ASSIGN,
    SINGLE_OWNER,
)
from regroup.sim.key_invariants import KeyRangeChecker
from regroup.sim.keyranges import PARALLELISMS, RecordKeys, Run, first_offset, run_records, scanned
from regroup.sim.kip848 import Kip848System
from regroup.sim.member_node import MemberSettings
from regroup.sim.network import Network, NetworkConfig
from regroup.sim.workload import Cadence, Processor, ProducedLog

T = "orders"
P0 = Shard(T, 0)
LOW, HIGH = range_shards(T, 0, 2)


def kinds(c: KeyRangeChecker) -> set[str]:
    return {v.invariant for v in c.violations}


def records_of(keys: RecordKeys, shard: Shard, runs: list[Run]) -> list[int]:
    """The offsets ``runs`` stand for, ascending."""
    out: list[int] = []
    for r in runs:
        offs = keys.offsets(shard.topic, shard.partition, r.key, r.hi)
        out += offs[bisect_left(offs, r.lo):bisect_left(offs, r.hi)]
    return sorted(out)


# ------------------------------------------------------------------------------ the records' keys
def test_every_record_has_one_key_whatever_order_the_log_is_read_in() -> None:
    a, b = RecordKeys(7), RecordKeys(7)
    b.offsets(T, 0, 3, 10)  # b draws its keys in small steps, a in one go
    b.offsets(T, 0, 0, 333)
    whole = [a.offsets(T, 0, k, 1_000) for k in range(a.keys_per_partition)]
    assert whole == [b.offsets(T, 0, k, 1_000) for k in range(b.keys_per_partition)]
    below = sorted(o for offs in whole for o in offs if o < 1_000)
    assert below == list(range(1_000))  # every record has exactly one key
    assert all(a.key_of(T, 0, o) == k for k in (0, 5) for o in whole[k][:20])
    assert len(whole[0]) > len(whole[-1])  # skewed: hot keys and cold ones
    assert RecordKeys(8).offsets(T, 0, 0, 1_000) != whole[0]
    assert a.offsets(T, 1, 0, 1_000) != whole[0]


def test_a_keys_point_is_the_consumers_hash_of_it() -> None:
    keys = RecordKeys(3)
    assert keys.points(T, 2)[5] == key_hash(b"3/orders/2/5", 0)
    for n in PARALLELISMS:  # the ranges of any parallelism share out the keys
        shares = [keys.keys_in(s) for s in range_shards(T, 2, n)]
        assert sorted(k for share in shares for k in share) == list(range(keys.keys_per_partition))
    assert keys.keys_in(Shard(T, 2)) == tuple(range(keys.keys_per_partition))


def test_record_counts() -> None:
    keys = RecordKeys(1, keys_per_partition=4)
    offs = keys.offsets(T, 0, 2, 500)
    assert keys.count(T, 0, 2, 0, 500) == bisect_left(offs, 500)
    assert keys.count(T, 0, 2, 300, 200) == 0
    runs = [Run(k, 100, 300) for k in range(4)]
    assert run_records(keys, P0, runs) == 200


# ------------------------------------------------------------------------------ what a range processes
def test_a_scan_keeps_its_keys_and_skips_what_the_resume_says() -> None:
    keys = RecordKeys(11)
    assert scanned(keys, LOW, Resume(0), 50, 50) == []
    runs = scanned(keys, LOW, Resume(40), 40, 90)
    assert [r.key for r in runs] == list(keys.keys_in(LOW)) and all((r.lo, r.hi) == (40, 90) for r in runs)
    point = keys.points(T, 0)[runs[0].key]
    skip = Resume(40, ((point, point + 1, 70),))  # that key was done below 70 by a former owner
    assert first_offset(skip, point, 40) == 70 and first_offset(skip, point, 80) == 80
    again = scanned(keys, LOW, skip, 40, 90)
    assert again[0] == Run(runs[0].key, 70, 90) and again[1:] == runs[1:]
    assert scanned(keys, LOW, Resume(40, ((point, point + 1, 95),)), 40, 90)[0].key != runs[0].key


fragment_offsets = st.lists(st.one_of(st.none(), st.integers(0, 300)), min_size=8, max_size=8)


@settings(deadline=None, max_examples=150)
@given(seed=st.integers(0, 10_000), old=st.sampled_from(PARALLELISMS), new=st.sampled_from(PARALLELISMS),
       offsets=fragment_offsets, pick=st.integers(0, 7), lo=st.integers(0, 300), length=st.integers(0, 200))
def test_a_scan_is_the_resume_applied_record_by_record(seed: int, old: int, new: int,
                                                       offsets: list[int | None], pick: int, lo: int,
                                                       length: int) -> None:
    """`scanned` gives exactly the records `Resume.skips` keeps, one by one: those of the range's keys,
    minus what the committed fragments (of another parallelism) say former owners did."""
    keys = RecordKeys(seed, keys_per_partition=8)
    fragments = {s: o for s, o in zip(range_shards(T, 0, old), offsets, strict=False) if o is not None}
    shard = range_shards(T, 0, new)[pick % new]
    r = resume(fragments, shard, 0) if fragments else Resume(0)
    start = max(lo, r.start)
    points = keys.points(T, 0)
    expected = [o for o in range(start, start + length)
                if shard.lo <= points[keys.key_of(T, 0, o)] < shard.hi
                and not r.skips(points[keys.key_of(T, 0, o)], o)]
    assert records_of(keys, shard, scanned(keys, shard, r, start, start + length)) == expected


def test_a_range_moves_past_the_records_of_other_ranges_and_forgets_what_it_passed() -> None:
    keys = RecordKeys(5)
    log = ProducedLog(rate_per_s=1000)
    log.create(T, 1, 0)
    checker = KeyRangeChecker(keys)
    p = Processor("a#1", log, Cadence(0, 100), checker, keys)
    k = keys.keys_in(LOW)[0]
    point = keys.points(T, 0)[k]
    checker.done.update({(T, 0, k): 150})  # a former owner did key k up to 150
    p.acquire(LOW, 0)
    p.activate(LOW, 0, 0, Resume(0, ((point, point + 1, 150),)))
    assert p.stop(LOW, 250) == 100 and p.work[LOW].resume is not None  # the position: the partition's end
    assert p.commit_positions(250) == {}  # stopped: nothing to commit
    p2 = Processor("b#1", log, Cadence(0, 100), checker, keys)
    p2.acquire(HIGH, 0)
    p2.activate(HIGH, 0, 0)
    assert p2.commit_positions(450) == {HIGH: 300}  # HIGH's position passed LOW's records too
    p.release(LOW, 300, clean=True)
    p.acquire(LOW, 300)
    p.activate(LOW, 100, 300, Resume(100, ((point, point + 1, 150),)))
    p.report_all(650)  # scanned to 500: the skip piece is behind it
    assert p.work[LOW].resume is None
    assert checker.ok, checker.violations
    assert checker.duplicates == 0 and checker.done[(T, 0, k)] == 500


# ------------------------------------------------------------------------------ the key-level checker
def checker_with(seed: int = 2) -> tuple[RecordKeys, KeyRangeChecker]:
    keys = RecordKeys(seed)
    return keys, KeyRangeChecker(keys)


def process(c: KeyRangeChecker, owner: str, shard: Shard, lo: int, hi: int, resume: Resume | None = None,
            t: int = 0) -> None:
    c.on_processed(t, owner, shard, lo, hi)
    c.on_records(t, owner, shard, scanned(c.keys, shard, resume or Resume(lo), lo, hi))


def hand(c: KeyRangeChecker, owner: str, shard: Shard, t: int = 0) -> None:
    c.on_acquire(t, owner, shard)
    c.on_activate(t, owner, shard, 0)


def test_a_split_and_a_merge_with_clean_hand_offs_duplicate_nothing() -> None:
    _, c = checker_with()
    hand(c, "a#1", P0)
    process(c, "a#1", P0, 0, 100)
    c.on_release(1, "a#1", P0, clean=True)
    hand(c, "a#1", LOW, 2)  # split: both halves resume where the whole stopped
    hand(c, "b#1", HIGH, 2)
    process(c, "a#1", LOW, 100, 180)
    process(c, "b#1", HIGH, 100, 240)
    c.on_release(3, "a#1", LOW, clean=True)
    c.on_release(3, "b#1", HIGH, clean=True)
    hand(c, "c#1", P0, 4)  # merge: resume at the laggard, skip what the other half did
    merged = resume({LOW: 180, HIGH: 240}, P0, 0)
    assert merged.start == 180 and merged.skip == ((HIGH.lo, HIGH.hi, 240),)
    process(c, "c#1", P0, 180, 400, merged)
    c.all_processed(5, {P0: 400})
    assert c.ok, c.violations
    assert c.duplicates == 0 and c.clean_handoffs == 3
    assert c.records_processed == 400


def test_a_merge_that_ignores_the_other_halfs_progress_duplicates() -> None:
    _, c = checker_with()
    hand(c, "a#1", LOW)
    hand(c, "b#1", HIGH)
    process(c, "a#1", LOW, 0, 100)
    process(c, "b#1", HIGH, 0, 200)
    c.on_release(1, "a#1", LOW, clean=True)
    c.on_release(1, "b#1", HIGH, clean=True)
    hand(c, "c#1", P0, 2)
    process(c, "c#1", P0, 100, 300)  # start_positions' answer alone: HIGH's 100..199 again
    assert kinds(c) == {EXACTLY_ONCE} and c.duplicates > 0


def test_after_an_unclean_hand_off_the_replay_is_allowed() -> None:
    _, c = checker_with()
    hand(c, "a#1", LOW)
    process(c, "a#1", LOW, 0, 100)
    c.on_release(1, "a#1", LOW, clean=False)  # crashed: its commit stopped at 60
    hand(c, "b#1", P0, 2)
    merged = resume({LOW: 60}, P0, 0)  # HIGH has no fragment: it begins at 0
    process(c, "b#1", P0, merged.start, 200, merged)
    assert c.ok, c.violations
    assert c.duplicates > 0


def test_a_range_that_moves_past_unprocessed_records_is_caught_at_once_and_at_the_end() -> None:
    _, c = checker_with()
    hand(c, "a#1", LOW)
    process(c, "a#1", LOW, 0, 100)
    c.on_release(1, "a#1", LOW, clean=True)
    hand(c, "b#1", LOW, 2)
    process(c, "b#1", LOW, 150, 200)  # 100..149 of LOW's keys: nobody did them
    assert kinds(c) == {AT_LEAST_ONCE}
    c.violations.clear()
    c.all_processed(3, {P0: 200})  # and they are still missing at the end (HIGH's records too)
    assert kinds(c) == {AT_LEAST_ONCE}
    assert any("never processed" in v.message for v in c.violations)


def test_a_record_processed_after_a_later_one_of_its_key_breaks_key_order() -> None:
    _, c = checker_with()
    hand(c, "a#1", P0)
    process(c, "a#1", P0, 0, 50)
    c.on_release(1, "a#1", P0, clean=True)
    hand(c, "b#1", P0, 2)
    process(c, "b#1", P0, 80, 120)  # skipped 50..79
    c.on_release(3, "b#1", P0, clean=True)
    hand(c, "c#1", P0, 4)
    process(c, "c#1", P0, 50, 80)  # ... which come late, after later records of their keys
    assert kinds(c) == {AT_LEAST_ONCE, KEY_ORDER}
    late = [v for v in c.violations if v.invariant == KEY_ORDER]
    assert late and "after later records" in late[0].message
    c.violations.clear()
    c.all_processed(5, {P0: 120})
    assert c.ok and c.duplicates == 0


def test_overlapping_shards_are_never_held_by_two_processes() -> None:
    _, c = checker_with()
    c.on_acquire(0, "a#1", P0)
    c.on_acquire(1, "b#1", HIGH)
    assert kinds(c) == {SINGLE_OWNER}
    assert "overlaps" in c.violations[0].message
    _, c = checker_with()
    c.on_acquire(0, "a#1", P0)
    c.on_release(1, "a#1", P0, clean=True)
    c.on_acquire(2, "b#1", HIGH)
    c.on_acquire(2, "c#1", LOW)
    assert c.ok


def test_a_zombies_processing_is_wasted_not_held_against_the_rules() -> None:
    keys, c = checker_with()
    hand(c, "a#1", LOW)
    process(c, "a#1", LOW, 0, 100)
    c.on_fenced(1, "a#1")
    hand(c, "b#1", P0, 2)
    merged = resume({LOW: 50}, P0, 0)
    process(c, "b#1", P0, merged.start, 150, merged)  # replays LOW from its commit: allowed
    process(c, "a#1", LOW, 100, 160)  # the zombie goes on until it hears
    c.on_release(3, "a#1", LOW, clean=False)
    assert c.ok, c.violations
    assert c.zombie_records == run_records(keys, LOW, scanned(keys, LOW, Resume(100), 100, 160))


def cur(assigned: set[Shard], epoch: int = 0) -> CurrentAssignment:
    return CurrentAssignment(epoch, 0, MemberStatus.STABLE, frozenset(assigned), frozenset())


def test_the_coordinator_never_gives_a_shard_overlapping_one_another_member_holds() -> None:
    _, c = checker_with()
    c.records(0, [CurrentAssignmentRecord("g", "a", cur({P0}))])
    c.records(1, [CurrentAssignmentRecord("g", "b", cur({HIGH}))])
    assert kinds(c) == {REVOKE_BEFORE_ASSIGN}
    _, c = checker_with()
    c.records(0, [CurrentAssignmentRecord("g", "a", cur({P0}))])
    c.records(1, [CurrentAssignmentRecord("g", "a", cur({LOW})),
                  CurrentAssignmentRecord("g", "b", cur({HIGH}))])
    assert c.ok


def test_committed_offsets_per_key_never_go_back_nor_run_ahead() -> None:
    _, c = checker_with()
    hand(c, "a#1", P0)
    process(c, "a#1", P0, 0, 100)
    c.records(0, [OffsetRecord("g", P0, 100)])
    # The whole partition becomes two ranges; HIGH commits 80 (its own fragment): its keys went back.
    c.records(1, [OffsetRecord("g", P0, None), OffsetRecord("g", LOW, 100), OffsetRecord("g", HIGH, 80)])
    assert kinds(c) == {OFFSETS_MONOTONIC} and "went back" in c.violations[0].message
    _, c = checker_with()
    hand(c, "a#1", P0)
    process(c, "a#1", P0, 0, 100)
    c.records(0, [OffsetRecord("g", P0, 120)])
    assert kinds(c) == {OFFSETS_MONOTONIC} and "not processed" in c.violations[0].message


# ------------------------------------------------------------------------------ the system
def steady_group(changes: list[tuple[int, int]], until: int, members: int = 3, partitions: int = 3,
                 seed: int = 1) -> tuple[Kip848System, KeyRangeChecker]:
    """A group under steady load on a network without faults, whose parallelism changes at the given
    times; run to ``until``, then every record produced until shortly before must have been processed."""
    engine = Engine()
    rng = random.Random(seed)
    log = ProducedLog()
    log.create(T, partitions, 0)
    keys = RecordKeys(seed)
    checker = KeyRangeChecker(keys)
    network = Network(engine, rng, NetworkConfig(), faults_until=0)
    system = Kip848System(engine, rng, network, log, nudges=True, settings=MemberSettings(topics=(T,)),
                          checker=checker, keys=keys)
    for i in range(members):
        system.add_member(f"m{i}")

    def change(n: int) -> Callable[[], None]:
        return lambda: system.set_parallelism(T, n)

    for at, n in changes:
        engine.at(at, f"parallelism {n}", change(n))
    engine.run(until)
    for m in system.live_members():
        assert m.processor is not None
        m.processor.report_all(engine.now)
    checker.all_processed(engine.now, {s: log.end_offset(s, engine.now - 2_000) for s in log.shards((T,))})
    return system, checker


def test_under_steady_load_splits_and_merges_lose_nothing_and_duplicate_nothing() -> None:
    """Issue 11: 1 -> 4 -> 2 -> 3 -> 8 -> 1 key ranges while three members consume: every record is
    processed exactly once, in order per key; every hand-off is clean."""
    system, checker = steady_group([(10_000, 4), (25_000, 2), (40_000, 3), (55_000, 8), (70_000, 1)], 100_000)
    assert checker.ok, checker.violations[:5]
    assert system.parallelism_changes == 5 and system.settled()
    assert checker.duplicates == 0 and checker.unclean_handoffs == 0 and checker.clean_handoffs > 20
    produced = sum(system.log.end_offset(s, 98_000) for s in system.log.shards((T,)))
    assert checker.records_processed >= produced > 5_000


@pytest.mark.parametrize("members", [1, 5])
def test_more_or_fewer_members_than_ranges(members: int) -> None:
    system, checker = steady_group([(8_000, 8), (20_000, 3)], 45_000, members=members, partitions=2, seed=4)
    assert checker.ok, checker.violations[:5]
    assert checker.duplicates == 0 and system.settled()


def test_key_range_plans_are_the_plain_plans_plus_parallelism_changes() -> None:
    for seed in range(30):
        plain, ranged = make_plan(seed, 120_000, 12), make_plan(seed, 120_000, 12, key_ranges=True)
        assert not plain.key_ranges and not plain.parallelism
        assert all(e.kind != "parallelism" for e in plain.events)
        assert tuple(e for e in ranged.events if e.kind != "parallelism") == plain.events
        assert ranged.network == plain.network and ranged.members == plain.members
        changes = [e for e in ranged.events if e.kind == "parallelism"]
        assert len(changes) >= 2 and all(e.value in PARALLELISMS for e in changes)
        current = dict(ranged.parallelism) | {"payments": 1}
        for e in changes:  # each is a real change of its topic's parallelism
            assert e.value != current[e.topic]
            current[e.topic] = e.value
        assert any("key ranges" in line for line in ranged.describe())


def test_a_short_key_range_sweep_holds_every_invariant() -> None:
    summary = sweep(30, start_seed=0, key_ranges=True)
    assert not summary.failed, [(r.seed, list(map(str, r.violations[:3])), r.replay) for r in summary.failed]
    t = summary.totals
    assert t["parallelism_changes"] >= 60 and t["records_processed"] > 100_000
    assert t["clean_handoffs"] > 0 and t["unclean_handoffs"] > 0


def test_a_key_range_seed_replays_event_for_event() -> None:
    a, b = run_seed(12, record=True, key_ranges=True), run_seed(12, record=True, key_ranges=True)
    assert a.digest == b.digest and a.log == b.log
    assert a.digest != run_seed(12).digest
    assert a.replay == "regroup sim check --seed 12 --duration 120 --events 12 --key-ranges"
    assert any("admin: parallelism of" in line for line in a.log)
    assert a.stats["parallelism_changes"] >= 1


def test_key_ranges_through_the_cli() -> None:
    runner = CliRunner()
    result = runner.invoke(sim_app, ["check", "--seeds", "2", "--start-seed", "40", "--key-ranges", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["seeds"] == 2 and out["failed"] == [] and out["totals"]["parallelism_changes"] > 0
    result = runner.invoke(sim_app, ["check", "--seed", "41", "--duration", "40", "--events", "4",
                                     "--key-ranges"])
    assert result.exit_code == 0, result.output
    assert "plan: key ranges: orders in" in result.output and "OK" in result.output


def test_key_space_halves() -> None:
    assert (LOW.lo, LOW.hi, HIGH.lo, HIGH.hi) == (0, KEY_SPACE // 2, KEY_SPACE // 2, KEY_SPACE)
    assert overlaps(LOW, P0) and not overlaps(LOW, HIGH)
