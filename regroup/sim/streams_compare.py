"""`regroup sim streams`: streams-group scenarios against three promotion policies, as a table.

Each run seeds the group's committed offsets (every task's state is ``state_records`` records),
gives every process an up-to-date copy of its *home* tasks (task ``p`` on slot ``p mod n``), starts
the members within 2 s and waits until the group has settled (balanced, at rest, standbys caught
up). Then it deletes the copies formation left unused (`StreamsSystem.forget_unused_copies`), lets
two heartbeat intervals pass so that every member has reported that, applies the scenario's change
at ``t0`` and runs until the group has settled again and stayed settled for
``STABLE_FOR_MS``, or until the window closes. All figures cover ``[t0, settled]`` and times are
counted from ``t0``.

Metrics:

* unavailable (task·s): the integral over the run of the number of tasks without an active able to
  process (no active, or an active still restoring); max (s): the worst task's share of it;
* moved: actives started on another process than the task's previous active;
* restored (M records): changelog records replayed, by actives and by copies;
* caught up: copies the core saw catch up and recomputed the target for (its ``WarmupCaughtUp``
  causes: warm-ups, and standbys it had seen behind) — each one a promotion by event;
* probes: probing rebalances (kip441 only);
* balanced (s): when the actives were last made balanced with no warm-up left and every task
  processing where the target puts it; stable (s): when the group settled for good.

The network has latency only (the consumer comparison's), and every policy gets the same seed.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import mean

from rich.console import Console
from rich.table import Table

from regroup.sim.engine import Engine
from regroup.sim.network import Network
from regroup.sim.scenarios import NETWORK
from regroup.sim.streams_member import Policy, StreamsSimSettings
from regroup.sim.streams_system import StreamsSystem

POLICIES = (Policy.COLD, Policy.KIP441, Policy.REGROUP)
#: A settled group must stay settled this long before the run stops.
STABLE_FOR_MS = 10_000
#: How often "settled?" is asked.
PROBE_MS = 500
#: Give up forming the group after this long.
FORM_WINDOW_MS = 3_600_000
ROLLING_GAP_MS = 30_000
RESTART_DOWNTIME_MS = 5_000

#: Applies the change at t0 (it may schedule more).
Change = Callable[[StreamsSystem, int], None]


def _scale_out(g: StreamsSystem, t0: int) -> None:
    slot = f"m{len(g.slots())}"
    g.add_member(slot)
    g.start(slot)


def _scale_in(g: StreamsSystem, t0: int) -> None:
    g.shutdown(g.slots()[-1])


def _crash(g: StreamsSystem, t0: int) -> None:
    g.crash("m1")


def _rolling(g: StreamsSystem, t0: int) -> None:
    for i, slot in enumerate(g.slots()):
        g.engine.at(t0 + i * ROLLING_GAP_MS, f"scenario: restart {slot}", _restart(g, slot))


def _restart(g: StreamsSystem, slot: str) -> Callable[[], None]:
    return lambda: g.shutdown(slot, restart_after=RESTART_DOWNTIME_MS)


def starter(g: StreamsSystem, slot: str) -> Callable[[], None]:
    return lambda: g.start(slot)


@dataclass(frozen=True)
class StreamsScenario:
    name: str
    title: str
    members: int
    change: Change
    standbys: int = 0
    static: bool = False
    #: The last action is this long after t0.
    actions_ms: int = 0
    window_ms: int = 3_600_000


def streams_scenarios() -> list[StreamsScenario]:
    return [
        StreamsScenario("scale-out", "3 -> 4 members", 3, _scale_out),
        StreamsScenario("scale-in", "4 -> 3 members, one leaves cleanly", 4, _scale_in),
        StreamsScenario("scale-in-standby", "4 -> 3 members, one leaves cleanly, 1 standby", 4, _scale_in,
                        standbys=1),
        StreamsScenario("crash", "4 members, one crashes, no standby", 4, _crash),
        StreamsScenario("crash-standby", "4 members, one crashes, 1 standby", 4, _crash, standbys=1),
        StreamsScenario("rolling", "rolling restart of 4 static members (5 s down each, state kept)", 4,
                        _rolling, static=True, actions_ms=3 * ROLLING_GAP_MS),
    ]


@dataclass
class StreamsMetrics:
    unavailable_task_s: float
    max_task_unavailable_s: float
    moved: int
    restored_m_records: float
    promotions: int
    probes: int
    balanced_s: float | None
    stable_s: float | None
    requests: int

    def as_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


@dataclass
class StreamsRunResult:
    scenario: str
    policy: str
    seed: int
    metrics: StreamsMetrics
    violations: list[str]
    events: int
    wall_s: float
    digest: str
    log: list[str] = field(default_factory=list)


def settings_for(scenario: StreamsScenario, base: StreamsSimSettings | None = None) -> StreamsSimSettings:
    return replace(base or StreamsSimSettings(), standby_replicas=scenario.standbys)


def run_until_settled(system: StreamsSystem, start: int, deadline: int) -> tuple[int | None, int | None]:
    """Probe every PROBE_MS from ``start``: when the group settled for good (None: never), and when
    it was last made balanced (None: not balanced at the end)."""
    engine = system.engine
    since: int | None = None
    balanced_since: int | None = None
    t = start
    while t <= deadline:
        engine.run(t)
        if system.balanced():
            if balanced_since is None:
                balanced_since = t
        else:
            balanced_since = None
        if system.settled():
            if since is None:
                since = t
            elif t - since >= STABLE_FOR_MS:
                return since, balanced_since
        else:
            since = None
        t += PROBE_MS
    return None, balanced_since


def run_streams(scenario: StreamsScenario, policy: Policy, seed: int = 0,
                base: StreamsSimSettings | None = None, *, record: bool = False) -> StreamsRunResult:
    """One scenario under one policy (see the module docstring)."""
    started = time.perf_counter()
    rng = random.Random(f"streams-{scenario.name}-{seed}")
    engine = Engine(record=record, verbose=record)
    network = Network(engine, rng, NETWORK, faults_until=0)
    s = settings_for(scenario, base)
    system = StreamsSystem(engine, rng, network, policy, s)
    system.seed_offsets()
    slots = [f"m{i}" for i in range(scenario.members)]
    for slot in slots:
        system.add_member(slot, scenario.static)
    for task in s.task_ids():
        system.seed_copy(slots[task.partition % len(slots)], task)
    for slot in slots:
        engine.at(rng.randint(0, 2_000), f"scenario: {slot} starts", starter(system, slot))
    formed, _ = run_until_settled(system, 2_000, FORM_WINDOW_MS)
    if formed is None:
        raise RuntimeError(f"streams {scenario.name}/{policy.value}: the group never formed: "
                           f"{system.describe()}")
    system.forget_unused_copies()
    t0 = engine.now + 2 * s.heartbeat_interval_ms  # every member has reported its copies since
    engine.run(t0)
    system.mark(t0)
    engine.trace(f"scenario: change ({scenario.title})")
    scenario.change(system, t0)
    last_action = t0 + scenario.actions_ms
    settled_at, balanced_at = run_until_settled(system, last_action, last_action + scenario.window_ms)
    t1 = engine.now if settled_at is None else settled_at
    system.check_replay()
    system.finish()
    per_task = [system.ledger.unavailable_ms(t, t0, t1) for t in s.task_ids()]
    metrics = StreamsMetrics(
        unavailable_task_s=sum(per_task) / 1000,
        max_task_unavailable_s=max(per_task) / 1000,
        moved=system.ledger.moved(t0),
        restored_m_records=system.restored_records / 1e6,
        promotions=system.promotions,
        probes=system.probes,
        balanced_s=None if balanced_at is None or settled_at is None else (balanced_at - t0) / 1000,
        stable_s=None if settled_at is None else (settled_at - t0) / 1000,
        requests=system.node.requests - system.requests_at_t0,
    )
    return StreamsRunResult(scenario.name, policy.value, seed, metrics, list(system.violations),
                            engine.events, time.perf_counter() - started, engine.digest(), list(engine.log))


# ------------------------------------------------------------------------------------------ the table

COLUMNS = (
    ("unavailable_task_s", "unavailable (task·s)"),
    ("max_task_unavailable_s", "max per task (s)"),
    ("moved", "moved"),
    ("restored_m_records", "restored (M records)"),
    ("promotions", "caught up"),
    ("probes", "probes"),
    ("balanced_s", "balanced (s)"),
    ("stable_s", "stable (s)"),
    ("requests", "requests"),
)


@dataclass
class StreamsRow:
    scenario: StreamsScenario
    policy: Policy
    runs: list[StreamsRunResult]

    def value(self, key: str) -> float | None:
        values = [getattr(r.metrics, key) for r in self.runs]
        if any(v is None for v in values):
            return None
        return float(mean(values))

    @property
    def violations(self) -> list[str]:
        return [v for r in self.runs for v in r.violations]

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"scenario": self.scenario.name, "policy": self.policy.value,
                                  "seeds": [r.seed for r in self.runs]}
        for key, _ in COLUMNS:
            out[key] = self.value(key)
        out["violations"] = self.violations
        out["events"] = sum(r.events for r in self.runs)
        out["wall_s"] = round(sum(r.wall_s for r in self.runs), 2)
        return out


def selected(names: list[str] | None = None) -> list[StreamsScenario]:
    chosen = streams_scenarios()
    if names:
        unknown = sorted(set(names) - {s.name for s in chosen})
        if unknown:
            raise ValueError(f"unknown streams scenario(s) {unknown}; known: {[s.name for s in chosen]}")
        chosen = [s for s in chosen if s.name in names]
    return chosen


def run_all(names: list[str] | None = None, seeds: int = 1, policies: tuple[Policy, ...] = POLICIES,
            base: StreamsSimSettings | None = None) -> list[StreamsRow]:
    return [StreamsRow(sc, p, [run_streams(sc, p, seed, base) for seed in range(seeds)])
            for sc in selected(names) for p in policies]


def _fmt(value: float | None, key: str) -> str:
    if value is None:
        return "not settled"
    if key in ("moved", "promotions", "probes", "requests"):
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    if key == "restored_m_records":
        return f"{value:.2f}"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def markdown(rows: list[StreamsRow]) -> str:
    head = "| scenario | policy | " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [head, "|---|---|" + "---:|" * len(COLUMNS)]
    for r in rows:
        cells = " | ".join(_fmt(r.value(k), k) for k, _ in COLUMNS)
        lines.append(f"| {r.scenario.name} | {r.policy.value} | {cells} |")
    return "\n".join(lines)


def print_table(rows: list[StreamsRow], console: Console) -> None:
    table = Table(title="Streams groups: per-task unavailability by promotion policy (means over seeds)")
    table.add_column("scenario")
    table.add_column("policy")
    for _, title in COLUMNS:
        table.add_column(title, justify="right")
    previous = None
    for r in rows:
        name = r.scenario.name if r.scenario.name != previous else ""
        previous = r.scenario.name
        table.add_row(name, r.policy.value, *(_fmt(r.value(k), k) for k, _ in COLUMNS))
    console.print(table)


def run_streams_compare(json_output: bool, out_dir: Path | None, seeds: int, names: list[str] | None,
                        policies: tuple[Policy, ...] = POLICIES,
                        base: StreamsSimSettings | None = None) -> list[StreamsRow]:
    started = time.perf_counter()
    base = base or StreamsSimSettings()
    rows = run_all(names, seeds, policies, base)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "streams.md").write_text(markdown(rows) + "\n")
    wall = round(time.perf_counter() - started, 1)
    violations = [f"{r.scenario.name}/{r.policy.value}: {v}" for r in rows for v in r.violations]
    if json_output:
        print(json.dumps({"rows": [r.as_dict() for r in rows], "seeds": seeds,
                          "settings": _settings_dict(base), "violations": violations, "wall_s": wall}))
    else:
        console = Console()
        console = Console(width=max(console.width, 160))
        print_table(rows, console)
        for sc in {r.scenario.name: r.scenario for r in rows}.values():
            console.print(f"  {sc.name}: {sc.title}")
        console.print(f"  {base.tasks} tasks of {base.state_records:,} records; restore "
                      f"{base.restore_per_s:,}/s, produce {base.produce_per_s}/s per task; acceptable lag "
                      f"{base.acceptable_recovery_lag:,}; max warm-ups {base.max_warmups}; probing every "
                      f"{base.probing_interval_ms // 1000} s (kip441)")
        for v in violations:
            console.print(f"[red]VIOLATION[/red] {v}")
        console.print(f"{sum(len(r.runs) for r in rows)} runs in {wall} s"
                      + ("" if not violations else f"; {len(violations)} invariant violation(s)"))
    return rows


def _settings_dict(s: StreamsSimSettings) -> dict[str, object]:
    return {name: getattr(s, name) for name in s.__dataclass_fields__}


__all__ = ["POLICIES", "StreamsMetrics", "StreamsRow", "StreamsRunResult", "StreamsScenario", "markdown",
           "run_all", "run_streams", "run_streams_compare", "streams_scenarios"]
