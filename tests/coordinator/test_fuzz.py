"""Fuzzing every gRPC method against one real coordinator process (issue 14, `regroup.chaos`).

hypothesis drives the fuzzer's own generators (every field value is a ``data.draw``, so a failure
shrinks to a short request sequence): structured messages built from the protobuf descriptors,
plausible member flows, inconsistent requests and raw or corrupted bytes, method by method and in
sequences. `regroup.chaos.oracle` judges every answer; a well-behaved member (the canary) heartbeats
in a thread all along; at the end the coordinator is stopped and its data dir must replay to the
state it described, and a restarted process must describe it too. Then `regroup chaos fuzz` itself,
with a small N, and the regressions the fuzzer found.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from regroup.chaos import requests as gen
from regroup.chaos.corrupt import Heavy, Request, flood, oversized
from regroup.chaos.fuzz import CONFIG, KNOWN, SERVER_ARGS, TOPICS, Canary, Fuzzer, logged_errors
from regroup.chaos.oracle import call, over_limits
from regroup.chaos.replay import check_restart
from regroup.chaos.values import RandomChooser
from regroup.cli import app
from regroup.coordinator import codec
from regroup.coordinator.store import DB_FILE, SqliteLog, StoreError
from regroup.protocol.records import GroupEpochRecord
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import streams_wire, wire
from regroup.rpc.errors import WireError
from tests.coordinator.server_proc import ServerProc, start_server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fuzz")]  # one worker: one coordinator, in order

T = TypeVar("T")
PROTO = Path(__file__).resolve().parents[2] / "proto" / "regroup.proto"
METHOD_NAMES = [m.name for m in gen.METHODS]
#: Mostly plausible, so that members get far (join, reconcile, commit) between the broken requests.
SEQUENCE_MODES = ("plausible", "plausible", "plausible", "inconsistent", "structured", "raw")
FUZZ = settings(deadline=None, derandomize=False, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class DrawChooser:
    """`regroup.chaos.values.Chooser` on hypothesis: every choice a draw, so examples shrink."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def pick(self, options: Sequence[T]) -> T:
        return self.data.draw(st.sampled_from(options))

    def chance(self, percent: int) -> bool:
        return self.data.draw(st.integers(0, 99)) < percent

    def text(self, max_size: int) -> str:
        return self.data.draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=max_size))

    def binary(self, max_size: int) -> bytes:
        return self.data.draw(st.binary(max_size=max_size))


class Coordinator:
    """The module's coordinator process (replaced when the restart test restarts it)."""

    def __init__(self, proc: ServerProc) -> None:
        self.proc = proc


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    holder = Coordinator(start_server(tmp_path_factory.mktemp("fuzz") / "data", *SERVER_ARGS))
    try:
        yield holder
    finally:
        if holder.proc.proc.poll() is None:
            assert holder.proc.terminate() == 0, holder.proc.log()


@pytest.fixture(scope="module")
def canary(coordinator: Coordinator) -> Iterator[Canary]:
    c = Canary(coordinator.proc.address, "canary-fuzz-test", slow_s=10.0)
    c.start()
    assert c.joined.wait(30) and not c.report.failures, c.report.failures
    yield c
    c.stop()


@pytest.fixture(scope="module")
def fuzzer(coordinator: Coordinator) -> Iterator[Fuzzer]:
    # Floods of up to 100,000 partitions in 3% of the raw requests (the command goes to 4,000,000).
    with Fuzzer(coordinator.proc.address, deadline_s=10.0, heavy=Heavy(flood_per_10k=300)) as f:
        yield f


_examples = itertools.count()


def _fresh_world(fuzzer: Fuzzer) -> None:
    """Each example starts knowing nothing, on one of 8 sets of groups (members it does not know may
    still be there: deeper states, and a bounded number of groups for the restart check)."""
    fuzzer.world = gen.World(prefix=f"h{next(_examples) % 8}-")


def _no_findings(req: Request, findings: Sequence[str]) -> None:
    assert not findings, f"{req.describe(2_000)}\n -> " + "\n -> ".join(findings)


# ================================================================================ coverage

def test_every_method_of_the_service_has_a_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = re.findall(r"^\s*rpc (\w+)\(", PROTO.read_text(), re.M)
    assert sorted(METHOD_NAMES) == sorted(declared), "regroup_pb2 lags proto/regroup.proto: regenerate it"
    gen.check_generators()
    monkeypatch.delitem(gen.PLAUSIBLE, "Watch")  # a method added to the proto without a generator
    with pytest.raises(LookupError, match=r"no generator for \['Watch'\]"):
        gen.check_generators()
    with pytest.raises(LookupError):
        Fuzzer("127.0.0.1:1")


def test_the_oracle_catches_what_it_should() -> None:
    """Not vacuous: each kind of bad answer is a finding."""
    from regroup.chaos.oracle import check_response, check_status
    from regroup.chaos.replay import State, differences

    def problems(method: str, msg: Any) -> list[str]:
        return check_response(method, msg.SerializeToString())[2]

    assert problems("CommitOffsets", pb.Ack(error=pb.ERROR_CODE_INVALID_REQUEST)) == [
        "INVALID_REQUEST without a message"]
    assert problems("Heartbeat", pb.HeartbeatResponse(error=99)) == ["unknown error code 99"]  # type: ignore[arg-type]
    refused = problems("DescribeGroup", pb.DescribeGroupResponse(group=pb.GroupDescription(state=99)))  # type: ignore[arg-type]
    assert refused and refused[0].startswith("the project's client refuses the answer"), refused
    assert problems("Watch", pb.Nudge(kind=pb.NUDGE_KIND_HEARTBEAT_NOW))
    assert check_response("Topics", b"\xff\xff")[1] == ["unparseable"]
    built = Request("Heartbeat", "plausible", (b"",), (pb.HeartbeatRequest(),))
    raw_bytes = Request("Heartbeat", "raw", (b"\xff",), (None,))
    assert check_status(built, grpc.StatusCode.INVALID_ARGUMENT, "malformed", 10)
    assert not check_status(raw_bytes, grpc.StatusCode.INVALID_ARGUMENT, "malformed", 10)
    assert check_status(raw_bytes, grpc.StatusCode.INTERNAL, "unexpected error: KeyError", 10)
    assert check_status(raw_bytes, grpc.StatusCode.UNKNOWN, "boom", 10)
    assert "a hang" in check_status(raw_bytes, grpc.StatusCode.DEADLINE_EXCEEDED, "late", 10)[0]
    assert check_status(raw_bytes, grpc.StatusCode.RESOURCE_EXHAUSTED, "", 10) == [
        "gRPC status RESOURCE_EXHAUSTED without a message"]
    assert over_limits(pb.DescribeGroupRequest(group_id="g" * 256)) == [
        "group_id is 256 characters long (the limit is 255)"]
    assert over_limits(pb.OffsetFetchRequest(group_id="g", shards=pb.ShardSet(
        topics=[pb.TopicPartitions(topic="t" * 300)]))) == []  # a topic listing nothing names nothing
    left = State({}, {}, {"g": {}})
    assert differences(left, State({}, {}, {}), ("live", "replayed")) == [
        "offsets of group 'g': live {} / replayed None"]
    log = ("2026-01-01 00:00:00,000 INFO regroup.coordinator: fine\n"
           "2026-01-01 00:00:00,001 ERROR regroup.coordinator: unexpected error in Heartbeat\n"
           "Traceback (most recent call last):\n  File ...\n"
           "forged INFO line\n2026-01-01 00:00:00,002 INFO regroup.coordinator: a\x1bb\n")
    found = logged_errors(log)
    assert len(found) == 4 and "line 5 is not a log line" in found[2] and "U+001B" in found[3], found


# ================================================================================ fuzzing

@pytest.mark.parametrize("method", METHOD_NAMES)
@settings(FUZZ, max_examples=10)
@given(data=st.data())
def test_each_method_in_each_mode(fuzzer: Fuzzer, canary: Canary, method: str, data: st.DataObject) -> None:
    """Every field drawn by hypothesis; each request from a fresh `World`, so that what hypothesis
    draws never depends on what the coordinator answered (its examples must replay)."""
    ch = DrawChooser(data)
    for mode in gen.MODES:
        _fresh_world(fuzzer)
        req, ans = fuzzer.step(ch, method, mode, follow_up=False)
        _no_findings(req, ans.findings)


@settings(FUZZ, max_examples=40)
@given(steps=st.lists(st.tuples(st.sampled_from(METHOD_NAMES), st.sampled_from(SEQUENCE_MODES),
                                st.integers(0, 2**16)), min_size=1, max_size=25))
def test_sequences_reach_deep_states(fuzzer: Fuzzer, canary: Canary,
                                     steps: list[tuple[str, str, int]]) -> None:
    """Joins, then heartbeats at the epochs the answers gave, commits, delegation, streams members,
    mixed with inconsistent and raw requests. hypothesis draws the steps (method, mode, seed); each
    request's fields come from the seed, following what the answers said — so hypothesis' own draws
    never depend on the coordinator, and a failing sequence shrinks step by step."""
    _fresh_world(fuzzer)
    for method, mode, seed in steps:
        req, ans = fuzzer.step(RandomChooser(seed), method, mode)
        _no_findings(req, ans.findings)


@settings(FUZZ, max_examples=120)
@given(method=st.sampled_from(METHOD_NAMES),
       bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=3))
def test_raw_bytes_as_a_request_body(fuzzer: Fuzzer, canary: Canary, method: str,
                                     bodies: list[bytes]) -> None:
    spec = gen.BY_NAME[method]
    sent = tuple(bodies) if spec.client_streaming else tuple(bodies[:1])
    req = Request(method, "raw", sent, (None,) * len(sent))
    _no_findings(req, call(fuzzer.channel, req, fuzzer.deadline_s).findings)


def test_a_body_over_the_size_limit_is_resource_exhausted(fuzzer: Fuzzer) -> None:
    ans = call(fuzzer.channel, Request("Heartbeat", "raw", (oversized(),), (None,)), fuzzer.deadline_s)
    assert ans.outcomes == ("grpc RESOURCE_EXHAUSTED",) and not ans.findings, ans


def test_a_seeded_run_of_every_kind(fuzzer: Fuzzer, canary: Canary) -> None:
    """What `regroup chaos fuzz` does, 600 requests from one seed: no finding, every method tried."""
    fuzzer.world = gen.World(prefix="seeded-")
    ch = RandomChooser(14)
    for _ in range(600):
        req, ans = fuzzer.step(ch)
        _no_findings(req, ans.findings)
    assert set(fuzzer.stats.methods) == set(METHOD_NAMES)
    assert fuzzer.stats.outcomes["NONE"] > 100 and fuzzer.stats.outcomes["grpc INVALID_ARGUMENT"] > 10


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_a_flood_beyond_the_limits_is_refused_at_once(fuzzer: Fuzzer, canary: Canary, method: str) -> None:
    """4,000,000 partitions (tasks, offsets) in a 14 MB request: refused by counting, before a single
    shard is built. (It used to be built first: 25 to 106 s of a blocked event loop on the loaded
    development machine, every other group waiting; found by `regroup chaos fuzz`.)"""
    body = gen.PLAUSIBLE[method](RandomChooser(2), gen.World(prefix="flood-")).SerializeToString()
    ans = call(fuzzer.channel, Request(method, "raw", (body + flood(method, 4_000_000),), (None,)), 5.0)
    assert not ans.findings and ans.seconds < 5.0, ans
    if method in ("Heartbeat", "HeartbeatStream", "FetchOffsets", "DeleteOffsets", "InstallAssignment",
                  "StreamsHeartbeat", "CommitOffsets", "ResetOffsets"):
        assert ans.outcomes == ("INVALID_REQUEST",), ans


def _unknown(findings: list[str]) -> list[str]:
    return [f for f in findings if not any(pattern.search(f) for pattern, _ in KNOWN)]


def test_the_coordinator_stayed_up_and_never_blocked_the_canary(coordinator: Coordinator, canary: Canary,
                                                                 fuzzer: Fuzzer) -> None:
    fuzzer.step(RandomChooser(1), "ListGroups", "plausible")  # at least one request, run alone
    assert coordinator.proc.proc.poll() is None
    report = canary.stop()
    assert report.heartbeats > 0 and not report.failures, report
    assert not _unknown(logged_errors(coordinator.proc.log())), logged_errors(coordinator.proc.log())


def test_a_restart_replays_the_same_state(coordinator: Coordinator, canary: Canary, fuzzer: Fuzzer) -> None:
    canary.stop()
    fuzzer.world = gen.World(prefix="replayed-")
    ch = RandomChooser(99)
    for _ in range(300):  # some state of its own, also when it runs alone
        fuzzer.step(ch, mode=ch.pick(("plausible", "plausible", "inconsistent", "structured")))
    report = check_restart(coordinator.proc, TOPICS, CONFIG)
    if report.restarted is not None:
        coordinator.proc = report.restarted  # type: ignore[assignment]
    assert not report.findings, report
    assert report.groups >= 3 and report.offsets > 0 and report.records > 0, report


# ================================================================================ the command

def test_the_chaos_fuzz_command() -> None:
    """Its own coordinator: started, fuzzed, stopped, replayed, restarted, stopped."""
    runner = CliRunner()
    result = runner.invoke(app, ["chaos", "fuzz", "--requests", "200", "--seed", "3"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(r"^regroup chaos fuzz: 200 requests in [\d.]+ s \([\d.]+ requests/s\), seed 3",
                     out, re.M)
    assert re.search(r"^  NONE +\d+$", out, re.M) and "answers by status or error code:" in out
    assert re.search(r"^replay: \d+ records, \d+ groups, \d+ committed offsets: same state", out, re.M)
    assert re.search(r"^crashes: 0$", out, re.M) and re.search(r"^findings: 0$", out, re.M), out


def test_the_chaos_fuzz_command_against_a_running_coordinator(coordinator: Coordinator) -> None:
    result = CliRunner().invoke(app, ["chaos", "fuzz", "--requests", "100", "--seed", "4", "--json",
                                      "--address", coordinator.proc.address])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    assert report["requests"] == 100 and report["crashes"] == 0 and report["requests_with_findings"] == 0
    assert report["other_findings"] == [] and report["replay"] is None
    assert sum(report["methods"].values()) == 100 and report["canary"]["heartbeats"] > 0
    assert report["coordinator"] == coordinator.proc.address


# ================================================================================ regressions

def _streams_join(**fields: Any) -> pb.StreamsHeartbeatRequest:
    msg = pb.StreamsHeartbeatRequest(group_id="g", member_id="m", member_epoch=0, process_id="p",
                                     rebalance_timeout_ms=30_000, **fields)
    if not msg.HasField("topology"):
        msg.topology.subtopologies.add(subtopology_id="s0", source_topics=["fz-a"])
    msg.owned.SetInParent()
    return msg


def _topology(sub: str, *topics: str) -> pb.Topology:
    return pb.Topology(subtopologies=[pb.Subtopology(subtopology_id=sub, source_topics=list(topics))])


def _task(sub: str, partition: int, topic: str = "fz-a", p: int = 0) -> pb.TaskPosition:
    return pb.TaskPosition(subtopology=sub, partition=partition, topics=[
        pb.TopicOffsets(topic=topic, partitions=[pb.PartitionOffset(partition=p, offset=5)])])


#: Streams requests the coordinator accepted (NONE) and kept, beyond the documented limits (ids 255
#: characters, topic names 249, no negative partitions): found by `regroup chaos fuzz` (seeds 2, 3).
OVER_LIMITS = [
    (_streams_join(topology=_topology("s" * 256, "fz-a")), "topology has a subtopology id of 256 characters"),
    (_streams_join(topology=_topology("s0", "fz-a", "t" * 1_001)),
     "topology: subtopology 's0' has a source topic of 1001 characters; the limit is 249"),
    (_streams_join(owned=pb.MemberTasks(standby=[pb.SubtopologyTasks(subtopology="h" * 100_000,
                                                                     partitions=[0])])),
     "owned.standby has a subtopology of 100000 characters; the limit is 255"),
    (_streams_join(owned=pb.MemberTasks(active=[pb.SubtopologyTasks(subtopology="s0", partitions=[0, -4])])),
     "owned.active has a negative partition: partition -4 of subtopology 's0'"),
    (_streams_join(owned=pb.MemberTasks(warmup=[pb.SubtopologyTasks(subtopology="", partitions=[1])])),
     "owned.warmup has a blank subtopology ''"),
    (_streams_join(task_offsets=pb.TaskOffsets(tasks=[_task("s1", -3)])),
     "task_offsets has a negative partition: partition -3 of subtopology 's1'"),
    (_streams_join(task_offsets=pb.TaskOffsets(tasks=[_task("x" * 50_000, 0)])),
     "task_offsets has a subtopology of 50000 characters; the limit is 255"),
    (_streams_join(task_offsets=pb.TaskOffsets(tasks=[_task("s0", 0, "y" * 250)])),
     "task_offsets of task s0_0 has a topic of 250 characters; the limit is 249"),
    (_streams_join(task_offsets=pb.TaskOffsets(tasks=[_task("s0", 0, "fz-a", -1)])),
     "task_offsets of task s0_0 has a negative partition: partition -1 of topic 'fz-a'"),
]


@pytest.mark.parametrize(("msg", "problem"), OVER_LIMITS)
def test_streams_names_and_partitions_beyond_the_limits_are_refused(msg: pb.StreamsHeartbeatRequest,
                                                                   problem: str) -> None:
    # (an empty string in a repeated message is not on the wire at all: the oracle cannot see it)
    assert over_limits(msg) or "blank" in problem, "the oracle must see this request as over the limits"
    with pytest.raises(WireError, match=re.escape(problem)):
        streams_wire.streams_heartbeat_request_from_pb(msg)


def test_streams_topologies_of_more_than_10000_topics_are_refused() -> None:
    msg = _streams_join(topology=pb.Topology(subtopologies=[
        pb.Subtopology(subtopology_id=f"s{i}", source_topics=[f"t{i}"]) for i in range(10_001)]))
    with pytest.raises(WireError, match="topology reads 10001 source topics; the limit is 10000"):
        streams_wire.streams_heartbeat_request_from_pb(msg)


def test_streams_requests_at_the_limits_are_accepted() -> None:
    owned = pb.MemberTasks(active=[pb.SubtopologyTasks(subtopology="s" * 255, partitions=[0])])
    msg = _streams_join(topology=_topology("s" * 255, "t" * 249), owned=owned,
                        task_offsets=pb.TaskOffsets(tasks=[_task("s" * 255, 0, "t" * 249)]))
    req = streams_wire.streams_heartbeat_request_from_pb(msg)
    assert req.topology is not None and req.owned is not None and req.task_offsets is not None


def test_the_coordinator_answers_them_invalid_request(coordinator: Coordinator) -> None:
    with grpc.insecure_channel(coordinator.proc.address) as channel:
        for msg, problem in OVER_LIMITS:
            req = Request("StreamsHeartbeat", "inconsistent", (msg.SerializeToString(),), (msg,))
            ans = call(channel, req, 10.0)
            assert ans.outcomes == ("INVALID_REQUEST",) and not ans.findings, ans
            assert problem in ans.responses[0].message  # type: ignore[attr-defined]


def test_the_store_loads_the_state_as_of_a_record(tmp_path: Path) -> None:
    """`SqliteLog.load(upto_seq)`, with which the restart check replays the state the live coordinator
    described."""
    records = [GroupEpochRecord("g", epoch) for epoch in range(1, 31)]
    log = SqliteLog(str(tmp_path / DB_FILE))
    try:
        log.append([(seq, codec.encode(r)) for seq, r in enumerate(records, 1)], [])
        assert log.load().records == records
        first = log.load(upto_seq=10)
        assert (first.last_seq, first.records) == (10, records[:10])
        assert log.load(upto_seq=1_000).records == records
        log.compact([codec.encode(records[19])], 20, {"g"}, 100)  # a snapshot as of record 20
        assert log.load(upto_seq=25).records == [records[19], *records[20:25]]
        with pytest.raises(StoreError, match="the snapshot covers records up to 20"):
            log.load(upto_seq=10)
    finally:
        log.close()


def _shards(n: int) -> pb.ShardSet:
    return pb.ShardSet(topics=[pb.TopicPartitions(topic="t", partitions=range(n))])


#: Each request field that lists shards, tasks or offsets, with more of them than the limit (built
#: when the test runs).
BEYOND: dict[str, tuple[Any, Any, str]] = {
    "fetch": (wire.fetch_request_from_pb,
              lambda: pb.OffsetFetchRequest(group_id="g", shards=_shards(1_000_001)),
              "shards lists 1000001 shards; the limit is 1000000"),
    "delete": (wire.delete_offsets_from_pb,
               lambda: pb.DeleteOffsetsRequest(group_id="g", shards=_shards(1_000_001)),
               "shards lists 1000001 shards; the limit is 1000000"),
    "install": (wire.install_assignment_from_pb, lambda: pb.InstallAssignmentRequest(
        group_id="g", assignment=[pb.MemberAssignment(member_id="m", shards=_shards(1_000_001))]),
        "assignment lists 1000001 shards; the limit is 1000000"),
    "commit": (wire.commit_request_from_pb, lambda: pb.OffsetCommitRequest.FromString(
        pb.OffsetCommitRequest(group_id="g", member_id="m").SerializeToString() + flood("CommitOffsets", 2)
        + flood("CommitOffsets", 4_000_000)), "offsets lists 1000003 shards; the limit is"),
    "task-offsets": (lambda m: streams_wire.streams_heartbeat_request_from_pb(m, max_owned=10),
                     lambda: _streams_join(task_offsets=pb.TaskOffsets(tasks=[
                         pb.TaskPosition(subtopology="s0", partition=p) for p in range(11)])),
                     "task_offsets lists 11 task copies and 0 offsets; the limit is 10"),
}


@pytest.mark.parametrize("field", BEYOND)
def test_a_list_beyond_the_limit_is_refused_before_it_is_built(field: str) -> None:
    """Found by `regroup chaos fuzz`: these lists were built in full (millions of shards, tens of
    seconds of the coordinator's event loop) before the core's limit refused them."""
    decode, build, problem = BEYOND[field]
    with pytest.raises(WireError, match=re.escape(problem)):
        decode(build())


def test_the_log_escapes_unicode_line_separators() -> None:
    from regroup.coordinator.logs import escape_controls

    assert "\u2028" not in escape_controls("offsets list a\u2028b-2 twice")
    assert "\u2029" not in escape_controls("a\u2029b")
