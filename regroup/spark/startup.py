"""Registering the source: its Python processes' environment, and the listener behind clean stops.

Spark keeps a Python function's environment with the function — here, the data source's — and
starts the source's processes with it: the driver-side reader (one new process per streaming query:
Spark has no daemon or reuse for it), the planner that reads the schema, the executors' ``read()``
workers. `register_source` registers a data source class with two additions to that environment,
leaving the session's own (``sc.environment``, from ``spark.executorEnv.*``) as it was:

* **fast start** — ``regroup/spark/_boot`` on their PYTHONPATH. The JVM puts Spark's
  ``pyspark.zip`` first on a Python worker's path, and a zip holds no bytecode: every new process
  compiles what it imports of pyspark (≈0.5 s of a query's start on a 2-core machine). The
  directory's ``sitecustomize`` makes the installed, compiled pyspark (and py4j) serve those imports
  when it is the very release the zip came from (a pip-installed pyspark, whose ``SPARK_HOME`` is
  the package directory); otherwise it changes nothing.
* **clean stop** — `regroup.spark.finished.ENV`, a directory where `FinishedBatchListener` (added to
  the session's streaming query manager, once) records each reader's finished batches, so that a
  stopping reader commits its last batch when, and only when, it finished.

A side effect to know: Spark keys its Python worker daemons by environment, so the source's
executor-side reads use their own daemon and worker pool, not the one of the application's UDFs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from regroup.spark.finished import ENV as FINISHED_ENV
from regroup.spark.finished import record_finished, record_terminated

#: The directory added to the source processes' PYTHONPATH (it holds only a ``sitecustomize``).
BOOT_DIR = str(Path(__file__).with_name("_boot"))

_lock = threading.Lock()
_finished_dir: str | None = None
_listening: weakref.WeakSet[Any] = weakref.WeakSet()  # the sessions with the listener


def register_source(spark: Any, source: type, *, fast_start: bool = True) -> None:
    """``spark.dataSource.register(source)`` with the environment above (``fast_start``: with its
    PYTHONPATH part). On a session without a SparkContext (Spark Connect) the source is registered
    as is: neither part applies."""
    env = _environment(spark)
    if env is None:
        spark.dataSource.register(source)
        return
    extra = {FINISHED_ENV: _listen(spark)}
    if fast_start:
        before = env.get("PYTHONPATH")
        extra["PYTHONPATH"] = BOOT_DIR if not before else f"{BOOT_DIR}{os.pathsep}{before}"
    saved = {k: env[k] for k in extra if k in env}
    env.update(extra)
    try:
        spark.dataSource.register(source)
    finally:
        for k in extra:
            if k in saved:
                env[k] = saved[k]
            else:
                env.pop(k, None)


def _environment(spark: Any) -> dict[str, Any] | None:
    try:
        env = spark.sparkContext.environment
    except Exception:  # Spark Connect has no SparkContext here
        return None
    return env if isinstance(env, dict) else None


def _listen(spark: Any) -> str:
    """The driver's channel directory (made once per process), the listener added to ``spark``."""
    global _finished_dir
    with _lock:
        if _finished_dir is None:
            _finished_dir = tempfile.mkdtemp(prefix="regroup-spark-finished-")
            atexit.register(shutil.rmtree, _finished_dir, True)
        if spark not in _listening:
            spark.streams.addListener(FinishedBatchListener(_finished_dir))
            _listening.add(spark)
        return _finished_dir


class FinishedBatchListener(StreamingQueryListener):
    """Reports each regroup reader's finished batches in ``directory`` (`regroup.spark.finished`).

    A progress event is posted after its batch's sink finished and the batch was written to the
    checkpoint's commit log, so its source end offsets name finished batches only."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._tokens: dict[str, set[str]] = defaultdict(set)  # query run id -> reader tokens seen

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        with self._lock:
            for source in progress.sources:
                token = record_finished(self.directory, source.endOffset)
                if token is not None:
                    self._tokens[str(progress.runId)].add(token)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            for token in self._tokens.pop(str(event.runId), ()):
                record_terminated(self.directory, token)
