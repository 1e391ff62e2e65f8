"""A simulated streams process cut off from the coordinator pauses its actives (`streams_member` rule
6, `regroup.protocol.failover` rule 12, the real `Contact`): they stop counting as running and their
state stops moving, until a heartbeat sent later is answered. And the seed that found two actives
after a coordinator restart (the restart fence, failover rule 4) holds every invariant."""

from __future__ import annotations

import random

from regroup.sim.engine import Engine
from regroup.sim.network import Network, NetworkConfig
from regroup.sim.streams_member import ACTIVE, Policy, StreamsSimSettings
from regroup.sim.streams_system import StreamsSystem

S = StreamsSimSettings(tasks=4, state_records=10_000)
GRACE_MS = 2_000  # CoordinatorConfig's default, which the simulator uses


def _system() -> StreamsSystem:
    engine = Engine(verbose=False)
    rng = random.Random(0)
    system = StreamsSystem(engine, rng, Network(engine, rng, NetworkConfig(), faults_until=0), Policy.REGROUP,
                           S)
    system.seed_offsets()
    system.add_member("m0")
    system.start("m0")
    return system


def test_a_process_cut_off_from_the_coordinator_pauses_its_actives_until_it_is_answered_again() -> None:
    system = _system()
    engine, m = system.engine, system.members["m0"]
    engine.run(30_000)
    tasks = S.task_ids()
    assert all(system.ledger.processing(t, engine.now) == m.member_id for t in tasks)
    cut_at = engine.now
    system.network.cut("m0", cut_at, cut_at + 30_000)  # nothing of it reaches the coordinator
    engine.run(cut_at + S.heartbeat_interval_ms + GRACE_MS + S.request_timeout_ms)
    now = engine.now
    assert m.contact.cut_off(now)
    assert all(system.ledger.processing(t, now) is None for t in tasks)  # not running, for the invariant
    frozen = {t: c.state(now, S) for t, c in m.disk.copies.items()}
    assert all(c.role == ACTIVE and c.paused for c in m.disk.copies.values())
    engine.run(now + 5_000)
    assert {t: c.state(engine.now, S) for t, c in m.disk.copies.items()} == frozen  # no progress
    engine.run(cut_at + 50_000)  # the partition heals: a heartbeat is answered, it carries on
    now = engine.now
    assert not m.contact.cut_off(now)
    assert all(system.ledger.processing(t, now) == m.member_id for t in tasks)
    assert all(c.state(now, S) > frozen[t] for t, c in m.disk.copies.items())
    assert system.violations == []


def test_a_healthy_process_is_never_paused() -> None:
    system = _system()
    m = system.members["m0"]
    paused = []
    for t in range(1_000, 120_000, 250):
        system.engine.run(t)
        paused += [t for c in m.disk.copies.values() if c.paused]
    assert paused == [] and system.violations == []


def test_the_restart_fence_seed_holds_every_invariant() -> None:
    """`regroup sim streams-check --seed 0 --duration 300` found two actives for count_0 after a
    coordinator restart: members alive but unheard were fenced while still running their tasks."""
    from regroup.sim.streams_check import run_check

    r = run_check(0, 300)
    assert r.violations == []
