"""Inside a Spark member process of either PySpark demo (`regroup.demo.spark_member`,
`regroup.demo.stateful_member`): its command line, its progress file, files written whole, its
SparkSession, the made-up rows of a warm-up, and the gate.

Rules of this module:

1. A progress line is written whole, in one write() (under a lock: a member may write from several
   threads): a reader never sees a torn line from a killed process except possibly the very last
   one, which it skips until it ends with a newline.
2. An output file is written under a temporary name of this process and renamed: readers see the whole
   file or none of it, and a process killed mid-write leaves no half file.
3. A member says ``starting`` first, then ``ready`` once Spark runs (and has warmed up), and then waits
   at its gate file until the demo opens it — unless it is told to stop first.
4. Nothing here joins a group or runs the pipeline: each demo's member module does, with these pieces.
   Spark's Python workers import this module too (the warm-up's function): only the standard library
   at module level.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

#: The events' value: ``{"customer": ..., "amount": ..., "seq": ...}`` (JSON bytes).
VALUE_SCHEMA = "customer string, amount long, seq long"
#: C1 only and the serial collector: several short-lived JVMs on two cores spend far less CPU
#: compiling (the first micro-batches take seconds less) and collecting, at no cost for batches this
#: small.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def member_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every member takes: NAME COORDINATOR LOG OUT_DIR (the member adds its fifth, where
    its state lives, and its own options)."""
    from regroup.demo.common import TOPIC

    p = argparse.ArgumentParser(description=description)
    p.add_argument("name")
    p.add_argument("coordinator")
    p.add_argument("log", help="embedded-log directory or kafka://HOST:PORT")
    p.add_argument("out", type=Path)
    p.add_argument("--topic", default=TOPIC)
    p.add_argument("--instance", default=None, help="static member id")
    p.add_argument("--progress", type=Path, default=None, help="default: OUT_DIR/progress/NAME.jsonl")
    p.add_argument("--wait-for", type=Path, default=None, help="join the group once this file exists")
    p.add_argument("--warm-up", action="store_true", help="run the pipeline once on made-up rows first")
    p.add_argument("--local-dir", type=Path, default=None, help="Spark's scratch directory")
    return p


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the whole file or none of it (rule 2)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a name per writer
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Progress:
    """Appends one JSON line per step to the member's progress file (the demo tails it: rule 1)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime
        self._lock = threading.Lock()

    @classmethod
    def start(cls, args: argparse.Namespace) -> Progress:
        """The progress file of the member ``args`` describe (`member_parser`), its first line written:
        ``starting``, with the process's pid (rule 3)."""
        progress = cls(args.progress or args.out / "progress" / f"{args.name}.jsonl")
        progress.write("starting", pid=os.getpid(), instance=args.instance)
        return progress

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"t": round(time.time(), 3), "kind": kind, **fields}) + "\n"
        with self._lock:
            self._f.write(line)


def wait_at_gate(progress: Progress, gate: Path | None, stopping: Callable[[], bool]) -> bool:
    """Say ``ready``, then wait until ``gate`` exists (rule 3); returns False if told to stop first."""
    progress.write("ready")
    while gate is not None and not gate.exists() and not stopping():
        time.sleep(0.05)
    return not stopping()


def start_spark(app_name: str, local_dir: Path | None = None, config: Mapping[str, str] | None = None) -> Any:
    """A small local SparkSession: one core, 512 MB, no UI, one shuffle partition — several of these
    share two cores in a demo. ``local_dir``: Spark's scratch space (default: the system's temp dir),
    where a killed process leaves its files; ``config``: the demo's own settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if local_dir is not None:
        local_dir.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.local.dir", str(local_dir))
    builder = (builder.master("local[1]").appName(app_name)
               .config("spark.driver.memory", "512m")
               .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.adaptive.enabled", "false"))
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _import_read_path(batches: Iterator[Any]) -> Iterator[Any]:
    import regroup.spark.read  # noqa: F401 - loaded into the Python worker that Spark will reuse

    yield from batches


def made_up_events(spark: Any, partitions: int, offsets: int, timestamp: Any = None) -> Any:
    """A few made-up events of one customer in the source's schema (``offsets`` in each of
    ``partitions``), passed through a Python worker that loads the source's read path: Spark reuses
    that worker, so a member released from its gate does not spend its first batch importing it."""
    from regroup.spark.read import SPARK_SCHEMA_DDL

    value = json.dumps({"customer": "c0001", "amount": 1, "seq": 1}).encode()
    rows: list[tuple[Any, ...]] = [("t", p, o, b"c0001", value, timestamp, [])
                                   for p in range(partitions) for o in range(offsets)]
    return spark.createDataFrame(rows, SPARK_SCHEMA_DDL).mapInArrow(_import_read_path, SPARK_SCHEMA_DDL)
