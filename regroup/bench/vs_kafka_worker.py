"""Member processes of `regroup bench vs-kafka`: one process runs one or more group members (threads) of
one system and logs what happens when, one file per member.

The systems, each reading the same topic on the same Apache Kafka broker:

* ``regroup``: a :class:`regroup.Consumer` on the Kafka log (``kafka://BOOTSTRAP``), its group run by a
  regroup coordinator process; it commits every second.
* ``kafka-consumer``: a confluent-kafka consumer with ``group.protocol=consumer`` (KIP-848, Kafka's
  own group coordinator in the broker; the broker's default ``uniform`` assignor).
* ``kafka-classic``: a confluent-kafka consumer with ``group.protocol=classic`` and
  ``partition.assignment.strategy=cooperative-sticky`` (incremental cooperative rebalancing).

Every member does the same work: it consumes batches of up to 200 records with a 50 ms wait and
counts them. Each member writes to ``OUT-<i>.out`` the lines of :mod:`regroup.bench.rebalance_worker`:
``T member ID`` once it subscribed, ``T assign|revoke|lost P1,P2`` from its rebalance callbacks
(incremental for all three systems), ``T first P`` when it handed out the first record of a
partition after being assigned it, and every 100 ms ``T count N``; a regroup member also writes
``T commit-failed MESSAGE`` when the coordinator refused a periodic commit (it carries on, as Kafka's
auto-commit does) and ``T read-timeout MESSAGE`` when a read of the Kafka log timed out in ``consume``
(it polls again), and any member ``T error MESSAGE`` when its thread ended on an exception (a regroup
member then closes its consumer, leaving the group). Times are wall-clock seconds.

Usage: ``python -m regroup.bench.vs_kafka_worker SYSTEM BOOTSTRAP COORDINATOR TOPIC GROUP OUT
FIRST_INDEX COUNT [--static ID] [--session-ms MS] [--heartbeat-ms MS] [--refresh-ms MS]``.
SIGTERM closes every member cleanly (a static member of Kafka leaves without leaving the group).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

SYSTEMS = ("regroup", "kafka-consumer", "kafka-classic")


class _Out:
    """One member's event lines."""

    def __init__(self, path: str) -> None:
        self._f: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 - closed by close()
        self.fresh: set[int] = set()  # assigned, no record handed out yet

    def write(self, kind: str, rest: str) -> None:
        self._f.write(f"{time.time():.4f} {kind} {rest}\n")

    def partitions(self, kind: str, parts: list[int]) -> None:
        if kind == "assign":
            self.fresh.update(parts)
        elif kind in ("revoke", "lost"):
            self.fresh.difference_update(parts)
        self.write(kind, ",".join(str(p) for p in sorted(parts)))

    def consumed(self, parts: set[int]) -> None:
        for p in parts & self.fresh:
            self.fresh.discard(p)
            self.write("first", str(p))

    def close(self) -> None:
        self._f.close()


def _kafka_config(args: argparse.Namespace, instance: str | None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        # How soon a consumer learns that the topic grew (librdkafka's default is 5 minutes; regroup's
        # coordinator refreshes its topic metadata at the same interval: --topic-refresh-s).
        "topic.metadata.refresh.interval.ms": args.refresh_ms,
        "metadata.max.age.ms": 3 * args.refresh_ms,
        "enable.partition.eof": False,
    }
    if args.system == "kafka-classic":
        conf.update({"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
                     "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": args.heartbeat_ms})
    else:  # the session timeout and heartbeat interval of the new protocol are the broker's settings
        conf["group.protocol"] = "consumer"
    if instance is not None:
        conf["group.instance.id"] = instance
    return conf


def _run_kafka(args: argparse.Namespace, out: _Out, instance: str | None, stop: threading.Event) -> None:
    from confluent_kafka import Consumer  # lazy: the regroup members do not need it

    def cb(kind: str) -> Callable[[Any, list[Any]], None]:
        def f(_c: Any, parts: list[Any]) -> None:
            out.partitions(kind, [tp.partition for tp in parts])
        return f

    c = Consumer(_kafka_config(args, instance))
    c.subscribe([args.topic], on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))
    out.write("member", instance or f"{args.system}-{id(c)}")
    count, last = 0, time.time()
    while not stop.is_set():
        msgs = c.consume(200, 0.05)
        good = [m for m in msgs if m.error() is None]
        count += len(good)
        if good:
            out.consumed({p for m in good if (p := m.partition()) is not None})
        now = time.time()
        if now - last >= 0.1:
            out.write("count", str(count))
            count, last = 0, now
    c.close()


def _run_regroup(args: argparse.Namespace, out: _Out, instance: str | None, stop: threading.Event) -> None:
    from regroup import Consumer
    from regroup.client.errors import CommitFailedError
    from regroup.log.errors import LogTimeoutError

    def cb(kind: str) -> Callable[[Any, Any], None]:
        def f(_c: Any, shards: Any) -> None:
            out.partitions(kind, [s.partition for s in shards])
        return f

    c = Consumer(args.group, coordinator=args.coordinator, log=f"kafka://{args.bootstrap}",
                 topics=[args.topic], instance_id=instance, on_assign=cb("assign"),
                 on_revoke=cb("revoke"), on_lost=cb("lost"), max_batch_records=200)
    out.write("member", c.member_id)
    try:
        count, last, committed = 0, time.time(), time.time()
        while not stop.is_set():
            try:
                batch = c.consume(200, 0.05)
            except LogTimeoutError as e:
                # A read of the Kafka log found no fetch answer in its 30 s (a broker overloaded, e.g.
                # while it creates __consumer_offsets): nothing was handed out or moved, so poll again,
                # as a Kafka consumer's poll does with a slow fetch. Counted in the figures.
                out.write("read-timeout", str(e).replace("\n", " "))
                batch = []
            count += len(batch)
            if batch:
                out.consumed({r.partition for r in batch})
            now = time.time()
            if now - last >= 0.1:
                out.write("count", str(count))
                count, last = 0, now
            if now - committed >= 1.0:
                # A periodic commit the coordinator refuses is what Kafka's auto-commit does with one:
                # say so and carry on (the next commit covers the same records). Letting it end the
                # thread left a member that heartbeats but never polls: its revocations never happen,
                # the group waits for its rebalance timeout (300 s) and never settles.
                try:
                    c.commit()
                except CommitFailedError as e:
                    out.write("commit-failed", str(e).replace("\n", " "))
                committed = now
    except BaseException as e:
        out.write("error", f"{type(e).__name__}: {e}".replace("\n", " "))
        raise
    finally:
        c.close()  # leave the group: a member whose thread ended must not keep heartbeating


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="vs_kafka_worker")
    p.add_argument("system", choices=SYSTEMS)
    p.add_argument("bootstrap")
    p.add_argument("coordinator")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("out")
    p.add_argument("first_index", type=int)
    p.add_argument("count", type=int)
    p.add_argument("--static", default=None,
                   help="group.instance.id (static members); with COUNT > 1, its prefix: ID-<i>")
    p.add_argument("--session-ms", type=int, default=10_000)
    p.add_argument("--heartbeat-ms", type=int, default=2_000)
    p.add_argument("--refresh-ms", type=int, default=1_000)
    args = p.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run = _run_regroup if args.system == "regroup" else _run_kafka
    threads = []
    for i in range(args.first_index, args.first_index + args.count):
        out = _Out(f"{args.out}-{i}.out")
        instance = None if not args.static else args.static if args.count == 1 else f"{args.static}-{i}"

        def body(out: _Out = out, instance: str | None = instance) -> None:
            try:
                run(args, out, instance, stop)
            finally:
                out.close()

        t = threading.Thread(target=body, name=f"member-{i}", daemon=True)
        t.start()
        threads.append(t)
    while any(t.is_alive() for t in threads) and not stop.is_set():
        stop.wait(0.2)
    for t in threads:
        t.join(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1:])
