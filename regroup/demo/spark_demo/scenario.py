"""The PySpark demo's script: start the members, produce, then scale out, scale in, roll, kill -9, drain.

Rules of this module:

1. Each event happens at its planned fraction of the duration (`EVENT_PLAN`), and never before the
   group is stable, every member past its first (slow, JVM-compiling) batches, and `STEADY_S` after the
   previous event settled: an event's pauses are its own, not the previous one's.
2. An event is followed until the group is stable again and every partition it touched has been
   processed again by its new owner; that span plus `WINDOW_MARGIN_S` is its window, in which the
   analysis measures pauses and stalls.
3. And those of `regroup.demo.spark_common.scenario`: waits, the four events, the drain.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from regroup.demo.spark_common.scenario import (
    EVENT_LABELS,
    STATIC_INSTANCE,
    WINDOW_MARGIN_S,
    DemoRun,
    RunConfig,
    event_end,
    moved_partitions,
    static_roll,
)
from regroup.demo.spark_demo.processes import Proc, Processes
from regroup.demo.spark_demo.watch import GroupWatch

#: The coordinator's session timeout: a kill -9'd member's partitions move after it; a static member
#: must restart within it. A Spark query needs ~4 s from start to join on an idle 2-core machine and
#: three times that under load, hence more than the 6-10 s that would do for plain consumers.
SESSION_TIMEOUT_MS = 20_000
#: At least this long between the group becoming stable and the next event.
STEADY_S = 6.0
#: When the events happen, as fractions of the duration (each also waits for a stable group).
EVENT_PLAN = (("scale-out", 0.12), ("scale-in", 0.34), ("static-roll", 0.56), ("kill-9", 0.78))


@dataclass
class DemoConfig(RunConfig):
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    join_timeout_s: float = 180.0  # JVM start-up of several members at once on two cores


@dataclass
class Event:
    kind: str
    member: str
    at: float
    epoch_before: int
    owners_before: dict[int, str]
    stable_at: float | None = None
    #: When every partition the event touched had been processed again by its new owner.
    resumed_at: float | None = None
    epoch_after: int = -1
    owners_after: dict[int, str] = field(default_factory=dict)
    note: str = ""

    @property
    def touched(self) -> list[int]:
        """The partitions that moved, and those of the member concerned (a static member's wait)."""
        mine = {p for p, m in self.owners_after.items() if m == self.member}
        return sorted(set(moved_partitions(self.owners_before, self.owners_after)) | mine)

    @property
    def window(self) -> tuple[float, float]:
        """From the event until the group is stable and every touched partition is processed again."""
        return self.at, event_end(self.at, self.stable_at, self.resumed_at) + WINDOW_MARGIN_S


class SparkDemo(DemoRun[Processes]):
    """One run: its processes, the group as sampled, the events so far, and what the run is doing."""

    def __init__(self, root: Path, log_spec: str, topic: str, partitions: int) -> None:
        super().__init__(root, log_spec, topic, partitions, Processes(root, log_spec, topic))
        self.watch = GroupWatch(topic, partitions)
        self.events: list[Event] = []

    @property
    def procs(self) -> list[Proc]:
        return self.processes.members

    def sample(self) -> None:
        self.watch.refresh(self.processes.client, self.procs)

    def stable(self) -> bool:
        return self.watch.stable(self.procs)

    def drained(self) -> bool:
        return self.watch.drained(self.workload)

    def warm(self) -> bool:
        """Every member has finished two batches with records: past its slow first one (a cold JVM
        compiles), which should not count as a pause caused by the next event."""
        return all(sum(1 for b in p.batches if b.rows) >= 2 for p in self.procs if p.in_group)

    def resumed_times(self, ev: Event) -> dict[int, float]:
        """For each partition the event touched, when its owner now first completed a batch with it
        (by a process that was in the group then, so not the stopping half of a static roll)."""
        first: dict[int, float] = {}
        for p in self.procs:
            if not p.in_group:
                continue
            for b in p.batches:
                if b.t > ev.at:
                    for part in b.partitions:
                        if ev.owners_after.get(part) == p.name and part not in first:
                            first[part] = b.t
        return {part: first[part] for part in ev.touched if part in first}

    def resumed(self, ev: Event) -> bool:
        return len(self.resumed_times(ev)) == len(ev.touched)


def play(demo: SparkDemo, cfg: DemoConfig) -> bool:
    """Start the members, produce, run the events, stop producing and drain; returns whether every
    partition was committed up to the log's end. The coordinator is already running."""
    spare, replacement = _start(demo, cfg)
    demo.t0 = time.time()
    demo.timings["startup_s"] = round(demo.t0 - demo.started, 1)
    demo.processes.start_producer(cfg.partitions, cfg.rate)
    _run_events(demo, cfg, spare, replacement)
    return demo.finish(cfg.duration, demo.drained,
                       "waiting until every partition is committed up to the log's end")


def _start(demo: SparkDemo, cfg: DemoConfig) -> tuple[Proc, Proc]:
    """Start the first members and the spare of the scale out, let the first ones join as soon as
    each is ready, and start the static member's replacement. (The workload starts then: the group
    settles faster with data to process, and every event waits for a stable group anyway.)"""
    processes = demo.processes
    first = [processes.spawn(f"m{i + 1}", STATIC_INSTANCE if i == 0 else None) for i in range(cfg.members)]
    # The spares are warmed up: the events should measure the protocol, not a cold JVM's first batch.
    # The static member's replacement starts once the first ones are up (JVMs starting together slow
    # each other down); it has until the roll to warm up.
    spare = processes.spawn(f"m{cfg.members + 1}", warm_up=True)
    replacement: list[Proc] = []
    demo.phase = "starting Spark"

    def joined() -> bool:
        for p in first:
            if p.ready_at and p.released_at is None:
                processes.release(p)
        if not replacement and all(p.ready_at for p in first):
            replacement.append(processes.spawn("m1", STATIC_INSTANCE, warm_up=True))
        return all(p.member_id for p in first)

    if not demo.wait(joined, cfg.join_timeout_s):
        raise RuntimeError(f"the Spark members did not start and join within {cfg.join_timeout_s:.0f} s;"
                           f" see {demo.root / 'logs'}")
    return spare, replacement[0]


def _event(demo: SparkDemo, kind: str, member: str, act: Callable[[], None], note: str = "") -> Event:
    """Do ``act`` and follow the group until it is stable again (rule 2)."""
    demo.phase = f"{EVENT_LABELS[kind]}: {member}"
    ev = Event(kind, member, time.time(), demo.watch.epoch(), demo.watch.current_owners(), note=note)
    demo.events.append(ev)
    act()
    if demo.wait(demo.stable, 90):
        ev.stable_at = time.time()
    else:
        ev.note = (ev.note + " · the group was not stable within 90 s").strip(" ·")
    ev.epoch_after, ev.owners_after = demo.watch.epoch(), demo.watch.current_owners()
    demo.phase += " · waiting for its partitions to be processed again"
    if demo.wait(lambda: demo.resumed(ev), 60):
        ev.resumed_at = max(demo.resumed_times(ev).values(), default=ev.stable_at)
    return ev


def _run_events(demo: SparkDemo, cfg: DemoConfig, spare: Proc, replacement: Proc) -> None:
    processes = demo.processes
    for kind, frac in EVENT_PLAN:
        demo.phase = "steady"
        prev = demo.events[-1].stable_at or demo.events[-1].at if demo.events else demo.t0
        at = max(demo.t0 + frac * cfg.duration, prev + STEADY_S)
        demo.wait(lambda at=at: time.time() >= at, cfg.duration)  # type: ignore[misc]
        demo.phase = "waiting for a stable group, every member past its first batches"
        demo.wait(lambda: demo.stable() and demo.warm(), 90)
        dynamic = [p for p in demo.procs if p.in_group and p.instance is None]
        static = next(p for p in demo.procs if p.in_group and p.instance == STATIC_INSTANCE)
        if kind == "scale-out":
            demo.wait(lambda: spare.ready_at is not None, 120)
            _event(demo, kind, spare.name, lambda: processes.release(spare))
        elif kind == "scale-in":
            victim = min(dynamic, key=lambda p: p.name)
            _event(demo, kind, victim.name, functools.partial(processes.terminate, victim))
        elif kind == "static-roll":
            demo.wait(lambda: replacement.ready_at is not None, 120)
            # The checkpoint is free once the old query has stopped (before its Spark shuts down).
            ev = _event(demo, kind, static.name, static_roll(demo, static, replacement, timeout=60))
            ev.note = ("group epoch unchanged" if ev.epoch_after == ev.epoch_before
                       else "group epoch CHANGED")
        elif dynamic:
            victim = min(dynamic, key=lambda p: p.name)
            _event(demo, kind, victim.name, functools.partial(processes.kill, victim))
