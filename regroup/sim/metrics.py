"""What a rebalance costs, measured from what the consumers did.

`Recorder` listens to the consumers (it is a `ShardObserver`) and to the protocol (changes, barrier
rounds, requests); `measure` turns a recording into `Metrics` for a window that starts at the change:

``handoff_s``
    from the (last) change to the last partition hand-off: every partition is processed by its
    final owner from then on;
``stable_s``
    from the (last) change until the group is stable: hand-offs done and the protocol at rest (for
    KIP-848, every member at the new epoch — a member whose partitions do not move learns of the new
    epoch on its next heartbeat);
``unavailable_partition_s``
    partition-seconds during which a partition that existed was processed by nobody;
``bystander_pause_s``
    the longest time a member *not involved in the change* (for a rolling restart: in the current
    step) stopped processing a partition it owned both before and after (an eager rebalance stops
    everyone; the new protocol stops nobody);
``moved``
    hand-offs: a partition started by another member than the one that processed it last;
``stops``
    times a partition's processing stopped (a revocation, a crash, a shutdown);
``barrier_rounds``
    group-wide JoinGroup/SyncGroup rounds (0 for KIP-848);
``requests``
    requests the coordinator served in the window (heartbeats, joins, syncs, commits, fetches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from regroup.protocol.shard import Shard
from regroup.sim.keyranges import Run
from regroup.sim.workload import ProducedLog


def slot_of(owner: str) -> str:
    """The member slot of a process identity ``slot#incarnation``."""
    return owner.split("#", 1)[0]


@dataclass(slots=True)
class _Span:
    slot: str
    start: int
    end: int | None = None


@dataclass
class Recorder:
    """Active-processing spans per partition, hand-offs, and protocol events."""

    log: ProducedLog
    spans: dict[Shard, list[_Span]] = field(default_factory=dict)
    handoffs: list[tuple[int, Shard, str, str]] = field(default_factory=list)
    stops: list[int] = field(default_factory=list)
    protocol_changes: list[int] = field(default_factory=list)
    barrier_rounds: list[int] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    _last_slot: dict[Shard, str] = field(default_factory=dict)

    # ---------------------------------------------------------------- ShardObserver
    def on_acquire(self, t: int, owner: str, shard: Shard) -> None:
        pass

    def on_activate(self, t: int, owner: str, shard: Shard, offset: int) -> None:
        slot = slot_of(owner)
        prev = self._last_slot.get(shard)
        if prev is not None and prev != slot:
            self.handoffs.append((t, shard, prev, slot))
        self._last_slot[shard] = slot
        self.spans.setdefault(shard, []).append(_Span(slot, t))

    def on_processed(self, t: int, owner: str, shard: Shard, lo: int, hi: int) -> None:
        pass

    def on_records(self, t: int, owner: str, shard: Shard, runs: Sequence[Run]) -> None:
        pass

    def on_stop(self, t: int, owner: str, shard: Shard) -> None:
        spans = self.spans.get(shard)
        if spans and spans[-1].end is None:
            spans[-1].end = t
        self.stops.append(t)

    def on_release(self, t: int, owner: str, shard: Shard, clean: bool) -> None:
        pass

    # ---------------------------------------------------------------- protocol
    def protocol_change(self, t: int) -> None:
        if not self.protocol_changes or self.protocol_changes[-1] != t:
            self.protocol_changes.append(t)

    def barrier_round(self, t: int) -> None:
        self.barrier_rounds.append(t)

    def request(self, t: int) -> None:
        self.requests.append(t)

    # ---------------------------------------------------------------- queries
    def owner_at(self, shard: Shard, t: int) -> str | None:
        for s in reversed(self.spans.get(shard, [])):
            if s.start <= t and (s.end is None or s.end > t):
                return s.slot
        return None

    def last_handoff(self, t0: int, t1: int) -> int:
        """The last time in ``[t0, t1]`` a partition started or stopped being processed (t0 if none)."""
        last = t0
        for spans in self.spans.values():
            for s in spans:
                if t0 <= s.start <= t1:
                    last = max(last, s.start)
                if s.end is not None and t0 <= s.end <= t1:
                    last = max(last, s.end)
        return last

    def last_protocol_change(self, t0: int, t1: int) -> int:
        return max([t0, *(t for t in self.protocol_changes if t0 <= t <= t1)])

    def availability(self, t0: int, t1: int, step: int) -> list[tuple[int, int, int]]:
        """``(t, partitions processed, partitions existing)`` sampled every ``step`` ms."""
        deltas: list[tuple[int, int, int]] = []  # (time, d_active, d_existing)
        for shard in self.log.shards(tuple(self.log.partitions)):
            deltas.append((self.log.created_at(shard) or 0, 0, 1))
        for spans in self.spans.values():
            for s in spans:
                deltas.append((s.start, 1, 0))
                if s.end is not None:
                    deltas.append((s.end, -1, 0))
        deltas.sort()
        out: list[tuple[int, int, int]] = []
        active = existing = 0
        i = 0
        for t in range(t0, t1 + 1, step):
            while i < len(deltas) and deltas[i][0] <= t:
                active += deltas[i][1]
                existing += deltas[i][2]
                i += 1
            out.append((t, active, existing))
        return out


@dataclass(frozen=True)
class Metrics:
    #: From the last action to the last partition hand-off (None: never settled).
    handoff_s: float | None
    #: From the last action until the group is stable (hand-offs done, protocol at rest).
    stable_s: float | None
    unavailable_partition_s: float
    bystander_pause_s: float
    moved: int
    stops: int
    barrier_rounds: int
    requests: int
    partitions: int

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


#: One step of a scenario: when it starts and which member slots it involves.
Step = tuple[int, frozenset[str]]


def _covered(spans: list[_Span], t0: int, t1: int, slot: str | None = None) -> list[tuple[int, int]]:
    """The parts of ``[t0, t1]`` covered by spans (of ``slot`` only, if given), merged and sorted."""
    pieces = sorted((max(s.start, t0), min(s.end if s.end is not None else t1, t1))
                    for s in spans if slot is None or s.slot == slot)
    merged: list[tuple[int, int]] = []
    for a, b in pieces:
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _pause(rec: Recorder, shards: list[Shard], a: int, b: int, bystanders: frozenset[str]) -> int:
    """Longest stop in ``[a, b]`` of a partition a bystander processed both at ``a`` and at ``b``."""
    pause = 0
    for shard in shards:
        before, after = rec.owner_at(shard, a), rec.owner_at(shard, b)
        if before is None or before != after or before not in bystanders:
            continue
        mine = _covered(rec.spans.get(shard, []), a, b, before)
        edges = [a] + [x for lo, hi in mine for x in (lo, hi)] + [b]
        pause = max([pause, *(edges[i + 1] - edges[i] for i in range(0, len(edges) - 1, 2))])
    return pause


def measure(rec: Recorder, steps: list[Step], last_action: int, t1: int, slots: frozenset[str],
            settled: bool) -> Metrics:
    """Metrics of a run whose change is ``steps`` (from the first step to ``t1``).

    A member is a bystander of a step unless the step involves it; its pause is measured over the
    step (until the next step starts, or ``t1``). ``settled``: whether the group settled by ``t1``.
    """
    t0 = steps[0][0]
    shards = rec.log.shards(tuple(rec.log.partitions))
    unavailable = 0
    for shard in shards:
        start = max(t0, rec.log.created_at(shard) or 0)
        if start < t1:
            covered = sum(b - a for a, b in _covered(rec.spans.get(shard, []), start, t1))
            unavailable += (t1 - start) - covered
    pause = 0
    for i, (a, involved) in enumerate(steps):
        b = steps[i + 1][0] if i + 1 < len(steps) else t1
        pause = max(pause, _pause(rec, shards, a, b, slots - involved))
    moved = sum(1 for t, *_ in rec.handoffs if t0 <= t <= t1)
    stops = sum(1 for t in rec.stops if t0 <= t <= t1)
    rounds = sum(1 for t in rec.barrier_rounds if t0 <= t <= t1)
    requests = sum(1 for t in rec.requests if t0 <= t <= t1)
    handoff = rec.last_handoff(last_action, t1)
    stable = max(handoff, rec.last_protocol_change(last_action, t1))
    return Metrics(
        (handoff - last_action) / 1000 if settled else None,
        (stable - last_action) / 1000 if settled else None,
        round(unavailable / 1000, 3), pause / 1000, moved, stops, rounds, requests, len(shards))
