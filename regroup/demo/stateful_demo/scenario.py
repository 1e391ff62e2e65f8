"""The stateful demo's script: start the members, let them settle, produce, then scale out, scale in,
roll the static member, kill -9 one member, and drain.

Rules of this module:

1. The first members join before the topic exists (the group is "not ready": no tasks), so that the
   first assignment, once the topic is created, spreads the tasks over all of them at once, each
   with its standby, fresh (nothing to restore). The workload starts with the topic; the events wait
   for the group to settle (rule 2).
2. Each event happens no earlier than its planned fraction of the duration (`EVENT_PLAN`), and only
   once the group has settled (`GroupWatch.settled`: stable, no warm-up left, every task active once
   with its standby, every member running what it was assigned), every task has produced output
   twice since the previous event, and `STEADY_S` has passed since that event ended.
3. An event is followed until the group has settled again and every task has produced output
   again from the member now holding it active; that span is its window (plus `WINDOW_MARGIN_S`),
   in which the analysis measures each task's unavailability.
4. And those both demos share (`regroup.demo.spark_common.scenario`): every wait is for a
   condition, the same four events, the drain at the end.
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
from regroup.demo.stateful_demo.processes import Member, Processes, Settings
from regroup.demo.stateful_demo.watch import ACTIVE, GroupWatch
from regroup.log import open_log
from regroup.log.base import PartitionedLog

#: At least this long between an event's end and the next event.
STEADY_S = 5.0
#: When the events happen, as fractions of the duration (each also waits for a settled group).
EVENT_PLAN = (("scale-out", 0.1), ("scale-in", 0.35), ("static-roll", 0.55), ("kill-9", 0.75))


@dataclass
class DemoConfig(RunConfig):
    settings: Settings = field(default_factory=Settings)
    join_timeout_s: float = 240.0  # several JVMs starting at once on two cores
    settle_timeout_s: float = 150.0


def task_name(partition: int) -> str:
    return f"s_{partition}"


@dataclass
class Event:
    kind: str
    member: str
    at: float
    epoch_before: int
    actives_before: dict[int, str]
    settled_at: float | None = None
    #: When every task had produced output again from the member now holding it active.
    resumed_at: float | None = None
    epoch_after: int = -1
    actives_after: dict[int, str] = field(default_factory=dict)
    note: str = ""

    @property
    def moved(self) -> list[int]:
        """The tasks whose active moved to another member."""
        return moved_partitions(self.actives_before, self.actives_after)

    @property
    def touched(self) -> list[int]:
        """The tasks that moved, and those the member concerned held active before."""
        mine = {p for p, m in self.actives_before.items() if m == self.member}
        return sorted(set(self.moved) | mine)

    @property
    def end(self) -> float:
        return event_end(self.at, self.settled_at, self.resumed_at)

    @property
    def window(self) -> tuple[float, float]:
        return self.at, self.end + WINDOW_MARGIN_S


class StatefulDemo(DemoRun[Processes]):
    """One run: its processes, the group as sampled, the events so far, and what the run is doing."""

    def __init__(self, root: Path, log_spec: str, topic: str, cfg: DemoConfig) -> None:
        processes = Processes(root, log_spec, topic, cfg.settings)
        super().__init__(root, log_spec, topic, cfg.partitions, processes)
        self.cfg = cfg
        self.watch = GroupWatch(topic, cfg.partitions, cfg.settings.standby_replicas,
                                cfg.settings.acceptable_recovery_lag, trace=root / "group.jsonl")
        self.events: list[Event] = []
        self._log: PartitionedLog | None = None

    @property
    def members(self) -> list[Member]:
        return self.processes.members

    def ends(self) -> dict[int, int]:
        if self._log is None:
            self._log = open_log(self.log_spec)
        return self._log.end_offsets(self.topic)

    def close(self) -> None:
        """Stop every process and close the log."""
        super().close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def sample(self) -> None:
        try:
            ends: dict[int, int] | None = self.ends()
        except Exception:
            ends = None
        self.watch.refresh(self.processes.client, self.members, ends)

    def settled(self) -> bool:
        return self.watch.settled(self.members)

    def outputs_since(self, t: float) -> dict[int, int]:
        """Per task, batches with records whose output was written after ``t`` (any member)."""
        out: dict[int, int] = {}
        for m in self.members:
            for b in m.batches:
                if b.t > t and b.records:
                    p = int(b.task.rpartition("_")[2])
                    out[p] = out.get(p, 0) + 1
        return out

    def warm(self, since: float) -> bool:
        """Every task has produced output twice since ``since``: the group is past the last event."""
        counts = self.outputs_since(since)
        return all(counts.get(p, 0) >= 2 for p in range(self.partitions))

    def resumed_times(self, ev: Event) -> dict[int, float]:
        """For each task, when it first produced output after the event from the member now holding
        it active (a process in the group now: not the stopped half of a static roll)."""
        owners = self.watch.actives()
        first: dict[int, float] = {}
        for m in self.members:
            if not m.in_group:
                continue
            for b in m.batches:
                p = int(b.task.rpartition("_")[2])
                if b.t > ev.at and b.records and owners.get(p) == m.name and p not in first:
                    first[p] = b.t
        return first

    def resumed(self, ev: Event) -> bool:
        return len(self.resumed_times(ev)) == self.partitions


def play(demo: StatefulDemo) -> bool:
    """Start the members, produce, run the events, stop producing and drain; returns whether every
    partition was committed up to the log's end. The coordinator is already running."""
    spare, replacement = _start(demo)
    _run_events(demo, spare, replacement)
    return demo.finish(demo.cfg.duration, lambda: demo.watch.drained(demo.workload, demo.ends()),
                       "waiting until every task has committed up to the log's end")


def _start(demo: StatefulDemo) -> tuple[Member, Member]:
    """Start the first members (the first one static) and the spare of the scale out; let the first
    ones join together once all are ready, start the static member's replacement, and wait until
    the group has settled (rule 1)."""
    cfg, processes = demo.cfg, demo.processes
    # Every member warms up (a stateful query's first batches cost seconds of JIT compiling, which
    # would otherwise delay every task's first output by tens of seconds on two busy cores).
    first = [processes.spawn(f"m{i + 1}", STATIC_INSTANCE if i == 0 else None, warm_up=True)
             for i in range(cfg.members)]
    spare = processes.spawn(f"m{cfg.members + 1}", warm_up=True)
    replacement: list[Member] = []
    demo.phase = "starting Spark"
    if not demo.wait(lambda: all(m.ready_at for m in first), cfg.join_timeout_s):
        raise RuntimeError(f"the Spark members did not start within {cfg.join_timeout_s:.0f} s; "
                           f"see {demo.root / 'logs'}")
    for m in first:
        processes.release(m)
    demo.phase = "the first members join (no topic yet: no tasks)"
    if not demo.wait(lambda: demo.watch.members() == cfg.members, cfg.join_timeout_s):
        raise RuntimeError(f"the Spark members did not join within {cfg.join_timeout_s:.0f} s; "
                           f"see {demo.root / 'logs'}")
    processes.create_topic(cfg.partitions)
    demo.t0 = t = time.time()
    demo.timings["startup_s"] = round(demo.t0 - demo.started, 1)
    processes.start_producer(cfg.partitions, cfg.rate)
    # The replacement warms up while the others settle (JVMs starting together slow each other down).
    replacement.append(processes.spawn("m1", STATIC_INSTANCE, warm_up=True))
    demo.phase = "the topic exists: the first members start their tasks"
    if not demo.wait(demo.settled, cfg.settle_timeout_s):
        raise RuntimeError(f"the group did not settle within {cfg.settle_timeout_s:.0f} s; see "
                           f"{demo.root / 'logs'}")
    demo.timings["first_settle_s"] = round(time.time() - t, 1)
    return spare, replacement[0]


def _event(demo: StatefulDemo, kind: str, member: str, act: Callable[[], None]) -> Event:
    """Do ``act`` and follow the group until it has settled and every task produced again (rule 3)."""
    demo.phase = f"{EVENT_LABELS[kind]}: {member}"
    ev = Event(kind, member, time.time(), demo.watch.epoch(), demo.watch.actives())
    demo.events.append(ev)
    act()
    timeout = demo.cfg.settle_timeout_s
    if demo.wait(demo.settled, timeout):
        ev.settled_at = time.time()
    else:
        ev.note = f"the group did not settle within {timeout:.0f} s"
    ev.epoch_after, ev.actives_after = demo.watch.epoch(), demo.watch.actives()
    demo.phase += " · waiting for every task to produce output again"
    if demo.wait(lambda: demo.resumed(ev), timeout):
        ev.resumed_at = max(demo.resumed_times(ev).values())
    return ev


def _run_events(demo: StatefulDemo, spare: Member, replacement: Member) -> None:
    processes, cfg = demo.processes, demo.cfg
    for kind, frac in EVENT_PLAN:
        demo.phase = "steady"
        prev = demo.events[-1].end if demo.events else demo.t0
        at = max(demo.t0 + frac * cfg.duration, prev + STEADY_S)
        demo.wait(lambda at=at: time.time() >= at, cfg.duration + 60)  # type: ignore[misc]
        demo.phase = "waiting for a settled group, every task producing, every standby caught up"
        demo.wait(lambda prev=prev: demo.settled() and demo.watch.standbys_caught_up()  # type: ignore[misc]
                  and demo.warm(prev), cfg.settle_timeout_s)
        inside = [m for m in demo.members if m.in_group]
        dynamic = [m for m in inside if m.instance is None]
        static = next(m for m in inside if m.instance == STATIC_INSTANCE)
        if kind == "scale-out":
            demo.wait(lambda: spare.ready_at is not None, 120)
            _event(demo, kind, spare.name, lambda: processes.release(spare))
        elif kind == "scale-in":
            victim = min(dynamic, key=lambda m: m.name)
            _event(demo, kind, victim.name, functools.partial(processes.terminate, victim))
        elif kind == "static-roll":
            demo.wait(lambda: replacement.ready_at is not None, 120)
            # The replacement joins as soon as the old one has stepped out of the group: its actives
            # are stopped then (their last batches committed), and the session timeout runs from
            # there. Its copies may still be stopping — that takes seconds each on a busy machine.
            ev = _event(demo, kind, static.name, static_roll(
                demo, static, replacement, timeout=90,
                out_of_group=lambda: demo.watch.stepped_out(STATIC_INSTANCE)))
            ev.note = (ev.note + (" · " if ev.note else "") + ("nothing moved" if not ev.moved
                                                                else f"tasks moved: {ev.moved}"))
        else:  # a member whose tasks have standbys (every task has one when the group has settled)
            victim = min([m for m in dynamic if m.roles(ACTIVE)] or dynamic, key=lambda m: m.name)
            _event(demo, kind, victim.name, functools.partial(processes.kill, victim))
