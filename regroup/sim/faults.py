"""Random fault plans for the invariant sweep: everything a seed decides, drawn up front.

A `FaultPlan` is a small group (2-6 members, each static or dynamic), its topics, a faulty network
(latency tail, drops, duplicates, hold-ups, lost nudges) and a list of timed events during the churn
window: crashes (mostly followed by a restart), graceful shutdowns and restarts, new members,
network partitions of one member, slow batches, coordinator restarts, partitions added to a topic
and a topic created. Every fault ends by the *quiet time*; after it only latency remains, and the
group must settle within the liveness bound.

Events that no longer apply when their time comes (crashing a process that is down, restarting one
that is up) do nothing, so any plan is valid.

A *key-range* plan (``key_ranges=True``, ``regroup sim check --key-ranges``) is the same plan — the
same group, network and faults, drawn first from the same stream — plus an initial parallelism for
``orders`` and 2 or more *parallelism changes* in the churn window (`PARALLELISMS`; each a real
change of its topic's value, so splits, merges and non-nested re-cuts such as 2 -> 3). Drawing them
after everything else keeps the plans of the plain sweep, and so its regression seeds, unchanged.

A *split* plan (``splits=True``, ``regroup sim check --splits``; a key-range plan too) adds, drawn
after everything else again, 2 or more producer-side layout changes of ``orders``'s partitions
(regroup/sim/pieces.py): a *split* of an open piece into 2-4 pieces (half of them in a partition
split already, so pieces nest) and a *merge* of two adjacent open pieces or of every open piece of a
partition split before (a merge with nothing to merge becomes a split). The first is a split.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from regroup.sim.keyranges import PARALLELISMS
from regroup.sim.kip848 import Kip848System
from regroup.sim.network import NetworkConfig

#: When the first fault may strike: the group forms first.
CHURN_START_MS = 15_000

KINDS = ("crash", "shutdown", "join", "stall", "cut", "coordinator", "grow", "create")
_WEIGHTS = (3.0, 2.0, 1.0, 2.0, 2.0, 1.5, 1.0, 0.5)


@dataclass(frozen=True, slots=True)
class PlannedEvent:
    at_ms: int
    kind: str
    slot: str = ""
    #: Duration (stall, cut, coordinator downtime), restart delay (-1: none), or partition count.
    value: int = 0
    static: bool = False
    topic: str = ""
    #: Split and merge: the partition, and which open piece (in key order) is split or merged with
    #: the next; a merge's ``value`` is 0 for every open piece, 2 for a pair; a split's is ``into``.
    partition: int = 0
    piece: int = 0

    def __str__(self) -> str:
        detail = {
            "crash": f"{self.slot}" + (f", restart after {self.value} ms" if self.value >= 0 else ""),
            "shutdown": f"{self.slot}" + (f", restart after {self.value} ms" if self.value >= 0 else ""),
            "join": f"{self.slot}" + (" (static)" if self.static else ""),
            "stall": f"{self.slot} for {self.value} ms",
            "cut": f"{self.slot} for {self.value} ms",
            "coordinator": f"down for {self.value} ms",
            "grow": f"{self.topic} to {self.value} partitions",
            "create": f"{self.topic} with {self.value} partitions",
            "parallelism": f"{self.topic} to {self.value} key range(s) per partition",
            "split": f"{self.topic}:{self.partition}: open piece {self.piece} into {self.value}",
            "merge": f"{self.topic}:{self.partition}: " + (
                "every open piece" if self.value == 0 else f"open pieces {self.piece} and {self.piece + 1}"),
        }[self.kind]
        return f"t={self.at_ms:>7} {self.kind:<11} {detail}"


@dataclass(frozen=True)
class FaultPlan:
    seed: int
    members: tuple[tuple[str, bool], ...]
    topics: tuple[tuple[str, int], ...]
    subscribed: tuple[str, ...]
    network: NetworkConfig
    events: tuple[PlannedEvent, ...]
    quiet_at_ms: int
    #: regroup (nudges) or KIP-848 as Kafka ships it (heartbeats only): the same core either way.
    nudges: bool = True
    #: A key-range plan: the group's parallelism per topic before anyone joins (empty: whole partitions).
    parallelism: tuple[tuple[str, int], ...] = ()
    key_ranges: bool = False
    #: A split plan: producer-side splits and merges of partitions among the events.
    splits: bool = False

    def describe(self) -> list[str]:
        n = self.network
        lines = [
            f"seed {self.seed}: members "
            + ", ".join(f"{s}{' (static)' if st else ''}" for s, st in self.members)
            + "; topics " + ", ".join(f"{t}:{p}" for t, p in self.topics),
            f"network: latency {n.latency_min_ms}+lognormal(median {n.latency_median_ms:.1f} ms, "
            f"sigma {n.latency_sigma:.2f}); drop request {n.drop_request:.3f}, response "
            f"{n.drop_response:.3f}, nudge {n.drop_nudge:.2f}; duplicate {n.duplicate_request:.3f}; "
            f"hold-up {n.delay_probability:.3f} up to {n.delay_max_ms} ms; "
            + ("nudges on (regroup)" if self.nudges else "nudges off (KIP-848 as Kafka ships it)"),
        ]
        if self.key_ranges:
            lines.append("key ranges: " + ", ".join(f"{t} in {n}" for t, n in self.parallelism)
                         + " at the start" + ("; producer-side splits and merges" if self.splits else ""))
        lines += [str(e) for e in self.events]
        lines.append(f"t={self.quiet_at_ms:>7} quiet: faults stop")
        return lines


def make_plan(seed: int, duration_ms: int, events: int, stale_requests: bool = False,
              key_ranges: bool = False, splits: bool = False) -> FaultPlan:
    """The plan of ``seed``: a churn window of ``duration_ms`` with ``events`` faults.

    ``stale_requests`` lets hold-ups delay requests too, past their sender's timeout. ``key_ranges``
    adds an initial parallelism and parallelism changes (drawn last: the rest is the plain plan);
    ``splits`` (a key-range plan too) adds producer-side splits and merges, drawn after those.
    """
    key_ranges = key_ranges or splits
    rng = random.Random(f"plan-{seed}")
    slots = [f"m{i}" for i in range(rng.randint(2, 6))]
    members = tuple((s, rng.random() < 0.5) for s in slots)
    orders = rng.randint(2, 12)
    net = NetworkConfig(
        latency_min_ms=1, latency_median_ms=rng.uniform(0.5, 20.0), latency_sigma=rng.uniform(0.2, 1.2),
        latency_max_ms=2_000,
        drop_request=rng.choice((0.0, rng.uniform(0.0, 0.05))),
        drop_response=rng.choice((0.0, rng.uniform(0.0, 0.05))),
        duplicate_request=rng.choice((0.0, rng.uniform(0.0, 0.08))),
        delay_probability=rng.uniform(0.01, 0.05) if stale_requests else rng.choice(
            (0.0, rng.uniform(0.0, 0.02))),
        delay_max_ms=rng.randint(500, 15_000),
        drop_nudge=rng.uniform(0.0, 0.3),
        stale_requests=stale_requests,
    )
    nudges = rng.random() < 0.7
    quiet = CHURN_START_MS + duration_ms
    planned: list[PlannedEvent] = []
    created = False
    for _ in range(events):
        at = rng.randint(CHURN_START_MS, quiet - 1)
        room = quiet - at
        kind = rng.choices(KINDS, _WEIGHTS)[0]
        slot = rng.choice(slots)
        if kind in ("crash", "shutdown"):
            restart = rng.randint(200, 50_000) if rng.random() < 0.8 else -1
            if restart >= room:
                restart = rng.randint(0, max(0, room - 1)) if rng.random() < 0.5 else -1
            planned.append(PlannedEvent(at, kind, slot, restart))
        elif kind == "join":
            new = f"m{len(slots)}"
            slots.append(new)
            planned.append(PlannedEvent(at, kind, new, static=rng.random() < 0.5))
        elif kind in ("stall", "cut"):
            planned.append(PlannedEvent(at, kind, slot, min(rng.randint(500, 60_000), room)))
        elif kind == "coordinator":
            planned.append(PlannedEvent(at, kind, value=min(rng.randint(0, 10_000), room)))
        elif kind == "grow":
            planned.append(PlannedEvent(at, kind, topic="orders", value=rng.randint(1, 6)))  # added
        elif not created:
            created = True
            planned.append(PlannedEvent(at, "create", topic="payments", value=rng.randint(1, 6)))
    parallelism: tuple[tuple[str, int], ...] = ()
    if key_ranges:
        start, changes = _parallelism_changes(rng, quiet, events)
        parallelism = (("orders", start),)
        planned.extend(changes)
    layout = _layout_draws(rng, quiet, events) if splits else []
    planned.sort(key=lambda e: e.at_ms)
    # Growth was drawn as partitions added; in time order it becomes the new partition count.
    partitions = orders
    for i, e in enumerate(planned):
        if e.kind == "grow":
            partitions += e.value
            planned[i] = PlannedEvent(e.at_ms, "grow", topic="orders", value=partitions)
    if layout:
        planned = _layout_changes(planned, layout, orders)
    return FaultPlan(seed, members, (("orders", orders),), ("orders", "payments"), net, tuple(planned), quiet,
                     nudges, parallelism, key_ranges, splits)


@dataclass(frozen=True, slots=True)
class _LayoutDraw:
    at_ms: int
    merge: bool
    into: int
    every: bool
    nested: bool
    partition: int
    piece: int


def _layout_draws(rng: random.Random, quiet: int, events: int) -> list[_LayoutDraw]:
    """The raw draws of a split plan's layout changes: 2 or more (about one per 3 faults)."""
    count = rng.randint(2, max(2, events // 3 + 1))
    times = sorted(rng.randint(CHURN_START_MS, quiet - 1) for _ in range(count))
    return [_LayoutDraw(at, i > 0 and rng.random() < 0.45, rng.randint(2, 4), rng.random() < 0.3,
                        rng.random() < 0.5, rng.randrange(1 << 30), rng.randrange(1 << 30))
            for i, at in enumerate(times)]


def _layout_changes(planned: list[PlannedEvent], draws: list[_LayoutDraw], orders: int) -> list[PlannedEvent]:
    """The layout changes placed among the other events (after those at the same time), each resolved
    against the partitions and open pieces ``orders`` will have then."""
    out = sorted([*planned, *(PlannedEvent(d.at_ms, "layout", value=i) for i, d in enumerate(draws))],
                 key=lambda e: e.at_ms)
    partitions = orders
    pieces: dict[int, int] = {}  # open pieces per split partition
    for i, e in enumerate(out):
        if e.kind == "grow":
            partitions = e.value
        if e.kind != "layout":
            continue
        d = draws[e.value]
        split = sorted(p for p, n in pieces.items() if n > 1)
        if d.merge and split:
            p = split[d.partition % len(split)]
            n = pieces[p]
            piece = 0 if d.every else d.piece % (n - 1)
            pieces[p] = 1 if d.every else n - 1
            out[i] = PlannedEvent(e.at_ms, "merge", topic="orders", value=0 if d.every else 2, partition=p,
                                  piece=piece)
        else:
            p = split[d.partition % len(split)] if d.nested and split else d.partition % partitions
            n = pieces.get(p, 1)
            pieces[p] = n + d.into - 1
            out[i] = PlannedEvent(e.at_ms, "split", topic="orders", value=d.into, partition=p,
                                  piece=d.piece % n)
    return out


def _parallelism_changes(rng: random.Random, quiet: int, events: int) -> tuple[int, list[PlannedEvent]]:
    """The initial parallelism of ``orders`` and the changes of a key-range plan, in time order: 2 or
    more (about one per 4 faults), mostly of ``orders``, sometimes of ``payments`` (which may not
    exist yet: the setting then applies when it is created). Each differs from its topic's value
    before it, so each moves the group's epoch and hands ranges over."""
    start = rng.choice(PARALLELISMS)
    current = {"orders": start, "payments": 1}
    count = rng.randint(2, max(2, events // 4 + 1))
    times = sorted(rng.randint(CHURN_START_MS, quiet - 1) for _ in range(count))
    out: list[PlannedEvent] = []
    for at in times:
        topic = "payments" if rng.random() < 0.2 else "orders"
        value = rng.choice([n for n in PARALLELISMS if n != current[topic]])
        current[topic] = value
        out.append(PlannedEvent(at, "parallelism", topic=topic, value=value))
    return start, out


def apply_event(system: Kip848System, event: PlannedEvent) -> None:
    """Carry out one planned event on the running system."""
    actions: dict[str, Callable[[], None]] = {
        "crash": lambda: _crash(system, event),
        "shutdown": lambda: system.shutdown(event.slot, event.value if event.value >= 0 else None),
        "join": lambda: system.add_member(event.slot, event.static),
        "stall": lambda: system.stall(event.slot, event.value, end_by=event.at_ms + event.value),
        "cut": lambda: system.cut(event.slot, event.value),
        "coordinator": lambda: system.restart_coordinator(event.value),
        "grow": lambda: system.grow_topic(event.topic, event.value),
        "create": lambda: system.grow_topic(event.topic, event.value),
        "parallelism": lambda: system.set_parallelism(event.topic, event.value),
        "split": lambda: _layout(system, event),
        "merge": lambda: _layout(system, event),
    }
    actions[event.kind]()


def _crash(system: Kip848System, event: PlannedEvent) -> None:
    member = system.members.get(event.slot)
    if member is None or not member.alive:
        return
    system.crash(event.slot)
    if event.value >= 0:
        system.engine.after(event.value, f"{event.slot}: restart", lambda: system.restart(event.slot))


def _layout(system: Kip848System, event: PlannedEvent) -> None:
    from regroup.sim.lanes import change_layout  # the log's layout module: only split runs load it

    change_layout(system, event.kind, event.topic, event.partition, event.piece, event.value)
