"""`regroup chaos fuzz`: N generated requests against a real coordinator process, and the verdict.

The run starts its own coordinator (a temporary data dir, topics ``fz-a..fz-d`` and the canary's,
a 10 s session timeout and a snapshot every 500 records so that timers fire and snapshots are
replayed) unless given ``--address``. A `Canary` — one well-behaved member of its own group in a
thread — heartbeats and commits all along: any refusal or a heartbeat slower than ``slow_s`` says
the fuzzer blocked another group. Each request is checked by `oracle.call`; every 100 requests the
process must still be alive. At the end the canary leaves, the coordinator's log must hold no
``ERROR``/``CRITICAL`` line nor a traceback, and (own coordinator only) `replay.check_restart`
compares the live state, the data dir replayed, and a restarted process.

A finding is any of these failures; the exit status is 1 when there is one.
"""

from __future__ import annotations

import base64
import collections
import json
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from regroup.bench.procs import start_coordinator_process
from regroup.chaos.corrupt import Heavy, Request, generate
from regroup.chaos.oracle import Answer, call
from regroup.chaos.replay import CoordinatorProcess, ReplayReport, check_restart
from regroup.chaos.requests import BY_NAME, FUZZ_TOPICS, METHODS, World, check_generators
from regroup.chaos.values import Chooser, RandomChooser
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.shard import ShardSet
from regroup.rpc.client import CoordinatorClient

CANARY_TOPIC = "canary"
TOPICS = {**FUZZ_TOPICS, CANARY_TOPIC: 2}
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 1_000
#: The fuzz coordinator's flags (beyond --listen and --data-dir).
SERVER_ARGS = ("--log", "static:" + ",".join(f"{t}={n}" for t, n in TOPICS.items()), "--metrics-port", "0",
               "--session-timeout-ms", str(SESSION_TIMEOUT_MS), "--heartbeat-interval-ms",
               str(HEARTBEAT_INTERVAL_MS), "--snapshot-every", "500")
#: `regroup chaos fuzz`'s heavy requests: one raw request in 10,000 over the size limit, one in 100 a
#: flood of up to 4,000,000 partitions.
CLI_HEAVY = Heavy(oversized_per_10k=1, flood_per_10k=100, flood_max=4_000_000)
CONFIG = CoordinatorConfig(session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
#: Heartbeat and stream methods come up more often: they are where the state is.
WEIGHTED_METHODS = tuple(m.name for m in METHODS for _ in range(
    {"Heartbeat": 4, "HeartbeatStream": 2, "StreamsHeartbeat": 3, "CommitOffsets": 2}.get(m.name, 1)))
#: Findings of known bugs, each with its strict-xfail test: reported apart, not counted in the exit
#: status (remove an entry when its test starts to pass).
KNOWN: tuple[tuple[re.Pattern[str], str], ...] = ()
_LOGGED_ERROR = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) |^Traceback ", re.M)
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
#: C0 (but tab), DEL, C1, and the line and paragraph separators some tools break lines at.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_METRICS = re.compile(r"\(metrics on \S+:(\d+)\)")
_ADDRESS = re.compile(r"listening on (\S+?)[;\s]")


# ============================================================================ the coordinator process

@dataclass
class Spawned:
    """A coordinator process this run started (`replay.CoordinatorProcess`)."""

    proc: subprocess.Popen[str]
    address: str
    metrics_port: int | None
    data_dir: Path
    args: tuple[str, ...]

    @classmethod
    def start(cls, data_dir: Path, *args: str) -> Spawned:
        proc, line = start_coordinator_process(data_dir, *args)
        address, metrics = _ADDRESS.search(line), _METRICS.search(line)
        if address is None or metrics is None:
            proc.kill()
            raise RuntimeError(f"unexpected start-up line from the coordinator: {line!r}")
        return cls(proc, address.group(1), int(metrics.group(1)), data_dir, args)

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def terminate(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def restart(self) -> Spawned:
        return Spawned.start(self.data_dir, *self.args)


def logged_errors(text: str) -> list[str]:
    """What is wrong with a coordinator's log: its ERROR/CRITICAL lines and tracebacks, and lines a
    client could have forged — a line that does not start with a time and a level (an id with a
    newline in it, written as such), or a control character (docs/operations.md: they are written
    as ``\\xNN``)."""
    out = [m.group(0) + text[m.end():].split("\n", 1)[0] for m in _LOGGED_ERROR.finditer(text)]
    for n, line in enumerate(text.split("\n"), 1):
        if line and not _LOG_LINE.match(line) and not line.startswith((" ", "Traceback")):
            out.append(f"line {n} is not a log line (forged by a client?): {line[:200]!r}")
        elif (bad := _CONTROL.search(line)) is not None:
            at = bad.start()
            out.append(f"line {n} holds control character U+{ord(bad.group()):04X} at column {at}: "
                       f"{line[:80]!r} ... {line[max(80, at - 60):at + 60]!r}")
    return out


# ============================================================================ the canary

@dataclass
class CanaryReport:
    heartbeats: int = 0
    commits: int = 0
    failures: list[str] = field(default_factory=list)
    max_latency_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"heartbeats": self.heartbeats, "commits": self.commits, "failures": self.failures[:20],
                "max_latency_ms": round(self.max_latency_s * 1000, 1)}


class Canary(threading.Thread):
    """One well-behaved member of its own group: joins, heartbeats every ``period_s`` owning what it
    was given, commits now and then, leaves at `stop`. A refusal, a failed call or a heartbeat slower
    than ``slow_s`` is a failure: the fuzzer blocked (or broke) a group it never touched."""

    def __init__(self, address: str, group_id: str, *, period_s: float = 0.1, slow_s: float = 5.0) -> None:
        super().__init__(name="regroup-chaos-canary", daemon=True)
        self.address, self.group_id, self.period_s, self.slow_s = address, group_id, period_s, slow_s
        self.report = CanaryReport()
        self.joined = threading.Event()
        self._halt = threading.Event()

    def stop(self, timeout: float = 30) -> CanaryReport:
        self._halt.set()
        self.join(timeout)
        return self.report

    def _fail(self, what: str) -> None:
        self.report.failures.append(what)

    def run(self) -> None:
        member = "canary-member"
        epoch, owned = 0, ShardSet()
        req = HeartbeatRequest(self.group_id, member, 0, rebalance_timeout_ms=30_000,
                               subscribed_topics=(CANARY_TOPIC,), owned=frozenset())
        try:
            with CoordinatorClient(self.address, timeout_s=max(10.0, self.slow_s * 2),
                                   client_id="regroup-chaos-canary") as c:
                while not self._halt.is_set():
                    t0 = time.perf_counter()
                    resp = c.heartbeat(req)
                    took = time.perf_counter() - t0
                    self.report.heartbeats += 1
                    self.report.max_latency_s = max(self.report.max_latency_s, took)
                    if took > self.slow_s:
                        self._fail(f"a heartbeat took {took:.1f} s")
                    if resp.error is not ErrorCode.NONE:
                        self._fail(f"heartbeat at epoch {epoch} refused: {resp.error.value}: {resp.message}")
                        return
                    epoch = resp.member_epoch
                    owned = resp.assignment if resp.assignment is not None else owned
                    self.joined.set()
                    if owned and self.report.heartbeats % 10 == 0:
                        offsets = dict.fromkeys(owned, self.report.heartbeats)
                        ack = c.commit_offsets(OffsetCommitRequest(self.group_id, member, epoch, offsets))
                        self.report.commits += 1
                        if ack.error is not ErrorCode.NONE:
                            self._fail(f"commit refused: {ack.error.value}: {ack.message}")
                    req = HeartbeatRequest(self.group_id, member, epoch, owned=owned)
                    self._halt.wait(self.period_s)
                c.heartbeat(HeartbeatRequest(self.group_id, member, -1))
        except Exception as e:  # CoordinatorUnavailable: no answer within its deadline, or gone
            self._fail(f"{type(e).__name__}: {e}")
        finally:
            self.joined.set()


# ============================================================================ the fuzzer

@dataclass
class Finding:
    request: str
    problems: tuple[str, ...]
    #: The exact bodies sent, base64 (cut at 64 KiB each), to replay the request.
    payloads: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"request": self.request, "problems": list(self.problems),
                "payloads_base64": list(self.payloads)}


@dataclass
class Stats:
    requests: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0
    methods: collections.Counter[str] = field(default_factory=collections.Counter)
    modes: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_method: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    findings: list[Finding] = field(default_factory=list)
    finding_count: int = 0
    #: The five slowest requests: (seconds, request number, request).
    slowest: list[tuple[float, int, str]] = field(default_factory=list)

    def add(self, req: Request, ans: Answer, keep: int = 100) -> None:
        self.requests += 1
        self.seconds += ans.seconds
        self.slowest_s = max(self.slowest_s, ans.seconds)
        if len(self.slowest) < 5 or ans.seconds > self.slowest[-1][0]:
            self.slowest = sorted([*self.slowest, (ans.seconds, self.requests, req.describe(200))],
                                  reverse=True)[:5]
        self.methods[req.method] += 1
        self.modes[req.mode] += 1
        self.outcomes.update(ans.outcomes)
        self.by_method.update((req.method, o) for o in ans.outcomes)
        if ans.findings:
            self.finding_count += 1
            if len(self.findings) < keep:
                self.findings.append(Finding(req.describe(), ans.findings, tuple(
                    base64.b64encode(p[:65_536]).decode() for p in req.payloads)))


class Fuzzer:
    """Sends generated requests to one coordinator and keeps the tally; `step` is one request."""

    def __init__(self, address: str, *, deadline_s: float = 10.0, world: World | None = None,
                 heavy: Heavy | None = None) -> None:
        check_generators()
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1),
                                                               ("grpc.max_receive_message_length", -1)])
        self.deadline_s = deadline_s
        self.world = world or World()
        self.heavy = heavy or Heavy()
        self.stats = Stats()
        #: Watch streams left open a while (nudges reach them; a member's fifth is refused).
        self.held: collections.deque[Any] = collections.deque()

    def step(self, ch: Chooser, method: str | None = None, mode: str | None = None, *,
             follow_up: bool = True) -> tuple[Request, Answer]:
        """One request (``method`` and ``mode`` drawn unless given); after a spec fetched, the delegate's
        InstallAssignment often follows at once as a request of its own (``follow_up``)."""
        req = generate(method or ch.pick(WEIGHTED_METHODS), ch, self.world, mode, self.heavy)
        ans = call(self.channel, req, self.deadline_s, hold=ch.chance(30))
        if ans.held is not None:
            self.held.append(ans.held)
            while len(self.held) > 12:
                self.held.popleft().cancel()
        self.world.learn(req.method, req.messages, ans.responses)
        self.stats.add(req, ans)
        if req.method == "GetAssignmentSpec" and ans.outcomes == ("NONE",) and follow_up and ch.chance(70):
            return self.step(ch, "InstallAssignment", "plausible")  # the delegate delivers at once
        return req, ans

    def close(self) -> None:
        while self.held:
            self.held.popleft().cancel()
        self.channel.close()

    def __enter__(self) -> Fuzzer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


# ============================================================================ the run

def run_fuzz(requests: int, seed: int, *, address: str | None = None, deadline_s: float = 10.0,
             slow_s: float = 5.0, heavy: Heavy = CLI_HEAVY, keep: bool = False,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``requests`` requests from ``seed``; returns the report (`print_report` prints it). Without
    ``address`` it starts (and always stops) its own coordinator, in a temporary directory removed at
    the end unless ``keep``."""
    if address is not None:
        return _run(requests, seed, address, None, deadline_s, slow_s, heavy, progress, [])
    tmp = Path(tempfile.mkdtemp(prefix="regroup-chaos-"))
    started: list[Spawned] = []
    try:
        started.append(Spawned.start(tmp / "data", *SERVER_ARGS))
        report = _run(requests, seed, started[0].address, started[0], deadline_s, slow_s, heavy,
                      progress, started)
        report["coordinator"] = f"started in {tmp}" + (" (kept)" if keep else "")
        return report
    finally:
        for s in started:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(requests: int, seed: int, address: str, server: Spawned | None, deadline_s: float, slow_s: float,
         heavy: Heavy, progress: Callable[[str], None] | None, started: list[Spawned],
         ) -> dict[str, Any]:
    findings: list[str] = []
    crashes = 0
    canary = Canary(address, f"canary-{seed}-{time.time_ns():x}", slow_s=slow_s)
    canary.start()
    canary.joined.wait(30)
    ch = RandomChooser(seed)
    t0 = time.perf_counter()
    with Fuzzer(address, deadline_s=deadline_s, heavy=heavy) as fuzzer:
        try:
            checked = 0
            while fuzzer.stats.requests < requests:
                fuzzer.step(ch, follow_up=fuzzer.stats.requests + 1 < requests)
                n = fuzzer.stats.requests
                if n - checked >= 100 or n >= requests:
                    if not _alive(server, fuzzer.channel, deadline_s):
                        crashes += 1
                        findings.append(f"the coordinator died after {n} requests")
                        break
                    if progress is not None and n // 1000 > checked // 1000:
                        progress(f"{n} requests, {fuzzer.stats.finding_count} with findings")
                    checked = n
        finally:
            canary_report = canary.stop()
        wall = time.perf_counter() - t0
        stats = fuzzer.stats
    findings.extend(f"canary: {f}" for f in canary_report.failures[:20])
    replay: ReplayReport | None = None
    if server is not None:
        if not crashes:
            replay = check_restart(server, TOPICS, CONFIG)
            findings.extend(f"replay: {f}" for f in replay.findings)
            if isinstance(replay.restarted, Spawned):
                started.append(replay.restarted)
                if replay.restarted.terminate() != 0:
                    findings.append("replay: the restarted coordinator did not stop cleanly")
        elif server.proc.poll() is None:
            server.terminate()
        log_text = server.log_path.read_text(errors="replace")
        findings.extend(f"coordinator log: {line}" for line in logged_errors(log_text))
    known: collections.Counter[str] = collections.Counter()
    for f in list(findings):
        issue = next((why for pattern, why in KNOWN if pattern.search(f)), None)
        if issue is not None:
            findings.remove(f)
            known[issue] += 1
    return {
        "seed": seed, "requests": stats.requests, "seconds": round(wall, 2),
        "requests_per_s": round(stats.requests / wall, 1) if wall else 0.0,
        "slowest_ms": round(stats.slowest_s * 1000, 1),
        "slowest": [{"ms": round(t * 1000, 1), "n": n, "request": d} for t, n, d in stats.slowest],
        "methods": dict(sorted(stats.methods.items())), "modes": dict(sorted(stats.modes.items())),
        "answers": dict(stats.outcomes.most_common()),
        "answers_by_method": {m: {o: n for (m2, o), n in sorted(stats.by_method.items()) if m2 == m}
                              for m in sorted(stats.methods)},
        "requests_with_findings": stats.finding_count,
        "findings": [f.as_dict() for f in stats.findings],
        "other_findings": findings[:50], "crashes": crashes, "canary": canary_report.as_dict(),
        "known_issues": dict(known),
        "replay": replay.as_dict() if replay is not None else None,
        "coordinator": address,
    }


def _alive(server: CoordinatorProcess | None, channel: grpc.Channel, deadline_s: float) -> bool:
    if server is not None:
        return server.proc.poll() is None
    try:  # an existing coordinator: it answers
        list_groups: Any = channel.unary_unary(BY_NAME["ListGroups"].path, request_serializer=None,
                                               response_deserializer=None)
        list_groups(b"", timeout=deadline_s)
    except grpc.RpcError:
        return False
    return True


def total_findings(report: dict[str, Any]) -> int:
    return int(report["requests_with_findings"]) + len(report["other_findings"])


def print_report(report: dict[str, Any], out: Callable[[str], None] = print) -> None:
    """The report as text (`--json` prints ``report`` itself)."""
    out(f"regroup chaos fuzz: {report['requests']} requests in {report['seconds']} s "
        f"({report['requests_per_s']} requests/s), seed {report['seed']}, "
        f"coordinator {report['coordinator']}")
    out("methods: " + ", ".join(f"{k} {v}" for k, v in report["methods"].items()))
    out("modes: " + ", ".join(f"{k} {v}" for k, v in report["modes"].items()))
    out("answers by status or error code:")
    for label, n in report["answers"].items():
        out(f"  {label:<34} {n:>8}")
    c = report["canary"]
    out(f"canary: {c['heartbeats']} heartbeats, {c['commits']} commits, {len(c['failures'])} failures, "
        f"slowest heartbeat {c['max_latency_ms']} ms")
    r = report["replay"]
    if r is None:
        out("replay: not checked (an existing coordinator: its data dir is not ours to restart)")
    else:
        verdict = "same state" if not r["findings"] else f"{len(r['findings'])} difference(s)"
        out(f"replay: {r['records_replayed']} records, {r['groups']} groups, "
            f"{r['committed_offsets']} committed offsets: {verdict}" + "".join(f"; {n}" for n in r["notes"]))
    out(f"slowest answer: {report['slowest_ms']} ms")
    out(f"crashes: {report['crashes']}")
    out(f"findings: {total_findings(report)}")
    for f in report["findings"]:
        out(f"  {f['request']}")
        for p in f["problems"]:
            out(f"    -> {p}")
    for line in report["other_findings"]:
        out(f"  {line}")
    for issue, n in report["known_issues"].items():
        out(f"known issue (a strict xfail test; not counted): {n} x {issue}")


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=True)
