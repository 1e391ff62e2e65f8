"""A consumer process of the demo and the end-to-end tests: reads, records what it processed, commits.

Usage: python -m regroup.demo.worker COORDINATOR LOG_DIR GROUP OUT_FILE [--instance ID] [--topic T]
       [--values]

Each processed record is appended to OUT_FILE as "partition offset" (flushed before the commit, so a
record is on disk before its offset is committed); with ``--values``, "partition offset value" (the
value decoded as text): a partition split on the producer side has pieces whose offsets overlap, so
there the value names the record. Events (assign, revoke, lost, commit-refused) go to
OUT_FILE.events. SIGTERM closes the consumer cleanly (commit, leave).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from regroup import Consumer
from regroup.client.errors import CommitFailedError


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("coordinator")
    p.add_argument("log")
    p.add_argument("group")
    p.add_argument("out")
    p.add_argument("--instance")
    p.add_argument("--topic", default="orders")
    p.add_argument("--values", action="store_true")
    args = p.parse_args()
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    events = open(args.out + ".events", "a", buffering=1)  # noqa: SIM115

    def ev(kind: str) -> Any:
        return lambda c, shards: events.write(f"{time.time():.3f} {kind} "
                                              f"{' '.join(sorted(map(str, shards)))}\n")

    c = Consumer(args.group, coordinator=args.coordinator, log=args.log, topics=[args.topic],
                 instance_id=args.instance, on_assign=ev("assign"), on_revoke=ev("revoke"),
                 on_lost=ev("lost"), rebalance_timeout_ms=20_000)
    events.write(f"{time.time():.3f} started {c.member_id}\n")
    with open(args.out, "a") as out:
        while not stop:
            batch = c.consume(500, 0.2)
            if not batch:
                continue
            if args.values:
                out.write("".join(f"{r.partition} {r.offset} {(r.value or b'').decode()}\n" for r in batch))
            else:
                out.write("".join(f"{r.partition} {r.offset}\n" for r in batch))
            out.flush()
            try:
                c.commit()
            except CommitFailedError as e:
                events.write(f"{time.time():.3f} commit-refused {e.code.value if e.code else '-'}\n")
    c.close()
    events.write(f"{time.time():.3f} closed\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
