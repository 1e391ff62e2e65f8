"""A record store in memory: what the simulator and tests give the runtime instead of SQLite.

Appending makes records durable at once (a simulated disk never lags); the simulator crashes the
coordinator between steps, so "appended" and "durable" are the same moment there. Compaction follows
the durable store's rule when ``snapshot_every`` is set, and only when asked otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from regroup.coordinator.history import EpochHistory, HistoryOp
from regroup.protocol.outcome import AnyRecord


class MemoryStore:
    def __init__(self, records: Sequence[AnyRecord] = (), *, snapshot_every: int | None = None,
                 history_limit: int = 100) -> None:
        #: What a restart recovers from: the last snapshot, then every record appended after it.
        self.records: list[AnyRecord] = list(records)
        self.history = EpochHistory(history_limit)
        self.snapshot_every = snapshot_every
        self._tail = len(self.records)
        self._since_snapshot = len(self.records)
        self._last_snapshot_size = 0

    @property
    def tail(self) -> int:
        return self._tail

    def append(self, records: Sequence[AnyRecord], history: Sequence[HistoryOp] = ()) -> int:
        self.records.extend(records)
        self.history.apply(history)
        self._tail += len(records)
        self._since_snapshot += len(records)
        return self._tail

    def compaction_due(self) -> bool:
        every = self.snapshot_every
        return every is not None and self._since_snapshot > max(every, self._last_snapshot_size)

    def compact(self, snapshot: list[AnyRecord]) -> None:
        self.records = list(snapshot)
        self._since_snapshot = 0
        self._last_snapshot_size = len(snapshot)
