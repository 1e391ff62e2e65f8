"""What one step of the coordinator produced: the answer, the records, and what the shell must know.

Every kind of group (consumer groups in `consumer_groups`, streams groups in `streams.coordinator`)
answers each state-changing call with an `Outcome`, and the shells (`regroup.coordinator.runtime`, the
simulator) handle all of them the same way: persist ``records`` in order, then release ``response``;
nudge ``wake``; report ``fences``, ``epoch_events`` and ``notes``.

`AnyRecord` is every durable record of every group type: the store, the codec and replay take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from regroup.protocol.causes import EpochEvent, Fence
from regroup.protocol.records import Record
from regroup.protocol.streams.records import StreamsRecord
from regroup.protocol.timers import MemberKey

__all__ = ["AnyRecord", "Outcome", "merged"]

R = TypeVar("R", covariant=True)
T = TypeVar("T")

#: A durable record of any group type.
AnyRecord = Record | StreamsRecord


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    response: R
    #: Persist these, in order, before releasing the response.
    records: tuple[AnyRecord, ...] = ()
    #: Members whose next heartbeat will find work (revoke, or shards they waited for are free).
    wake: frozenset[MemberKey] = frozenset()
    #: Members removed by this step because they missed a deadline, and which one.
    fences: tuple[Fence, ...] = ()
    #: Groups created, bumped (with why) or deleted, and targets installed, in order.
    epoch_events: tuple[EpochEvent, ...] = ()
    #: Members no longer in their group after this step (left, fenced, or replaced by a take-over).
    departed: tuple[MemberKey, ...] = ()
    #: Things an operator should see in the log (e.g. a custom assignor that failed).
    notes: tuple[str, ...] = ()


def merged(response: T, *parts: Outcome[object]) -> Outcome[T]:
    """One outcome of several steps taken in order (e.g. timers of consumer and streams groups)."""
    return Outcome(
        response,
        tuple(r for p in parts for r in p.records),
        frozenset().union(*(p.wake for p in parts)),
        tuple(f for p in parts for f in p.fences),
        tuple(e for p in parts for e in p.epoch_events),
        tuple(d for p in parts for d in p.departed),
        tuple(n for p in parts for n in p.notes),
    )
