"""The coordinator runtime: one step of the protocol core, turned into what its shell must do.

Rules:
1. Every event goes through one of two doors: `Runtime.step` for anything that may change state (a
   request, a timer, new topic metadata), `Runtime.read` for answers that change nothing. The gRPC
   service and the simulator both use these doors, so the simulator checks what production runs.
2. A step's records are appended to the store, with the epoch history they imply, before anything
   else happens; the answer may leave only once every record up to `Effects.durable_seq` is durable.
   A read waits for the store's tail too: it may show state whose records are still being written.
3. The member whose request caused a step is not nudged: its answer already carries the news.
4. The history is worded from the causes the core reported (`regroup.protocol.causes`), never guessed
   from the records.
5. The runtime does no I/O of its own and reads no clock: the store is given, wall-clock time for
   history entries is a callable, and the shell performs the effects (awaits durability, pushes
   nudges, arms one timer at `Effects.next_deadline`, writes log lines).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from regroup.coordinator.history import HistoryOp, derive
from regroup.protocol.causes import EpochEvent, Fence, TargetInstalled
from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.timers import MemberKey

R = TypeVar("R")


class RecordStore(Protocol):
    """Where the runtime appends records; durability is awaited by the shell, not here."""

    @property
    def tail(self) -> int:
        """Sequence number of the last record appended (durable or not)."""
        ...

    def append(self, records: Sequence[AnyRecord], history: Sequence[HistoryOp]) -> int:
        """Queue records with their history entries; the sequence number to await."""
        ...

    def compaction_due(self) -> bool: ...

    def compact(self, snapshot: list[AnyRecord]) -> None:
        """Replace everything appended so far by ``snapshot`` (the state after it)."""
        ...


@dataclass(frozen=True, slots=True)
class Effects(Generic[R]):
    """What one step asks of its shell, in the order the shell should honour it."""

    response: R
    #: Release the response once every record up to this sequence number is durable.
    durable_seq: int
    records: tuple[AnyRecord, ...] = ()
    history: tuple[HistoryOp, ...] = ()
    #: Members to push a "heartbeat now" to (the requester excluded).
    nudges: frozenset[MemberKey] = frozenset()
    fences: tuple[Fence, ...] = ()
    epoch_events: tuple[EpochEvent, ...] = ()
    #: Members no longer in their group: forget what the shell kept about them.
    departed: tuple[MemberKey, ...] = ()
    #: Things an operator should see in the log, from the core.
    notes: tuple[str, ...] = ()
    #: When the core's timers are due next (None: no timer): the shell's one wake-up.
    next_deadline: int | None = None

    @property
    def installed_target(self) -> bool:
        return any(isinstance(e, TargetInstalled) for e in self.epoch_events)

    def fence_lines(self) -> list[str]:
        return [f"group {f.group_id!r}: member {f.member_id!r} fenced ({f.reason.value})"
                for f in self.fences]


class Runtime:
    """The core and its store, stepped together (see the rules above)."""

    def __init__(self, coord: Coordinator, store: RecordStore, unix_ms: Callable[[], int]) -> None:
        self.coord = coord
        self.store = store
        self.unix_ms = unix_ms

    def step(self, decide: Callable[[Coordinator], Outcome[R]], requester: MemberKey | None = None,
             ) -> Effects[R]:
        """Run one state-changing call of the core and persist it. An exception from the core
        propagates untouched: nothing was appended, and the shell decides whether it can go on."""
        out = decide(self.coord)
        store = self.store
        history: tuple[HistoryOp, ...] = ()
        if out.records:
            if out.epoch_events:
                history = tuple(derive(out.epoch_events, self.unix_ms()))
            seq = store.append(out.records, history)
            if store.compaction_due():
                store.compact(self.coord.snapshot())
        else:
            seq = store.tail
        nudges = out.wake - {requester} if requester is not None and out.wake else out.wake
        return Effects(out.response, seq, out.records, history, nudges, out.fences, out.epoch_events,
                       out.departed, out.notes, self.coord.next_deadline())

    def read(self, answer: Callable[[Coordinator], R]) -> Effects[R]:
        """Answer from the core's state; the answer waits for the store's tail (rule 2)."""
        return Effects(answer(self.coord), self.store.tail)
