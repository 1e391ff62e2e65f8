"""The Arrow shape of consumed records, shared by every backend and by the PySpark source.

The PySpark source yields ``pyarrow.RecordBatch`` objects because that is about twice as fast as
yielding tuples (see environment-notes.md), and Spark wants every batch to have exactly the same
schema. Defining the schema once, here, keeps the embedded log's zero-copy path, the Kafka backend's
conversion and the Spark source in agreement.

Headers are a list of ``{key, value}`` structs rather than a map: Kafka headers are ordered and may
repeat a key, and Spark's own Kafka source exposes them the same way
(``array<struct<key: string, value: binary>>``). Timestamps are milliseconds since the epoch in UTC,
as Kafka stores them; a consumer that needs another unit casts (``batch.cast(schema)``), which is a
vectorised multiplication.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from regroup.log.base import ConsumedRecord

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_STRUCT)
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")

#: The schema of every batch that ``read_arrow`` returns, whatever the backend.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("headers", HEADERS_TYPE),
    ]
)


def empty_batch() -> pa.RecordBatch:
    """A batch with :data:`ARROW_SCHEMA` and no rows (what a read at the end of a partition returns)."""
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


def records_to_arrow(records: Sequence[ConsumedRecord]) -> pa.RecordBatch:
    """Convert consumed records to one batch with :data:`ARROW_SCHEMA` (the generic, row-wise path).

    Backends without a columnar storage format (Kafka) use this; the embedded log builds its batches
    straight from its on-disk columns instead.
    """
    if not records:
        return empty_batch()
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.topic for r in records], type=pa.string()),
            pa.array([r.partition for r in records], type=pa.int32()),
            pa.array([r.offset for r in records], type=pa.int64()),
            pa.array([r.key for r in records], type=pa.binary()),
            pa.array([r.value for r in records], type=pa.binary()),
            pa.array([r.timestamp_ms for r in records], type=pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], type=HEADERS_TYPE
            ),
        ],
        schema=ARROW_SCHEMA,
    )
