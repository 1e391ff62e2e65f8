"""`regroup chaos abuse`: abusive clients send the largest legal heartbeats; do well-behaved members starve?

The run starts its own coordinator process (a temporary data dir, the topic ``fair`` of the
well-behaved group) and, once the well-behaved members have joined:

- ``abusers`` abusive clients, each a process of its own over a real socket (`abuser_main`): each joins
  a group of its own, then sends heartbeats at its epoch whose owned list holds the documented maximum
  (`CoordinatorConfig.max_owned_shards`, 1,000,000) of distinct partitions of a topic that does not
  exist — a legal request (about 3 MB) the coordinator must decode and validate in full — one after
  the other, as fast as they are answered;
- ``members`` well-behaved members (threads of this process, one client each) heartbeating every
  heartbeat interval, the first also committing offsets of what it owns after each heartbeat.

It reports the well-behaved heartbeats' latency (p50, p99, max), how many took longer than the
deadline (the heartbeat interval) or failed (a fenced member rejoins, as a real one would), the
commits' outcome, and the abusive requests served, refused (an error code, or RESOURCE_EXHAUSTED /
UNAVAILABLE), failed, and unanswered ``END_GRACE_S`` after the run. ``ok``: every well-behaved
heartbeat and commit was answered without error and p99 stayed below the deadline.

Figures, not assertions: the test of this module (tests/chaos/test_abuse.py) asserts outcomes only.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from regroup.bench.procs import start_coordinator_process
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, HeartbeatResponse, OffsetCommitRequest
from regroup.protocol.shard import Shard
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.wire import SERVICE_NAME

FAIR_TOPIC = "fair"
FAIR_GROUP = "abuse-fair"
FAIR_PARTITIONS = 12
#: The topic the abusers claim to own: absent from the coordinator's metadata, as in the issue.
ABUSE_TOPIC = "abuse-not-a-topic"
ABUSE_JOIN_TOPIC = "abuse-join"
#: How long a call may take before the client gives up (long: we measure latency, not timeouts).
CALL_TIMEOUT_S = 120.0
#: How long after the run an abusive request still in flight may wait for its answer.
END_GRACE_S = 30.0


@dataclass(frozen=True, slots=True)
class Settings:
    abusers: int = 6
    seconds: float = 30.0
    members: int = 3
    heartbeat_interval_ms: int = 1_000
    #: Partitions in each abusive owned list (default: the documented maximum).
    owned: int = CoordinatorConfig().max_owned_shards
    #: Extra coordinator flags.
    server_args: tuple[str, ...] = ()


@dataclass
class MemberFigures:
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    commits_ok: int = 0
    commit_errors: list[str] = field(default_factory=list)
    commit_latencies_ms: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


# ============================================================================ the abusive client

def abusive_request(group_id: str, member_id: str, epoch: int, owned: int) -> bytes:
    """A heartbeat at ``epoch`` whose owned list holds ``owned`` distinct partitions of `ABUSE_TOPIC`,
    encoded (built once: the client's cost must not limit the abuse)."""
    msg = pb.HeartbeatRequest(group_id=group_id, member_id=member_id, member_epoch=epoch)
    tp = msg.owned.topics.add()
    tp.topic = ABUSE_TOPIC
    tp.partitions.extend(range(owned))
    return msg.SerializeToString()


def abuser_main(address: str, index: int, seconds: float, owned: int) -> dict[str, Any]:
    """One abusive client: join a group of its own, then send the largest legal heartbeats for
    ``seconds``; returns what happened to them."""
    group, member = f"abuse-{index}", f"abuser-{index}"
    counts: dict[str, Any] = {"sent": 0, "served": 0, "refused": 0, "failed": 0, "unanswered": 0, "codes": {}}
    def join() -> int:
        with CoordinatorClient(address, timeout_s=CALL_TIMEOUT_S, heartbeat_stream=False,
                               client_id=f"abuser-{index}") as client:
            joined = client.heartbeat(HeartbeatRequest(group, member, 0, rebalance_timeout_ms=60_000,
                                                       subscribed_topics=(ABUSE_JOIN_TOPIC,),
                                                       owned=frozenset()))
        return max(joined.member_epoch, 1)

    epoch = join()
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20),
                                                      ("grpc.max_send_message_length", 64 << 20)])
    call: Any = channel.unary_unary(f"/{SERVICE_NAME}/Heartbeat", request_serializer=None,
                                    response_deserializer=pb.HeartbeatResponse.FromString)
    body = abusive_request(group, member, epoch, owned)
    counts["request_bytes"] = len(body)
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        counts["sent"] += 1
        try:
            # The last request may wait at most END_GRACE_S past the end of the run.
            resp = call(body, timeout=min(CALL_TIMEOUT_S, stop_at - time.monotonic() + END_GRACE_S))
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            # RESOURCE_EXHAUSTED / UNAVAILABLE: the coordinator shed the request (a refusal); not
            # answered by the end of the run; anything else is a failure.
            kind = ("refused" if code in ("RESOURCE_EXHAUSTED", "UNAVAILABLE") else
                    "unanswered" if code == "DEADLINE_EXCEEDED" else "failed")
            counts[kind] += 1
            counts["codes"][code] = counts["codes"].get(code, 0) + 1
            time.sleep(0.05)
            continue
        name = pb.ErrorCode.Name(resp.error)
        counts["codes"][name] = counts["codes"].get(name, 0) + 1
        if resp.error == pb.ERROR_CODE_NONE:
            counts["served"] += 1
            if resp.member_epoch != epoch and resp.member_epoch > 0:
                epoch = resp.member_epoch
                body = abusive_request(group, member, epoch, owned)
        else:
            # Refused by the core (fenced after its slow heartbeats, say): rejoin, abuse on.
            counts["refused"] += 1
            if resp.error in (pb.ERROR_CODE_UNKNOWN_MEMBER_ID, pb.ERROR_CODE_FENCED_MEMBER_EPOCH):
                with contextlib.suppress(Exception):
                    epoch = join()
                    body = abusive_request(group, member, epoch, owned)
    channel.close()
    return counts


# ============================================================================ well-behaved members

def _join(member: str) -> HeartbeatRequest:
    return HeartbeatRequest(FAIR_GROUP, member, 0, rebalance_timeout_ms=60_000,
                            subscribed_topics=(FAIR_TOPIC,), owned=frozenset())


def _member(address: str, index: int, settings: Settings, start: threading.Event, stop: threading.Event,
            figures: MemberFigures, commit: bool) -> None:
    interval_s = settings.heartbeat_interval_ms / 1000
    member = f"fair-{index}"
    owned: frozenset[Shard] = frozenset()
    offsets: dict[Shard, int] = {}
    with CoordinatorClient(address, timeout_s=CALL_TIMEOUT_S, client_id=member) as client:
        joined = client.heartbeat(_join(member))
        epoch = joined.member_epoch
        if joined.assignment is not None:
            owned = joined.assignment
        start.wait()
        next_at = time.monotonic()
        while not stop.is_set():
            t0 = time.monotonic()
            resp: HeartbeatResponse | None = None
            try:
                resp = client.heartbeat(_join(member) if epoch == 0 else
                                        HeartbeatRequest(FAIR_GROUP, member, epoch, owned=owned))
            except Exception as e:
                figures.errors.append(f"{member}: {type(e).__name__}: {e}")
            figures.latencies_ms.append((time.monotonic() - t0) * 1000)
            if resp is not None:
                if resp.error is not ErrorCode.NONE:
                    figures.errors.append(f"{member}: {resp.error.value}: {resp.message}")
                    if resp.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
                        epoch, owned = 0, frozenset()  # fenced: what a real member does, rejoin
                else:
                    epoch = resp.member_epoch
                    if resp.assignment is not None:
                        owned = resp.assignment  # released and taken at once: nothing to process
            if commit and owned and resp is not None and resp.error is ErrorCode.NONE:
                for s in owned:
                    offsets[s] = offsets.get(s, 0) + 1
                t1 = time.monotonic()
                try:
                    ack = client.commit_offsets(OffsetCommitRequest(
                        FAIR_GROUP, member, epoch, {s: offsets[s] for s in owned}))
                    if ack.ok:
                        figures.commits_ok += 1
                    else:
                        figures.commit_errors.append(f"{ack.error.value}: {ack.message}")
                except Exception as e:
                    figures.commit_errors.append(f"{type(e).__name__}: {e}")
                figures.commit_latencies_ms.append((time.monotonic() - t1) * 1000)
            next_at += interval_s
            stop.wait(max(0.0, next_at - time.monotonic()))
        with contextlib.suppress(Exception):  # the run is over; a failed leave only delays the cleanup
            client.heartbeat(HeartbeatRequest(FAIR_GROUP, member, -1))


# ============================================================================ the run

def run_abuse(settings: Settings, *, directory: str | None = None, keep: bool = False,
              progress: Any = None) -> dict[str, Any]:
    """Run the scenario and return its report (see the module docstring)."""
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="regroup-abuse-"))
    say = progress or (lambda _line: None)
    session_ms = max(10_000, 10 * settings.heartbeat_interval_ms)
    proc, line = start_coordinator_process(
        root / "data", "--log", f"static:{FAIR_TOPIC}={FAIR_PARTITIONS},{ABUSE_JOIN_TOPIC}=1",
        "--heartbeat-interval-ms", str(settings.heartbeat_interval_ms), "--session-timeout-ms",
        str(session_ms), *settings.server_args)
    address = line.split("listening on ", 1)[1].split(";")[0].split(" ")[0]
    say(f"coordinator on {address} (log: {root / 'data.log'})")
    abusers: list[subprocess.Popen[str]] = []
    figures = MemberFigures()
    start, stop = threading.Event(), threading.Event()
    threads = [threading.Thread(target=_member, args=(address, i, settings, start, stop, figures, i == 0),
                                name=f"fair-{i}", daemon=True) for i in range(settings.members)]
    abuse: list[dict[str, Any]] = []
    try:
        for t in threads:
            t.start()
        for i in range(settings.abusers):
            abusers.append(subprocess.Popen(
                [sys.executable, "-m", "regroup.chaos.abuse", address, str(i), str(settings.seconds),
                 str(settings.owned)], stdout=subprocess.PIPE, text=True))
        say(f"{settings.abusers} abusive clients, {settings.members} well-behaved members, "
            f"{settings.seconds:g} s")
        start.set()
        ends_at = time.monotonic() + settings.seconds
        for p in abusers:
            out, _ = p.communicate(timeout=settings.seconds + 2 * CALL_TIMEOUT_S)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            abuse.append(json.loads(lines[-1]) if lines else {"sent": 0, "served": 0, "refused": 0,
                                                               "failed": 1, "codes": {"exit": p.returncode}})
        stop.wait(max(0.0, ends_at - time.monotonic()))  # the run lasts its seconds, abusers or not
        stop.set()
        for t in threads:
            t.join(timeout=2 * CALL_TIMEOUT_S)
    finally:
        start.set()
        stop.set()
        for p in abusers:
            if p.poll() is None:
                p.kill()
                p.wait()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not keep and directory is None:
            shutil.rmtree(root, ignore_errors=True)
    return report(settings, figures, abuse, alive=proc.returncode in (0, -15))


def report(settings: Settings, figures: MemberFigures, abuse: list[dict[str, Any]], *, alive: bool,
           ) -> dict[str, Any]:
    lat = figures.latencies_ms
    deadline = settings.heartbeat_interval_ms
    p99 = percentile(lat, 0.99)
    codes: dict[str, int] = {}
    for a in abuse:
        for k, v in a.get("codes", {}).items():
            codes[str(k)] = codes.get(str(k), 0) + int(v)
    heartbeats = {
        "count": len(lat), "errors": len(figures.errors), "error_samples": figures.errors[:5],
        "p50_ms": _round(percentile(lat, 0.5)), "p99_ms": _round(p99),
        "max_ms": _round(max(lat, default=None)),
        "deadline_ms": deadline, "missed_deadline": sum(1 for x in lat if x > deadline),
        "longest_miss_streak": _streak([x > deadline for x in lat]),
    }
    commits = {"ok": figures.commits_ok, "errors": len(figures.commit_errors),
               "error_samples": figures.commit_errors[:5],
               "p99_ms": _round(percentile(figures.commit_latencies_ms, 0.99))}
    abusive: dict[str, Any] = {k: sum(a.get(k, 0) for a in abuse) for k in ("sent", "served", "refused",
                                                                              "failed", "unanswered")}
    abusive |= {"request_bytes": max((a.get("request_bytes", 0) for a in abuse), default=0), "codes": codes}
    ok = (alive and not figures.errors and not figures.commit_errors and bool(lat)
          and p99 is not None and p99 < deadline)
    return {"settings": asdict(settings), "heartbeats": heartbeats, "commits": commits, "abusive": abusive,
            "coordinator_exited_cleanly": alive, "ok": ok}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def _streak(flags: list[bool]) -> int:
    best = run = 0
    for f in flags:
        run = run + 1 if f else 0
        best = max(best, run)
    return best


def dumps(rep: dict[str, Any]) -> str:
    return json.dumps(rep, indent=2, sort_keys=True)


def print_report(rep: dict[str, Any]) -> None:
    s, hb, c, a = rep["settings"], rep["heartbeats"], rep["commits"], rep["abusive"]
    print(f"abuse: {s['abusers']} abusive clients ({a['request_bytes']:,} bytes, {s['owned']:,} owned "
          f"partitions per heartbeat), {s['members']} well-behaved members, {s['seconds']:g} s, "
          f"heartbeat interval {s['heartbeat_interval_ms']} ms")
    print(f"well-behaved heartbeats: {hb['count']}  p50 {hb['p50_ms']} ms  p99 {hb['p99_ms']} ms  "
          f"max {hb['max_ms']} ms  over the {hb['deadline_ms']} ms deadline: {hb['missed_deadline']} "
          f"(longest streak {hb['longest_miss_streak']})  errors: {hb['errors']}")
    for e in hb["error_samples"]:
        print(f"  error: {e}")
    print(f"commits: {c['ok']} ok, {c['errors']} failed, p99 {c['p99_ms']} ms")
    for e in c["error_samples"]:
        print(f"  error: {e}")
    print(f"abusive requests: {a['sent']} sent, {a['served']} served, {a['refused']} refused, "
          f"{a['failed']} failed, {a['unanswered']} unanswered at the end  {a['codes']}")
    print("OK" if rep["ok"] else "NOT OK: a well-behaved member was starved or refused")


if __name__ == "__main__":  # an abusive client process: ADDRESS INDEX SECONDS OWNED
    _address, _index, _seconds, _owned = sys.argv[1:5]
    print(json.dumps(abuser_main(_address, int(_index), float(_seconds), int(_owned))), flush=True)
