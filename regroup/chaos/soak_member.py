"""A consumer member of the chaos soak: reads, records what it processed and what it committed, commits.

Usage: python -m regroup.chaos.soak_member COORDINATOR LOG GROUP TOPIC OUT [--instance ID]

Rules of this module (the soak's accounting, `regroup.chaos.soak_verify`, relies on each):

1. OUT is this process's own file (one per incarnation). Each batch the consumer hands out is written
   in one write() as ``b <unix time>`` followed by one line ``<seq> <partition> <offset>`` per record
   (``seq`` from the record's value), then flushed — before the batch is committed. A process killed
   mid-write may leave a torn last line; readers skip it.
2. OUT.events gets one line per event, ``<unix time> <kind> ...``: ``started MEMBER_ID``, ``assign``,
   ``revoke`` and ``lost`` with their partitions, ``commit P=O,...`` once the coordinator acknowledged
   a commit, ``refused P=O,... <reason>`` when it refused one (or could not be reached) —
   ``revoke-refused`` for the commit of a hand-off, after which the partitions are released all the
   same —, ``fatal``, ``closed``. A commit is logged only after it is acknowledged: a ``commit`` line
   is durable in the coordinator.
3. The member commits explicitly what it processed: the next offset of each partition of a batch,
   after the batch, and of each revoked partition in ``on_revoke`` (so that the commit of a hand-off
   is logged too). A lost partition is dropped without committing (another member may own it).
4. SIGTERM closes the consumer cleanly (commit, leave; a static member leaves temporarily).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import IO, Any

from regroup import Consumer
from regroup.client.errors import CommitFailedError, ConsumerError
from regroup.client.partition import TopicPartition


def _seq(value: bytes | None) -> int:
    try:
        return int(json.loads(value or b"{}")["seq"])
    except (ValueError, KeyError, TypeError):
        return -1  # not a soak record: the accounting reports it


class Member:
    """The member's loop and its files (rules 1-3)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.topic = args.topic
        self.out: IO[str] = open(args.out, "a")  # noqa: SIM115 - the process's lifetime
        self.events: IO[str] = open(args.out + ".events", "a", buffering=1)  # noqa: SIM115
        self.done: dict[int, int] = {}  # partition -> next offset to commit (processed up to)
        self.consumer = Consumer(args.group, coordinator=args.coordinator, log=args.log, topics=[args.topic],
                                 instance_id=args.instance, on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost,
                                 rebalance_timeout_ms=20_000)
        self.event("started", self.consumer.member_id)

    def event(self, kind: str, *fields: str) -> None:
        self.events.write(" ".join((f"{time.time():.3f}", kind, *fields)) + "\n")

    def _on_assign(self, _: Consumer, tps: set[TopicPartition]) -> None:
        self.event("assign", ",".join(str(tp.partition) for tp in sorted(tps)) or "-")

    def _on_revoke(self, c: Consumer, tps: set[TopicPartition]) -> None:
        self.event("revoke", ",".join(str(tp.partition) for tp in sorted(tps)) or "-")
        self.commit({tp.partition for tp in tps}, c, refused="revoke-refused")
        for tp in tps:
            self.done.pop(tp.partition, None)

    def _on_lost(self, _: Consumer, tps: set[TopicPartition]) -> None:
        self.event("lost", ",".join(str(tp.partition) for tp in sorted(tps)) or "-")
        for tp in tps:
            self.done.pop(tp.partition, None)

    def commit(self, partitions: set[int], c: Consumer | None = None, refused: str = "refused") -> None:
        offsets = {p: self.done[p] for p in sorted(partitions) if p in self.done}
        if not offsets:
            return
        text = ",".join(f"{p}={o}" for p, o in offsets.items())
        try:
            (c or self.consumer).commit({TopicPartition(self.topic, p): o for p, o in offsets.items()})
        except CommitFailedError as e:
            self.event(refused, text, str(e).replace("\n", " ")[:300])
        else:
            self.event("commit", text)

    def run(self, stopping: list[bool]) -> int:
        while not stopping:
            try:
                batch = self.consumer.consume(500, 0.2)
            except ConsumerError as e:
                self.event("fatal", str(e).replace("\n", " ")[:300])
                return 3
            if not batch:
                continue
            lines = [f"b {time.time():.3f}\n"]
            for r in batch:
                lines.append(f"{_seq(r.value)} {r.partition} {r.offset}\n")
                self.done[r.partition] = r.offset + 1
            self.out.write("".join(lines))
            self.out.flush()
            self.commit({r.partition for r in batch})
        self.consumer.close()
        self.event("closed")
        return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("coordinator")
    p.add_argument("log")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("out")
    p.add_argument("--instance")
    args = p.parse_args(argv)
    stopping: list[bool] = []

    def on_term(*_: Any) -> None:
        stopping.append(True)

    signal.signal(signal.SIGTERM, on_term)
    return Member(args).run(stopping)


if __name__ == "__main__":
    sys.exit(main())
