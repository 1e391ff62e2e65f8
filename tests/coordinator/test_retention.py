"""Offsets retention and the log-end check in the shell: the retention mark's storage format, the
service's end-offset lookups (`regroup.coordinator.ends`), and a real coordinator process — an empty
group's offsets expire after the retention given on the command line, commits beyond the log's end
or beyond any log are refused, and a retention of 0 is refused at start-up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from regroup.coordinator import codec
from regroup.coordinator.ends import LogEnds
from regroup.coordinator.server import ServerConfig, serve
from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.store import DurableStore
from regroup.log import LogRecord, open_log
from regroup.protocol.config import ConfigError, CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.records import EmptySinceRecord
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.topics import TopicMetadata
from regroup.rpc import wire
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import start_server

T0, T1 = Shard("t", 0), Shard("t", 1)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


# ------------------------------------------------------------------------------------ the record
def test_a_retention_mark_is_stored_and_read_back() -> None:
    marks = [EmptySinceRecord("g", 1_700_000_000_123, 7), EmptySinceRecord("g", None)]
    assert [codec.encode(r) for r in marks] == ['["R","g",1700000000123,7]', '["R","g",null,0]']
    assert [codec.decode(codec.encode(r)) for r in marks] == marks
    for damaged in ('["R","g",1]', '["R","g","soon",1]', '["R","g",1,true]', '["R",3,1,1]'):
        with pytest.raises(codec.CodecError, match="EmptySinceRecord"):
            codec.decode(damaged)


# ------------------------------------------------------------------------------------ log ends
class FakeLog:
    """``end_offsets`` of one topic; blocks while ``gate`` is clear, counts its calls."""

    def __init__(self, ends: Mapping[int, int]) -> None:
        self.ends = dict(ends)
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0

    def end_offsets(self, topic: str) -> dict[int, int]:
        self.calls += 1
        if not self.gate.wait(10):
            raise TimeoutError("the test never opened the gate")
        if topic != "t":
            raise KeyError(topic)
        return dict(self.ends)


def test_no_lookup_without_a_source_or_for_a_topic_the_coordinator_does_not_know() -> None:
    async def run() -> None:
        assert await LogEnds(None).for_offsets({T0: 5}, {"t"}) == {}
        fake = FakeLog({0: 10})
        assert await LogEnds(fake.end_offsets).for_offsets({Shard("x", 0): 5}, {"t"}) == {}
        assert fake.calls == 0
    asyncio.run(run())


def test_an_offset_within_the_cached_end_goes_through_without_asking_the_log() -> None:
    async def run() -> None:
        fake = FakeLog({0: 10, 1: 3})
        ends = LogEnds(fake.end_offsets)
        assert await ends.for_offsets({T0: 20}, {"t"}) == {T0: 10, T1: 3}  # beyond the cache: asked
        assert await ends.for_offsets({T0: 10, T1: 1}, {"t"}) == {}  # inside what it read: not asked
        assert fake.calls == 1
        fake.ends[0] = 30
        assert await ends.for_offsets({T0: 25}, {"t"}) == {T0: 30, T1: 3}  # asked again: it grew
        assert fake.calls == 2 and ends.cached("t") == {0: 30, 1: 3}
    asyncio.run(run())


def test_one_lookup_at_a_time_shared_by_every_request_that_arrived_before_it_started() -> None:
    async def run() -> None:
        fake = FakeLog({0: 10})
        fake.gate.clear()
        ends = LogEnds(fake.end_offsets, timeout_s=60)  # not failing open here, even on a busy machine
        first = asyncio.create_task(ends.for_offsets({T0: 50}, {"t"}))
        while fake.calls < 1:  # its lookup runs (and waits at the gate)
            await asyncio.sleep(0.01)
        # Arrived while it runs: it may have read the log before their consumers did, so they queue
        # one lookup after it, and share it.
        later = [asyncio.create_task(ends.for_offsets({T0: 50}, {"t"})) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert fake.calls == 1
        fake.ends[0] = 60
        fake.gate.set()
        assert await first == {T0: 60}
        assert await asyncio.gather(*later) == [{T0: 60}] * 5
        assert ends.lookups == fake.calls == 2
    asyncio.run(run())


class _Context:
    """What the service asks of a call's context when it answers a commit (who called, for its log)."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


def test_a_commit_the_core_refuses_is_answered_without_looking_up_the_log_end(tmp_path: Path) -> None:
    """Unknown member, stale epoch, a shard it does not own: the core's own checks answer first, and
    the log is not asked; a commit that passes them is checked against an end read for it."""
    async def run() -> list[tuple[ErrorCode, int]]:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        service = CoordinatorService(Coordinator(topics=TopicMetadata({"t": 2})), store)
        fake = FakeLog({0: 10, 1: 10})
        service.ends = LogEnds(fake.end_offsets, timeout_s=60)
        try:
            join = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=30_000, subscribed_topics=("t",),
                                    owned=EMPTY)
            joined = service._step(lambda c: c.heartbeat(join, service.clock())).response
            assert joined.assignment == frozenset({T0, T1}), joined
            epoch = joined.member_epoch
            out = []
            for member, at, shard, offset in (("zombie", epoch, T0, 50), ("m", epoch + 1, T0, 50),
                                              ("m", epoch, Shard("t", 7), 50),  # not its shard
                                              ("m", epoch, T0, 50),  # passes: the end (10) refuses it
                                              ("m", epoch, T0, 9)):  # inside the end just read
                req = OffsetCommitRequest("g", member, at, {shard: offset})
                ack = await service.commit_offsets(wire.commit_request_to_pb(req), _Context())  # type: ignore[arg-type]
                out.append((wire.error_from_pb(ack.error), fake.calls))
            return out
        finally:
            await service.close()
            await store.close()

    assert asyncio.run(run()) == [(ErrorCode.UNKNOWN_MEMBER_ID, 0), (ErrorCode.STALE_MEMBER_EPOCH, 0),
                                  (ErrorCode.NOT_OWNED, 0), (ErrorCode.INVALID_REQUEST, 1),
                                  (ErrorCode.NONE, 1)]


def test_a_failed_or_slow_lookup_fails_open() -> None:
    async def run() -> None:
        fake = FakeLog({0: 10})
        assert await LogEnds(fake.end_offsets).for_offsets({Shard("gone", 0): 5}, {"gone"}) == {}
        fake.gate.clear()
        slow = LogEnds(fake.end_offsets, timeout_s=0.05)
        try:
            assert await slow.for_offsets({T0: 50}, {"t"}) == {}
        finally:
            fake.gate.set()
    asyncio.run(run())


# ------------------------------------------------------------------------------------ end to end
def test_an_empty_groups_offsets_expire_after_the_retention_given_on_the_command_line(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:t=2", "--offsets-retention-ms", "1500")
    try:
        with CoordinatorClient(s.address, timeout_s=5) as c:
            assert c.reset_offsets("by-an-operator", {T0: 1, T1: 2}).ok  # no member ever
            r = c.heartbeat(HeartbeatRequest("consumed", "a", 0, rebalance_timeout_ms=5_000,
                                             subscribed_topics=("t",), owned=EMPTY))
            assert r.error is ErrorCode.NONE, r.message
            assert c.commit_offsets(OffsetCommitRequest("consumed", "a", r.member_epoch, {T0: 7})).ok
            kept = c.heartbeat(HeartbeatRequest("kept", "b", 0, rebalance_timeout_ms=5_000,
                                                subscribed_topics=("t",), owned=EMPTY))
            assert kept.error is ErrorCode.NONE
            assert c.heartbeat(HeartbeatRequest("consumed", "a", -1)).error is ErrorCode.NONE  # leaves

            def listed() -> set[str]:
                return {g for g, _, _ in c.list_groups()}

            assert listed() == {"by-an-operator", "consumed", "kept"}
            wait_for(lambda: listed() == {"kept"}, "the empty groups to expire")  # kept has a member
        log = s.log()
        assert "offsets retention 1.5 s" in log
        assert "group 'consumed': no members for" in log
        assert "its 2 committed offset(s) expired and the group was deleted" in log  # by-an-operator
        assert "group 'by-an-operator' deleted" in log
    finally:
        assert s.terminate() == 0, s.log()


def test_commits_beyond_the_log_end_or_beyond_any_log_are_refused(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic("t", 2)
    log.produce("t", 0, [LogRecord(None, b"x", 0)] * 10)
    s = start_server(tmp_path / "data", "--log", str(log_dir))
    try:
        with CoordinatorClient(s.address, timeout_s=5) as c:
            r = c.heartbeat(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=5_000,
                                             subscribed_topics=("t",), owned=EMPTY))
            assert r.error is ErrorCode.NONE and r.assignment == {T0, T1}

            def commit(offsets: dict[Shard, int]) -> tuple[ErrorCode, str]:
                ack = c.commit_offsets(OffsetCommitRequest("g", "a", r.member_epoch, offsets))
                return ack.error, ack.message

            code, message = commit({T0: 11})
            assert code is ErrorCode.INVALID_REQUEST
            assert message.startswith("offset 11 for t:0 is beyond the end of the partition in the log (10,")
            assert commit({T0: 10}) == (ErrorCode.NONE, "")
            log.produce("t", 0, [LogRecord(None, b"x", 0)] * 5)
            assert commit({T0: 15}) == (ErrorCode.NONE, "")  # beyond what it read before: read again
            code, message = commit({T1: 2**63 - 1})
            assert code is ErrorCode.INVALID_REQUEST and "is beyond any log" in message
            assert commit({T1: 0}) == (ErrorCode.NONE, "")  # t:1 was not poisoned
            assert c.heartbeat(HeartbeatRequest("g", "a", -1)).error is ErrorCode.NONE
            assert c.reset_offsets("g", {T0: 16}).ok  # an operator's reset is not checked against the end
    finally:
        log.close()
        assert s.terminate() == 0, s.log()


@pytest.mark.parametrize("command", [[sys.executable, "-m", "regroup.coordinator.server"],
                                     [sys.executable, "-m", "regroup.cli", "coordinator"]])
@pytest.mark.parametrize("retention", ["0", "-5"])
def test_a_retention_that_is_not_positive_is_refused_at_start_up(tmp_path: Path, command: list[str],
                                                                  retention: str) -> None:
    done = subprocess.run([*command, "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
                           f"--offsets-retention-ms={retention}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "--offsets-retention-ms must be a positive number of milliseconds" in done.stderr
    assert f"got {retention}" in done.stderr


@pytest.mark.parametrize(("setting", "said"), [
    ({"offsets_retention_ms": 0}, "--offsets-retention-ms must be a positive number of milliseconds"),
    ({"max_groups": 0}, "--max-groups must be at least 1, got 0"),
    ({"failover_grace_ms": -1}, "--failover-grace-ms must be a non-negative integer of milliseconds"),
    ({"heartbeat_interval_ms": 0}, "--heartbeat-interval-ms must be positive, got 0"),
    ({"session_timeout_ms": 5_000},
     "--session-timeout-ms must be larger than the heartbeat interval (5000 ms)"),
    ({"max_large_requests_per_client": 4, "max_large_requests_waiting": 3},
     "--max-large-requests-waiting must be at least the large requests one client may have waiting (4)"),
])
def test_a_setting_the_core_refuses_is_named_by_its_flag(tmp_path: Path, setting: dict[str, int],
                                                         said: str) -> None:
    """The core's own check of its settings, worded with the flag that set the value (one check)."""
    with pytest.raises(ValueError) as refused:
        asyncio.run(serve(ServerConfig(str(tmp_path / "data"), **setting)))  # type: ignore[arg-type]
    assert said in str(refused.value), refused.value
    assert not (tmp_path / "data").exists()  # refused before anything was opened
    with pytest.raises(ConfigError) as e:
        CoordinatorConfig(**setting)
    assert e.value.field in str(refused.value).replace("-", "_") and str(e.value).startswith(e.value.field)
