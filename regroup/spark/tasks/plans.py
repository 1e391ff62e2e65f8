"""What the active of a task has planned, read by the member's warm-ups (`regroup.spark.tasks.pipeline`
rule 3; `regroup.protocol.streams.checkpoints` rule 4).

Spark writes a batch's offsets to the checkpoint's offset log before it runs the batch, so the
newest entry after the batch of record is where the active is going. A warm-up reads up to there:
it runs the active's batches beside it. The log is walked on from the last entry found per task
(old entries are purged by Spark; newer ones only appear), and any read error means "nothing
known" — the warm-up then keeps to the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from regroup.protocol.shard import Shard
from regroup.protocol.streams.checkpoints import CheckpointRecord
from regroup.protocol.streams.topology import TaskId
from regroup.spark.tasks.checkpoint import batch_ends
from regroup.spark.tasks.statepath import StatePath

__all__ = ["ActivePlans"]

log = logging.getLogger("regroup.spark.tasks")

#: How many batches past the batch of record are looked for in one call (the record lags the newest
#: plan by one batch, a few while the committed offsets are refreshed).
_PLANNED_AHEAD_MAX = 64


class ActivePlans:
    """Per task, the newest batch its active planned, read from the checkpoints under ``root``."""

    def __init__(self, root: StatePath) -> None:
        self.root = root
        self._found: dict[TaskId, tuple[str, int, dict[Shard, int]]] = {}  # (directory, batch, ends)

    def keep(self, tasks: Collection[TaskId]) -> None:
        """Forget the tasks that have no warm-up here any more."""
        self._found = {t: f for t, f in self._found.items() if t in tasks}

    def planned(self, record: CheckpointRecord | None, task: TaskId | None = None) -> dict[Shard, int] | None:
        """The ends of the newest batch planned after the batch of ``record``, in its directory; None
        when none is planned, or the log cannot be read."""
        if record is None:
            return None
        batch, planned = record.batch, None
        known = self._found.get(task) if task is not None else None
        if known is not None and known[0] == record.directory and known[1] > batch:
            batch, planned = known[1], known[2]
        directory = self.root / record.directory
        try:
            for _ in range(_PLANNED_AHEAD_MAX):
                ends = batch_ends(directory, batch + 1)
                if ends is None:
                    break
                batch, planned = batch + 1, ends
        except Exception as e:  # unreadable now (a file being replaced, the filesystem's trouble)
            log.debug("cannot read the planned batches of %s: %s", directory, e)
            return None
        if task is not None and planned is not None:
            self._found[task] = (record.directory, batch, planned)
        return planned
