"""``format("regroup-task")``: the source of one task query — the task's partition of each source
topic of its subtopology, from given offsets, as far as the member's `Control` allows.

It holds no membership: the application's member (`regroup.spark.tasks.pipeline`) decides when the
query runs, how far it may read and when it must stop, and commits at the coordinator. The offset
Spark checkpoints is ``{"v": 1, "ends": {"topic:partition": offset}}``.

A source partition split on the producer side (`regroup.log.embedded.layout`) is read as *lanes*, as
the consumer-group source reads it: the task's part cut at the open pieces' boundaries
(`microbatch.lanes_of`), each lane a key of the offset (``topic:partition:lo-hi``), planned up to
its own piece's end (`microbatch.lane_ends`) and never past the member's limit for its keys
(`checkpoints.limit_of`). A split cuts a lane at the next plan, each part beginning where the lane
was (`checkpoints.lane_start`, so the checkpoint alone says where); lanes are never joined again
(after a merge, each reads the merged piece's records of its own keys).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from regroup.log import piece_ends_of
from regroup.protocol.microbatch import (
    ShardRange,
    lane_ends,
    lanes_of,
    parse_shard_key,
    shard_key,
    split_ranges,
)
from regroup.protocol.shard import Shard
from regroup.protocol.streams.checkpoints import lane_start, limit_of
from regroup.spark.read import SPARK_SCHEMA_DDL, read_range
from regroup.spark.source import RangePartition
from regroup.spark.tasks.control import read_control, write_ack

__all__ = ["TaskDataSource", "task_offset", "task_offset_ends"]

OFFSET_VERSION = 1


def task_offset(ends: dict[Shard, int], begin: dict[Shard, int] | None = None) -> dict[str, Any]:
    """The offset Spark logs: the batch's ends, and where the checkpoint's first batch began (so
    that a copy of the checkpoint can run an unfinished batch 0 again from the same place)."""
    out: dict[str, Any] = {"v": OFFSET_VERSION, "ends": {shard_key(s): ends[s] for s in sorted(ends)}}
    if begin is not None:
        out["begin"] = {shard_key(s): begin[s] for s in sorted(begin)}
    return out


def task_offset_ends(offset: dict[str, Any]) -> dict[Shard, int]:
    if offset.get("v") != OFFSET_VERSION:
        raise ValueError(f"not a regroup task offset: {offset!r}")
    return {parse_shard_key(k): int(v) for k, v in offset["ends"].items()}


class TaskStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        try:
            self.log_spec = options["log"]
            self.control = Path(options["control"])
            self.begin = task_offset_ends(json.loads(options["begin"]))
            self.max_records = int(options.get("maxrecordspertrigger") or 0) or None
            self.max_split = int(options.get("maxrecordspersplit") or 1_000_000)
        except (KeyError, ValueError) as e:
            raise ValueError(f"format('regroup-task') is started by regroup.spark.streams, not by hand "
                             f"(bad or missing option: {e})") from None
        self._log: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_log"] = None
        return state

    def initialOffset(self) -> dict[str, Any]:
        return task_offset(self.begin, self.begin)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is None:
            start = task_offset(self.begin, self.begin)
        current = task_offset_ends(start)
        control = read_control(self.control)
        if control.gate:
            write_ack(self.control, control.generation)
            return start
        if self._log is None:
            from regroup.log import open_log

            self._log = open_log(self.log_spec)
        ends: dict[Shard, int] = {}
        pieces = piece_ends_of(self._log, {s.partition_key for s in current})
        for shard, at in current.items():
            for lane in lanes_of(shard, tuple(sorted(pieces[shard.partition_key]))):
                end = lane_ends([lane], pieces).get(lane, at)
                if control.limit is not None:
                    end = min(end, limit_of(control.limit, lane, at))
                if self.max_records is not None:
                    end = min(end, at + self.max_records)
                ends[lane] = max(at, end)
        return task_offset(ends, self.begin)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = task_offset_ends(start), task_offset_ends(end)
        ranges = [ShardRange(s, lane_start(begin, s), e) for s, e in sorted(finish.items())
                  if e > lane_start(begin, s)]
        return [RangePartition(self.log_spec, r) for r in split_ranges(ranges, self.max_split)]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the member commits at the coordinator when the batch's output is done

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        r = partition.range
        return read_range(partition.log_spec, r.shard, r.start, r.end)


class TaskDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "regroup-task"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TaskStreamReader({str(k).lower(): str(v) for k, v in self.options.items()})
