"""The chaos soak's producer process: a steady keyed load to the embedded log until SIGTERM.

Usage: python -m regroup.chaos.soak_producer LOG TOPIC PARTITIONS RATE STATUS

Rules of this module:

1. Every record's value carries a unique ``seq`` (0, 1, 2, ... in produce order; the key is a customer,
   the partition the key's: `regroup.demo.common.Workload`). The soak counts records by it.
2. STATUS gets a line ``{"produced": N}`` about every second: N records are in the log (their produce
   calls returned). The last line, written after the last produce call, adds ``"done": true``; a
   failed producer writes ``"error"`` instead and exits 1.
3. SIGTERM (or SIGINT) stops producing at a request boundary. Nothing else stops it: the soak never
   injects faults into the producer, whose log is the ground truth the members are checked against.
4. The log is written without fsync: the machine does not crash in a soak, processes do.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from regroup.demo.common import Workload


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 5:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    log_dir, topic, partitions, rate = args[0], args[1], int(args[2]), int(args[3])
    status_path = Path(args[4])
    stop = threading.Event()

    def on_term(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    workload = Workload(f"embedded://{log_dir}?fsync=never", topic, partitions, rate)
    producing = threading.Thread(target=workload.run, args=(stop,), name="produce", daemon=True)
    producing.start()
    with open(status_path, "a", buffering=1) as status:
        while producing.is_alive():
            status.write(json.dumps({"t": round(time.time(), 3), "produced": workload.produced}) + "\n")
            producing.join(timeout=1.0)
        final: dict[str, Any] = {"t": round(time.time(), 3), "produced": workload.produced, "done": True}
        if workload.error is not None:
            final = {**final, "done": False, "error": repr(workload.error)}
        status.write(json.dumps(final) + "\n")
    return 0 if workload.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
