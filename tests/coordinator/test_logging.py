"""The coordinator's log on stderr, from real processes: start-up, joins, leaves, fences with their
reason, errors answered to clients, ``--log-level``; and never a token.

Both entry points are covered: ``python -m regroup.coordinator.server`` (`start_server`) and the
documented ``regroup coordinator`` command (`start_cli_coordinator`). A step's log lines are written
before its answer is released, so a line is normally there when the call returns; `wait_for_log`
polls only as a guard (and for timers, which fire on their own).
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import AuthenticationFailed
from regroup.rpc.wire import SERVICE_NAME
from tests.coordinator.server_proc import ServerProc, start_server

_LISTENING = re.compile(r"listening on (?P<addr>\S+?)[ ;]")


def start_cli_coordinator(data_dir: Path, *extra: str, timeout: float = 20,
                          env: dict[str, str] | None = None) -> ServerProc:
    """``regroup coordinator`` as a process (stderr to ``DATA.log``), like `start_server`."""
    args = ["--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra]
    log_path = data_dir.parent / f"{data_dir.name}.log"
    err = open(log_path, "a")  # noqa: SIM115 - the child keeps writing to it
    proc = subprocess.Popen([sys.executable, "-m", "regroup.cli", "coordinator", *args],
                            stdout=subprocess.PIPE, stderr=err, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    err.close()
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"coordinator exited with {proc.returncode}:\n{log_path.read_text()}")
        if sel.select(timeout=0.1):
            line = proc.stdout.readline()
            m = _LISTENING.search(line)
            if m:
                return ServerProc(proc, m.group("addr"), None, data_dir, args, log_path)
    proc.kill()
    raise RuntimeError(f"coordinator did not start in {timeout} s:\n{log_path.read_text()}")


STARTERS: dict[str, Callable[..., ServerProc]] = {"module": start_server, "cli": start_cli_coordinator}


def wait_for_log(s: ServerProc, pattern: str, timeout: float = 20) -> str:
    """The log once ``pattern`` (a regex) appears in it; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        text = s.log()
        if re.search(pattern, text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} not in the log:\n{text}")
        time.sleep(0.02)


def join(c: CoordinatorClient, group: str, member: str, instance: str | None = None) -> int:
    r = c.heartbeat(HeartbeatRequest(group, member, 0, instance_id=instance, rebalance_timeout_ms=30_000,
                                     subscribed_topics=("orders",), owned=EMPTY))
    assert r.error is ErrorCode.NONE, r.message
    return r.member_epoch


def leave(c: CoordinatorClient, group: str, member: str, epoch: int, instance: str | None = None) -> None:
    r = c.heartbeat(HeartbeatRequest(group, member, epoch, instance_id=instance))
    assert r.error is ErrorCode.NONE, r.message


@pytest.mark.parametrize("entry", sorted(STARTERS))
def test_start_up_joins_and_leaves_are_logged(tmp_path: Path, entry: str) -> None:
    data = tmp_path / "data"
    s = STARTERS[entry](data, "--log", "static:orders=4", "--log-level", "info")
    try:
        assert (f"starting: data dir {data}, listen 127.0.0.1:0, topic metadata from static:orders=4"
                in s.log())
        assert f"listening on {s.address} (plaintext, no API token)" in s.log()
        with CoordinatorClient(s.address, timeout_s=10) as c:
            join(c, "payments", "a", instance="worker-1")
            b = join(c, "payments", "b")
            leave(c, "payments", "b", -1)
            leave(c, "payments", "a", -1, instance="worker-1")
        log = wait_for_log(s, r"member 'a' \(instance 'worker-1'\) left")
        lines = [line.split(" regroup.coordinator: ", 1)[1] for line in log.splitlines()
                 if " INFO regroup.coordinator: group " in line]
        assert lines == [
            "group 'payments' created",
            "group 'payments': member 'a' (instance 'worker-1') joined; group epoch 1",
            f"group 'payments': member 'b' joined; group epoch {b}",
            f"group 'payments': member 'b' left; group epoch {b + 1}",
            f"group 'payments': member 'a' (instance 'worker-1') left; group epoch {b + 2}",
        ], log
        assert "DEBUG" not in log
    finally:
        assert s.terminate() == 0, s.log()
    assert "shutting down" in s.log()


def test_fences_are_logged_with_their_reason(tmp_path: Path) -> None:
    """A member gone silent is fenced at its session timeout; a static member that stepped out too."""
    s = start_server(tmp_path / "data", "--log", "static:orders=4", "--session-timeout-ms", "600",
                     "--heartbeat-interval-ms", "100")
    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            join(c, "g", "silent")
            epoch = join(c, "g", "static", instance="i-1")
            leave(c, "g", "static", -2, instance="i-1")  # steps out: keeps its shards for a session
            assert "group 'g': member 'static' (instance 'i-1') stepped out" in s.log()
        log = wait_for_log(s, r"member 'silent' fenced \(session timeout\)")
        log = wait_for_log(s, r"member 'static' fenced \(session timeout\)")
        assert "INFO regroup.coordinator: group 'g': member 'silent' fenced (session timeout)" in log
        assert epoch > 0
    finally:
        assert s.terminate() == 0, s.log()


def test_errors_answered_to_clients_are_warnings(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:orders=4", "--log-level", "WARNING")
    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            epoch = join(c, "g", "a")
            r = c.heartbeat(HeartbeatRequest("g", "ghost", 3))
            assert r.error is ErrorCode.UNKNOWN_MEMBER_ID
            ack = c.commit_offsets(OffsetCommitRequest("g", "a", epoch + 5, {Shard("orders", 0): 1}))
            assert not ack.ok
            log = wait_for_log(s, r"CommitOffsets from ipv4:127\.0\.0\.1:\d+ answered")
        assert re.search(r"WARNING regroup\.coordinator: Heartbeat from ipv4:127\.0\.0\.1:\d+ \(group 'g', "
                         r"member 'ghost'\) answered UNKNOWN_MEMBER_ID: member 'ghost' is not in group 'g'",
                         log), log
        assert re.search(rf"CommitOffsets from \S+ answered {ack.error.value}: {re.escape(ack.message)}", log)
        assert "joined" not in log and "INFO" not in log  # --log-level warning: no info lines
    finally:
        assert s.terminate() == 0, s.log()


def test_a_token_never_appears_in_the_logs(tmp_path: Path) -> None:
    """At debug level, with calls that carry the token, calls that carry a wrong one, joins, leaves
    and refusals: neither token is on stderr or stdout."""
    token, wrong = "s3cret-T0KEN-7f1c", "wr0ng-T0KEN-99ab"
    s = start_cli_coordinator(tmp_path / "data", "--log", "static:orders=4", "--log-level", "debug",
                              "--token", token)
    try:
        with CoordinatorClient(s.address, timeout_s=10, token=token) as c:
            epoch = join(c, "g", "a", instance="i-1")
            c.heartbeat(HeartbeatRequest("g", "ghost", 3))  # an error answered: a warning line
            leave(c, "g", "a", -1, instance="i-1")
            assert epoch > 0
        with CoordinatorClient(s.address, timeout_s=10, token=wrong) as c, \
                pytest.raises(AuthenticationFailed):
            c.list_groups()
        channel = grpc.insecure_channel(s.address)  # no token at all, garbage body
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(f"/{SERVICE_NAME}/Heartbeat", request_serializer=bytes,
                                response_deserializer=bytes)(b"\xff" + token.encode(), timeout=10)
        channel.close()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        log = wait_for_log(s, r"Heartbeat refused with UNAUTHENTICATED")
        assert "ListGroups refused with UNAUTHENTICATED" in log
        assert "member 'a' (instance 'i-1') left" in log and "DEBUG regroup.coordinator" in log
        assert "API token required" in log
    finally:
        assert s.terminate() == 0, s.log()
    assert s.proc.stdout is not None
    everything = s.log() + s.proc.stdout.read()
    for secret in (token, wrong, "Bearer"):
        assert secret not in everything, everything


@pytest.mark.parametrize("command", [["regroup.coordinator.server"], ["regroup.cli", "coordinator"]])
def test_an_unknown_log_level_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", *command, "--data-dir", str(tmp_path / "data"),
                          "--log-level", "loud"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "loud" in out.stderr and not (tmp_path / "data").exists()

