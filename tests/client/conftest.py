"""Shared fixtures of the consumer shell's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.log import open_log
from regroup.log.base import LogRecord, PartitionedLog


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionedLog]:
    """An embedded log with topic ``t``: two partitions of ten records each (key ``k``)."""
    lg = open_log(str(tmp_path / "log"))
    lg.create_topic("t", 2)
    for p in (0, 1):
        lg.produce("t", p, [LogRecord(b"k", str(i).encode(), 0) for i in range(10)])
    yield lg
    lg.close()
