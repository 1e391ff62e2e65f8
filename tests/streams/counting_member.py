"""A streams member process for the end-to-end tests: counts records per key in its task's state
store and emits ``key -> count`` to the ``counts`` topic after every record.

    python -m tests.streams.counting_member COORDINATOR LOG STATE_DIR [--instance ID] [--standby]
        [--parallelism K --name NAME]

It prints ``ready`` once constructed and exits 0 after SIGTERM (a clean leave). With ``--parallelism
K`` its tasks are key ranges (K per partition of ``orders``): each emits ``count NAME`` to its own
partition of ``counts`` (``partition * K + range``: the embedded log has one writer per partition).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable

from regroup.log.base import ConsumedRecord
from regroup.streams.app import StreamsApp, TaskContext

GROUP = "counts"
TOPOLOGY = {"count": ["orders"]}


def count(record: ConsumedRecord, task: TaskContext) -> None:
    assert record.key is not None
    n = int(task.store.get(record.key) or b"0") + 1
    task.store.put(record.key, b"%d" % n)
    task.send("counts", record.key, b"%d" % n)


def count_named(name: str) -> Callable[[ConsumedRecord, TaskContext], None]:
    def count_range(record: ConsumedRecord, task: TaskContext) -> None:
        assert record.key is not None
        n = int(task.store.get(record.key) or b"0") + 1
        task.store.put(record.key, b"%d" % n)
        task.send("counts", record.key, b"%d %s" % (n, name.encode()),
                  partition=task.task.changelog_partition)

    return count_range


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("coordinator")
    p.add_argument("log")
    p.add_argument("state_dir")
    p.add_argument("--instance", default=None)
    p.add_argument("--parallelism", type=int, default=1)
    p.add_argument("--name", default="")
    args = p.parse_args()
    ranged = args.parallelism > 1
    app = StreamsApp(coordinator=args.coordinator, log=args.log, group=GROUP, topology=TOPOLOGY,
                     parallelism={"count": args.parallelism} if ranged else None,
                     process=count_named(args.name) if ranged else count, state_dir=args.state_dir,
                     instance_id=args.instance,
                     session_timeout_ms=6_000, heartbeat_interval_ms=500, batch_records=200)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    app.run(stop)
    sys.exit(0)


if __name__ == "__main__":
    main()
