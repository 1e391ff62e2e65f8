"""How many concurrent queries on ``format("regroup")`` one ``local[2]`` session sustains (a measuring
script, not a test).

    .venv/bin/python -m tests.spark.concurrency [--queries 2,4,8,12,16] [--rate 1000] [--window 30]

For each N: a fresh topic of 2·N partitions and a fresh group; N queries join it (each gets its own
2 partitions), trigger ``processingTime=500 ms``, ``noop`` sink; a producer thread appends ``rate``
records/s per query (100-byte values, every 100 ms). Once the group is stable and every query has
completed batches, a window of ``window`` seconds is measured from the queries' progress reports:
records processed per second (all queries) against records produced, each batch's
``triggerExecution`` duration (median, p95, max, share over the 500 ms interval), and the
machine's CPU use. Then the queries stop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

TRIGGER_MS = 500


def cpu_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds used so far by this script's process tree, by kind of process, and by the rest of
    the machine ("other")."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, str, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        procs[int(name)] = (int(fields[1]), cmd, (int(fields[11]) + int(fields[12])) / tick)
    me = os.getpid()

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == me:
                return True
            pid = procs[pid][0] if pid in procs else 0
        return False

    out: dict[str, float] = {}
    for pid, (_, cmd, cpu) in procs.items():
        if not ours(pid):
            kind = "other"
        elif pid == me:
            kind = "driver Python"
        elif "python_streaming_source_runner" in cmd:
            kind = "readers"
        elif "java" in cmd:
            kind = "JVM"
        elif "regroup.coordinator.server" in cmd:
            kind = "coordinator"
        else:
            kind = "read workers"  # pyspark.daemon and its forked workers
        out[kind] = out.get(kind, 0.0) + cpu
    return out


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(spark: Any, address: str, log_dir: Path, tmp: Path, n: int, rate: int,
        window: float) -> dict[str, Any]:
    from regroup.log import open_log
    from regroup.log.base import LogRecord
    from regroup.rpc.client import CoordinatorClient
    from regroup.rpc.errors import RequestRejected

    topic = group = f"load-{n}"
    parts = 2 * n
    log = open_log(f"embedded://{log_dir}?fsync=never")
    log.create_topic(topic, parts)
    stop = threading.Event()
    produced = [0]

    def producer() -> None:
        per_tick = rate * n // 10  # every 100 ms
        value = b"v" * 100
        next_at = time.monotonic()
        i = 0
        while not stop.is_set():
            per: dict[int, list[LogRecord]] = {}
            for k in range(per_tick):
                rec = LogRecord(b"k%d" % (i + k), value, 1_700_000_000_000)
                per.setdefault((i + k) % parts, []).append(rec)
            for p, recs in per.items():
                log.produce(topic, p, recs)
            i += per_tick
            produced[0] = i
            next_at += 0.1
            stop.wait(max(0.0, next_at - time.monotonic()))

    feeder = threading.Thread(target=producer, daemon=True)
    feeder.start()
    queries = []
    for q in range(n):
        df = (spark.readStream.format("regroup").option("group", group).option("topics", topic)
              .option("coordinator", address).option("log", str(log_dir)).load())
        queries.append(df.writeStream.format("noop").queryName(f"{group}-q{q}")
                       .option("checkpointLocation", str(tmp / "cp" / f"{group}-{q}"))
                       .trigger(processingTime=f"{TRIGGER_MS} milliseconds").start())
    try:
        deadline = time.monotonic() + 180
        with CoordinatorClient(address) as client:
            while True:
                try:
                    d = client.describe_group(group).description
                except RequestRejected:  # no member joined yet
                    time.sleep(0.5)
                    continue
                if d.state.value == "stable" and len(d.members) == n and \
                        all(len(m.assigned) == 2 for m in d.members):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"N={n}: group not stable: {d}")
                time.sleep(0.5)
        time.sleep(10)  # every query past its first batches
        t0, busy0, kinds0 = time.time(), cpu_busy(), cpu_by_kind()
        produced0 = produced[0]
        time.sleep(window)
        t1, busy1, kinds1 = time.time(), cpu_busy(), cpu_by_kind()
        produced1 = produced[0]
        durations: list[float] = []
        rows = 0
        for q in queries:
            for p in q.recentProgress:
                ts = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
                if t0 <= ts < t1 and p.numInputRows > 0:
                    durations.append(p.durationMs["triggerExecution"])
                    rows += p.numInputRows
        dead = [q.name for q in queries if not q.isActive]
    finally:
        for q in queries:
            q.stop()
        stop.set()
        feeder.join()
        log.close()
    span = t1 - t0
    return {
        "queries": n,
        "produced/s": (produced1 - produced0) / span,
        "processed/s": rows / span,
        "batches": len(durations),
        "batch ms p50": statistics.median(durations) if durations else float("nan"),
        "batch ms p95": pct(durations, 0.95),
        "batch ms max": max(durations, default=float("nan")),
        f"> {TRIGGER_MS} ms": sum(d > TRIGGER_MS for d in durations) / max(1, len(durations)),
        "cpu busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
        "failed": dead,
        "cpu by kind": {k: (kinds1[k] - kinds0.get(k, 0.0)) / (t1 - t0) for k in sorted(kinds1)},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default="2,4,8,12,16")
    ap.add_argument("--rate", type=int, default=1000, help="records/s produced per query")
    ap.add_argument("--window", type=float, default=30.0, help="measured seconds per N")
    args = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from regroup.spark import register
    from tests.coordinator.server_proc import start_server

    with tempfile.TemporaryDirectory(prefix="regroup-concurrency-") as d:
        tmp = Path(d)
        log_dir = tmp / "log"
        log_dir.mkdir()
        server = start_server(tmp / "coord", "--log", str(log_dir))
        spark = (SparkSession.builder.master("local[2]").appName("regroup-concurrency")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "2g")
                 .config("spark.sql.streaming.numRecentProgressUpdates", "1000").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        try:
            for n in (int(x) for x in args.queries.split(",")):
                r = run(spark, server.address, log_dir, tmp, n, args.rate, args.window)
                print(f"N={r['queries']:2d}  produced {r['produced/s']:7.0f}/s"
                      f"  processed {r['processed/s']:7.0f}/s"
                      f"  batches {r['batches']:4d}  batch ms p50 {r['batch ms p50']:5.0f}"
                      f" p95 {r['batch ms p95']:5.0f} max {r['batch ms max']:5.0f}"
                      f"  over {TRIGGER_MS} ms {r[f'> {TRIGGER_MS} ms']:5.1%}  cpu {r['cpu busy']:5.1%}"
                      f"  load {os.getloadavg()[0]:.1f}  failed {r['failed']}", flush=True)
                kinds = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu by kind"].items())
                print(f"      CPU cores used: {kinds}", flush=True)
        finally:
            spark.stop()
            server.proc.kill()
            server.proc.wait(timeout=10)


if __name__ == "__main__":
    main()
