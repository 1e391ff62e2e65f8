"""Key ranges' hash is Spark's built-in ``xxhash64`` (seed 42): an executor can tell a record's key
range with a native expression, no Python (docs/key-ranges.md, regroup/protocol/keyrange.py rule 1)."""

from __future__ import annotations

from typing import Any

import pytest

from regroup.protocol.keyrange import key_hash

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


def test_spark_xxhash64_of_the_key_gives_the_same_point_as_key_hash(spark: Any) -> None:
    from pyspark.sql import functions as F

    keys = [b"customer-7", b"", b"a", bytes(range(40)), "ü-key".encode(), b"x" * 1000]
    df = spark.createDataFrame([(k,) for k in keys], "key binary")
    # the top 32 bits of the unsigned 64-bit hash: shiftrightunsigned on Spark's signed long
    rows = df.select("key", F.shiftrightunsigned(F.xxhash64("key"), 32).alias("point")).collect()
    assert {bytes(r.key): r.point for r in rows} == {k: key_hash(k, 0) for k in keys}
