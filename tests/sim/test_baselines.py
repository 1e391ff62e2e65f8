"""The four protocols on the comparison scenarios: the figures have the shape they must have."""

from __future__ import annotations

import random
from functools import cache

import pytest

from regroup.sim.classic import ClassicSystem
from regroup.sim.classic_coordinator import ClassicConfig
from regroup.sim.engine import Engine
from regroup.sim.invariants import InvariantChecker
from regroup.sim.metrics import Metrics
from regroup.sim.network import Network
from regroup.sim.scenarios import NETWORK, POLL, run, scenarios
from regroup.sim.system import ProtocolKind
from regroup.sim.workload import ProducedLog

EAGER, COOP = ProtocolKind.CLASSIC_EAGER, ProtocolKind.CLASSIC_COOPERATIVE
KIP848, REGROUP = ProtocolKind.KIP848, ProtocolKind.REGROUP
SESSION_S = 45.0


@cache
def metrics(scenario: str, protocol: ProtocolKind) -> Metrics:
    sc = next(s for s in scenarios() if s.name == scenario)
    return run(sc, protocol, seed=0).metrics


def test_eager_pauses_everyone_regroup_only_the_movers() -> None:
    eager, regroup = metrics("scale-out-10", EAGER), metrics("scale-out-10", REGROUP)
    assert eager.stops == eager.partitions == 50  # everyone revoked everything
    assert eager.bystander_pause_s > 1.0 and eager.barrier_rounds == 1
    assert regroup.stops == regroup.moved and regroup.moved in (4, 5)  # only what moves stops
    assert regroup.bystander_pause_s == 0 and regroup.barrier_rounds == 0
    assert regroup.unavailable_partition_s < eager.unavailable_partition_s / 10


def test_cooperative_takes_two_barrier_rounds_and_spares_bystanders() -> None:
    coop = metrics("scale-out-10", COOP)
    assert coop.barrier_rounds == 2 and coop.bystander_pause_s == 0 and coop.stops == coop.moved


@pytest.mark.parametrize("scenario", ["scale-out-10", "slow-member", "crash"])
def test_every_protocol_moves_the_same_partitions(scenario: str) -> None:
    moved = {p: metrics(scenario, p).moved for p in ProtocolKind}
    assert len(set(moved.values())) == 1, moved  # one assignor for all: like for like


def test_nudges_hand_over_within_round_trips_heartbeats_within_an_interval() -> None:
    kip, regroup = metrics("scale-out-10", KIP848), metrics("scale-out-10", REGROUP)
    assert kip.handoff_s is not None and regroup.handoff_s is not None
    assert regroup.handoff_s < 1.5 < kip.handoff_s <= 11.0  # at most two heartbeat intervals
    assert kip.barrier_rounds == 0 and kip.bystander_pause_s == 0


def test_a_slow_member_holds_the_classic_barrier_but_not_kip848() -> None:
    eager, coop = metrics("slow-member", EAGER), metrics("slow-member", COOP)
    kip, regroup = metrics("slow-member", KIP848), metrics("slow-member", REGROUP)
    assert eager.bystander_pause_s > 50  # everyone waits for the 60 s batch
    assert coop.stable_s is not None and coop.stable_s > 50 and coop.bystander_pause_s == 0
    assert kip.stable_s is not None and kip.stable_s < 15
    assert regroup.handoff_s is not None and regroup.handoff_s < 2


def test_topic_growth_is_noticed_by_the_coordinator_not_the_classic_leader() -> None:
    kip, regroup = metrics("topic-growth", KIP848), metrics("topic-growth", REGROUP)
    eager = metrics("topic-growth", EAGER)
    assert regroup.stable_s is not None and regroup.stable_s < 2
    assert kip.stable_s is not None and 2 < kip.stable_s <= 10  # the published "about 5 s"
    assert eager.stable_s is not None and eager.stable_s > kip.stable_s  # metadata.max.age.ms
    assert eager.moved == kip.moved == 0 and eager.stops == 100  # eager revoked the old 100 too


def test_a_crash_costs_a_session_timeout_everywhere() -> None:
    for p in ProtocolKind:
        m = metrics("crash", p)
        # The session runs from the crashed member's last heartbeat: up to one interval before.
        assert m.handoff_s is not None and SESSION_S - 5 <= m.handoff_s <= SESSION_S + 10, (p, m)
    assert metrics("crash", EAGER).bystander_pause_s > 0 == metrics("crash", REGROUP).bystander_pause_s


def test_rolling_restarts_static_move_nothing_dynamic_rebalance_twice_each() -> None:
    for p in ProtocolKind:
        assert metrics("rolling-static", p).moved == 0, p
    assert metrics("rolling-dynamic", EAGER).barrier_rounds == 20  # a leave and a join per member
    assert metrics("rolling-dynamic", KIP848).barrier_rounds == 0
    assert metrics("rolling-dynamic", EAGER).bystander_pause_s > 0 == \
        metrics("rolling-dynamic", REGROUP).bystander_pause_s


@pytest.mark.parametrize("cooperative", [False, True])
def test_the_classic_models_keep_single_ownership_and_exactly_once(cooperative: bool) -> None:
    engine, rng = Engine(), random.Random(3)
    log = ProducedLog()
    log.create("orders", 30, 0)
    checker = InvariantChecker()
    system = ClassicSystem(engine, rng, Network(engine, rng, NETWORK), log,
                           config=ClassicConfig(cooperative=cooperative), poll=POLL, checker=checker)
    for i in range(6):
        system.add_member(f"m{i}")
    engine.run(20_000)
    system.add_member("m6")
    engine.at(30_000, "", lambda: system.crash("m2"))
    engine.at(40_000, "", lambda: system.shutdown("m3", restart_after=3_000))
    engine.run(150_000)
    assert system.settled(), system.describe()
    assert checker.ok, checker.violations
