"""The comparison scenarios, and how one runs against one protocol.

Each run forms the group first (everyone joins at t≈0 and the group settles), waits 10 s, applies
the scenario's *change* at ``t0``, and runs until the group has settled again and stayed so for
``STABLE_FOR_MS`` (or until the scenario's window closes). Metrics cover ``[t0, settled]``.

The network has no faults here, only latency (1 ms + log-normal, median 2 ms), and every protocol
gets the same group, topic, poll model and seed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from regroup.protocol.config import CoordinatorConfig
from regroup.sim.classic import ClassicSystem
from regroup.sim.classic_coordinator import ClassicConfig
from regroup.sim.engine import Engine
from regroup.sim.kip848 import Kip848System
from regroup.sim.member_node import MemberSettings
from regroup.sim.metrics import Metrics, Recorder, Step, measure
from regroup.sim.network import Network, NetworkConfig
from regroup.sim.system import GroupSystem, PollModel, ProtocolKind
from regroup.sim.workload import ProducedLog

TOPIC = "orders"
#: A settled group must stay settled this long before the run stops.
STABLE_FOR_MS = 10_000
#: How often "settled?" is asked after the change.
PROBE_MS = 250
NETWORK = NetworkConfig(latency_min_ms=1, latency_median_ms=2.0, latency_sigma=0.5, latency_max_ms=200)
POLL = PollModel(period_min_ms=50, period_max_ms=500)

#: Applies the change at t0 (it may schedule more); returns its steps (start, slots involved).
Change = Callable[[GroupSystem, int], list[Step]]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    members: int
    partitions: int
    change: Change
    static: bool = False
    #: Give up waiting for the group to settle this long after t0.
    window_ms: int = 180_000
    #: The last action is this long after t0 (settling is only looked for after it).
    actions_ms: int = 0
    heavy: bool = False


def _scale_out(g: GroupSystem, t0: int) -> list[Step]:
    slot = f"m{len(g.slots())}"
    g.add_member(slot)
    return [(t0, frozenset({slot}))]


def _grow(g: GroupSystem, t0: int) -> list[Step]:
    g.grow_topic(TOPIC, g.log.partitions[TOPIC] + 900)
    return [(t0, frozenset())]


ROLLING_GAP_MS = 30_000
RESTART_DOWNTIME_MS = 5_000


def _rolling(g: GroupSystem, t0: int) -> list[Step]:
    steps: list[Step] = []
    for i, slot in enumerate(g.slots()):
        at = t0 + i * ROLLING_GAP_MS
        g.engine.at(at, f"scenario: restart {slot}", _restart(g, slot))
        steps.append((at, frozenset({slot})))
    return steps


def _restart(g: GroupSystem, slot: str) -> Callable[[], None]:
    return lambda: g.shutdown(slot, restart_after=RESTART_DOWNTIME_MS)


SLOW_BATCH_MS = 60_000


def _slow_member(g: GroupSystem, t0: int) -> list[Step]:
    g.stall("m0", SLOW_BATCH_MS)  # m0's next batch takes a minute...
    slot = f"m{len(g.slots())}"
    g.engine.at(t0 + 1_000, f"scenario: {slot} joins", lambda: g.add_member(slot))  # ...and one joins
    return [(t0, frozenset({"m0", slot}))]


def _crash(g: GroupSystem, t0: int) -> list[Step]:
    g.crash("m3")
    return [(t0, frozenset({"m3"}))]


def scenarios() -> list[Scenario]:
    return [
        Scenario("scale-out-10", "scale out by one, 10 members", 10, 50, _scale_out),
        Scenario("scale-out-100", "scale out by one, 100 members", 100, 500, _scale_out),
        Scenario("scale-out-1000", "scale out by one, 1,000 members", 1000, 5000, _scale_out, heavy=True),
        Scenario("topic-growth", "10 members, topic grows by 900 partitions", 10, 100, _grow,
                 window_ms=420_000),
        Scenario("rolling-static", "rolling restart, static members", 10, 50, _rolling, static=True,
                 actions_ms=9 * ROLLING_GAP_MS, window_ms=9 * ROLLING_GAP_MS + 120_000),
        Scenario("rolling-dynamic", "rolling restart, dynamic members", 10, 50, _rolling,
                 actions_ms=9 * ROLLING_GAP_MS, window_ms=9 * ROLLING_GAP_MS + 120_000),
        Scenario("slow-member", "one member in a 60 s batch while one joins", 10, 50, _slow_member,
                 actions_ms=1_000),
        Scenario("crash", "one member crashes", 10, 50, _crash),
    ]


@dataclass
class RunResult:
    scenario: str
    protocol: str
    seed: int
    metrics: Metrics
    #: (t - t0 in s, partitions processed, partitions existing), sampled.
    availability: list[tuple[float, int, int]]
    wall_s: float
    events: int


def build(protocol: ProtocolKind, engine: Engine, rng: random.Random, log: ProducedLog,
          recorder: Recorder) -> GroupSystem:
    network = Network(engine, rng, NETWORK, faults_until=0)
    if protocol in (ProtocolKind.KIP848, ProtocolKind.REGROUP):
        return Kip848System(engine, rng, network, log, nudges=protocol is ProtocolKind.REGROUP,
                            settings=MemberSettings(topics=(TOPIC,)), config=CoordinatorConfig(),
                            poll=POLL, recorder=recorder)
    config = ClassicConfig(cooperative=protocol is ProtocolKind.CLASSIC_COOPERATIVE)
    return ClassicSystem(engine, rng, network, log, config=config, topics=(TOPIC,), poll=POLL,
                         recorder=recorder)


def _run_until_settled(system: GroupSystem, start: int, deadline: int) -> int | None:
    """Probe every PROBE_MS from ``start``; the time the group settled for good, or None."""
    engine = system.engine
    since: int | None = None
    t = start
    while t <= deadline:
        engine.run(t)
        if system.settled():
            if since is None:
                since = t
            elif t - since >= STABLE_FOR_MS:
                return since
        else:
            since = None
        t += PROBE_MS
    return None


def _join(system: GroupSystem, slot: str, static: bool) -> Callable[[], None]:
    return lambda: system.add_member(slot, static)


def run(scenario: Scenario, protocol: ProtocolKind, seed: int = 0) -> RunResult:
    started = time.perf_counter()
    rng = random.Random(f"{scenario.name}-{seed}")
    engine = Engine(verbose=False)
    log = ProducedLog()
    log.create(TOPIC, scenario.partitions, 0)
    recorder = Recorder(log)
    system = build(protocol, engine, rng, log, recorder)
    for i in range(scenario.members):
        slot = f"m{i}"
        engine.at(rng.randint(0, 2_000), "", _join(system, slot, scenario.static))
    formed = _run_until_settled(system, 2_000, 600_000)
    if formed is None:
        raise RuntimeError(f"{scenario.name}/{protocol.value}: the group never formed: {system.describe()}")
    t0 = engine.now + 10_000
    engine.run(t0)
    steps = scenario.change(system, t0)
    last_action = t0 + scenario.actions_ms
    settled_at = _run_until_settled(system, last_action, t0 + scenario.window_ms)
    t1 = engine.now if settled_at is None else settled_at
    metrics = measure(recorder, steps, last_action, t1, frozenset(system.slots()), settled_at is not None)
    step = max(250, (t1 - t0) // 400)
    samples = recorder.availability(t0 - 2_000, t1 + 2_000, step)
    availability = [((t - t0) / 1000, a, n) for t, a, n in samples]
    return RunResult(scenario.name, protocol.value, seed, metrics, availability,
                     time.perf_counter() - started, engine.events)
