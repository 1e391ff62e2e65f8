"""A streams group's topology: validation of the request, and readiness against the topics."""

from __future__ import annotations

import pytest

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.streams.topology import (
    Subtopology,
    TaskId,
    Topology,
    TopologyNotReady,
    TopologyReady,
    configure,
)
from regroup.protocol.topics import TopicMetadata


def test_a_ready_topology_has_one_task_per_partition_of_each_subtopology() -> None:
    topo = Topology.of({"join": ["clicks", "views"], "count": ["orders"]})
    got = configure(topo, TopicMetadata({"clicks": 3, "views": 3, "orders": 2, "other": 9}))
    assert isinstance(got, TopologyReady) and got.ready
    assert got.tasks == (TaskId("count", 0), TaskId("count", 1),
                         TaskId("join", 0), TaskId("join", 1), TaskId("join", 2))
    assert dict(got.tasks_per_subtopology) == {"count": 2, "join": 3}


def test_task_ids_sort_by_subtopology_then_partition_and_print_like_kafka() -> None:
    assert sorted([TaskId("b", 0), TaskId("a", 10), TaskId("a", 2)]) == [
        TaskId("a", 2), TaskId("a", 10), TaskId("b", 0)]
    assert str(TaskId("0", 3)) == "0_3"


def test_missing_source_topics_make_the_topology_not_ready_naming_them() -> None:
    topo = Topology.of({"join": ["clicks", "views"], "count": ["orders"]})
    got = configure(topo, TopicMetadata({"clicks": 3}))
    assert isinstance(got, TopologyNotReady) and not got.ready
    assert got.reasons == (
        "subtopology 'count': source topic 'orders' does not exist",
        "subtopology 'join': source topic 'views' does not exist",
    )
    assert "orders" in got.message and "views" in got.message


def test_several_missing_topics_of_one_subtopology_are_all_named() -> None:
    got = configure(Topology.of({"j": ["a", "b", "c"]}), TopicMetadata({"b": 1}))
    assert isinstance(got, TopologyNotReady)
    assert got.reasons == ("subtopology 'j': source topics 'a', 'c' do not exist",)


def test_source_topics_with_different_partition_counts_are_not_ready_with_the_counts() -> None:
    topo = Topology.of({"join": ["clicks", "views"], "count": ["orders"]})
    got = configure(topo, TopicMetadata({"clicks": 4, "views": 6, "orders": 2}))
    assert isinstance(got, TopologyNotReady)
    assert len(got.reasons) == 1
    reason = got.reasons[0]
    assert "'join'" in reason and "not co-partitioned" in reason
    assert "'clicks' has 4" in reason and "'views' has 6" in reason


def test_a_not_ready_topology_becomes_ready_when_the_topics_are_fixed() -> None:
    topo = Topology.of({"join": ["clicks", "views"]})
    assert not configure(topo, TopicMetadata({"clicks": 4, "views": 6})).ready
    fixed = configure(topo, TopicMetadata({"clicks": 6, "views": 6}))
    assert isinstance(fixed, TopologyReady) and len(fixed.tasks) == 6


def test_subtopologies_are_kept_in_id_order_whatever_the_declaration_order() -> None:
    a = Topology.of({"b": ["y"], "a": ["x"]})
    b = Topology.of({"a": ["x"], "b": ["y"]})
    assert a == b
    assert [s.subtopology_id for s in a.subtopologies] == ["a", "b"]
    assert a.source_topics == frozenset({"x", "y"})


@pytest.mark.parametrize(("sources", "match"), [
    ({}, "at least one subtopology"),
    ({"": ["t"]}, "subtopology id must be a non-empty string"),
    ({"  ": ["t"]}, "subtopology id must be a non-empty string"),
    ({"s": []}, "subtopology 's' has no source topics"),
    ({"s": [""]}, "subtopology 's' names a source topic ''"),
    ({"s": "orders"}, "must be a list of names, not the string 'orders'"),
    ({"a": ["t", "u"], "b": ["u"]}, "topic 'u' is a source of both subtopology 'a' and 'b'"),
])
def test_malformed_topologies_are_invalid_requests(sources: dict[str, object], match: str) -> None:
    with pytest.raises(ProtocolError, match=match) as err:
        Topology.of(sources)  # type: ignore[arg-type]
    assert err.value.code is ErrorCode.INVALID_REQUEST


def test_duplicate_subtopology_ids_are_an_invalid_request() -> None:
    with pytest.raises(ProtocolError, match="subtopology id 's' is used twice") as err:
        Topology((Subtopology("s", frozenset({"a"})), Subtopology("s", frozenset({"b"}))))
    assert err.value.code is ErrorCode.INVALID_REQUEST


def test_a_topology_that_is_not_a_mapping_is_an_invalid_request() -> None:
    with pytest.raises(ProtocolError, match="mapping of subtopology id"):
        Topology.of([("s", ["t"])])  # type: ignore[arg-type]
