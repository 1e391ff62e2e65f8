"""`regroup sim streams-check`: streams groups under faults, the invariants at every step, then liveness.

One seed draws a plan: a scenario of `streams_compare` and a policy, network faults (dropped,
duplicated and held-up messages, lost nudges), coordinator restarts and member crashes (each
restarting 1-60 s later, in the same slot: the same process, its copies intact) during
``duration_s`` of churn after ``t0``. `StreamsSystem` checks its invariants at every coordinator step
(one active per task, promotion only to caught-up copies, no fatal answer). After the quiet time
the group must *settle* — balanced, at rest, standbys caught up — within `LIVENESS_MS`, which
leaves room for a session timeout, two restores in a row and, under kip441, three probing
intervals. At the end the store's records must rebuild the live groups.

A seed reproduces its run event for event; ``--seed N`` replays one and prints its event log.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from regroup.sim.engine import Engine
from regroup.sim.network import Network, NetworkConfig
from regroup.sim.streams_compare import run_until_settled, settings_for, starter, streams_scenarios
from regroup.sim.streams_member import Policy, SimStreamsMember
from regroup.sim.streams_system import StreamsSystem

DEFAULT_DURATION_S = 600
#: After the quiet time: a session timeout, two restores in a row, three probing intervals.
LIVENESS_MS = 3_600_000


@dataclass
class StreamsCheckResult:
    seed: int
    scenario: str
    policy: str
    violations: list[str]
    #: From the quiet time until the group settled (None: it did not within LIVENESS_MS).
    settle_ms: int | None
    events: int
    digest: str
    wall_s: float
    plan: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    #: The group as it was left, when it did not settle.
    state: str = ""
    stale_requests: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations and self.settle_ms is not None

    def as_dict(self) -> dict[str, object]:
        return {"seed": self.seed, "scenario": self.scenario, "policy": self.policy, "ok": self.ok,
                "violations": self.violations, "settle_ms": self.settle_ms, "events": self.events,
                "digest": self.digest, "wall_s": round(self.wall_s, 3),
                "replay": replay_command(self.seed, self.stale_requests)}


def replay_command(seed: int, stale_requests: bool = False) -> str:
    return f"regroup sim streams-check --seed {seed}" + (" --stale-requests" if stale_requests else "")


def _network(stale_requests: bool) -> NetworkConfig:
    return NetworkConfig(latency_min_ms=1, latency_median_ms=2.0, latency_sigma=0.8, latency_max_ms=500,
                         drop_request=0.03, drop_response=0.03, duplicate_request=0.03,
                         delay_probability=0.05, delay_max_ms=8_000, drop_nudge=0.2,
                         stale_requests=stale_requests)


def _restart_coordinator(system: StreamsSystem, down_ms: int) -> Callable[[], None]:
    return lambda: system.node.crash(down_ms)


def _crash_member(system: StreamsSystem, slot: str, down_ms: int) -> Callable[[], None]:
    def crash() -> None:
        m = system.members.get(slot)
        if m is not None and m.alive:
            m.crash()
            system.engine.after(down_ms, f"plan: {slot} restarts", _restarter(m))
    return crash


def _restarter(m: SimStreamsMember) -> Callable[[], None]:
    return lambda: m.start()


def run_check(seed: int, duration_s: int = DEFAULT_DURATION_S, *, stale_requests: bool = False,
              record: bool = False) -> StreamsCheckResult:
    started = time.perf_counter()
    rng = random.Random(f"streams-check-{seed}")
    scenario = rng.choice(streams_scenarios())
    policy = rng.choice(list(Policy))
    engine = Engine(record=record, verbose=record)
    network = Network(engine, rng, _network(stale_requests), faults_until=None)
    s = settings_for(scenario)
    system = StreamsSystem(engine, rng, network, policy, s)
    plan = [f"plan: seed {seed}: {scenario.name} ({scenario.title}) under {policy.value}; faults for "
            f"{duration_s} s"]
    system.seed_offsets()
    slots = [f"m{i}" for i in range(scenario.members)]
    for slot in slots:
        system.add_member(slot, scenario.static)
    for task in s.task_ids():
        system.seed_copy(slots[task.partition % len(slots)], task)
    for slot in slots:
        engine.at(rng.randint(0, 2_000), f"plan: {slot} starts", starter(system, slot))
    t0 = 60_000
    engine.run(t0)
    system.mark(t0)
    scenario.change(system, t0)
    span = duration_s * 1000
    for _ in range(rng.randint(1, 3)):
        at, down = t0 + rng.randint(0, span), rng.randint(100, 20_000)
        plan.append(f"plan:   t={at}: coordinator restarts ({down} ms down)")
        engine.at(at, "plan: coordinator restarts", _restart_coordinator(system, down))
    for _ in range(rng.randint(0, 3)):
        at, slot, down = t0 + rng.randint(0, span), rng.choice(slots), rng.randint(1_000, 60_000)
        plan.append(f"plan:   t={at}: {slot} crashes (back after {down} ms)")
        engine.at(at, f"plan: {slot} crashes", _crash_member(system, slot, down))
    quiet = t0 + span + 60_000 + 20_000  # the last restart, and the coordinator's last downtime
    network.faults_until = t0 + span
    settled, _ = run_until_settled(system, quiet, quiet + LIVENESS_MS)
    system.check_replay()
    return StreamsCheckResult(seed, scenario.name, policy.value, list(system.violations),
                              None if settled is None else settled - quiet, engine.events, engine.digest(),
                              time.perf_counter() - started, plan, list(engine.log),
                              "" if settled is not None else system.describe(), stale_requests)


@dataclass
class StreamsSweep:
    seeds: int
    failed: list[StreamsCheckResult]
    events: int
    wall_s: float
    max_settle_ms: int

    def as_dict(self) -> dict[str, object]:
        return {"seeds": self.seeds, "failed": [r.as_dict() for r in self.failed], "events": self.events,
                "wall_s": round(self.wall_s, 1), "max_settle_ms": self.max_settle_ms}


def sweep(seeds: int, start_seed: int = 0, duration_s: int = DEFAULT_DURATION_S,
          stale_requests: bool = False) -> StreamsSweep:
    started = time.perf_counter()
    failed: list[StreamsCheckResult] = []
    events = max_settle = 0
    for seed in range(start_seed, start_seed + seeds):
        r = run_check(seed, duration_s, stale_requests=stale_requests)
        events += r.events
        if r.settle_ms is not None:
            max_settle = max(max_settle, r.settle_ms)
        if not r.ok:
            failed.append(r)
    return StreamsSweep(seeds, failed, events, time.perf_counter() - started, max_settle)


__all__ = ["LIVENESS_MS", "StreamsCheckResult", "StreamsSweep", "replay_command", "run_check", "sweep"]
