"""Random but realistic coordinator workloads through the protocol core (for store and codec tests)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from regroup.coordinator.runtime import Effects
from regroup.protocol.messages import OffsetCommitRequest
from regroup.protocol.records import Record
from regroup.sim.inproc import InProcessGroup


class RecordingGroup(InProcessGroup):
    """An in-process group that hands every step's records to ``sink`` as they are produced."""

    sink: Callable[[tuple[Record, ...]], None] | None = None

    def _perform(self, eff: Effects[Any]) -> None:
        if self.sink is not None and eff.records:
            self.sink(eff.records)
        super()._perform(eff)


def run_workload(group: RecordingGroup, seed: int, steps: int) -> None:
    """Joins, leaves, crashes, static restarts, commits and topic growth, in virtual time."""
    rng = random.Random(seed)
    topics = {"t": 8, "u": 3}
    group.update_topics(topics)
    n = 0
    for _ in range(steps):
        op = rng.random()
        live = sorted(group.members)
        if op < 0.3 or not live:
            n += 1
            static = f"inst-{n % 3}" if rng.random() < 0.3 else None
            if static is not None and any(m.instance_id == static for m in group.members.values()):
                static = None
            subscription = tuple(sorted(rng.sample(sorted(topics), rng.randint(1, 2))))
            group.join(f"m{n}", subscription, instance_id=static)
        elif op < 0.4:
            group.leave(rng.choice(live))
        elif op < 0.45:
            group.crash(rng.choice(live))
        elif op < 0.5:
            t = rng.choice(sorted(topics))
            topics[t] += 1
            group.update_topics(dict(topics))
        else:
            commit(group, rng)
        group.run_for(rng.choice([100, 1_000, 6_000, 50_000]))


def commit(group: RecordingGroup, rng: random.Random) -> None:
    for mid, m in sorted(group.members.items()):
        if m.owned and rng.random() < 0.5:
            offsets = {s: rng.randint(0, 1000) for s in m.owned}
            req = OffsetCommitRequest(group.group_id, mid, m.epoch, offsets, metadata=f"by {mid}")
            group.step(lambda c, req=req: c.commit_offsets(req, group.now))
