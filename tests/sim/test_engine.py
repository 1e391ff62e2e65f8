"""The engine's ordering and log, the network's faults, the poll-loop cadence and the processor."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.shard import Shard
from regroup.sim.engine import Engine, LivelockError
from regroup.sim.invariants import InvariantChecker
from regroup.sim.network import Network, NetworkConfig
from regroup.sim.workload import Cadence, Processor, ProducedLog


def test_events_run_in_time_then_scheduling_order() -> None:
    e = Engine(record=True)
    seen: list[str] = []
    e.at(20, "b", lambda: seen.append("b"))
    e.at(10, "a", lambda: seen.append("a"))
    e.at(20, "c", lambda: seen.append("c"))
    e.at(10, "", lambda: e.after(0, "d", lambda: seen.append("d")))  # unlabelled: not logged
    e.run(100)
    assert seen == ["a", "d", "b", "c"] and e.now == 100
    assert [line.split("|")[1].strip() for line in e.log] == ["a", "d", "b", "c"]


def test_the_digest_tells_runs_apart() -> None:
    def run(label: str) -> str:
        e = Engine()
        e.at(5, label, lambda: None)
        e.run(10)
        return e.digest()

    assert run("x") == run("x") != run("y")


def test_a_livelock_is_caught() -> None:
    e = Engine(max_events_per_instant=100)

    def again() -> None:
        e.after(0, "again", again)

    e.at(1, "again", again)
    with pytest.raises(LivelockError):
        e.run(10)


def test_calls_are_answered_once_or_time_out() -> None:
    e = Engine()
    net = Network(e, random.Random(1), NetworkConfig(drop_request=0.3, drop_response=0.3,
                                                       duplicate_request=0.3))
    applied = 0
    outcomes: list[str] = []

    def handler() -> int:
        nonlocal applied
        applied += 1
        return applied

    for _ in range(200):
        net.call("m", "req", handler, lambda r: outcomes.append("reply"), lambda: outcomes.append("timeout"),
                 1_000)
    e.run(10_000)
    assert len(outcomes) == 200  # exactly one outcome per call
    assert 0 < outcomes.count("timeout") < 200
    assert applied > outcomes.count("reply")  # duplicates applied twice, some replies lost


def test_a_cut_member_hears_nothing() -> None:
    e = Engine()
    net = Network(e, random.Random(1), NetworkConfig())
    net.cut("m", 0, 5_000)
    got: list[int] = []
    net.call("m", "req", lambda: 1, got.append, lambda: got.append(-1), 1_000)
    e.at(6_000, "later", lambda: net.call("m", "req", lambda: 2, got.append, lambda: got.append(-2),
                                          1_000))
    e.run(10_000)
    assert got == [-1, 2]


def test_cadence_boundaries_and_stalls() -> None:
    c = Cadence(phase=30, period=100)
    assert c.next_at_or_after(0) == 30 and c.next_at_or_after(31) == 130
    assert c.last_at_or_before(29) is None and c.last_at_or_before(229) == 130
    start, end = c.stall(131, 1_000)  # the batch fetched at 230 takes a second
    assert (start, end) == (230, 1_230)
    assert c.next_at_or_after(231) == 1_230 and c.next_at_or_after(1_231) == 1_330
    assert c.last_at_or_before(1_229) == 230 and c.last_at_or_before(1_230) == 1_230


def test_processor_counts_a_batch_once_it_is_done() -> None:
    log = ProducedLog(rate_per_s=1000)
    log.create("t", 1, 0)
    s = Shard("t", 0)
    checker = InvariantChecker()
    p = Processor("a#1", log, Cadence(0, 100), checker)
    p.acquire(s, 0)
    p.activate(s, 0, 0)  # first fetch at 0
    assert p.position(s, 99) == 0  # batch of [0, 0) still running
    assert p.position(s, 250) == 100  # batch fetched at 100 done at 200
    assert p.stop(s, 300) == 200
    p.release(s, 300, clean=True)
    assert checker.processed_hw[s] == 200 and checker.ok


@settings(deadline=None)
@given(phase=st.integers(0, 999), period=st.integers(1, 1000),
       stalls=st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 5_000)), max_size=4),
       t=st.integers(0, 40_000))
def test_cadence_is_consistent(phase: int, period: int, stalls: list[tuple[int, int]], t: int) -> None:
    c = Cadence(phase, period)
    for at, d in sorted(stalls):
        c.stall(at, d)
    nxt = c.next_at_or_after(t)
    assert nxt >= t and c.last_at_or_before(nxt) == nxt
    assert not any(s < nxt < e for s, e in c.stalls)  # nothing polls in the middle of a long batch
    last = c.last_at_or_before(t)
    if last is not None:
        assert last <= t and c.next_at_or_after(last) == last
        assert c.next_at_or_after(last + 1) >= nxt
