"""The coordinator's log lines in process: worded from the core's reports, control characters escaped,
no secret in a log spec, unexpected exceptions at error with their traceback."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from regroup.coordinator.logs import (
    FORMAT,
    _Formatter,
    escape_controls,
    instance_lookup,
    log_step,
    redact_spec,
)
from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.store import DurableStore
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.outcome import Outcome
from regroup.protocol.shard import EMPTY
from regroup.protocol.topics import TopicMetadata
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc.wire import SERVICE_NAME

log = logging.getLogger("regroup.coordinator.test")


def test_control_characters_are_escaped() -> None:
    assert escape_controls("orders-grüße [x] 😀") == "orders-grüße [x] 😀"
    assert escape_controls("a\nb\x1b[31mc\x7f\x9b") == "a\\x0ab\\x1b[31mc\\x7f\\x9b"


def test_the_formatter_keeps_one_line_per_message_and_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc = sys.exc_info()
    record = logging.LogRecord("regroup.coordinator", logging.ERROR, __file__, 1, "bad %s", ("x\nFORGED",),
                               exc)
    text = _Formatter(FORMAT).format(record)
    first, *rest = text.splitlines()
    assert first.endswith("ERROR regroup.coordinator: bad x\\x0aFORGED")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"


def test_a_log_spec_is_logged_without_its_options() -> None:
    assert redact_spec("kafka://b1:9092,b2:9092?security.protocol=SASL_SSL&sasl.password=hunter2") == \
        "kafka://b1:9092,b2:9092 (options: security.protocol, sasl.password)"
    assert redact_spec("kafka://user:hunter2@b1:9092") == "kafka://***@b1:9092"
    assert redact_spec("static:orders=6") == "static:orders=6"
    assert redact_spec("/var/lib/regroup/log") == "/var/lib/regroup/log"
    assert redact_spec(None) == "none (the groups' recorded topics)"


# ------------------------------------------------------------------ lines worded from the core's steps
def step(coord: Coordinator, caplog: pytest.LogCaptureFixture, req: HeartbeatRequest, now: int,
         ) -> HeartbeatResponse:
    out: Outcome[HeartbeatResponse] = coord.heartbeat(req, now)
    key = (req.group_id, req.member_id)
    caplog.clear()
    log_step(log, out.epoch_events, out.fences, out.departed, instance_lookup(coord, {key: req.instance_id}),
             key)
    return out.response


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_static_members_take_overs_and_fences(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="regroup")
    coord = Coordinator(CoordinatorConfig(session_timeout_ms=1_000, heartbeat_interval_ms=100),
                        topics=TopicMetadata({"orders": 4, "audit": 1}))

    def joining(member: str, topics: tuple[str, ...] = ("orders",)) -> HeartbeatRequest:
        return HeartbeatRequest("g", member, 0, instance_id="i-1", rebalance_timeout_ms=1_000,
                                subscribed_topics=topics, owned=EMPTY)

    r = step(coord, caplog, joining("a"), 0)
    assert lines(caplog)[:2] == ["group 'g' created",
                                 "group 'g': member 'a' (instance 'i-1') joined; group epoch 1"]
    assert "group 'g': group epoch 1 (member a joined; subscribed topics now orders=4)" in lines(caplog)
    assert ("group 'g': target epoch 1 installed (assignor 'uniform'; 1 member target(s) changed)"
            in lines(caplog))

    step(coord, caplog, HeartbeatRequest("g", "a", -2, instance_id="i-1"), 10)
    assert lines(caplog) == []  # stepping out moves no epoch: the service words it from the answer

    # Back under a new member id with the same subscription: nothing moves, the old id departs.
    step(coord, caplog, joining("a2"), 20)
    assert lines(caplog) == ["group 'g': member 'a' replaced by member 'a2' (instance 'i-1') "
                             "(a static member back under a new id)"]

    # Out and back again with a new subscription: a take-over the core reports as such.
    step(coord, caplog, HeartbeatRequest("g", "a2", -2, instance_id="i-1"), 30)
    assert step(coord, caplog, joining("a3", ("orders", "audit")), 40).error.value == "NONE"
    assert lines(caplog)[0] == ("group 'g': member 'a3' took over static instance 'i-1' from member 'a2' "
                                "with a new subscription; group epoch 2")
    assert r.member_epoch == 1

    expired = coord.expire(5_000)
    caplog.clear()
    log_step(log, expired.epoch_events, expired.fences, expired.departed, instance_lookup(coord))
    assert "group 'g': member 'a3' fenced (session timeout)" in lines(caplog)
    assert not any("removed" in line or "left" in line for line in lines(caplog))


# ------------------------------------------------------------------ unexpected exceptions
class Exploding(Coordinator):
    def list_groups(self) -> Any:
        raise RuntimeError("list boom")

    def watch(self, group_id: str, member_id: str) -> Any:
        raise RuntimeError("watch boom")


def test_unexpected_exceptions_are_logged_with_their_traceback(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A handler that raises: the client gets INTERNAL (no detail), the log the traceback at error."""

    async def main() -> None:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        service = CoordinatorService(Exploding(), store)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((service.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                list_groups = channel.unary_unary(
                    f"/{SERVICE_NAME}/ListGroups", request_serializer=pb.ListGroupsRequest.SerializeToString,
                    response_deserializer=pb.ListGroupsResponse.FromString)
                with pytest.raises(grpc.aio.AioRpcError) as unary:
                    await list_groups(pb.ListGroupsRequest(), timeout=10)
                assert unary.value.code() == grpc.StatusCode.INTERNAL
                assert unary.value.details() == "unexpected error: RuntimeError"
                watch = channel.unary_stream(
                    f"/{SERVICE_NAME}/Watch", request_serializer=pb.WatchRequest.SerializeToString,
                    response_deserializer=pb.Nudge.FromString)
                with pytest.raises(grpc.aio.AioRpcError) as stream:
                    async for _ in watch(pb.WatchRequest(group_id="g", member_id="m"), timeout=10):
                        pass
                assert stream.value.code() == grpc.StatusCode.INTERNAL
        finally:
            await server.stop(0)
            await service.close()
            await store.close()

    asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "regroup.coordinator"]
    assert [r.getMessage().split(" from ")[0] for r in errors] == [
        "unexpected error in ListGroups", "unexpected error in Watch"]
    assert all(r.exc_info is not None and isinstance(r.exc_info[1], RuntimeError) for r in errors)
    assert str(errors[0].exc_info[1]) == "list boom" and str(errors[1].exc_info[1]) == "watch boom"  # type: ignore[index]
