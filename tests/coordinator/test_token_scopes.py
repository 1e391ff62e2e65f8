"""Scoped API tokens against a real coordinator process: every gRPC method (unary and streaming) with
no token, a wrong token, and each token of a tokens file in and out of its scopes and groups; the
dashboard; start-up checks; TLS with a wrong CA; and never a token in a status, a body or the log.

Calls go through a bare gRPC channel, so that the metadata is exactly what a test says and the
status code is what the server sent. An allowed call may still be refused by the protocol (an
unknown member, a group of another kind): it only must not be UNAUTHENTICATED or PERMISSION_DENIED.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from regroup.coordinator.auth import METHOD_SCOPES
from regroup.coordinator.tokens import Scope, token_sha256
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.errors import AuthenticationFailed, CoordinatorUnavailable
from regroup.rpc.wire import SERVICE_NAME
from tests.coordinator.server_proc import ServerProc, start_server
from tests.coordinator.test_logging import start_cli_coordinator, wait_for_log
from tests.coordinator.test_server import make_cert

MEMBER = "m3mber-T0KEN-orders-5d2e"
READER = "r3ader-T0KEN-8c41"
ADMIN = "adm1n-T0KEN-0b7f"
EVERYTHING = "ev3ry-T0KEN-a9e3"
WRONG = "wr0ng-T0KEN-31f6"
SINGLE = "s1ngle-T0KEN-6a2c"
SECRETS = (MEMBER, READER, ADMIN, EVERYTHING, WRONG, SINGLE)

TOKENS_TOML = f"""
# members of the orders groups; the token itself is in the file
[[token]]
name = "orders-members"
token = "{MEMBER}"
scopes = ["member"]
groups = ["orders", "orders-*"]

[[token]]
name = "dashboard"
token_sha256 = "{token_sha256(READER)}"
scopes = ["read"]

[[token]]
name = "ops"
token_sha256 = "{token_sha256(ADMIN)}"
scopes = ["admin"]

[[token]]
name = "root"
token_sha256 = "{token_sha256(EVERYTHING)}"
scopes = ["member", "read", "admin"]
groups = ["*"]
"""

#: token -> (scopes, whether its member calls may name group "payments")
GRANTS: dict[str, tuple[frozenset[Scope], bool]] = {
    MEMBER: (frozenset({Scope.MEMBER}), False),
    READER: (frozenset({Scope.READ}), True),
    ADMIN: (frozenset({Scope.ADMIN, Scope.READ}), True),
    EVERYTHING: (frozenset(Scope), True),
}
DENIED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
_METHODS = {m.name: m for m in pb.DESCRIPTOR.services_by_name["Coordinator"].methods}


def request_for(method: str, group: str) -> Any:
    """A small request of ``method`` naming ``group`` (when the method has a group)."""
    desc = _METHODS[method]
    msg = getattr(pb, desc.input_type.name)()
    fields = desc.input_type.fields_by_name
    if "group_id" in fields:
        msg.group_id = group
    if "member_id" in fields:
        msg.member_id = "m1"
    if method in ("Heartbeat", "HeartbeatStream"):
        msg.rebalance_timeout_ms = 30_000
        msg.subscribed_topics.values.append("orders")
        msg.owned.SetInParent()
    if method == "SetParallelism":
        msg.topic, msg.parallelism = "orders", 1
    return msg


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token is not None else ()


class Caller:
    """Calls any method on a bare channel; remembers every status detail it got."""

    def __init__(self, address: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        self.channel = (grpc.secure_channel(address, credentials) if credentials is not None
                        else grpc.insecure_channel(address))
        self.details: list[str] = []

    def __call__(self, method: str, request: Any, md: tuple[tuple[str, str], ...], timeout: float = 10,
                 ) -> grpc.StatusCode:
        desc = _METHODS[method]
        path = f"/{SERVICE_NAME}/{method}"
        out = getattr(pb, desc.output_type.name).FromString
        ser = (lambda m: m) if isinstance(request, bytes) else type(request).SerializeToString
        try:
            if desc.client_streaming:
                stream = self.channel.stream_stream(path, request_serializer=ser, response_deserializer=out)(
                    iter([request]), metadata=md, timeout=timeout)
                next(stream)
                stream.cancel()
            elif desc.server_streaming:
                answers = self.channel.unary_stream(path, request_serializer=ser, response_deserializer=out)(
                    request, metadata=md, timeout=timeout)
                next(answers)
                answers.cancel()
            else:
                self.channel.unary_unary(path, request_serializer=ser, response_deserializer=out)(
                    request, metadata=md, timeout=timeout)
        except grpc.RpcError as e:
            self.details.append(str(e.details()))
            return e.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    def close(self) -> None:
        self.channel.close()


def write_tokens(directory: Path) -> Path:
    path = directory / "tokens.toml"
    path.write_text(TOKENS_TOML)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    d = tmp_path_factory.mktemp("scoped")
    s = start_server(d / "data", "--log", "static:orders=2,payments=2", "--tokens-file",
                     str(write_tokens(d)), "--http", "127.0.0.1:0")
    yield s
    assert s.terminate() == 0, s.log()


@pytest.fixture
def caller(scoped: ServerProc) -> Iterator[Caller]:
    c = Caller(scoped.address)
    yield c
    c.close()
    for text in c.details:
        for secret in SECRETS:
            assert secret not in text, text


def assert_not_in(texts: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in texts, f"a token is in:\n{texts}"


# ------------------------------------------------------------------ every method, every token


@pytest.mark.parametrize("method", sorted(METHOD_SCOPES))
def test_every_method_refuses_a_missing_or_wrong_token(caller: Caller, method: str) -> None:
    request = request_for(method, "orders")
    assert caller(method, request, ()) == grpc.StatusCode.UNAUTHENTICATED
    assert caller(method, request, metadata(WRONG)) == grpc.StatusCode.UNAUTHENTICATED
    assert caller(method, request, metadata("")) == grpc.StatusCode.UNAUTHENTICATED
    assert caller(method, request, (("authorization", ADMIN),)) == grpc.StatusCode.UNAUTHENTICATED
    assert caller(method, request, (("authorization", f"Bearer {ADMIN} "),)) == \
        grpc.StatusCode.UNAUTHENTICATED
    assert caller(method, request, (("x-token", f"Bearer {EVERYTHING}"),)) == grpc.StatusCode.UNAUTHENTICATED
    assert all("a valid API token is required" in d for d in caller.details)


@pytest.mark.parametrize("method", sorted(METHOD_SCOPES))
@pytest.mark.parametrize("group", ["orders", "orders-eu", "payments"])
def test_every_method_checks_the_scope_and_the_group(caller: Caller, method: str, group: str) -> None:
    scope = METHOD_SCOPES[method]
    for token, (scopes, any_group) in GRANTS.items():
        code = caller(method, request_for(method, group), metadata(token))
        allowed = scope in scopes and (scope is not Scope.MEMBER or any_group or group != "payments")
        if allowed:
            assert code not in DENIED, (method, group, token, caller.details[-1:])
        else:
            assert code == grpc.StatusCode.PERMISSION_DENIED, (method, group, token, code)
            detail = caller.details[-1]
            assert method in detail and ("'orders-members'" in detail or "'dashboard'" in detail
                                         or "'ops'" in detail), detail


def test_the_heartbeat_stream_checks_every_request(caller: Caller) -> None:
    """Answers for an allowed group; the first request for another group ends the stream."""
    requests: queue.SimpleQueue[pb.HeartbeatRequest | None] = queue.SimpleQueue()
    stream = caller.channel.stream_stream(
        f"/{SERVICE_NAME}/HeartbeatStream", request_serializer=pb.HeartbeatRequest.SerializeToString,
        response_deserializer=pb.HeartbeatResponse.FromString,
    )(iter(requests.get, None), metadata=metadata(MEMBER), timeout=20)
    try:
        requests.put(request_for("HeartbeatStream", "orders-stream"))
        first = next(stream)
        assert first.error == pb.ERROR_CODE_NONE and first.member_epoch >= 1, first
        requests.put(pb.HeartbeatRequest(group_id="orders-stream", member_id="m1",
                                         member_epoch=first.member_epoch))
        assert next(stream).error == pb.ERROR_CODE_NONE
        requests.put(request_for("HeartbeatStream", "payments"))
        with pytest.raises(grpc.RpcError) as e:
            next(stream)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "'payments'" in str(e.value.details()) and "'orders-members'" in str(e.value.details())
    finally:
        requests.put(None)
        stream.cancel()


def test_a_malformed_request_is_invalid_not_denied_for_a_member_token(caller: Caller) -> None:
    garbage = b"\xff\xff\xff"
    assert caller("CommitOffsets", garbage, metadata(MEMBER)) == grpc.StatusCode.INVALID_ARGUMENT
    assert caller("Watch", garbage, metadata(MEMBER)) == grpc.StatusCode.INVALID_ARGUMENT
    assert caller("CommitOffsets", garbage, ()) == grpc.StatusCode.UNAUTHENTICATED
    assert caller("ResetOffsets", garbage, metadata(MEMBER)) == grpc.StatusCode.PERMISSION_DENIED


def test_the_client_library_with_scoped_tokens(scoped: ServerProc) -> None:
    """A member token runs a member (stream heartbeats, Watch, commits) in its groups; anything else
    is `AuthenticationFailed`, never `CoordinatorUnavailable` (which would be retried)."""
    with CoordinatorClient(scoped.address, token=MEMBER, timeout_s=10) as member:
        r = member.heartbeat(HeartbeatRequest("orders-client", "a", 0, rebalance_timeout_ms=30_000,
                                              subscribed_topics=("orders",), owned=EMPTY))
        assert r.error is ErrorCode.NONE and r.member_epoch >= 1
        member.watch("orders-client", "a").cancel()
        ack = member.commit_offsets(OffsetCommitRequest("orders-client", "a", r.member_epoch,
                                                        {Shard("orders", 0): 5}))
        assert ack.ok, ack.message
        for refused in (lambda: member.describe_group("orders-client"), member.list_groups,
                        lambda: member.reset_offsets("orders-client", {Shard("orders", 0): 0}),
                        lambda: member.heartbeat(HeartbeatRequest("payments", "a", 0, owned=EMPTY)),
                        lambda: member.watch("payments", "a")):
            with pytest.raises(AuthenticationFailed, match="refused") as e:
                refused()
            assert_not_in(str(e.value), *SECRETS)
    with CoordinatorClient(scoped.address, token=READER, timeout_s=10) as reader:
        assert "orders-client" in {g.group_id for g in reader.list_groups()}
        with pytest.raises(AuthenticationFailed, match="needs the member scope"):
            reader.heartbeat(HeartbeatRequest("orders", "a", 0, owned=EMPTY))
        with pytest.raises(AuthenticationFailed, match="needs the admin scope"):
            reader.delete_group("orders-client")
    with CoordinatorClient(scoped.address, token=ADMIN, timeout_s=10) as admin:
        assert admin.describe_group("orders-client").description.group_id == "orders-client"
        assert admin.topics() == {"orders": 2, "payments": 2}
    log = wait_for_log(scoped, r"DeleteGroup refused with PERMISSION_DENIED: token 'dashboard'")
    assert re.search(r"HeartbeatStream from \S+ refused with PERMISSION_DENIED: token 'orders-members' may "
                     r"not call HeartbeatStream for group 'payments'", log), log
    assert "API token 'orders-members' (member for groups 'orders', 'orders-*')" in log
    assert "API token required: 4 tokens from" in log
    assert_not_in(log, *SECRETS)


# ------------------------------------------------------------------ the dashboard


def http_get(s: ServerProc, path: str, headers: dict[str, str] | None = None,
             ) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
            return None

    assert s.dashboard_url is not None
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(s.dashboard_url + path, headers=headers or {}),
                         timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_the_dashboard_wants_the_read_scope(scoped: ServerProc) -> None:
    bodies = []
    for token, status in ((None, 401), (WRONG, 401), (MEMBER, 403), (READER, 200), (ADMIN, 200),
                          (EVERYTHING, 200)):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for path in ("api/groups", "api/openapi.json", ""):
            code, _, body = http_get(scoped, path, headers)
            assert code == status or (path == "" and status == 200 and code == 404), (token, path, code)
            bodies.append(body.decode(errors="replace"))
        code, _, body = http_get(scoped, "api/groups", {"Cookie": f"regroup_token={token}"})
        assert code == status, (token, code)
    denied = json.loads(http_get(scoped, "api/groups", {"Authorization": f"Bearer {MEMBER}"})[2])
    assert denied["error"] == "PERMISSION_DENIED" and "'orders-members'" in denied["message"]
    # The link sets the cookie only for a token that may read.
    code, headers, _ = http_get(scoped, f"?token={MEMBER}")
    assert code == 403 and "Set-Cookie" not in headers
    code, headers, _ = http_get(scoped, f"?token={WRONG}")
    assert code == 401 and "Set-Cookie" not in headers
    code, headers, _ = http_get(scoped, f"?token={READER}")
    assert code == 302 and headers["Set-Cookie"].startswith(f"regroup_token={READER};")
    assert_not_in("\n".join(b for b in bodies if not b.startswith("<")), *SECRETS)


# ------------------------------------------------------------------ --token keeps meaning everything


def test_a_single_token_still_opens_every_method(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:orders=2", "--token", SINGLE)
    caller = Caller(s.address)
    try:
        for method in sorted(METHOD_SCOPES):
            for group in ("orders", "payments"):
                assert caller(method, request_for(method, group), metadata(SINGLE)) not in DENIED, method
            assert caller(method, request_for(method, "orders"), metadata(WRONG)) == \
                grpc.StatusCode.UNAUTHENTICATED
    finally:
        caller.close()
        assert s.terminate() == 0, s.log()


# ------------------------------------------------------------------ start-up


def run_coordinator(command: list[str], data_dir: Path, *extra: str,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command, "--listen", "127.0.0.1:0", "--data-dir",
                           str(data_dir), *extra], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


COMMANDS = [["regroup.coordinator.server"], ["regroup.cli", "coordinator"]]


@pytest.mark.parametrize("command", COMMANDS, ids=["module", "cli"])
def test_a_bad_tokens_file_stops_the_start(tmp_path: Path, command: list[str]) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text(TOKENS_TOML + f'\n[[token]]\nname = "again"\ntoken = "{MEMBER}"\nscopes = ["read"]\n')
    out = run_coordinator(command, tmp_path / "data", "--tokens-file", str(bad))
    assert out.returncode == 2, out
    assert "entry 5 ('again'): the same token as entry 'orders-members'" in out.stderr
    assert_not_in(out.stdout + out.stderr, *SECRETS)
    bad.write_text('[[token]]\nname = "m"\ntoken = "x"\nscopes = ["member"]\n')
    out = run_coordinator(command, tmp_path / "data", "--tokens-file", str(bad))
    assert out.returncode == 2 and "a member scope needs 'groups'" in out.stderr, out
    out = run_coordinator(command, tmp_path / "data", "--tokens-file", str(write_tokens(tmp_path)),
                          "--token", SINGLE)
    assert out.returncode == 2 and "give --token or --tokens-file, not both" in out.stderr, out
    assert_not_in(out.stdout + out.stderr, *SECRETS)


@pytest.mark.parametrize("starter", [start_server, start_cli_coordinator], ids=["module", "cli"])
def test_regroup_token_from_the_environment_is_ignored_with_a_tokens_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starter: Callable[..., ServerProc]) -> None:
    monkeypatch.setenv("REGROUP_TOKEN", SINGLE)
    s = starter(tmp_path / "data", "--tokens-file", str(write_tokens(tmp_path)))
    caller = Caller(s.address)
    try:
        assert caller("ListGroups", pb.ListGroupsRequest(), metadata(SINGLE)) == \
            grpc.StatusCode.UNAUTHENTICATED
        assert caller("ListGroups", pb.ListGroupsRequest(), metadata(READER)) == grpc.StatusCode.OK
    finally:
        caller.close()
        assert s.terminate() == 0, s.log()


def test_plain_tokens_in_a_file_others_may_read_are_a_warning(tmp_path: Path) -> None:
    path = write_tokens(tmp_path)
    path.chmod(0o644)
    s = start_server(tmp_path / "data", "--tokens-file", str(path))
    try:
        log = wait_for_log(s, r"holds plain tokens \(orders-members\) and other users may read it")
        assert_not_in(log, *SECRETS)
    finally:
        assert s.terminate() == 0, s.log()


# ------------------------------------------------------------------ secrets in the log


def test_no_token_in_the_log_at_debug_level(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:orders=2", "--log-level", "debug",
                     "--tokens-file", str(write_tokens(tmp_path)), "--http", "127.0.0.1:0")
    caller = Caller(s.address)
    try:
        for method in sorted(METHOD_SCOPES):
            for token in (*GRANTS, WRONG, None):
                caller(method, request_for(method, "payments"), metadata(token))
        for token in (MEMBER, WRONG, READER):
            http_get(s, f"?token={token}")
            http_get(s, "api/groups", {"Authorization": f"Bearer {token}"})
        wait_for_log(s, r"ResetOffsets refused with PERMISSION_DENIED: token 'orders-members'")
    finally:
        caller.close()
        assert s.terminate() == 0, s.log()
    assert s.proc.stdout is not None
    logged = s.log() + s.proc.stdout.read()
    assert "Heartbeat refused with UNAUTHENTICATED: no or wrong API token" in logged
    assert_not_in(logged, *SECRETS, "Bearer ")  # no metadata at all
    assert_not_in("\n".join(caller.details), *SECRETS)


# ------------------------------------------------------------------ TLS


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make test certificates")
def test_tls_with_a_wrong_ca_fails(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    (tmp_path / "other").mkdir()
    cert, key = make_cert(tmp_path / "server")
    other_ca, _ = make_cert(tmp_path / "other")  # a CA that did not sign the server's certificate
    s = start_server(tmp_path / "data", "--log", "static:orders=2", "--tokens-file",
                     str(write_tokens(tmp_path)), "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        with CoordinatorClient(s.address, token=READER, tls_ca=str(cert), timeout_s=10) as good:
            assert good.list_groups() == []
        for token in (READER, EVERYTHING):
            with CoordinatorClient(s.address, token=token, tls_ca=str(other_ca), timeout_s=5) as bad:
                with pytest.raises(CoordinatorUnavailable) as e:
                    bad.list_groups()
                assert_not_in(str(e.value), *SECRETS)
                with pytest.raises(CoordinatorUnavailable):
                    bad.heartbeat(HeartbeatRequest("orders", "a", 0, owned=EMPTY))
        other = Caller(s.address, grpc.ssl_channel_credentials(other_ca.read_bytes()))
        try:
            assert other("Watch", request_for("Watch", "orders"), metadata(EVERYTHING), timeout=5) == \
                grpc.StatusCode.UNAVAILABLE
        finally:
            other.close()
        right = Caller(s.address, grpc.ssl_channel_credentials(cert.read_bytes()))
        try:
            assert right("ListGroups", pb.ListGroupsRequest(), metadata(WRONG)) == \
                grpc.StatusCode.UNAUTHENTICATED
        finally:
            right.close()
    finally:
        assert s.terminate() == 0, s.log()
    assert_not_in(s.log(), *SECRETS)
