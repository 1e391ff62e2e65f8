"""``spark.readStream.format("regroup")``: a streaming query that is a member of a regroup group.

Spark's Python data source API splits a source in two:

* the driver-side reader (``initialOffset``, ``latestOffset``, ``partitions``, ``commit``) runs in one
  long-lived Python process per query; it owns the group membership (`QueryMember`), created lazily on
  the first call because Spark also builds and pickles copies of the reader for planning — those
  must not join the group;
* ``read`` runs in Spark's Python workers, one call per input partition: it opens the log and yields
  Arrow record batches of one offset range, straight from the log's columns.

Key ranges (a group's ``parallelism`` above 1 for a topic, docs/key-ranges.md): each key range the
query owns is a shard of its own, with its own offsets, skip pieces and commits. The ranges of one
partition are read together (`microbatch.grouped_ranges`, `regroup.spark.read.read_ranges`): one
input partition per slice of ``maxRecordsPerSplit`` offsets reads the partition's records once and
keeps those whose key hash is in one of the ranges (and, after a merge, that the range's skip pieces
do not drop: records a former owner did); the filter is vectorised. ``maxRecordsPerTrigger`` /
``maxRecordsPerSplit`` count records read, not kept. A range (or a whole partition after a merge) is
committed at the batch's end for it, like a partition. A partition split on the producer side is not
read so: its lanes lie in different pieces, each with offsets of its own, and are read by key — each
lane slice an input partition of its own, so that they are read side by side.

Offsets in Spark's checkpoint are `BatchOffset` JSON (see `regroup.protocol.microbatch`); those this
reader plans also carry its random token (``"reader"``), by which the driver's listener reports which
batches finished (`regroup.spark.finished`): a stopping query commits its last batch if it finished.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from regroup.protocol.microbatch import BatchOffset, ShardRange, grouped_ranges
from regroup.spark.finished import TOKEN_KEY
from regroup.spark.options import SourceOptions, parse_options
from regroup.spark.read import SPARK_SCHEMA_DDL, read_range, read_ranges

if TYPE_CHECKING:
    from regroup.spark.member import QueryMember

log = logging.getLogger("regroup.spark")


class RangePartition(InputPartition):
    """One Spark task: one `ShardRange` (records [start, end) of one partition, of one key range when
    the shard is one) of the log ``log_spec``."""

    def __init__(self, log_spec: str, shard_range: ShardRange) -> None:
        r = shard_range
        super().__init__((r.shard.topic, r.shard.partition, r.shard.lo, r.shard.hi, r.start, r.end))
        self.log_spec, self.range = log_spec, shard_range


class RangesPartition(InputPartition):
    """One Spark task reading several `ShardRange`s of one partition at once (`read_ranges`)."""

    def __init__(self, log_spec: str, ranges: tuple[ShardRange, ...]) -> None:
        super().__init__(tuple((r.shard.topic, r.shard.partition, r.shard.lo, r.shard.hi, r.start, r.end)
                               for r in ranges))
        self.log_spec, self.ranges = log_spec, ranges


class RegroupStreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._member: QueryMember | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Copies pickled for planning and read() carry the options only — never the membership.
        return {"opts": self.opts, "_member": None}

    def _joined(self) -> QueryMember:
        if self._member is None:
            # Imported here: Spark's workers, which only run read(), never load the membership code.
            from regroup.spark.member import QueryMember

            self._member = QueryMember(self.opts)
            self._member.install_sigterm_handler()
        return self._member

    def initialOffset(self) -> dict[str, Any]:
        return BatchOffset().to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        finished = BatchOffset.from_json(start) if start is not None else BatchOffset()
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if limit is None:
            max_rows = self.opts.max_records_per_trigger
        member = self._joined()
        end = member.plan(finished, max_rows)
        if end == finished:  # no new batch: the finished one was just committed
            member.unconfirmed = None
            return start if start is not None else end.to_json()
        out = {**end.to_json(), TOKEN_KEY: member.token}  # the listener knows the reader by it
        member.unconfirmed = out
        return out

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        member = self._joined()
        ranges = member.ranges(BatchOffset.from_json(start), BatchOffset.from_json(end))
        member.unconfirmed = end  # the batch about to run (the planned one, or a replay after a restart)
        # A split partition's lanes stay reads of their own (side by side), its pieces say which.
        pieces = {pk: member.log.key_pieces(*pk) for pk in sorted({r.shard.partition_key for r in ranges})}
        reads = grouped_ranges(ranges, self.opts.max_records_per_split, pieces)
        return [RangePartition(self.opts.log, rs[0]) if len(rs) == 1 else RangesPartition(self.opts.log, rs)
                for rs in reads]

    def commit(self, end: dict[str, Any]) -> None:
        self._joined().batch_committed(BatchOffset.from_json(end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, RangesPartition):
            return read_ranges(partition.log_spec, partition.ranges)
        assert isinstance(partition, RangePartition)
        r = partition.range
        return read_range(partition.log_spec, r.shard, r.start, r.end, r.skip)

    def stop(self) -> None:
        if self._member is not None:
            self._member.stop()


class RegroupDataSource(DataSource):
    """Register with ``spark.dataSource.register(RegroupDataSource)`` (or `regroup.spark.register`)."""

    @classmethod
    def name(cls) -> str:
        return "regroup"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RegroupStreamReader(parse_options(self.options))
