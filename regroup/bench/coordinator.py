"""`regroup bench coordinator`: heartbeats per second and latency against one real coordinator process.

Set-up: a coordinator process (`python -m regroup.coordinator.server`) with its durable SQLite store in
a temporary data dir, and load-generating processes (asyncio gRPC clients, one connection each) that
run N members in groups of ``group_size``. Members join group by group and converge (revoke, then
assign), then heartbeat every ``interval_ms`` with the steady "delta" request a real member sends
(group, member id, epoch), spread evenly over the interval.

Each measurement window reports the offered rate (members / interval), the achieved rate, the
client-side round-trip latency (p50/p99, including the client's own queueing), the server-side
latency from the coordinator's own histogram (receipt to answer, including the wait for durability),
the CPU each process used, and how late the load generator sent (a generator that cannot keep up
shows it there, not as a slow coordinator). The sweep grows the group count (1k, 5k, 10k members at
the interval) and then shortens the interval at the largest size until the coordinator saturates
(achieved < 95% of offered, or server p99 above 100 ms).

The machine has 2 cores: the coordinator and the generators share them, so the figures are a lower
bound for a coordinator with a core of its own. Steady heartbeats write no records (nothing changes);
joins, revocations and commits do, and wait for their group commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import math
import multiprocessing as mp
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from rich.console import Console
from rich.table import Table

SATURATION_RATIO = 0.95
SATURATION_P99_MS = 100.0
_CLK = os.sysconf("SC_CLK_TCK")
_CODES = {"FENCED": 6, "UNKNOWN_MEMBER": 5, "NONE": 0}


@dataclass
class Window:
    """One measurement window."""

    transport: str
    members: int
    interval_ms: int
    offered_per_s: float
    achieved_per_s: float
    client_p50_ms: float
    client_p99_ms: float
    server_p50_ms: float
    server_p99_ms: float
    server_cpu: float
    loadgen_cpu: float
    send_lag_p99_ms: float
    errors: int
    saturated: bool = False
    notes: list[str] = field(default_factory=list)
    #: Dashboard pages open during the window (`_DashboardPage`).
    dashboard_clients: int = 0


# =============================================================================== load generator


class _Member:
    __slots__ = ("busy", "due", "epoch", "gid", "interval_s", "joined", "mid", "owned", "report")

    def __init__(self, gid: str, mid: str, interval_s: float) -> None:
        self.gid, self.mid = gid, mid
        self.epoch = 0
        self.joined = False
        self.owned: Any = None  # pb.ShardSet of what it holds
        self.report = False  # send owned on the next heartbeat (it changed)
        self.interval_s = interval_s
        self.due = 0.0  # the schedule entry that counts (older heap entries are stale)
        self.busy = False  # one heartbeat in flight at a time, as a real member


class _LoadGen:
    """Runs members on one asyncio loop; commands arrive from the parent over a pipe."""

    def __init__(self, address: str, topic_of: dict[str, str]) -> None:
        import grpc.aio

        from regroup.rpc import regroup_pb2 as pb

        self.pb = pb
        self.topic_of = topic_of
        self.channel = grpc.aio.insecure_channel(address)
        self.call = self.channel.unary_unary(
            "/regroup.v1.Coordinator/Heartbeat", request_serializer=pb.HeartbeatRequest.SerializeToString,
            response_deserializer=pb.HeartbeatResponse.FromString)
        self.open_stream = self.channel.stream_stream(
            "/regroup.v1.Coordinator/HeartbeatStream",
            request_serializer=pb.HeartbeatRequest.SerializeToString,
            response_deserializer=pb.HeartbeatResponse.FromString)
        #: "stream": each sender keeps a HeartbeatStream (as CoordinatorClient does); "unary": a call each.
        self.transport = "stream"
        self.members: list[_Member] = []
        self.heap: list[tuple[float, int]] = []
        self.measuring = False
        self.lat = array("d")
        self.lag = array("d")
        self.errors = 0
        # Heartbeats in flight at once, like a few hundred members whose calls overlap; beyond that
        # the generator queues (and reports its send lag) rather than pile calls onto the server.
        self.ready: asyncio.Queue[tuple[float, int]] = asyncio.Queue()
        self.senders = 128

    def request(self, m: _Member) -> Any:
        pb = self.pb
        if not m.joined:
            msg = pb.HeartbeatRequest(group_id=m.gid, member_id=m.mid, member_epoch=0,
                                      rebalance_timeout_ms=60_000)
            msg.subscribed_topics.values.append(self.topic_of[m.gid])
            msg.owned.SetInParent()
            return msg
        msg = pb.HeartbeatRequest(group_id=m.gid, member_id=m.mid, member_epoch=m.epoch)
        if m.report:
            msg.owned.CopyFrom(m.owned)
        return msg

    async def sender(self) -> None:
        stream: Any = None
        while True:
            due, i = await self.ready.get()
            m = self.members[i]
            try:
                if self.transport == "stream" and stream is None:
                    stream = self.open_stream()
                elif self.transport != "stream" and stream is not None:
                    await stream.done_writing()
                    stream = None
                if not await self._send(m, i, due, stream):
                    stream = None
            finally:
                m.busy = False

    async def _exchange(self, req: Any, stream: Any) -> Any:
        if stream is None:
            return await self.call(req, timeout=30)
        await stream.write(req)
        return await stream.read()

    async def _send(self, m: _Member, i: int, due: float, stream: Any) -> bool:
        """One heartbeat; False when the stream broke."""
        req = self.request(m)
        reported = m.report
        t0 = time.perf_counter()
        try:
            resp = await self._exchange(req, stream)
            if resp is None or not hasattr(resp, "error"):
                raise ConnectionError("the heartbeat stream ended")
        except Exception:
            self.errors += self.measuring
            self.schedule(i, time.perf_counter() + 1.0)
            return False
        t1 = time.perf_counter()
        if self.measuring:
            self.lat.append(t1 - t0)
            self.lag.append(max(0.0, t0 - due))
        again = t0 + m.interval_s
        if resp.error == 0:
            m.joined = True
            m.epoch = resp.member_epoch
            if reported:
                m.report = False
            if resp.HasField("assignment") and resp.assignment != m.owned:
                m.owned = self.pb.ShardSet()
                m.owned.CopyFrom(resp.assignment)
                m.report = True
                again = t1  # acknowledge at once, as a member does
        elif resp.error in (_CODES["FENCED"], _CODES["UNKNOWN_MEMBER"]):
            m.joined, m.epoch, m.owned, m.report = False, 0, None, False
            again = t1
            self.errors += self.measuring
        else:
            self.errors += self.measuring
        self.schedule(i, again)
        return True

    def schedule(self, i: int, at: float) -> None:
        self.members[i].due = at
        heapq.heappush(self.heap, (at, i))

    async def ticker(self) -> None:
        """Hands due members to the senders, every 5 ms (the lag this adds is counted)."""
        heap = self.heap
        while True:
            now = time.perf_counter()
            while heap and heap[0][0] <= now:
                at, i = heapq.heappop(heap)
                m = self.members[i]
                if m.busy or at != m.due:
                    continue  # stale: the member was rescheduled, or its answer will reschedule it
                m.busy = True
                self.ready.put_nowait((at, i))
            await asyncio.sleep(0.005)

    def add(self, members: list[tuple[str, str]], interval_s: float) -> None:
        """New members, joining now and heartbeating every ``interval_s`` (fast, to converge)."""
        now = time.perf_counter()
        for gid, mid in members:
            self.members.append(_Member(gid, mid, interval_s))
            self.schedule(len(self.members) - 1, now)

    def slow_down(self, interval_s: float) -> None:
        """Every member from its next heartbeat on heartbeats every ``interval_s``."""
        for m in self.members:
            m.interval_s = interval_s

    def respread(self, interval_s: float) -> None:
        """Switch to a new interval, members spread evenly over it."""
        now = time.perf_counter()
        order = list(range(len(self.members)))
        random.Random(7).shuffle(order)
        for k, i in enumerate(order):
            self.members[i].interval_s = interval_s
            self.schedule(i, now + interval_s * k / max(1, len(order)))

    async def measure(self, seconds: float) -> dict[str, Any]:
        self.lat, self.lag, self.errors = array("d"), array("d"), 0
        c0 = os.times()
        self.measuring = True
        await asyncio.sleep(seconds)
        self.measuring = False
        c1 = os.times()
        return {"lat": self.lat.tobytes(), "lag": self.lag.tobytes(), "errors": self.errors,
                "cpu": (c1.user - c0.user) + (c1.system - c0.system)}


def _worker_main(conn: Connection, address: str, topic_of: dict[str, str]) -> None:
    async def main() -> None:
        gen = _LoadGen(address, topic_of)
        tasks = [asyncio.create_task(gen.ticker())]
        tasks += [asyncio.create_task(gen.sender()) for _ in range(gen.senders)]
        loop = asyncio.get_running_loop()
        while True:
            cmd, arg = await loop.run_in_executor(None, conn.recv)
            if cmd == "add":
                gen.add(*arg)
                conn.send(None)
            elif cmd == "transport":
                gen.transport = arg
                conn.send(None)
            elif cmd == "slow":
                gen.slow_down(arg)
                conn.send(None)
            elif cmd == "interval":
                gen.respread(arg)
                conn.send(None)
            elif cmd == "joined":
                conn.send(sum(1 for m in gen.members if m.joined))
            elif cmd == "measure":
                conn.send(await gen.measure(arg))
            else:
                for t in tasks:
                    t.cancel()
                await gen.channel.close()
                conn.send(None)
                return

    asyncio.run(main())


# =============================================================================== the coordinator process


class _Coordinator:
    def __init__(self, data_dir: str, topics: dict[str, int], interval_ms: int, dashboard: bool = False,
                 ) -> None:
        spec = "static:" + ",".join(f"{t}={n}" for t, n in topics.items())
        session = max(45_000, 10 * interval_ms)
        profile = os.environ.get("REGROUP_BENCH_PROFILE")  # cProfile the coordinator into this file
        prefix = ["-m", "cProfile", "-o", profile] if profile else []
        self.proc = subprocess.Popen(
            [sys.executable, *prefix, "-m", "regroup.coordinator.server", "--listen", "127.0.0.1:0",
             "--data-dir", data_dir, "--log", spec, "--metrics-port", "0",
             "--heartbeat-interval-ms", str(interval_ms), "--session-timeout-ms", str(session),
             "--log-level", os.environ.get("REGROUP_BENCH_LOG", "WARNING"),
             *(["--http", "127.0.0.1:0"] if dashboard else [])],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+) \(metrics on \S+:(\d+)\)", line)
        if m is None:
            self.proc.kill()
            raise RuntimeError(f"the coordinator did not start: {line!r}")
        self.address, self.metrics_port = m.group(1), int(m.group(2))
        page = re.search(r"; dashboard on (http://\S+/)", line)
        self.dashboard_url = page.group(1) if page else None

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK

    def histogram(self) -> dict[float, float]:
        """Cumulative buckets of regroup_heartbeat_latency_seconds."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for le, v in re.findall(r'regroup_heartbeat_latency_seconds_bucket\{le="([^"]+)"\} (\S+)', text):
            out[math.inf if le == "+Inf" else float(le)] = float(v)
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class _DashboardPage:
    """What one open dashboard page asks of the coordinator: the event stream, a re-fetch of the group
    it shows (and the list) on each event, and the page's fallback poll every 5 s."""

    def __init__(self, base_url: str, group: str) -> None:
        import threading

        self.base_url, self.group = base_url, group
        self.events = self.fetches = 0
        #: Seconds per JSON fetch, as the page waited for it.
        self.fetch_s: list[float] = []
        self._stop = threading.Event()
        self._stream: Any = None
        self._threads = [threading.Thread(target=self._listen, daemon=True),
                         threading.Thread(target=self._poll, daemon=True)]
        for t in self._threads:
            t.start()

    def _fetch(self) -> None:
        for path in ("api/groups", f"api/groups/{self.group}"):
            t0 = time.perf_counter()
            with contextlib.suppress(OSError), urllib.request.urlopen(self.base_url + path, timeout=30) as r:
                r.read()
                self.fetches += 1
                self.fetch_s.append(time.perf_counter() - t0)

    def _listen(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._stream = urllib.request.urlopen(self.base_url + "api/events", timeout=60)
            for line in self._stream:
                if self._stop.is_set():
                    return
                if line.startswith(b"event: "):
                    self.events += 1
                    self._fetch()

    def _poll(self) -> None:
        while not self._stop.wait(5.0):
            self._fetch()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            if self._stream is not None:
                self._stream.close()


def _pages_process(base_url: str, groups: list[str], conn: Connection) -> None:
    """Open one page per group until told to stop, then send back (events, fetch seconds). The pages
    run in a process of their own, as browsers would: in the load generator's process their JSON
    parsing would hold its interpreter and delay the heartbeats it sends (seen: send-lag p99 ×9)."""
    pages = [_DashboardPage(base_url, g) for g in groups]
    conn.recv()
    for p in pages:
        p.close()
    conn.send((sum(p.events for p in pages), [t for p in pages for t in p.fetch_s]))


def _bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Quantile (ms) of the observations between two scrapes, interpolated within buckets."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan")
    rank, prev_bound, prev_count = q * total, 0.0, 0.0
    for b, c in zip(bounds, counts, strict=True):
        if c >= rank:
            if math.isinf(b):
                return prev_bound * 1000
            frac = (rank - prev_count) / (c - prev_count) if c > prev_count else 1.0
            return (prev_bound + (b - prev_bound) * frac) * 1000
        prev_bound, prev_count = b, c
    return prev_bound * 1000


def _pct(values: array[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


# =============================================================================== the run


class _Bench:
    def __init__(self, members: int, group_size: int, interval_ms: int, processes: int,
                 data_dir: str, dashboard: bool = False) -> None:
        from regroup.rpc.client import CoordinatorClient

        self.group_size = group_size
        self.groups = [f"bench-{g:03d}" for g in range(math.ceil(members / group_size))]
        topics = {f"topic-{g}": 2 * group_size for g in self.groups}
        self.topic_of = {g: f"topic-{g}" for g in self.groups}
        self.coord = _Coordinator(data_dir, topics, interval_ms, dashboard)
        self.client = CoordinatorClient(self.coord.address, timeout_s=60)
        ctx = mp.get_context("spawn")
        self.workers: list[tuple[Any, Connection]] = []
        for _ in range(processes):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, self.coord.address, self.topic_of), daemon=True)
            p.start()
            self.workers.append((p, parent))
        self.members = 0

    def _all(self, cmd: str, arg: Any = None) -> list[Any]:
        for _, conn in self.workers:
            conn.send((cmd, arg))
        return [conn.recv() for _, conn in self.workers]

    def grow(self, target: int, base_interval_ms: int, progress: Console | None) -> float:
        """Join members group by group up to ``target``; returns seconds until every group was stable.

        A joining group's members heartbeat every 0.5 s until the group is stable (a real member is
        nudged instead), then every ``base_interval_ms`` like the others.
        """
        t0 = time.perf_counter()
        while self.members < target:
            g = self.groups[self.members // self.group_size]
            n = min(self.group_size - self.members % self.group_size, target - self.members)
            batch = [(g, f"m{self.members + k:06d}") for k in range(n)]
            for w, (_, conn) in enumerate(self.workers):
                conn.send(("add", (batch[w::len(self.workers)], 0.5)))
            for _, conn in self.workers:
                conn.recv()
            self.members += n
            self._wait_stable(g)
            self._all("slow", base_interval_ms / 1000)
            if progress is not None:
                progress.print(f"  {self.members:,} members joined ({time.perf_counter() - t0:.1f} s)")
        return time.perf_counter() - t0

    def _expected(self, group: str) -> int:
        index = self.groups.index(group)
        return min(self.group_size, self.members - index * self.group_size)

    def _wait_stable(self, group: str, timeout: float = 600) -> None:
        from regroup.protocol.state import GroupState
        from regroup.rpc.errors import RequestRejected

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                d = self.client.describe_group(group).description
                if d.state is GroupState.STABLE and len(d.members) == self._expected(group):
                    return
            except RequestRejected:  # not created yet
                pass
            time.sleep(0.2)
        raise RuntimeError(f"group {group} did not become stable in {timeout} s")

    def measure(self, interval_ms: int, seconds: float, transport: str) -> Window:
        self._all("transport", transport)
        self._all("interval", interval_ms / 1000)
        time.sleep(min(2.0, interval_ms / 1000))  # let the new schedule settle
        h0, c0 = self.coord.histogram(), self.coord.cpu_seconds()
        t0 = time.perf_counter()
        results = self._all("measure", seconds)
        elapsed = time.perf_counter() - t0
        h1, c1 = self.coord.histogram(), self.coord.cpu_seconds()
        lat, lag = array("d"), array("d")
        for r in results:
            lat.frombytes(r["lat"])
            lag.frombytes(r["lag"])
        offered = self.members / (interval_ms / 1000)
        achieved = len(lat) / elapsed
        w = Window(
            transport=transport, members=self.members, interval_ms=interval_ms,
            offered_per_s=round(offered, 1),
            achieved_per_s=round(achieved, 1), client_p50_ms=round(_pct(lat, 0.5), 2),
            client_p99_ms=round(_pct(lat, 0.99), 2), server_p50_ms=round(_bucket_quantile(h0, h1, 0.5), 2),
            server_p99_ms=round(_bucket_quantile(h0, h1, 0.99), 2), server_cpu=round((c1 - c0) / elapsed, 2),
            loadgen_cpu=round(sum(r["cpu"] for r in results) / elapsed, 2),
            send_lag_p99_ms=round(_pct(lag, 0.99), 2), errors=sum(r["errors"] for r in results))
        w.saturated = achieved < SATURATION_RATIO * offered or w.server_p99_ms > SATURATION_P99_MS
        if w.send_lag_p99_ms > 0.5 * interval_ms:
            w.notes.append("the load generator fell behind its schedule (client-bound)")
        return w

    def measure_with_pages(self, pages: int, interval_ms: int, seconds: float) -> Window:
        """The same window as `measure`, with ``pages`` dashboard pages open on the groups."""
        assert self.coord.dashboard_url is not None
        ctx = mp.get_context("spawn")
        ours, theirs = ctx.Pipe()
        shown = [self.groups[i % len(self.groups)] for i in range(pages)]
        proc = ctx.Process(target=_pages_process, args=(self.coord.dashboard_url, shown, theirs), daemon=True)
        proc.start()
        try:
            w = self.measure(interval_ms, seconds, "stream")
        finally:
            ours.send("stop")
            events, fetched = ours.recv() if ours.poll(60) else (0, [])
            proc.join(10)
        w.dashboard_clients = pages
        fetch_s = array("d", fetched)
        w.notes.append(f"{pages} dashboard page(s): {events} events, "
                       f"{len(fetch_s)} JSON fetches, p50 {_pct(fetch_s, 0.5):.1f} ms, "
                       f"p99 {_pct(fetch_s, 0.99):.1f} ms")
        return w

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self._all("stop")
        for p, _ in self.workers:
            p.join(timeout=10)
        self.client.close()
        self.coord.stop()


def _sweep_points(members: int, interval_ms: int, sweep: bool) -> list[tuple[int, int]]:
    if not sweep:
        return [(members, interval_ms)]
    sizes = sorted({s for s in (1_000, 5_000, 10_000) if s < members} | {members})
    points = [(s, interval_ms) for s in sizes]
    points += [(members, max(50, int(interval_ms / d))) for d in (1.25, 1.5, 2, 4, 8)]
    return points


def run_coordinator_bench(members: int, interval_ms: int, duration_s: float, json_output: bool, *,
                          sweep: bool = True, group_size: int = 500, processes: int = 1,
                          compare_unary: bool = True, dashboard_clients: int = 0) -> dict[str, Any]:
    """Run the benchmark, print a table (or one JSON object) and return the figures.

    Heartbeats go on HeartbeatStream calls (as `CoordinatorClient` sends them); with ``compare_unary``
    the largest size is measured again with one unary Heartbeat call per heartbeat. With
    ``dashboard_clients`` N the coordinator also serves the dashboard, and the target window is
    measured again with N pages open (0 pages and N pages in the same run, on the same coordinator).
    """
    if members < 1 or interval_ms < 1 or duration_s <= 0:
        raise ValueError("members, interval_ms and duration_s must be positive")
    progress = None if json_output else Console(stderr=True)
    points = _sweep_points(members, interval_ms, sweep)
    windows: list[Window] = []
    with tempfile.TemporaryDirectory(prefix="regroup-bench-") as data_dir:
        bench = _Bench(members, min(group_size, members), interval_ms, processes, data_dir,
                       dashboard=dashboard_clients > 0)
        try:
            join_s = 0.0
            for transport in ("stream", "unary") if compare_unary else ("stream",):
                for size, interval in points:
                    if transport == "unary" and size != members:
                        continue
                    if size > bench.members:
                        join_s += bench.grow(size, interval_ms, progress)
                    w = bench.measure(interval, duration_s, transport)
                    windows.append(w)
                    if progress is not None:
                        progress.print(f"  {transport}: {w.members:,} members every {interval} ms: "
                                       f"{w.achieved_per_s:,.0f}/s of {w.offered_per_s:,.0f}/s, "
                                       f"server p99 {w.server_p99_ms} ms")
                    if w.saturated and size == members and interval <= interval_ms:
                        break  # found the saturation point; faster intervals only saturate more
            if dashboard_clients > 0:
                for pages in (0, dashboard_clients):  # back to back, so that both see the same state
                    w = bench.measure(interval_ms, duration_s, "stream") if pages == 0 else \
                        bench.measure_with_pages(pages, interval_ms, duration_s)
                    w.transport = f"stream, {pages} pages"
                    windows.append(w)
                    if progress is not None:
                        progress.print(f"  {pages} dashboard pages: server p99 {w.server_p99_ms} ms, "
                                       f"client p99 {w.client_p99_ms} ms")
        finally:
            bench.close()
    streamed = [w for w in windows if w.transport == "stream"]
    paged = [w for w in windows if w.transport.startswith("stream, ")]
    target = next((w for w in streamed if w.members == members and w.interval_ms == interval_ms), streamed[0])
    unsaturated = [w for w in streamed if not w.saturated]
    unary = [w for w in windows if w.transport == "unary"]
    result: dict[str, Any] = {
        "members": members, "interval_ms": interval_ms, "duration_s": duration_s, "group_size": group_size,
        "groups": math.ceil(members / group_size), "loadgen_processes": processes, "cpus": os.cpu_count(),
        "durable_store": "sqlite wal, synchronous=FULL, group commit",
        "join_and_converge_s": round(join_s, 1), "heartbeats_per_s": target.achieved_per_s,
        "p50_ms": target.client_p50_ms, "p99_ms": target.client_p99_ms,
        "server_p50_ms": target.server_p50_ms, "server_p99_ms": target.server_p99_ms,
        "max_sustained_per_s": max((w.achieved_per_s for w in unsaturated), default=0.0),
        "saturates_at_offered_per_s": next((w.offered_per_s for w in streamed if w.saturated), None),
        "unary_max_sustained_per_s": max((w.achieved_per_s for w in unary if not w.saturated), default=None),
        "unary_saturates_at_offered_per_s": next((w.offered_per_s for w in unary if w.saturated), None),
        "sweep": [asdict(w) for w in windows],
    }
    if len(paged) == 2:
        without, with_pages = paged
        result["dashboard"] = {
            "clients": dashboard_clients,
            "server_p99_ms": [without.server_p99_ms, with_pages.server_p99_ms],
            "client_p99_ms": [without.client_p99_ms, with_pages.client_p99_ms],
            "server_cpu": [without.server_cpu, with_pages.server_cpu],
            "client_p99_ratio": round(with_pages.client_p99_ms / without.client_p99_ms, 2)
            if without.client_p99_ms else None,
            "server_p99_ratio": round(with_pages.server_p99_ms / without.server_p99_ms, 2)
            if without.server_p99_ms else None,
        }
    if json_output:
        print(json.dumps(result))
    else:
        _print(result, windows)
    return result


def _print(result: dict[str, Any], windows: list[Window]) -> None:
    c = Console(width=max(Console().width, 130))
    t = Table(title=f"Coordinator heartbeats: one process, durable store, {result['groups']} groups of "
                    f"{result['group_size']}, {result['loadgen_processes']} load-generator process(es), "
                    f"{result['cpus']} CPUs shared")
    for head in ("transport", "members", "interval ms", "offered/s", "achieved/s", "client p50/p99 ms",
                 "server p50/p99 ms", "server CPU", "loadgen CPU", "send lag p99 ms", "errors", ""):
        t.add_column(head, justify="right")
    for w in windows:
        t.add_row(w.transport, f"{w.members:,}", str(w.interval_ms), f"{w.offered_per_s:,.0f}",
                  f"{w.achieved_per_s:,.0f}",
                  f"{w.client_p50_ms} / {w.client_p99_ms}", f"{w.server_p50_ms} / {w.server_p99_ms}",
                  f"{w.server_cpu:.0%}", f"{w.loadgen_cpu:.0%}", str(w.send_lag_p99_ms), str(w.errors),
                  "SATURATED" if w.saturated else "ok")
    c.print(t)
    c.print(f"Target ({result['members']:,} members every {result['interval_ms']} ms = "
            f"{result['members'] / result['interval_ms'] * 1000:,.0f}/s): "
            f"{result['heartbeats_per_s']:,.0f}/s, "
            f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms (client round trip).")
    sat = result["saturates_at_offered_per_s"]
    c.print(f"Heartbeat streams: highest unsaturated rate {result['max_sustained_per_s']:,.0f}/s; "
            + (f"saturated at {sat:,.0f}/s offered." if sat else "no saturation within the sweep."))
    if result["unary_max_sustained_per_s"] is not None or result["unary_saturates_at_offered_per_s"]:
        c.print("Unary Heartbeat calls: highest unsaturated rate "
                f"{result['unary_max_sustained_per_s'] or 0:,.0f}/s"
                + (f"; saturated at {result['unary_saturates_at_offered_per_s']:,.0f}/s offered."
                   if result["unary_saturates_at_offered_per_s"] else "."))
    dash = result.get("dashboard")
    if dash is not None:
        c.print(f"Dashboard pages open: 0 vs {dash['clients']}: client p99 {dash['client_p99_ms'][0]} vs "
                f"{dash['client_p99_ms'][1]} ms (x{dash['client_p99_ratio']}), server p99 "
                f"{dash['server_p99_ms'][0]} vs {dash['server_p99_ms'][1]} ms (x{dash['server_p99_ratio']}).")
    c.print("Server and load generators share the machine's cores: CPU columns show who was busy "
            f"(1.00 = one core). Joining and converging all members took {result['join_and_converge_s']} s.")
    for w in windows:
        for n in w.notes:
            c.print(f"  note ({w.transport}, {w.members:,} @ {w.interval_ms} ms): {n}")
