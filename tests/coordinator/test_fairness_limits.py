"""The limits that keep large requests from starving heartbeats: the core's rules (`ListedShards`,
`large_request_refusal`, the configuration) and the shell's lane (`regroup.coordinator.large`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from regroup.coordinator.handlers import Malformed, request_parser
from regroup.coordinator.large import Encoded, LargeRequests, TooManyLargeRequests
from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.store import DurableStore
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import KEY_SPACE, Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.validation import (
    LISTING_SLICE,
    ListedShards,
    check_shards,
    large_request_refusal,
    shards_from_listing,
    validate_heartbeat,
)
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import streams_wire, wire

CFG = CoordinatorConfig()


def listed(**topics: list[int]) -> ListedShards:
    shards = shards_from_listing("owned", list(topics.items()), CFG.max_owned_shards)
    assert isinstance(shards, ListedShards)
    return shards


# ---------------------------------------------------------------------------------------- ListedShards

def test_a_listing_is_the_set_of_its_shards_in_every_comparison() -> None:
    owned = listed(a=[0, 1, 2], b=[5])
    same = frozenset({Shard("a", 0), Shard("a", 1), Shard("a", 2), Shard("b", 5)})
    fewer = frozenset({Shard("a", 0), Shard("b", 5)})
    assert owned == same and same == owned and hash(owned) == hash(same)
    assert (owned != same) is False and (same != owned) is False
    assert len(owned) == 4 and set(owned) == same
    assert Shard("a", 1) in owned and Shard("a", 3) not in owned and Shard("c", 0) not in owned
    assert Shard("a", 1, 0, KEY_SPACE // 2) not in owned  # a part of a partition is not the partition
    assert owned != fewer and fewer <= owned and not owned <= fewer and owned >= fewer
    assert not owned.isdisjoint(fewer) and owned.isdisjoint({Shard("c", 0)})
    assert not fewer.isdisjoint(owned)
    assert owned & fewer == fewer and fewer & owned == fewer
    assert owned - fewer == {Shard("a", 1), Shard("a", 2)} and fewer - owned == frozenset()
    assert owned | {Shard("c", 0)} == same | {Shard("c", 0)}
    assert type(owned & fewer) is frozenset  # what the core builds from it is a plain set
    assert listed() == frozenset() and not listed()


def test_check_shards_checks_a_listing_by_topic_with_the_same_messages() -> None:
    check_shards("owned", listed(a=list(range(10))), CFG, 10)
    with pytest.raises(ProtocolError, match="owned lists 11 shards; the limit is 10"):
        check_shards("owned", listed(a=list(range(11))), CFG, 10)
    with pytest.raises(ProtocolError, match="owned has a negative partition: b:-3"):
        check_shards("owned", listed(a=[1, 2], b=[4, -3]), CFG, 10)
    with pytest.raises(ProtocolError, match="invalid topic name ''"):
        check_shards("owned", shards_from_listing("owned", [("", [1])], 10), CFG, 10)
    long_name = "t" * (CFG.max_topic_name_length + 1)
    with pytest.raises(ProtocolError, match="invalid topic name"):
        check_shards("owned", shards_from_listing("owned", [(long_name, [1])], 10), CFG, 10)


def test_a_repeat_is_found_across_slices_of_a_long_listing() -> None:
    numbers = [*range(3 * LISTING_SLICE), LISTING_SLICE // 2]
    with pytest.raises(ProtocolError, match=f"lists partition t:{LISTING_SLICE // 2} twice"):
        shards_from_listing("owned", [("t", numbers)], CFG.max_owned_shards)
    assert len(shards_from_listing("owned", [("t", numbers[:-1])], CFG.max_owned_shards)) == 3 * LISTING_SLICE


def test_the_largest_legal_heartbeat_validates_by_topic() -> None:
    owned = shards_from_listing("owned", [("t", range(CFG.max_owned_shards))], CFG.max_owned_shards)
    validate_heartbeat(HeartbeatRequest("g", "m", 3, owned=owned), CFG)
    assert Shard("t", CFG.max_owned_shards - 1) in owned and len(owned) == CFG.max_owned_shards


# ---------------------------------------------------------------------------------------- admission

def test_large_request_refusal_names_the_limit() -> None:
    cfg = CoordinatorConfig(max_large_requests_per_client=2, max_large_requests_waiting=3)
    assert large_request_refusal(0, 0, cfg) is None
    assert large_request_refusal(1, 2, cfg) is None
    per_client = large_request_refusal(2, 2, cfg)
    assert per_client is not None and "limit is 2" in per_client
    assert "max_large_requests_per_client" in per_client
    total = large_request_refusal(0, 3, cfg)
    assert total is not None and "max_large_requests_waiting" in total and "limit is 3" in total


@pytest.mark.parametrize("bad", [dict(large_request_bytes=0), dict(max_large_requests_per_client=0),
                                 dict(max_large_requests_per_client=4, max_large_requests_waiting=3)])
def test_the_large_request_limits_must_make_sense(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="large requests"):
        CoordinatorConfig(**bad)


def test_a_body_over_the_threshold_is_left_encoded_for_the_lane() -> None:
    parse = request_parser("Heartbeat", pb.HeartbeatRequest, 100)
    small = pb.HeartbeatRequest(group_id="g", member_id="m").SerializeToString()
    assert isinstance(parse(small), pb.HeartbeatRequest)
    big = pb.HeartbeatRequest(group_id="g" * 200, member_id="m").SerializeToString()
    encoded = parse(big)
    assert isinstance(encoded, Encoded) and encoded.parse(encoded.data).group_id == "g" * 200
    assert isinstance(parse(b"\xff" * 200), Encoded)
    assert isinstance(encoded.parse(b"\xff" * 200), Malformed)


def test_the_lane_refuses_a_second_large_request_of_a_client_and_serves_others() -> None:
    async def scenario() -> None:
        lane = LargeRequests(CoordinatorConfig(max_large_requests_per_client=1, max_large_requests_waiting=2))
        release = threading.Event()
        try:
            first = asyncio.create_task(lane.prepare("client-a", lambda: release.wait(10)))
            await asyncio.sleep(0)  # the first is admitted (waiting counted) before the others ask
            with pytest.raises(TooManyLargeRequests, match="max_large_requests_per_client"):
                await lane.prepare("client-a", lambda: True)
            other = asyncio.create_task(lane.prepare("client-b", lambda: "b"))
            await asyncio.sleep(0)
            with pytest.raises(TooManyLargeRequests, match="max_large_requests_waiting"):
                await lane.prepare("client-c", lambda: True)
            release.set()
            assert await first is True and await other == "b"
            assert await lane.prepare("client-a", lambda: "again") == "again"  # answered: it may send more
            assert (lane.served, lane.refused) == (3, 2)
        finally:
            release.set()
            lane.close()

    asyncio.run(scenario())


class _Context:
    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


def test_a_large_streams_heartbeat_is_checked_by_the_core_on_the_lane_as_a_consumer_one_is(
        tmp_path: Path) -> None:
    """A shape the core refuses (a join without its rebalance timeout) is answered with the core's
    message from the lane: the step, on the event loop, never sees the request."""
    async def run() -> tuple[Any, list[str]]:
        store = DurableStore(str(tmp_path))
        store.open()
        store.start(asyncio.get_running_loop())
        service = CoordinatorService(Coordinator(), store)
        steps: list[str] = []
        step = service.runtime.step

        def counted(*args: Any) -> Any:
            steps.append("step")
            return step(*args)

        service.runtime.step = counted  # type: ignore[method-assign]
        req = StreamsHeartbeatRequest("g", "m", 0, process_id="p")  # a join must send rebalance_timeout_ms
        data = streams_wire.streams_heartbeat_request_to_pb(req).SerializeToString()
        parse = request_parser("StreamsHeartbeat", pb.StreamsHeartbeatRequest)
        encoded = Encoded("StreamsHeartbeat", data, parse)
        try:
            answer = await service.streams_heartbeat(encoded, _Context())  # type: ignore[arg-type]
            return answer, steps
        finally:
            await service.close()
            await store.close()

    answer, steps = asyncio.run(run())
    assert wire.error_from_pb(answer.error) is ErrorCode.INVALID_REQUEST
    assert "a join (member_epoch 0) must send its rebalance_timeout_ms" in answer.message
    assert steps == []


def test_a_listing_has_frozensets_named_methods() -> None:
    owned = listed(a=[0, 1])
    both = frozenset({Shard("a", 0), Shard("a", 1)})
    assert owned.issubset(both) and owned.issuperset([Shard("a", 0)]) and not owned.issubset([Shard("a", 0)])
    assert owned.union([Shard("b", 0)]) == both | {Shard("b", 0)}
    assert owned.intersection([Shard("a", 1)]) == {Shard("a", 1)}
    assert owned.difference([Shard("a", 1)]) == {Shard("a", 0)}
    assert owned.symmetric_difference([Shard("a", 1), Shard("b", 0)]) == {Shard("a", 0), Shard("b", 0)}
    assert owned.copy() is owned
