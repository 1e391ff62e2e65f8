"""A Spark task-mode member as its own process (its own JVM), for kill -9 and zombie tests.

    python -m tests.spark.task_member COORDINATOR LOG STATE OUT_DIR [--kind count] [--instance ID]

Runs `regroup.spark.streams` with the harness's pipeline and an idempotent file sink in OUT_DIR
(one file per batch key); writes its tasks and roles to OUT_DIR/../<pid>.status (JSON) whenever
they change; prints ``ready`` once started; leaves cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from tests.spark.tasks_harness import TOPIC, Sink, build


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("coordinator")
    ap.add_argument("log")
    ap.add_argument("state")
    ap.add_argument("out")
    ap.add_argument("--kind", default="count")
    ap.add_argument("--instance", default=None)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    from regroup.spark import streams

    spark = (SparkSession.builder.master("local[2]").appName(f"task-member-{os.getpid()}")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    fn, mode = build(args.kind)
    pipeline = streams(spark, group="pipeline", topology={"s": [TOPIC]}, build=fn,
                       sink=Sink(args.kind, Path(args.out)), output_mode=mode,
                       coordinator=args.coordinator, log=args.log, state=args.state,
                       instance_id=args.instance, trigger_ms=300, session_timeout_ms=6000,
                       heartbeat_interval_ms=300).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    status = Path(args.out).parent / f"{os.getpid()}.status"
    print("ready", flush=True)
    last = None
    while not stop.is_set():
        now = {"tasks": {str(t): r for t, r in pipeline.tasks.items()}, "starts": dict(pipeline.starts),
               "process_id": pipeline.process_id, "error": str(pipeline.error or "")}
        if now != last:
            tmp = status.with_suffix(".tmp")
            tmp.write_text(json.dumps(now))
            os.replace(tmp, status)
            last = now
        time.sleep(0.1)
    pipeline.stop()
    spark.stop()


if __name__ == "__main__":
    main()
