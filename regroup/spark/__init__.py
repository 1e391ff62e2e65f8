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


def register(spark: Any, *, fast_start: bool = True) -> None:
    """Make ``format("regroup")`` available in ``spark`` (a SparkSession), and add the listener that
    lets a stopping query commit its last finished batch (see `regroup.spark.startup`).

    ``fast_start``: the source's Spark Python processes import the installed, compiled pyspark
    rather than Spark's ``pyspark.zip``."""
    # Imported here: Spark's workers import regroup.spark.* modules and need none of this.
    from regroup.spark.source import RegroupDataSource
    from regroup.spark.startup import register_source

    register_source(spark, RegroupDataSource, fast_start=fast_start)


def streams(spark: Any, **kwargs: Any) -> Any:
    """A stateful pipeline as one member of a streams group (task mode): one query per task, whose
    checkpoint is the task's state and moves with it. Keyword arguments: see
    `regroup.spark.tasks.StreamsPipeline`; call ``start()`` on the result."""
    from regroup.spark.tasks import StreamsPipeline

    return StreamsPipeline(spark, **kwargs)


__all__ = ["register", "streams"]
