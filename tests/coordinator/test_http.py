"""End to end: the dashboard's HTTP API of a real coordinator process (``--http``)."""

from __future__ import annotations

import http.client
import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from regroup.log import LogRecord, PartitionedLog, open_log
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import OffsetCommitRequest
from regroup.protocol.shard import Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.topology import TaskId, Topology
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import ServerProc, start_server
from tests.coordinator.test_server import M, settle

HTTP = ("--http", "127.0.0.1:0")


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartitionedLog]:
    partitioned = open_log(str(tmp_path_factory.mktemp("log") / "log"))
    partitioned.create_topic("orders", 6)
    yield partitioned
    partitioned.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, log: PartitionedLog) -> Iterator[ServerProc]:
    data = tmp_path_factory.mktemp("coord") / "data"
    s = start_server(data, "--log", str(getattr(log, "directory", "")), *HTTP)
    yield s
    assert s.terminate() == 0, s.log()


@pytest.fixture()
def client(server: ServerProc) -> Iterator[CoordinatorClient]:
    c = CoordinatorClient(server.address, client_id="tests", timeout_s=5)
    yield c
    c.close()


@pytest.fixture(scope="module")
def openapi(server: ServerProc) -> dict[str, Any]:
    status, doc = get(server, "api/openapi.json")
    assert status == 200
    assert doc["openapi"].startswith("3.1")
    return dict(doc)


def url(server: ServerProc, path: str) -> str:
    assert server.dashboard_url is not None
    return server.dashboard_url + path


def get(server: ServerProc, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url(server, path), headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def validate(doc: dict[str, Any], schema_name: str, value: Any) -> None:
    """Validate against one of the document's component schemas (JSON Schema 2020-12, as OpenAPI 3.1)."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": doc["components"],
              "$ref": f"#/components/schemas/{schema_name}"}
    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(value)


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class EventStream:
    """Reads /api/events on a thread; each event is (name, data) in arrival order."""

    def __init__(self, server: ServerProc, headers: dict[str, str] | None = None) -> None:
        assert server.dashboard_url is not None
        parts = urllib.parse.urlsplit(server.dashboard_url)
        # The socket timeout guards every read: a stream that stops sending fails the test, not hangs it.
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        self.conn.request("GET", "/api/events", headers=headers or {})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.status
        assert self.resp.headers["Content-Type"].startswith("text/event-stream")
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.comments: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        name, data = "message", ""
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    self.comments.append(line)
                elif line.startswith("event: "):
                    name = line[len("event: "):]
                elif line.startswith("data: "):
                    data = line[len("data: "):]
                elif line == "" and data:
                    self.events.put((name, json.loads(data)))
                    name, data = "message", ""
        except (OSError, ValueError, AttributeError):
            pass  # closed by close() from the test's thread (http.client then drops its file: None)

    def next_where(self, pred: Callable[[str, Any], bool], timeout: float = 15) -> tuple[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no matching event arrived")
            name, data = self.events.get(timeout=left)
            if pred(name, data):
                return name, data

    def close(self) -> None:
        # Shut the socket down rather than close the response: that would wait for the reader thread.
        if self.conn.sock is not None:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        self.conn.close()


def describe_cli(server: ServerProc, group: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "regroup.cli", "groups", "describe", group, "--json",
                          "--coordinator", server.address], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def _without_ages(obj: dict[str, Any]) -> dict[str, Any]:
    """The same object minus what moves with the clock between two reads (heartbeat ages)."""
    obj = json.loads(json.dumps(obj))
    for m in obj["members"]:
        if m["client"] is not None:
            assert isinstance(m["client"].pop("last_heartbeat_age_ms"), int)
    return obj


# ----------------------------------------------------------------------------------------- behaviour


def test_list_and_describe_match_the_cli_and_the_openapi_schemas(
        server: ServerProc, client: CoordinatorClient, log: PartitionedLog, openapi: dict[str, Any]) -> None:
    m1 = M("dash-list", "m1")
    m1.join(client)
    settle(client, [m1])
    log.produce("orders", 2, [LogRecord(None, b"x", 0)] * 10)
    ack = client.commit_offsets(OffsetCommitRequest("dash-list", "m1", m1.epoch, {Shard("orders", 2): 4}))
    assert ack.ok, ack.message
    status, listing = get(server, "api/groups")
    assert status == 200
    validate(openapi, "GroupList", listing)
    row = next(g for g in listing["groups"] if g["group"] == "dash-list")
    assert row["state"] == "stable" and row["members"] == 1 and row["epoch"] >= 1
    assert row["rebalances_last_hour"] >= 1
    assert row["lag"] == 6  # only orders-2 has a committed offset (4 of 10)

    status, api = get(server, "api/groups/dash-list")
    assert status == 200
    validate(openapi, "GroupDetails", api)
    timeline = api.pop("timeline")
    assert _without_ages(api) == _without_ages(describe_cli(server, "dash-list"))
    assert [(s["member_id"], s["step"]) for s in timeline][:2] == [("m1", "joined"), ("m1", "granted")]


def test_unknown_group_is_404_and_an_invalid_id_400(server: ServerProc, openapi: dict[str, Any]) -> None:
    status, body = get(server, "api/groups/no-such-group")
    assert status == 404 and body["error"] == "GROUP_ID_NOT_FOUND"
    validate(openapi, "Error", body)
    status, body = get(server, "api/groups/" + "x" * 300)
    assert status == 400 and body["error"] == "INVALID_REQUEST"
    validate(openapi, "Error", body)


def test_events_tell_of_a_new_group_and_of_a_member_joining(
        server: ServerProc, client: CoordinatorClient, openapi: dict[str, Any]) -> None:
    stream = EventStream(server)
    try:
        wait_for(lambda: stream.comments, "the stream's first comment")
        m = M("dash-sse", "m1")
        m.join(client)
        stream.next_where(lambda name, _data: name == "groups")
        _, data = stream.next_where(lambda name, data: name == "group" and data["group"] == "dash-sse")
        validate(openapi, "GroupEvent", data)
        assert data["epoch"] >= 1
    finally:
        stream.close()


def test_the_timeline_shows_a_partition_moving_with_its_hand_off(
        server: ServerProc, client: CoordinatorClient, openapi: dict[str, Any]) -> None:
    m1, m2 = M("dash-move", "m1"), M("dash-move", "m2")
    m1.join(client)
    settle(client, [m1])
    m2.join(client)
    settle(client, [m1, m2])
    status, body = get(server, "api/groups/dash-move")
    assert status == 200
    validate(openapi, "GroupDetails", body)
    steps = [(s["member_id"], s["step"]) for s in body["timeline"]]
    for expected in [("m1", "joined"), ("m1", "granted"), ("m2", "joined"), ("m1", "revoking"),
                     ("m1", "released"), ("m2", "granted")]:
        assert expected in steps, (expected, steps)
    assert steps.index(("m1", "revoking")) < steps.index(("m1", "released")) < steps.index(("m2", "granted"))
    by = {(s["member_id"], s["step"]): s for s in body["timeline"]}
    moved = set(by[("m1", "released")]["partitions"])
    assert moved and moved <= set(by[("m2", "granted")]["partitions"])
    assert moved == set(by[("m1", "revoking")]["partitions"])
    assert moved == {str(s) for s in m2.owned}
    assert by[("m1", "released")]["handoff_ms"] >= 0
    assert by[("m2", "granted")]["handoff_ms"] >= 0
    assert by[("m1", "granted")]["handoff_ms"] is None  # never owned before
    stamps = [s["at_unix_ms"] for s in body["timeline"]]
    assert stamps == sorted(stamps)


def test_the_page_is_served_from_the_package(server: ServerProc) -> None:
    from importlib import resources

    page = resources.files("regroup.coordinator.http").joinpath("static", "index.html")
    try:
        with urllib.request.urlopen(url(server, ""), timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
            assert r.read() == page.read_bytes()
    except urllib.error.HTTPError as e:
        assert e.code == 404 and not page.is_file()  # the page is not written yet
    status, _ = get(server, "static/..%2Fapp.py")
    assert status == 404


def test_dashboard_is_off_by_default(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data")
    try:
        assert s.dashboard_url is None
    finally:
        assert s.terminate() == 0, s.log()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def test_token_by_header_or_by_the_cookie_the_link_sets(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--token", "s3cret", *HTTP)
    try:
        assert get(s, "api/groups")[0] == 401
        status, body = get(s, "api/groups", {"Authorization": "Bearer wrong"})
        assert status == 401 and set(body) == {"error", "message"}
        assert get(s, "api/groups", {"Authorization": "Bearer s3cret"}) == (200, {"groups": []})
        assert get(s, "api/groups/x", {"Cookie": "regroup_token=wrong"})[0] == 401
        assert get(s, "?token=wrong")[0] == 401
        assert get(s, "api/openapi.json")[0] == 401
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(url(s, "api/events")), timeout=10)
        assert e.value.code == 401

        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(url(s, "?token=s3cret"), timeout=10)
        assert e.value.code == 302 and e.value.headers["Location"] == "/"
        cookie = e.value.headers["Set-Cookie"]
        assert cookie.startswith("regroup_token=s3cret;")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert get(s, "api/groups", {"Cookie": "regroup_token=s3cret"}) == (200, {"groups": []})
        stream = EventStream(s, {"Cookie": "regroup_token=s3cret"})
        wait_for(lambda: stream.comments, "the stream's first comment")
        assert s.terminate() == 0, s.log()  # an open event stream does not hold the shutdown up
        stream.thread.join(timeout=10)
        assert not stream.thread.is_alive()
    finally:
        assert s.terminate() == 0, s.log()


def test_a_group_id_is_url_encoded_in_the_path(server: ServerProc, client: CoordinatorClient) -> None:
    for gid in ("dash/a b", "dash-ü%x"):
        m = M(gid, "m1")
        m.join(client)
        settle(client, [m])
        status, body = get(server, "api/groups/" + urllib.parse.quote(gid, safe=""))
        assert status == 200 and body["group"] == gid


def test_after_a_restart_the_timeline_starts_empty_and_held_partitions_are_not_news(tmp_path: Path) -> None:
    s = start_server(tmp_path / "data", "--log", "static:orders=4", *HTTP)
    try:
        with CoordinatorClient(s.address, timeout_s=5) as c:
            m = M("dash-restart", "m1")
            m.join(c)
            settle(c, [m])
        assert get(s, "api/groups/dash-restart")[1]["timeline"]
        assert s.terminate() == 0, s.log()
        s = s.restart()
        assert s.dashboard_url is not None
        with CoordinatorClient(s.address, timeout_s=5) as c:
            m.beat(c)
            m2 = M("dash-restart", "m2")
            m2.join(c)
            settle(c, [m, m2])
        status, body = get(s, "api/groups/dash-restart")
        assert status == 200
        assert ("m1", "granted") not in [(t["member_id"], t["step"]) for t in body["timeline"]]
        assert [t["step"] for t in body["timeline"] if t["member_id"] == "m1"] == ["revoking", "released"]
        assert body["history"]  # the epoch history is persisted, unlike the timeline
    finally:
        assert s.terminate() == 0, s.log()


# ----------------------------------------------------------------------------------------- streams groups
COUNT = Topology.of({"count": ["orders"]})


def _streams_beat(c: CoordinatorClient, req: StreamsHeartbeatRequest) -> StreamsHeartbeatResponse:
    r = c.streams_heartbeat(req)
    assert r.error is ErrorCode.NONE, r.message
    return r


def _copies_at(reached: int) -> dict[TaskId, dict[Shard, int]]:
    return {TaskId("count", p): {Shard("orders", p): reached} for p in range(4)}


def test_a_streams_group_is_listed_with_its_kind_and_described_as_the_cli_does(tmp_path: Path) -> None:
    """A streams group on the dashboard's API: listed with its kind, described as `groups describe
    --json` prints it plus its epoch history (a warm-up catching up is a cause in it, also after a
    restart) and its timeline; events for it; a group that cannot run says why."""
    s = start_server(tmp_path / "data", "--log", "static:orders=4", "--standby-replicas", "1",
                     "--acceptable-recovery-lag", "100", *HTTP)
    try:
        status, openapi = get(s, "api/openapi.json")
        assert status == 200
        stream = EventStream(s)
        try:
            wait_for(lambda: stream.comments, "the stream's first comment")
            with CoordinatorClient(s.address, timeout_s=10) as c:
                a = _streams_beat(c, StreamsHeartbeatRequest("sg", "a", 0, process_id="P1",
                                                             rebalance_timeout_ms=30_000, topology=COUNT))
                _, data = stream.next_where(lambda name, data: name == "group" and data["group"] == "sg")
                validate(openapi, "GroupEvent", data)
                b = _streams_beat(c, StreamsHeartbeatRequest("sg", "b", 0, process_id="P2",
                                                             rebalance_timeout_ms=30_000, topology=COUNT))
                committed = {Shard("orders", p): 1000 for p in range(4)}
                assert c.commit_offsets(OffsetCommitRequest("sg", "a", a.member_epoch, committed)).ok
                _streams_beat(c, StreamsHeartbeatRequest("sg", "a", a.member_epoch,
                                                         task_offsets=_copies_at(1000)))
                _streams_beat(c, StreamsHeartbeatRequest("sg", "b", b.member_epoch,
                                                         task_offsets=_copies_at(950)))  # caught up
                _streams_beat(c, StreamsHeartbeatRequest("broken", "x", 0, process_id="P9",
                                                         rebalance_timeout_ms=30_000,
                                                         topology=Topology.of({"join": ["clicks"]})))
        finally:
            stream.close()

        status, listing = get(s, "api/groups")
        assert status == 200
        validate(openapi, "GroupList", listing)
        rows = {g["group"]: g for g in listing["groups"]}
        assert rows["sg"]["kind"] == "streams" and rows["sg"]["members"] == 2 and rows["sg"]["lag"] is None
        assert rows["sg"]["rebalances_last_hour"] >= 3  # two joins, the warm-up caught up
        assert rows["broken"]["state"] == "not ready"

        status, body = get(s, "api/groups/sg")
        assert status == 200
        validate(openapi, "StreamsGroupDetails", body)
        history, timeline = body.pop("history"), body.pop("timeline")
        assert body == describe_cli(s, "sg")
        assert body["kind"] == "streams" and body["ready"] and body["epoch"] == 3
        assert {m["member_id"]: m["lags"]["count_0"] for m in body["members"]} == {"a": 0, "b": 50}
        warm = re.compile(r"warm-up of task count_\d on member b caught up")
        caught = [h for h in history if warm.search(h["cause"])]
        assert caught and caught[-1]["epoch"] == 3 and caught[-1]["kind"] == "group"
        assert [(t["member_id"], t["step"]) for t in timeline] == [("a", "joined"), ("b", "joined")]

        status, broken = get(s, "api/groups/broken")
        assert status == 200
        validate(openapi, "StreamsGroupDetails", broken)
        assert not broken["ready"] and any("clicks" in r for r in broken["not_ready_reasons"])

        assert s.terminate() == 0, s.log()
        s = s.restart()
        status, again = get(s, "api/groups/sg")
        assert status == 200 and again["history"] == history  # persisted with the records
        assert again["timeline"] == [] and all(m["lags"] == {} for m in again["members"])  # soft state
    finally:
        assert s.terminate() == 0, s.log()


def test_a_streams_group_taking_over_operator_offsets_keeps_its_history_and_timeline(tmp_path: Path) -> None:
    """Offsets reset on an id nobody joined yet (an empty consumer group), then the first streams
    member joins it: the step deletes the consumer group and creates the streams group, and the
    streams group's history and timeline survive it — in the running coordinator and after a restart."""
    s = start_server(tmp_path / "data", "--log", "static:orders=4", *HTTP)
    try:
        with CoordinatorClient(s.address, timeout_s=10) as c:
            assert c.reset_offsets("taken", {Shard("orders", 0): 5}).ok
            _streams_beat(c, StreamsHeartbeatRequest("taken", "a", 0, process_id="P1",
                                                     rebalance_timeout_ms=30_000, topology=COUNT))
            assert c.describe_streams_group("taken").members[0].member_id == "a"
        status, body = get(s, "api/groups/taken")
        assert status == 200 and body["kind"] == "streams"
        history = [(h["kind"], h["epoch"], h["cause"]) for h in body["history"]]
        assert history[:2] == [("group", 0, "group created"),
                               ("group", 1, "member a joined; subscribed topics now orders=4")], history
        assert [(t["member_id"], t["step"]) for t in body["timeline"]] == [("a", "joined")]

        assert s.terminate() == 0, s.log()
        s = s.restart()
        status, again = get(s, "api/groups/taken")
        assert status == 200 and again["history"] == body["history"]  # persisted in the same order
    finally:
        assert s.terminate() == 0, s.log()
