"""The store's record encoding: exact and stable, for consumer and streams records alike."""

from __future__ import annotations

import re
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.coordinator import codec
from regroup.protocol.keyrange import ranges
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    EmptySinceRecord,
    ExternalHold,
    ExternalHoldRecord,
    GroupEpochRecord,
    MemberMetadata,
    MemberMetadataRecord,
    MemberStatus,
    OffsetRecord,
    ParallelismRecord,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.streams.records import (
    SourceParallelismRecord,
    SourceTopicsRecord,
    StreamsCurrent,
    StreamsCurrentRecord,
    StreamsEpochRecord,
    StreamsMember,
    StreamsMemberRecord,
    StreamsOffsetRecord,
    StreamsRecord,
    StreamsTargetEpochRecord,
    StreamsTargetRecord,
    TopologyRecord,
)
from regroup.protocol.streams.topology import Subtopology, TaskId, Topology
from tests.coordinator.workload import RecordingGroup, run_workload
from tests.protocol.streams.fake_members import Deployment

text = st.text(max_size=10)
opt = st.none() | text
# Whole partitions, and key ranges of two parallelisms (regroup.protocol.keyrange).
shards = st.builds(lambda t, p: Shard(t, p), st.sampled_from(["a", "b\u00e9", "c\"q"]),
                   st.integers(0, 99)) | st.builds(
    lambda t, p, r: Shard(t, p, *r), st.sampled_from(["a", "b\u00e9"]), st.integers(0, 99),
    st.sampled_from(ranges(2) + ranges(3)))
shard_sets = st.frozensets(shards)
meta = st.builds(MemberMetadata, opt, opt, st.integers(1, 10**6), st.frozensets(text), opt, opt,
                 st.lists(text, max_size=2).map(tuple))
current = st.builds(CurrentAssignment, st.integers(-2, 99), st.integers(-2, 99),
                    st.sampled_from(list(MemberStatus)), shard_sets, shard_sets)
records: st.SearchStrategy[Record] = st.one_of(
    st.builds(GroupEpochRecord, text, st.none() | st.integers(0, 2**40)),
    st.builds(SubscribedTopicsRecord, text, st.dictionaries(text, st.integers(1, 999))),
    st.builds(RegexRecord, text, text, st.none() | st.frozensets(text)),
    st.builds(MemberMetadataRecord, text, text, st.none() | meta),
    st.builds(TargetEpochRecord, text, st.integers(0, 99), text),
    st.builds(TargetMemberRecord, text, text, st.none() | shard_sets),
    st.builds(CurrentAssignmentRecord, text, text, st.none() | current),
    st.builds(OffsetRecord, text, shards,
              st.none() | st.integers(0, 2**62), text, st.integers(-1, 99)),
    st.builds(ParallelismRecord, text, text, st.none() | st.integers(2, 1024)),
    st.builds(ExternalHoldRecord, text, st.none() | st.builds(ExternalHold, text, shard_sets, st.booleans())),
    st.builds(EmptySinceRecord, text, st.none() | st.integers(0, 2**53), st.integers(0, 2**31)),
)


@given(records)
def test_round_trip_and_stable(record: Record) -> None:
    encoded = codec.encode(record)
    assert codec.decode(encoded) == record
    assert codec.encode(codec.decode(encoded)) == encoded


def test_real_workload_records_round_trip() -> None:
    seen: list[Record] = []
    g = RecordingGroup.create({})
    g.sink = seen.extend
    run_workload(g, seed=7, steps=60)
    assert len(seen) > 100
    assert [codec.decode(codec.encode(r)) for r in seen] == seen


def test_damaged_record_is_refused() -> None:
    with pytest.raises(codec.CodecError):
        codec.decode('["?", "g"]')
    with pytest.raises(codec.CodecError):
        codec.decode("not json")


# ---------------------------------------------------------------------------------------- streams records

sub_ids = st.sampled_from(["s", "join", "agg\u00e9", "q\"x"])
whole_tasks = st.builds(TaskId, sub_ids, st.integers(0, 2**31 - 1), st.just(0), st.just(1))
range_tasks = st.integers(2, 1024).flatmap(
    lambda k: st.builds(TaskId, sub_ids, st.integers(0, 2**20), st.integers(0, k - 1), st.just(k)))
task_ids = whole_tasks | range_tasks
task_sets = st.frozensets(task_ids, max_size=6)
member_tasks = st.builds(MemberTasks, task_sets, task_sets, task_sets)
streams_current = st.builds(StreamsCurrent, st.integers(-2, 2**31 - 1), st.integers(-2, 2**31 - 1),
                            st.sampled_from(list(MemberStatus)), member_tasks, member_tasks)
streams_member = st.builds(StreamsMember, opt, text, st.integers(1, 10**6))


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    """Valid topologies: unique non-blank ids, each topic the source of one subtopology."""
    ids = draw(st.lists(st.text(min_size=1, max_size=6).filter(str.strip), min_size=1, max_size=4,
                        unique=True))
    topics = draw(st.lists(st.text(min_size=1, max_size=6).filter(str.strip), min_size=len(ids),
                           max_size=len(ids) + 4, unique=True))
    owner = [i if i < len(ids) else draw(st.integers(0, len(ids) - 1)) for i in range(len(topics))]
    cuts = draw(st.lists(st.integers(1, 1024), min_size=len(ids), max_size=len(ids)))
    return Topology(tuple(Subtopology(sid, frozenset(t for t, o in zip(topics, owner, strict=True) if o == n),
                                      cuts[n])
                          for n, sid in enumerate(ids)))


STREAMS_KINDS = (StreamsEpochRecord, TopologyRecord, SourceTopicsRecord, SourceParallelismRecord,
                 StreamsMemberRecord, StreamsTargetRecord, StreamsTargetEpochRecord, StreamsCurrentRecord,
                 StreamsOffsetRecord)
streams_records: st.SearchStrategy[StreamsRecord] = st.one_of(
    st.builds(StreamsEpochRecord, text, st.none() | st.integers(0, 2**40)),
    st.builds(TopologyRecord, text, topologies()),
    st.builds(SourceTopicsRecord, text, st.dictionaries(text, st.integers(1, 999))),
    st.builds(SourceParallelismRecord, text, text, st.integers(1, 1024)),
    st.builds(StreamsMemberRecord, text, text, st.none() | streams_member),
    st.builds(StreamsTargetRecord, text, text, st.none() | member_tasks),
    st.builds(StreamsTargetEpochRecord, text, st.integers(0, 2**31 - 1)),
    st.builds(StreamsCurrentRecord, text, text, st.none() | streams_current),
    st.builds(StreamsOffsetRecord, text, st.builds(lambda t, p: Shard(t, p), text, st.integers(0, 99)),
              st.none() | st.integers(0, 2**62), text, st.integers(-1, 99)),
    st.builds(StreamsOffsetRecord, text,
              st.builds(lambda t, p, r: Shard(t, p, *ranges(4)[r]), text, st.integers(0, 99),
                        st.integers(0, 3)),
              st.none() | st.integers(0, 2**62), text, st.integers(-1, 99)),
)


@given(streams_records)
def test_streams_records_round_trip_and_stable(record: StreamsRecord) -> None:
    encoded = codec.encode(record)
    assert codec.decode(encoded) == record
    assert codec.encode(codec.decode(encoded)) == encoded


@given(st.none() | member_tasks, st.none() | streams_current)
def test_member_tasks_and_streams_current_round_trip(tasks: MemberTasks | None,
                                                      current: StreamsCurrent | None) -> None:
    target = StreamsTargetRecord("g", "m", tasks)
    assert codec.decode(codec.encode(target)) == target
    record = StreamsCurrentRecord("g", "m", current)
    assert codec.decode(codec.encode(record)) == record


@given(member_tasks)
def test_equal_member_tasks_encode_to_equal_bytes(tasks: MemberTasks) -> None:
    """Sets are written sorted: the order a set was built in never shows in the bytes."""
    rebuilt = MemberTasks(*(frozenset(sorted(s, reverse=True)) for s in (tasks.active, tasks.standby,
                                                                         tasks.warmup)))
    assert codec.encode(StreamsTargetRecord("g", "m", rebuilt)) == codec.encode(
        StreamsTargetRecord("g", "m", tasks))


def _one_of_each() -> list[codec.AnyRecord]:
    tasks = MemberTasks(frozenset({TaskId("b", 1), TaskId("a", 2), TaskId("a", 0)}),
                        frozenset({TaskId("b", 0)}), frozenset({TaskId("a", 1)}))
    return [
        GroupEpochRecord("g", 3),
        SubscribedTopicsRecord("g", {"b": 2, "a": 1}),
        RegexRecord("g", "t.*", frozenset({"t1", "t0"})),
        MemberMetadataRecord("g", "m", MemberMetadata("i", "r", 1000, frozenset({"t"}), None, "uniform",
                                                      ("uniform",))),
        TargetEpochRecord("g", 3, "uniform"),
        TargetMemberRecord("g", "m", frozenset({Shard("t", 1), Shard("t", 0)})),
        CurrentAssignmentRecord("g", "m", CurrentAssignment(3, 2, MemberStatus.STABLE,
                                                            frozenset({Shard("t", 0)}), frozenset())),
        OffsetRecord("g", Shard("t", 0), 42, "meta", 3),
        OffsetRecord("g", Shard("t", 0, 0, 1 << 31), 43, "meta", 3),
        ParallelismRecord("g", "t", 4),
        TargetMemberRecord("g", "m", frozenset({Shard("t", 1), Shard("t", 0, 0, 1 << 31)})),
        ExternalHoldRecord("g", ExternalHold("kafka:orders", frozenset({Shard("t", 1), Shard("t", 0)}))),
        EmptySinceRecord("g", 1_700_000_000_000, 5),
        StreamsEpochRecord("sg", 4),
        TopologyRecord("sg", Topology.of({"join": ["views", "clicks"], "count": ["orders"]})),
        SourceTopicsRecord("sg", {"views": 4, "clicks": 4, "orders": 2}),
        StreamsMemberRecord("sg", "m", StreamsMember("i", "P1", 60_000)),
        StreamsTargetRecord("sg", "m", tasks),
        StreamsTargetEpochRecord("sg", 4),
        StreamsCurrentRecord("sg", "m", StreamsCurrent(4, 3, MemberStatus.UNREVOKED, tasks,
                                                       MemberTasks(standby=frozenset({TaskId("c", 0)})))),
        StreamsOffsetRecord("sg", Shard("orders", 1), 7, "", 4),
        TopologyRecord("sg", Topology.of({"count": ["orders"], "join": ["clicks"]},
                                         parallelism={"count": 2})),
        StreamsTargetRecord("sg", "m", MemberTasks(frozenset({TaskId("count", 0, 1, 2),
                                                              TaskId("join", 0)}))),
        StreamsOffsetRecord("sg", Shard("orders", 0, 1 << 31, 1 << 32), 9, "", 4),
        SourceParallelismRecord("sg", "clicks", 4),
    ]


def test_every_record_type_round_trips() -> None:
    examples = _one_of_each()
    kinds = set(get_args(Record)) | set(get_args(StreamsRecord))
    assert set(STREAMS_KINDS) == set(get_args(StreamsRecord))
    assert {type(r) for r in examples} == kinds
    for r in examples:
        assert codec.decode(codec.encode(r)) == r
    tombstones: list[StreamsRecord] = [StreamsEpochRecord("sg", None), StreamsMemberRecord("sg", "m", None),
                  StreamsTargetRecord("sg", "m", None), StreamsCurrentRecord("sg", "m", None),
                  StreamsOffsetRecord("sg", Shard("t", 0), None)]
    assert [codec.decode(codec.encode(r)) for r in tombstones] == tombstones
    holds = [ExternalHoldRecord("g", None),
             ExternalHoldRecord("g", ExternalHold("kafka:k", frozenset(), known=False))]
    assert [codec.encode(r) for r in holds] == ['["H","g",null]', '["H","g",["kafka:k",false,{}]]']
    assert [codec.decode(codec.encode(r)) for r in holds] == holds


def test_stored_bytes_are_pinned() -> None:
    """The storage format: a change here breaks every store already written (FORMAT stays 1)."""
    assert [codec.encode(r) for r in _one_of_each()[8:]] == [
        '["K","g","t",0,0,2147483648,43,"meta",3]',
        '["P","g","t",4]',
        '["t","g","m",{"t":[[0,0,2147483648],1]}]',
        '["H","g",["kafka:orders",true,{"t":[0,1]}]]',
        '["R","g",1700000000000,5]',
        '["sE","sg",4]',
        '["sY","sg",{"count":["orders"],"join":["clicks","views"]}]',
        '["sS","sg",{"clicks":4,"orders":2,"views":4}]',
        '["sM","sg","m",["i","P1",60000]]',
        '["st","sg","m",[{"a":[0,2],"b":[1]},{"b":[0]},{"a":[1]}]]',
        '["sT","sg",4]',
        '["sC","sg","m",[4,3,"unrevoked",[{"a":[0,2],"b":[1]},{"b":[0]},{"a":[1]}],[{},{"c":[0]},{}]]]',
        '["sO","sg","orders",1,7,"",4]',
        '["sY","sg",{"count":{"parallelism":2,"topics":["orders"]},"join":["clicks"]}]',
        '["st","sg","m",[{"count":[[0,1,2]],"join":[0]},{},{}]]',
        '["sK","sg","orders",0,2147483648,4294967296,9,"",4]',
        '["sP","sg","clicks",4]',
    ]


def test_streams_records_written_before_key_range_tasks_still_decode() -> None:
    """Key-range tasks added fields without changing what a K=1 group writes: a store written before
    them replays to the same records (K=1 everywhere)."""
    before = ['["sY","sg",{"count":["orders"]}]', '["st","sg","m",[{"count":[0,1]},{},{}]]',
              '["sO","sg","orders",1,7,"",4]']
    assert [codec.decode(t) for t in before] == [
        TopologyRecord("sg", Topology((Subtopology("count", frozenset({"orders"}), 1),))),
        StreamsTargetRecord("sg", "m", MemberTasks(frozenset({TaskId("count", 0), TaskId("count", 1)}))),
        StreamsOffsetRecord("sg", Shard("orders", 1), 7, "", 4)]


@pytest.mark.parametrize("text, complaint", [
    ('["st","sg","m",[{"c":[[0,2,2]]},{},{}]]', "needs K > 1 and 0 <= r < K"),
    ('["st","sg","m",[{"c":[[0,0,1]]},{},{}]]', "needs K > 1"),
    ('["st","sg","m",[{"c":[[0,1,2],[0,1,2]]},{},{}]]', "listed twice"),
    ('["sY","sg",{"c":{"topics":["o"]}}]', "exactly 'topics' and 'parallelism'"),
    ('["sY","sg",{"c":{"topics":["o"],"parallelism":0}}]', "parallelism 0"),
    ('["sK","sg","o",0,5,5,1,"",1]', "not a range of the key space"),
])
def test_damaged_key_range_task_records_are_refused_naming_the_field(text: str, complaint: str) -> None:
    with pytest.raises(codec.CodecError, match=re.escape(complaint)):
        codec.decode(text)


def test_consumer_records_written_before_streams_still_decode() -> None:
    """Adding the streams tags kept FORMAT 1: data of the earlier version decodes unchanged."""
    written_before = [
        '["E","g",3]', '["S","g",{"a":1,"b":2}]', '["X","g","t.*",["t0","t1"]]',
        '["M","g","m",["i","r",1000,["t"],null,"uniform",["uniform"]]]', '["T","g",3,"uniform"]',
        '["t","g","m",{"t":[0,1]}]', '["C","g","m",[3,2,"stable",{"t":[0]},{}]]',
        '["O","g","t",0,42,"meta",3]',
    ]
    assert codec.FORMAT == 1
    assert [codec.decode(t) for t in written_before] == _one_of_each()[:8]
    assert [codec.encode(r) for r in _one_of_each()[:8]] == written_before


def test_real_streams_records_round_trip() -> None:
    """Records a streams group really emits: joins, warm-ups, revocations, leaves, offsets."""
    d = Deployment(config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=10))
    d.join("a", "P1")
    d.commit("a", 50)
    d.join("b", "P2", instance_id="i-b")
    d.settle()
    d.join("c", "P3")
    d.settle()
    d.leave("b", static=True)
    d.leave("a")
    d.settle()
    seen: list[StreamsRecord] = [r for r in d.records if isinstance(r, STREAMS_KINDS)]
    assert len(seen) == len(d.records) > 20
    assert {type(r) for r in seen} >= {StreamsEpochRecord, TopologyRecord, StreamsMemberRecord,
                                       StreamsTargetRecord, StreamsTargetEpochRecord, StreamsCurrentRecord}
    assert [codec.decode(codec.encode(r)) for r in seen] == seen


@pytest.mark.parametrize(("text", "problem"), [
    ("not json", "not JSON"),
    ('{"tag": "sE"}', "JSON array that starts with its tag"),
    ("[]", "JSON array that starts with its tag"),
    ('["sQ", "g"]', "unknown record tag 'sQ'"),
    ('["sE", "g"]', "StreamsEpochRecord (tag 'sE') is stored as 3 elements, found 2"),
    ('["sE", "g", 1, 2]', "stored as 3 elements, found 4"),
    ('["sE", 5, 1]', "StreamsEpochRecord: the group id must be a string, found 5"),
    ('["sE", "g", true]', "the group epoch must be an integer, found True"),
    ('["sT", "g", "4"]', "the target epoch must be an integer"),
    ('["sY", "g", {}]', "TopologyRecord: the stored topology breaks a topology rule: a topology needs"),
    ('["sY", "g", {"a": ["t"], "b": ["t"]}]', "topic 't' is a source of both subtopology"),
    ('["sY", "g", ["t"]]', "the topology must be an object"),
    ('["sS", "g", {"t": "4"}]', "the partition count of source topic 't' must be an integer"),
    ('["sM", "g", "m", ["i", "P1"]]', "the member must have 3 elements, found 2"),
    ('["sM", "g", "m", ["i", null, 1000]]', "the member's process id must be a string, found None"),
    ('["st", "g", "m", [{}, {}]]', "the target must have 3 elements"),
    ('["st", "g", "m", [{"s": [0, 0]}, {}, {}]]', "active tasks of the target: subtopology 's' has a "
                                                   "partition listed twice"),
    ('["st", "g", "m", [{}, {"s": ["0"]}, {}]]', "a partition of subtopology 's' in the standby tasks"),
    ('["st", "g", "m", [{}, {}, {"s": 0}]]', "the partitions of subtopology 's' in the warm-up tasks"),
    ('["sC", "g", "m", [1, 0, "lost", [{}, {}, {}], [{}, {}, {}]]]',
     "StreamsCurrentRecord: the member's status must be one of 'stable', 'unrevoked', 'unreleased', "
     "found 'lost'"),
    ('["sC", "g", "m", [1, 0, "stable", [{}, {}, {}]]]', "current assignment must have 5 elements"),
    ('["sO", "g", "t", 0, "7", "", 1]', "StreamsOffsetRecord: the offset must be an integer"),
    ('["O", "g", "t", 0]', "OffsetRecord (tag 'O') is stored as 7 elements, found 4"),
])
def test_a_damaged_record_is_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(codec.CodecError, match=re.escape(problem)):
        codec.decode(text)


def test_only_records_encode() -> None:
    with pytest.raises(TypeError, match="not a record"):
        codec.encode(("sE", "g", 1))  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "problem"), [
    (None, "it must be text, found NoneType None"),
    (5, "it must be text, found int 5"),
    (b'["E","g",1]', "it must be text, found bytes b'[\"E\",\"g\",1]'"),
])
def test_what_is_not_text_is_refused_naming_what_it_is(value: object, problem: str) -> None:
    """A damaged row can read back as NULL, a number or a blob: refused as such, never a TypeError."""
    with pytest.raises(codec.CodecError, match=re.escape(problem)):
        codec.decode(value)


@pytest.mark.parametrize(("text", "problem"), [
    ('["E", "g", 1.5]', "GroupEpochRecord: the group epoch must be an integer, found 1.5"),
    ('["E", "g", 1e400]', "the group epoch must be an integer, found inf"),
    ('["E", 7, 1]', "GroupEpochRecord: the group id must be a string, found 7"),
    ('["O", "g", "t", 0, "42", "", 1]', "OffsetRecord: the offset must be an integer, found '42'"),
    ('["O", "g", "t", true, 42, "", 1]', "the partition must be an integer, found True"),
    ('["O", "g", "t", 0, 42, null, 1]', "the commit metadata must be a string, found None"),
    ('["K", "g", "t", 0, "0", 2147483648, 42, "", 1]', "the key range's lo must be an integer, found '0'"),
    ('["S", "g", {"a": "1"}]', "SubscribedTopicsRecord: the partition count of topic 'a' must be an integer"),
    ('["X", "g", "t.*", [1]]', "an element of the topics the regex matched must be a string, found 1"),
    ('["M", "g", "m", ["i", null, "1000", ["t"], null, null, []]]',
     "MemberMetadataRecord: the member's rebalance timeout must be an integer, found '1000'"),
    ('["M", "g", "m", ["i", null, 1000]]', "the member's metadata must have 7 elements, found 3"),
    ('["T", "g", 3, null]', "TargetEpochRecord: the assignor must be a string, found None"),
    ('["t", "g", "m", {"t": [0, 0]}]', "TargetMemberRecord: the target: a partition is listed twice"),
    ('["t", "g", "m", {"t": ["0"]}]', "a partition of topic 't' in the target must be an integer, found '0'"),
    ('["t", "g", "m", {"t": [[0, 0]]}]', "a key range of topic 't' in the target must have 3 elements"),
    ('["t", "g", "m", ["t", 0]]', "the target must be an object"),
    ('["C", "g", "m", [1, 0, "lost", {}, {}]]', "the member's status must be one of 'stable'"),
    ('["C", "g", "m", [1, 0, "stable", {"t": [0]}, {"t": "1"}]]',
     "the partitions of topic 't' in the partitions pending revocation must be a list, found '1'"),
    ('["P", "g", "t", "4"]', "ParallelismRecord: the parallelism must be an integer, found '4'"),
    ('["H", "g", ["kafka:k", "yes", {}]]',
     "the external hold's known flag must be true or false, found 'yes'"),
    ('["H", "g", ["kafka:k", true]]', "an external hold [holder, known, shards] must have 3 elements"),
    ('["R", "g", "soon", 1]', "EmptySinceRecord: the empty-since time must be an integer, found 'soon'"),
])
def test_a_consumer_record_with_a_field_of_the_wrong_type_is_refused(text: str, problem: str) -> None:
    """Every field's type is checked, as for streams records: a damaged number is refused, not misread
    (a string offset would otherwise have been served as an offset)."""
    with pytest.raises(codec.CodecError, match=re.escape(problem)):
        codec.decode(text)
