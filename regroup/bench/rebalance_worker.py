"""One consumer process of `regroup bench rebalance`: consumes and logs what happens when.

Writes to OUT: ``T member ID`` once it started, ``T assign|revoke|lost P1,P2``, ``T first P`` when it
hands out the first record of a partition after being assigned it (`regroup bench failover`), and
every 100 ms ``T count N`` (records consumed since the last line). Times are wall-clock seconds,
comparable across processes on one machine.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from regroup import Consumer


def main(coordinator: str, log_dir: str, topic: str, out_path: str) -> None:
    out = open(out_path, "a", buffering=1)  # noqa: SIM115
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    fresh: set[int] = set()  # assigned, no record handed out yet

    def event(kind: str) -> Any:
        def write(c: Consumer, shards: Any) -> None:
            if kind == "assign":
                fresh.update(s.partition for s in shards)
            out.write(f"{time.time():.4f} {kind} {','.join(str(s.partition) for s in sorted(shards))}\n")
        return write

    c = Consumer("bench", coordinator=coordinator, log=log_dir, topics=[topic], on_assign=event("assign"),
                 on_revoke=event("revoke"), on_lost=event("lost"), max_batch_records=200)
    out.write(f"{time.time():.4f} member {c.member_id}\n")
    count, last = 0, time.time()
    while not stop:
        batch = c.consume(200, 0.05)
        count += len(batch)
        now = time.time()
        for p in {r.partition for r in batch} & fresh:
            fresh.discard(p)
            out.write(f"{now:.4f} first {p}\n")
        if now - last >= 0.1:
            out.write(f"{now:.4f} count {count}\n")
            count, last = 0, now
    c.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
