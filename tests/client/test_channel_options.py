"""The client's channel: quick to reconnect after a coordinator restart, patient with a slow handshake.

gRPC core reads ``grpc.min_reconnect_backoff_ms`` as the least time one connection attempt is given
(up to the server's HTTP/2 SETTINGS frame), not as a pause between attempts. At 100 ms a busy machine
failed connects with "connection attempt timed out before receiving SETTINGS frame" (seen with a proxy
that holds the coordinator's first bytes back for 500 ms: the call failed at 100 ms, passes at 20 s).
The pause between attempts is ``initial``/``max_reconnect_backoff_ms``, which stay short; the restart
tests (tests/coordinator/test_server.py, tests/e2e) show reconnection itself."""

from __future__ import annotations

from regroup.rpc.client import _CHANNEL_OPTIONS


def test_a_connection_attempt_may_take_seconds_and_retries_come_quickly() -> None:
    options = dict(_CHANNEL_OPTIONS)
    assert options["grpc.min_reconnect_backoff_ms"] >= 10_000
    assert options["grpc.initial_reconnect_backoff_ms"] <= 100
    assert options["grpc.max_reconnect_backoff_ms"] <= 2_000
