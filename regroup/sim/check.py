"""`regroup sim check`: run fault plans against the real core and check the invariants.

One seed = one `FaultPlan` run through `Kip848System` with an `InvariantChecker` listening at every
event, then a liveness phase: after the quiet time the group must settle within `liveness_bound_ms`
and stay settled, and every record produced must have been processed. A failing seed prints the
command that replays it; replaying prints the event log, event for event.

``key_ranges`` (``--key-ranges``) runs the key-range plan of the seed (faults.py: the same faults plus
parallelism changes of the live group): records carry keys (keyranges.py), members process key
ranges, and `KeyRangeChecker` checks the processing rules key by key (key_invariants.py).

``splits`` (``--splits``, a key-range run too) runs the split plan of the seed: the same again plus
producer-side splits and merges of partitions; the log is a `pieces.PieceLog` (records in pieces,
keys per piece) and members read in lanes (lanes.py).
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from regroup.protocol.config import CoordinatorConfig
from regroup.sim.engine import Engine
from regroup.sim.faults import FaultPlan, PlannedEvent, apply_event, make_plan
from regroup.sim.invariants import LIVENESS, PROTOCOL, InvariantChecker, Violation
from regroup.sim.key_invariants import KeyRangeChecker
from regroup.sim.keyranges import RecordKeys
from regroup.sim.kip848 import Kip848System
from regroup.sim.member_node import MemberSettings
from regroup.sim.network import Network
from regroup.sim.system import PollModel
from regroup.sim.workload import ProducedLog

DEFAULT_DURATION_S = 120
DEFAULT_EVENTS = 12
#: How long the group must stay settled (and keep processing) after it settled.
DRAIN_MS = 20_000


def _fault(system: Kip848System, event: PlannedEvent) -> Callable[[], None]:
    return lambda: apply_event(system, event)


def liveness_bound_ms(settings: MemberSettings, config: CoordinatorConfig, plan: FaultPlan,
                      poll: PollModel) -> int:
    """How long after the quiet time the group may take to settle.

    The slowest legitimate path: a member that went silent just before the quiet time is fenced one
    session timeout later (a static member's successor is refused until then); a request sent at the
    quiet time may time out first; a message held up before the quiet time may still arrive; then
    the new target travels (at worst on the next heartbeat, revoke at a poll boundary, then assign on
    the next heartbeat after that).
    """
    return (config.session_timeout_ms + settings.request_timeout_ms + 3 * config.heartbeat_interval_ms
            + plan.network.delay_max_ms + 2 * poll.period_max_ms + 5_000)


@dataclass
class CheckResult:
    seed: int
    violations: list[Violation]
    events: int
    digest: str
    virtual_ms: int
    wall_s: float
    #: Time from the quiet time until the group settled (None: it did not).
    settle_ms: int | None
    replay: str
    stats: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, object]:
        return {"seed": self.seed, "ok": self.ok, "violations": [str(v) for v in self.violations],
                "events": self.events, "digest": self.digest, "virtual_ms": self.virtual_ms,
                "wall_s": round(self.wall_s, 3), "settle_ms": self.settle_ms, "replay": self.replay,
                "stats": self.stats}


def replay_command(seed: int, duration_s: int, events: int, stale_requests: bool = False,
                   key_ranges: bool = False, splits: bool = False) -> str:
    options = (" --stale-requests" if stale_requests else "") + (
        " --splits" if splits else " --key-ranges" if key_ranges else "")
    return f"regroup sim check --seed {seed} --duration {duration_s} --events {events}{options}"


def run_seed(seed: int, duration_s: int = DEFAULT_DURATION_S, events: int = DEFAULT_EVENTS,
             record: bool = False, stale_requests: bool = False, key_ranges: bool = False,
             splits: bool = False) -> CheckResult:
    """Run one seed's fault plan and check every invariant; ``record`` keeps the event log;
    ``key_ranges`` runs its key-range plan (parallelism changes) with the key-level checks;
    ``splits`` its split plan (producer-side splits and merges too, members reading in lanes)."""
    started = time.perf_counter()
    key_ranges = key_ranges or splits
    plan = make_plan(seed, duration_s * 1000, events, stale_requests, key_ranges, splits)
    rng = random.Random(seed)
    engine = Engine(record=record)
    keys: RecordKeys | None = None
    make_processor = None
    if splits:
        from regroup.sim.lanes import lane_processor  # loads the log's layout: split runs only
        from regroup.sim.pieces import PieceKeys, PieceLog

        keys = PieceKeys(seed)
        log: ProducedLog = PieceLog(keys)
        make_processor = lane_processor
    else:
        keys = RecordKeys(seed) if key_ranges else None
        log = ProducedLog()
    for topic, partitions in plan.topics:
        log.create(topic, partitions, 0)
    network = Network(engine, rng, plan.network, faults_until=plan.quiet_at_ms)
    checker = InvariantChecker() if keys is None else KeyRangeChecker(keys)
    settings = MemberSettings(topics=plan.subscribed)
    config = CoordinatorConfig()
    poll = PollModel()
    system = Kip848System(engine, rng, network, log, nudges=plan.nudges, settings=settings, config=config,
                          poll=poll, checker=checker, keys=keys, make_processor=make_processor)
    for line in plan.describe():
        engine.trace("plan: " + line)
    for topic, parallelism in plan.parallelism:  # set by an operator before anyone joins
        system.set_parallelism(topic, parallelism)
    for slot, static in plan.members:
        system.add_member(slot, static)
    for e in plan.events:
        engine.at(e.at_ms, f"fault: {e.kind} {e.slot or e.topic}", _fault(system, e))

    settle_at: int | None = None

    def watch() -> None:
        nonlocal settle_at
        if settle_at is None and system.settled():
            settle_at = engine.now
            engine.stop()

    bound = liveness_bound_ms(settings, config, plan, poll)
    quiet = plan.quiet_at_ms
    try:
        engine.run(quiet)
        limit = quiet + settings.shutdown_timeout_ms + 60_000
        while system.churn_pending() and engine.now < limit:  # shutdowns finishing, their restarts
            engine.run(engine.now + 1_000)
        quiet = engine.now
        engine.trace("check: quiet")
        if not system.live_members():
            slot = system.slots()[0]  # keep someone consuming, or there is nothing to check
            engine.trace(f"check: every member is down; starting {slot}")
            system.restart(slot)
        engine.run(quiet + bound, watch=watch)
        if settle_at is None:
            checker.fail(engine.now, LIVENESS, f"not settled {bound} ms after the quiet time: "
                                               + system.describe())
        else:
            engine.trace("check: settled")
            engine.run(settle_at + DRAIN_MS)
            if not system.settled():
                checker.fail(engine.now, LIVENESS,
                             "settled, then unsettled with no churn: " + system.describe())
            elif checker.last_ownership_change > settle_at:
                checker.fail(checker.last_ownership_change, LIVENESS,
                             "ownership changed after the group settled, with no churn")
            _check_all_processed(system, checker, poll)
    except Exception as e:  # the core or the driver blew up: that is a finding too
        frame = traceback.extract_tb(e.__traceback__)[-1]
        checker.fail(engine.now, PROTOCOL, f"{type(e).__name__}: {e} (at {frame.filename}:{frame.lineno})")
    stats = {
        "duplicates": checker.duplicates, "clean_handoffs": checker.clean_handoffs,
        "unclean_handoffs": checker.unclean_handoffs, "coordinator_restarts": system.coordinator.restarts,
        "messages": network.messages, "messages_lost": network.lost,
        "heartbeats": sum(m.heartbeats for m in system.members.values()),
    }
    if isinstance(checker, KeyRangeChecker):
        stats["parallelism_changes"] = system.parallelism_changes
        stats["records_processed"] = checker.records_processed
    if splits:
        stats.update(_split_stats(system))
    return CheckResult(seed, list(checker.violations), engine.events, engine.digest(),
                       engine.now, time.perf_counter() - started,
                       None if settle_at is None else settle_at - quiet,
                       replay_command(seed, duration_s, events, stale_requests, key_ranges, splits), stats,
                       engine.log, plan.describe())


def _split_stats(system: Kip848System) -> dict[str, int]:
    from regroup.sim.pieces import PieceLog

    log = system.log
    assert isinstance(log, PieceLog)
    refused = sum(n for m in system.members.values() for n in m.refused.values())
    return {"splits": log.splits, "merges": log.merges, "lanes_cut": log.cuts, "commits_refused": refused}


def _check_all_processed(system: Kip848System, checker: InvariantChecker, poll: PollModel) -> None:
    now = system.engine.now
    for m in system.live_members():
        if m.processor is not None:
            m.processor.report_all(now)
    lag = 2 * poll.period_max_ms + 1_000
    topics = system.settings.topics
    # By partition, or, split on the producer side, by open piece (every key's end is its piece's).
    checker.all_processed(now, system.log.piece_ends(topics, now - lag))


@dataclass
class SweepSummary:
    seeds: int
    failed: list[CheckResult]
    events: int
    wall_s: float
    max_settle_ms: int
    virtual_s: float
    #: Each stat of `CheckResult.stats` summed over the seeds.
    totals: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"seeds": self.seeds, "failed": [r.as_dict() for r in self.failed],
                "failed_seeds": [r.seed for r in self.failed], "events": self.events,
                "wall_s": round(self.wall_s, 2), "max_settle_ms": self.max_settle_ms,
                "virtual_s": round(self.virtual_s, 1), "totals": self.totals}


def sweep(seeds: int, start_seed: int = 0, duration_s: int = DEFAULT_DURATION_S,
          events: int = DEFAULT_EVENTS, stale_requests: bool = False,
          key_ranges: bool = False, splits: bool = False) -> SweepSummary:
    started = time.perf_counter()
    failed: list[CheckResult] = []
    total_events = 0
    max_settle = 0
    virtual = 0
    totals: dict[str, int] = {}
    for seed in range(start_seed, start_seed + seeds):
        r = run_seed(seed, duration_s, events, stale_requests=stale_requests, key_ranges=key_ranges,
                     splits=splits)
        total_events += r.events
        virtual += r.virtual_ms
        for name, value in r.stats.items():
            totals[name] = totals.get(name, 0) + value
        if r.settle_ms is not None:
            max_settle = max(max_settle, r.settle_ms)
        if not r.ok:
            failed.append(r)
    return SweepSummary(seeds, failed, total_events, time.perf_counter() - started, max_settle,
                        virtual / 1000, totals)
