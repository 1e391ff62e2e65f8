"""Task mode: a Spark application as one member of a streams group, one query per task it holds,
whose checkpoint is the task's state (see docs/spark.md, "Stateful pipelines")."""

from regroup.spark.tasks.pipeline import BuildFn, SinkFn, StreamsPipeline, StreamsPipelineError, TaskBatch
from regroup.spark.tasks.statepath import StateRootError

__all__ = ["BuildFn", "SinkFn", "StateRootError", "StreamsPipeline", "StreamsPipelineError", "TaskBatch"]
