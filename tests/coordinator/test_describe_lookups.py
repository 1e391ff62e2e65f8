"""A describe asks the log for end offsets and for the pieces of split partitions side by side
(`CoordinatorService._ends_and_spans`), so that it waits one lookup timeout at most, and each lookup
still fails open on its own."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from regroup.coordinator.service import CoordinatorService, ServiceOptions
from regroup.coordinator.store import DurableStore
from regroup.log.embedded.pieces import TRIVIAL
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.shard import Shard

WAIT_S = 60.0  # a bound on waiting for a condition, never reached when the lookups run side by side


class _Source:
    """end_offsets answers only once layout was asked: they must run at the same time."""

    def __init__(self, spans_fail: bool = False) -> None:
        self.layout_asked = threading.Event()
        self.spans_fail = spans_fail

    def end_offsets(self, topic: str) -> dict[int, int]:
        assert self.layout_asked.wait(WAIT_S), "the spans lookup did not run beside the ends lookup"
        return {0: 10, 1: 20}

    def layout(self, topic: str, partition: int) -> Any:
        self.layout_asked.set()
        if self.spans_fail:
            raise OSError("pieces unreadable")
        return TRIVIAL

    def piece_ends(self, topic: str, partition: int) -> dict[tuple[int, int], int]:
        return {}


def _service(tmp_path: Path, source: _Source) -> CoordinatorService:
    refresher: Any = SimpleNamespace(source=source, on_result=None)
    return CoordinatorService(Coordinator(), DurableStore(str(tmp_path)), refresher=refresher,
                              options=ServiceOptions(end_offsets_timeout_s=WAIT_S))


def test_ends_and_spans_are_looked_up_side_by_side(tmp_path: Path) -> None:
    service = _service(tmp_path, _Source())
    ends, split = asyncio.run(service._ends_and_spans({"t": 2}))
    assert ends == {Shard("t", 0): 10, Shard("t", 1): 20}
    assert split == {}  # neither partition is split


def test_a_failed_spans_lookup_leaves_the_ends(tmp_path: Path) -> None:
    service = _service(tmp_path, _Source(spans_fail=True))
    ends, split = asyncio.run(service._ends_and_spans({"t": 2}))
    assert ends == {Shard("t", 0): 10, Shard("t", 1): 20} and split == {}
