"""regroup.spark (shell): PySpark Structured Streaming queries as members of a regroup group.

    from regroup.spark import register
    register(spark)
    df = (spark.readStream.format("regroup")
          .option("group", "orders-pipeline").option("topics", "orders")
          .option("coordinator", "127.0.0.1:9000").option("log", "/data/log")
          .load())

Each query is one group member; see docs/spark.md for the options and the guarantees.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make ``format("regroup")`` available in ``spark`` (a SparkSession)."""
    from regroup.spark.source import RegroupDataSource

    spark.dataSource.register(RegroupDataSource)


__all__ = ["register"]
