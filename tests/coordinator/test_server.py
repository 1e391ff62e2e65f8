"""End to end: a real coordinator process, driven through CoordinatorClient."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from regroup.log import LogRecord, PartitionedLog, open_log
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from regroup.protocol.shard import EMPTY, Shard, ShardSet
from regroup.protocol.state import GroupState
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.client import CoordinatorClient, NudgeStream
from regroup.rpc.errors import AuthenticationFailed, CoordinatorUnavailable, RequestRejected
from regroup.rpc.types import Nudge
from tests.coordinator.server_proc import ServerProc, start_server

# ----------------------------------------------------------------------------------------- helpers

T = TypeVar("T")


@dataclass
class M:
    """A member that takes and gives up shards instantly (owned = the last assignment)."""

    group: str
    id: str
    epoch: int = 0
    owned: ShardSet = field(default_factory=frozenset)

    def join(self, c: CoordinatorClient, topics: tuple[str, ...] = ("orders",), regex: str | None = None,
             ) -> HeartbeatResponse:
        r = c.heartbeat(HeartbeatRequest(self.group, self.id, 0, rebalance_timeout_ms=30_000,
                                         subscribed_topics=topics, subscribed_regex=regex, owned=EMPTY))
        return self._took(r)

    def beat(self, c: CoordinatorClient) -> HeartbeatResponse:
        return self._took(c.heartbeat(HeartbeatRequest(self.group, self.id, self.epoch, owned=self.owned)))

    def _took(self, r: HeartbeatResponse) -> HeartbeatResponse:
        assert r.error is ErrorCode.NONE, r.message
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = r.assignment
        return r


def settle(c: CoordinatorClient, members: list[M], rounds: int = 8) -> None:
    for _ in range(rounds):
        for m in members:
            m.beat(c)
        if c.describe_group(members[0].group).description.state is GroupState.STABLE:
            return
    raise AssertionError(f"group did not settle: {c.describe_group(members[0].group)}")


class Watcher:
    """Collects a member's nudges on a thread."""

    def __init__(self, c: CoordinatorClient, group: str, member: str) -> None:
        self.stream: NudgeStream = c.watch(group, member)
        self.nudges: queue.Queue[Nudge] = queue.Queue()
        self.thread = threading.Thread(target=lambda: [self.nudges.put(n) for n in self.stream], daemon=True)
        self.thread.start()

    def next(self, timeout: float = 3.0) -> tuple[Nudge, float]:
        t0 = time.perf_counter()
        n = self.nudges.get(timeout=timeout)
        return n, time.perf_counter() - t0

    def close(self) -> None:
        self.stream.cancel()
        self.thread.join(timeout=5)


def eventually(call: Callable[[], T], timeout: float = 5.0) -> T:
    """Retry while the coordinator is unavailable (a client reconnecting after a restart)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except CoordinatorUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartitionedLog]:
    """The real embedded log, shared with the coordinator process (which reads its metadata)."""
    partitioned = open_log(str(tmp_path_factory.mktemp("log") / "log"))
    for topic, partitions in {"orders": 6, "payments": 2, "admin": 3}.items():
        partitioned.create_topic(topic, partitions)
    yield partitioned
    partitioned.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, log: PartitionedLog) -> Iterator[ServerProc]:
    data = tmp_path_factory.mktemp("coord") / "data"
    log_dir = str(getattr(log, "directory", ""))
    s = start_server(data, "--log", log_dir, "--metrics-port", "0", "--topic-refresh-s", "0.5")
    yield s
    assert s.terminate() == 0, s.log()


@pytest.fixture()
def client(server: ServerProc) -> Iterator[CoordinatorClient]:
    c = CoordinatorClient(server.address, client_id="tests", timeout_s=5)
    yield c
    c.close()


# ----------------------------------------------------------------------------------------- behaviour


def test_join_heartbeat_commit_fetch_describe(client: CoordinatorClient, server: ServerProc,
                                              log: PartitionedLog) -> None:
    log.produce("orders", 1, [LogRecord(None, b"x", 0)] * 50)
    a = M("basic", "a")
    r = a.join(client)
    assert r.member_epoch == 1 and a.owned == frozenset(Shard("orders", p) for p in range(6))
    assert r.heartbeat_interval_ms == 5_000 and r.session_timeout_ms == 45_000
    assert a.beat(client).assignment is None  # steady: nothing to act on
    ack = client.commit_offsets(OffsetCommitRequest("basic", "a", a.epoch, {Shard("orders", 1): 42}, "m"))
    assert ack.ok, ack.message
    fetched = client.fetch_offsets(OffsetFetchRequest("basic", "a", a.epoch))
    assert fetched.error is ErrorCode.NONE and fetched.offsets[Shard("orders", 1)].offset == 42
    stale = client.commit_offsets(OffsetCommitRequest("basic", "a", a.epoch + 5, {Shard("orders", 1): 43}))
    assert stale.error is ErrorCode.STALE_MEMBER_EPOCH and "epoch" in stale.message

    d = client.describe_group("basic")
    assert d.description.state is GroupState.STABLE and d.description.epoch == 1
    assert d.coordinator == server.address
    assert d.clients["a"].client_id == "tests" and d.clients["a"].client_host == "127.0.0.1"
    assert 0 <= d.clients["a"].last_heartbeat_age_ms < 5_000
    (member,) = d.description.members
    assert member.assigned == a.owned and member.epoch == 1
    status = {o.shard: o for o in d.offsets}
    assert len(status) == 6 and status[Shard("orders", 1)].committed == 42
    assert status[Shard("orders", 1)].owner == "a" and status[Shard("orders", 2)].committed is None
    assert status[Shard("orders", 1)].log_end_offset == 50 and status[Shard("orders", 1)].lag == 8
    assert status[Shard("orders", 2)].log_end_offset == 0 and status[Shard("orders", 2)].lag is None
    assert [(h.kind, h.epoch) for h in d.history] == [("group", 0), ("group", 1), ("target", 1)]
    assert "member a joined" in d.history[1].cause and d.history[1].at_unix_ms > 1.6e12
    assert ("basic", GroupState.STABLE, 1) in client.list_groups()
    with pytest.raises(RequestRejected) as e:
        client.describe_group("no-such-group")
    assert e.value.code is ErrorCode.GROUP_ID_NOT_FOUND


def test_hand_off_takes_round_trips_thanks_to_nudges(client: CoordinatorClient) -> None:
    """b joins: a is nudged to revoke at once; when a releases, b is nudged to take its shards."""
    a, b = M("handoff", "a"), M("handoff", "b")
    a.join(client)
    wa = Watcher(client, "handoff", "a")
    try:
        t0 = time.perf_counter()
        b.join(client)  # a holds everything: b gets nothing yet and waits for a
        assert b.owned == EMPTY
        nudge, _ = wa.next()
        to_a = time.perf_counter() - t0
        assert nudge.group_id == "handoff" and nudge.member_id == "a" and nudge.group_epoch == 2
        wb = Watcher(client, "handoff", "b")
        try:
            r = a.beat(client)  # revoke: a keeps 3 of 6 at the same epoch
            assert r.assignment is not None and len(r.assignment) == 3
            a.beat(client)  # a reports it released them: b's shards are free now
            _, waited = wb.next()
            b.beat(client)
            hand_off = time.perf_counter() - t0
            assert len(b.owned) == 3 and b.owned.isdisjoint(a.owned)
        finally:
            wb.close()
    finally:
        wa.close()
    # Far below a heartbeat interval (5 s): the hand-off is a few round trips.
    assert to_a < 1.0 and waited < 1.0 and hand_off < 2.0, (to_a, waited, hand_off)


def test_bad_requests_get_invalid_request_and_the_server_survives(
        client: CoordinatorClient, server: ServerProc) -> None:
    def hb(req: HeartbeatRequest) -> HeartbeatResponse:
        return client.heartbeat(req)

    def join(group: str = "bad", member: str = "m", **kw: Any) -> HeartbeatRequest:
        fields: dict[str, Any] = {"rebalance_timeout_ms": 1, "subscribed_topics": ("t",), "owned": EMPTY}
        fields.update(kw)
        return HeartbeatRequest(group, member, 0, **fields)

    cases = {
        "oversized group id": join("g" * 10_000),
        "empty member id": join(member=""),
        "epoch below -2": HeartbeatRequest("bad", "m", -7),
        "join owning shards": join(owned=frozenset({Shard("t", 0)})),
        "negative partition": join(owned=frozenset({Shard("t", -1)})),
        "huge topic name": join(subscribed_topics=("x" * 5_000,)),
        "regex too long": join(subscribed_topics=None, subscribed_regex="a" * 5_000),
        "join without subscription": join(subscribed_topics=None),
    }
    for name, req in cases.items():
        r = hb(req)
        assert r.error is ErrorCode.INVALID_REQUEST, (name, r)
        assert r.message, name
    assert hb(join(subscribed_topics=None, subscribed_regex="(a)\\1")).error \
        is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert client.commit_offsets(OffsetCommitRequest("bad", "m", 1, {})).error is ErrorCode.INVALID_REQUEST
    assert client.commit_offsets(OffsetCommitRequest("bad", "m", 1, {Shard("t", 0): -4})).error \
        is ErrorCode.INVALID_REQUEST
    assert client.fetch_offsets(OffsetFetchRequest("x" * 300)).error is ErrorCode.INVALID_REQUEST
    assert client.delete_group("").error is ErrorCode.INVALID_REQUEST
    with pytest.raises(RequestRejected) as e:
        client.watch("bad", "")
    assert e.value.code is ErrorCode.INVALID_REQUEST

    # What the typed client cannot send: a shard listed twice, garbage bytes, a message over the limit.
    channel = grpc.insecure_channel(server.address)
    raw = channel.unary_unary("/regroup.v1.Coordinator/CommitOffsets")
    twice = pb.OffsetCommitRequest(group_id="bad", member_id="m", member_epoch=1, topics=[
        pb.TopicOffsets(topic="t", partitions=[pb.PartitionOffset(partition=0, offset=1)] * 2)])
    assert pb.Ack.FromString(raw(twice.SerializeToString(), timeout=5)).error == pb.ERROR_CODE_INVALID_REQUEST
    with pytest.raises(grpc.RpcError):
        raw(b"\xff\xff\xff garbage", timeout=5)
    with pytest.raises(grpc.RpcError) as big:
        huge = pb.OffsetCommitRequest(group_id="bad", metadata="x" * (17 * 2**20))
        raw(huge.SerializeToString(), timeout=10)
    assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    channel.close()

    assert server.proc.poll() is None
    assert M("after-bad", "ok").join(client).member_epoch == 1  # still serving, nothing corrupted
    assert "bad" not in {g for g, _, _ in client.list_groups()}  # refused requests changed nothing


def test_topic_metadata_reaches_groups_and_regex_subscriptions(client: CoordinatorClient,
                                                                log: PartitionedLog) -> None:
    r = M("regex", "r")
    r.join(client, topics=(), regex="events-.*")
    assert r.owned == EMPTY
    w = Watcher(client, "regex", "r")
    try:
        log.create_topic("events-eu", 2)
        assert client.refresh_topics()["events-eu"] == 2
        w.next()  # the new topic matched the regex: new target, the member is told at once
        assert r.beat(client).assignment == frozenset({Shard("events-eu", 0), Shard("events-eu", 1)})
        log.add_partitions("events-eu", 3)
        w.next(timeout=5)  # the periodic refresh (0.5 s) finds the added partition by itself
        r.beat(client)
        assert len(r.owned) == 3
    finally:
        w.close()
    d = client.describe_group("regex")
    assert d.description.subscribed_topics == {"events-eu": 3}
    assert any("events-eu=3" in h.cause for h in d.history)
    assert client.topics()["events-eu"] == 3 and client.topics_info().error == ""


def test_admin_reset_delete_offsets_and_group(client: CoordinatorClient, log: PartitionedLog) -> None:
    log.produce("admin", 0, [LogRecord(None, b"x", 0)] * 10)  # offsets name records the log has
    log.produce("admin", 1, [LogRecord(None, b"x", 0)] * 7)
    a = M("admin", "a")
    a.join(client, topics=("admin",))
    s0 = Shard("admin", 0)
    assert client.commit_offsets(OffsetCommitRequest("admin", "a", a.epoch, {s0: 10})).ok
    refused = client.reset_offsets("admin", {s0: 0})
    assert refused.error is ErrorCode.NON_EMPTY_GROUP and "member" in refused.message
    assert client.heartbeat(HeartbeatRequest("admin", "a", -1)).error is ErrorCode.NONE  # leave
    assert client.reset_offsets("admin", {s0: 3, Shard("admin", 1): 7}).ok
    fetched = client.fetch_offsets(OffsetFetchRequest("admin"))
    assert {s: c.offset for s, c in fetched.offsets.items()} == {s0: 3, Shard("admin", 1): 7}
    assert client.delete_offsets("admin", [s0]).ok
    assert set(client.fetch_offsets(OffsetFetchRequest("admin")).offsets) == {Shard("admin", 1)}
    assert client.delete_group("admin").ok
    assert "admin" not in {g for g, _, _ in client.list_groups()}
    assert client.delete_group("admin").error is ErrorCode.GROUP_ID_NOT_FOUND


def test_metrics_endpoint_serves_the_counters(client: CoordinatorClient, server: ServerProc) -> None:
    M("metrics", "a").join(client)
    assert server.metrics_port is not None
    for _ in range(30):  # per-group gauges follow the core's state within a second or so
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        if 'regroup_members{group="metrics",status="stable"} 1.0' in text:
            break
        time.sleep(0.25)
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples['regroup_heartbeats_total{error="NONE"}'] >= 1
    assert samples['regroup_heartbeats_total{error="INVALID_REQUEST"}'] >= 0
    assert samples["regroup_heartbeat_latency_seconds_count"] >= 1
    assert samples['regroup_group_epoch{group="metrics"}'] == 1
    assert samples['regroup_rebalances_total{group="metrics"}'] >= 1
    assert samples["regroup_records_written_total"] > 0
    assert samples["regroup_store_transactions_total"] > 0
    for name in ("regroup_assignment_seconds_count", "regroup_store_commit_seconds_count", "regroup_topics",
                 "regroup_watch_streams", "regroup_recovery_seconds"):
        assert name in samples, name
    assert samples['regroup_members{group="metrics",status="stable"}'] == 1
    assert samples['regroup_groups{state="stable"}'] >= 1 and "regroup_fenced_members" in text


# ----------------------------------------------------------------------------------------- restarts


def test_kill_9_restart_recovers_and_members_carry_on(tmp_path: Path) -> None:
    flags = ("--log", "static:orders=6", "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "1000")
    s = start_server(tmp_path / "data", *flags)
    c = CoordinatorClient(s.address, timeout_s=5)
    a, b = M("g", "a"), M("g", "b")
    a.join(c)
    b.join(c)
    settle(c, [a, b])
    assert c.commit_offsets(OffsetCommitRequest("g", "a", a.epoch, dict.fromkeys(a.owned, 7))).ok
    before = c.describe_group("g")

    s.kill9()
    with pytest.raises(CoordinatorUnavailable, match=r"Heartbeat|heartbeat stream"):
        a.beat(c)
    s = s.restart()
    try:
        after = eventually(lambda: c.describe_group("g"))
        assert after.description == before.description  # epochs, assignments, offsets: all recovered
        assert after.history == before.history
        ra, rb = eventually(lambda: a.beat(c)), b.beat(c)  # same epochs: nobody is fenced, nothing moves
        assert (ra.member_epoch, rb.member_epoch) == (before.description.epoch,) * 2
        assert ra.assignment is None and rb.assignment is None

        # The session timers were re-armed at recovery: b stops heartbeating and is fenced.
        w = Watcher(c, "g", "a")
        try:
            for _ in range(12):
                a.beat(c)
                if not w.nudges.empty():
                    break
                time.sleep(0.5)
            nudge, _ = w.next(timeout=1)
            assert nudge.group_epoch == before.description.epoch + 1
        finally:
            w.close()
        settle(c, [a])
        assert len(a.owned) == 6
        history = c.describe_group("g").history
        assert "member b fenced" in history[-2].cause
    finally:
        c.close()
        assert s.terminate() == 0, s.log()
    assert "shutting down" in s.log()


def test_snapshots_keep_recovery_bounded(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:t=4", "--snapshot-every", "20")
    c = CoordinatorClient(s.address)
    a = M("snap", "a")
    a.join(c, topics=("t",))
    for i in range(60):
        assert c.commit_offsets(OffsetCommitRequest("snap", "a", a.epoch, {Shard("t", i % 4): i})).ok
    before = c.describe_group("snap").description
    assert s.terminate() == 0
    s = s.restart()
    try:
        assert eventually(lambda: c.describe_group("snap")).description == before
        assert "recovered" in s.log()
        recovered = int(s.log().rsplit("recovered ", 1)[1].split(" ")[0])
        assert recovered < 50, recovered  # snapshot + tail, not the whole history (60+ records)
    finally:
        c.close()
        s.terminate()


# ----------------------------------------------------------------------------------------- auth


def make_cert(directory: Path) -> tuple[Path, Path]:
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
def test_token_and_tls_are_enforced(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    s = start_server(tmp_path / "data", "--log", "static:orders=2", "--token", "s3cret",
                     "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        good = CoordinatorClient(s.address, token="s3cret", tls_ca=str(cert))
        assert M("auth", "a").join(good).member_epoch == 1
        stream = good.watch("auth", "a")
        stream.cancel()
        assert good.list_groups() == [("auth", GroupState.STABLE, 1)]
        for bad in (CoordinatorClient(s.address, tls_ca=str(cert)),
                    CoordinatorClient(s.address, token="wrong", tls_ca=str(cert))):
            with pytest.raises(AuthenticationFailed, match="token"):
                bad.heartbeat(HeartbeatRequest("auth", "a", 1))
            with pytest.raises(AuthenticationFailed):
                bad.watch("auth", "a")
            bad.close()
        plaintext = CoordinatorClient(s.address, token="s3cret", timeout_s=2)
        with pytest.raises(CoordinatorUnavailable):
            plaintext.list_groups()
        plaintext.close()
        good.close()
    finally:
        assert s.terminate() == 0, s.log()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
def test_the_admin_commands_talk_tls_with_the_ca_given(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from regroup.cli import app

    cert, key = make_cert(tmp_path)
    s = start_server(tmp_path / "data", "--log", "static:orders=2", "--token", "s3cret",
                     "--tls-cert", str(cert), "--tls-key", str(key))
    monkeypatch.delenv("REGROUP_TLS_CA", raising=False)
    try:
        c = CoordinatorClient(s.address, token="s3cret", tls_ca=str(cert))
        M("tls", "a").join(c)
        c.close()
        base = ["groups", "list", "-c", s.address, "--token", "s3cret", "--json"]
        ok = CliRunner().invoke(app, [*base, "--tls-ca", str(cert)])
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.stdout)["groups"] == [{"group": "tls", "kind": "consumer", "state": "stable",
                                                   "members": 1}]
        monkeypatch.setenv("REGROUP_TLS_CA", str(cert))  # the same from the environment
        assert CliRunner().invoke(app, base).exit_code == 0
        monkeypatch.delenv("REGROUP_TLS_CA")
        missing = CliRunner().invoke(app, [*base, "--tls-ca", str(tmp_path / "nope.pem")])
        assert missing.exit_code == 2 and "no such file" in missing.output
    finally:
        assert s.terminate() == 0, s.log()


def test_delegated_assignment_through_the_api(client: CoordinatorClient) -> None:
    """A member offering a client-side assignor computes the target; the coordinator validates it."""
    req = HeartbeatRequest("delegated", "d1", 0, rebalance_timeout_ms=30_000, subscribed_topics=("payments",),
                           assignor="mine", client_assignors=("mine",), owned=EMPTY)
    r = client.heartbeat(req)
    assert r.error is ErrorCode.NONE and r.should_compute_assignment
    spec = client.assignment_spec("delegated", "d1", r.member_epoch)
    assert spec.assignor == "mine" and set(spec.spec.members) == {"d1"}
    assert dict(spec.spec.topics) == {"payments": 2}
    wrong = client.install_assignment("delegated", "d1", r.member_epoch, spec.group_epoch,
                                      {"d1": [Shard("payments", 0)]})  # leaves payments-1 out
    assert wrong.error is ErrorCode.INVALID_ASSIGNMENT and "unassigned" in wrong.message
    everything = frozenset({Shard("payments", 0), Shard("payments", 1)})
    ok = client.install_assignment("delegated", "d1", r.member_epoch, spec.group_epoch, {"d1": everything})
    assert ok.ok, ok.message
    d = M("delegated", "d1", epoch=r.member_epoch)
    d.beat(client)
    assert d.owned == everything
    with pytest.raises(RequestRejected) as e:
        client.assignment_spec("delegated", "d1", d.epoch)
    assert e.value.code is ErrorCode.NOT_ASSIGNMENT_DELEGATE


def test_unary_heartbeats_work_too(server: ServerProc) -> None:
    """Without the heartbeat stream the client sends one unary call per heartbeat: same answers."""
    with CoordinatorClient(server.address, heartbeat_stream=False) as unary:
        u = M("unary", "u")
        assert u.join(unary).member_epoch == 1 and len(u.owned) == 6
        assert u.beat(unary).assignment is None


def test_a_second_coordinator_on_the_same_data_dir_refuses_to_start(server: ServerProc) -> None:
    with pytest.raises(RuntimeError, match="exited with 2") as e:
        start_server(server.data_dir, "--log", "static:t=1", log_path=server.data_dir.parent / "second.log")
    assert "in use by another coordinator" in str(e.value)


def test_an_idle_connection_is_closed_and_the_client_reconnects(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:orders=2", "--idle-timeout-ms", "1000")
    c = CoordinatorClient(s.address, timeout_s=10)
    states: queue.Queue[grpc.ChannelConnectivity] = queue.Queue()
    try:
        assert c.list_groups() == []
        c._channel.subscribe(states.put, try_to_connect=False)
        seen = []
        while grpc.ChannelConnectivity.IDLE not in seen:  # the server's GOAWAY after a second idle
            seen.append(states.get(timeout=30))
        assert seen[0] is grpc.ChannelConnectivity.READY, seen
        assert c.list_groups() == []  # the next call connects again
    finally:
        c.close()
        assert s.terminate() == 0, s.log()
