"""A producer process for the split end-to-end test: a steady keyed load on one partition.

Usage: python -m tests.e2e.split_producer LOG_DIR TOPIC KEYS STOP_FILE COUNT_FILE

Record ``i`` has key ``key-{i % KEYS}`` and value ``i``; batches of 20, a short pause between them.
It stops once STOP_FILE exists and writes how many records it produced to COUNT_FILE (and, as it
goes, to COUNT_FILE.progress, for the test to wait on).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from regroup.log import open_log
from regroup.log.base import LogRecord


def main() -> int:
    log_dir, topic, keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stop, count = Path(sys.argv[4]), Path(sys.argv[5])
    progress = count.with_suffix(".progress")
    log = open_log(log_dir)
    i = 0
    try:
        while not stop.exists():
            log.produce(topic, 0, [LogRecord(f"key-{j % keys}".encode(), str(j).encode(), 0)
                                   for j in range(i, i + 20)])
            i += 20
            if i % 200 == 0:
                progress.write_text(str(i))
            time.sleep(0.002)
    finally:
        log.close()
    count.write_text(str(i))
    return 0


if __name__ == "__main__":
    sys.exit(main())
