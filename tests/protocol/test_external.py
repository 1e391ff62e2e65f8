"""Migrating from an external group (a live Kafka group): `regroup.protocol.external`'s rules through
the coordinator's door — grants wait while the external group holds a partition, a release hands over
its committed offset first and wakes the waiters, and all of it survives a restart."""

from __future__ import annotations

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.external import ExternalView
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest, OffsetResetRequest
from regroup.protocol.offsets import RESET_COMMIT_EPOCH
from regroup.protocol.records import ExternalHold, ExternalHoldRecord, MemberStatus, OffsetRecord
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.streams.assignment import NO_TASKS
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.topology import Topology
from regroup.protocol.topics import TopicMetadata
from tests.protocol.harness import Harness, shards

KAFKA = "kafka:orders-app"
ALL = shards("t", 0, 1, 2, 3)


def see(h: Harness, view: ExternalView | None, group: str = "g", holder: str = KAFKA):  # type: ignore[no-untyped-def]
    out = h.keep(h.coord.external_owners(group, holder, view, h.now))
    assert out.response.ok, out.response.message
    return out


def migrating(held: frozenset[Shard] = ALL, offsets: dict[Shard, int] | None = None) -> Harness:
    """A group that migrates from a Kafka group holding ``held``, with member ``a`` joined."""
    h = Harness(topics={"t": 4})
    see(h, None)
    see(h, ExternalView(held, offsets or {}))
    h.ok(h.join("a"))
    return h


def test_nothing_is_granted_before_the_first_read() -> None:
    h = Harness(topics={"t": 4})
    out = see(h, None)
    assert out.records == (ExternalHoldRecord("g", ExternalHold(KAFKA, EMPTY, known=False)),)
    resp = h.ok(h.join("a"))
    assert resp.assignment == EMPTY
    assert h.group().current["a"].status is MemberStatus.UNRELEASED
    assert see(h, None).records == ()  # declaring again changes nothing
    # An unsettled first read is no read: everything stays held.
    assert see(h, ExternalView(shards("t", 0), settled=False)).records == ()
    assert h.ok(h.hb("a", 1, owned=EMPTY)).member_epoch == 1
    assert h.group().current["a"].assigned == EMPTY


def test_held_partitions_wait_and_released_ones_start_at_the_adopted_offsets() -> None:
    h = migrating()
    assert h.group().current["a"].assigned == EMPTY
    out = see(h, ExternalView(shards("t", 0, 1), {Shard("t", p): 100 + p for p in range(4)}))
    # Rule 3's order: the offsets first, then the release; and the waiting member is woken.
    assert [type(r) for r in out.records] == [OffsetRecord, OffsetRecord, ExternalHoldRecord]
    assert out.wake == frozenset({("g", "a")})
    resp = h.ok(h.hb("a", 1, owned=EMPTY))
    assert resp.assignment == shards("t", 2, 3)
    assert h.group().current["a"].status is MemberStatus.UNRELEASED  # t0, t1 still held
    fetched = h.coord.fetch_offsets(OffsetFetchRequest("g", "a", 1)).offsets
    assert {s: c.offset for s, c in fetched.items()} == {Shard("t", 2): 102, Shard("t", 3): 103}
    assert fetched[Shard("t", 2)].commit_epoch == RESET_COMMIT_EPOCH
    assert fetched[Shard("t", 2)].metadata == f"adopted from {KAFKA}"
    # The Kafka group empties: the rest follows, and the member is stable.
    out = see(h, ExternalView(EMPTY, {Shard("t", 0): 7, Shard("t", 1): 8}))
    assert out.wake == frozenset({("g", "a")})
    assert h.ok(h.hb("a", 1, owned=shards("t", 2, 3))).assignment == ALL
    assert h.group().current["a"].status is MemberStatus.STABLE
    assert see(h, ExternalView(EMPTY, {Shard("t", 0): 7, Shard("t", 1): 8})).records == ()


def test_an_unsettled_view_only_grows_the_hold() -> None:
    h = migrating(held=shards("t", 0, 1))
    assert h.ok(h.hb("a", 1, owned=EMPTY)).assignment == shards("t", 2, 3)
    # Mid-rebalance in Kafka, t1 is in nobody's assignment for a moment: not a release.
    assert see(h, ExternalView(shards("t", 0), {Shard("t", 1): 5}, settled=False)).records == ()
    h.ok(h.hb("a", 1, owned=shards("t", 2, 3)))
    assert h.group().current["a"].assigned == shards("t", 2, 3)
    # It may grow while unsettled (and a hold never revokes: a keeps t2, and the step says so).
    out = see(h, ExternalView(shards("t", 0, 1, 2), settled=False))
    assert h.group().external == ExternalHold(KAFKA, shards("t", 0, 1, 2))
    assert any("t:2" in n and "two consumers" in n for n in out.notes)
    h.ok(h.hb("a", 1, owned=shards("t", 2, 3)))
    assert h.group().current["a"].assigned == shards("t", 2, 3)
    # Settled again without t1: released, adopted; t2 is a's, its offset is not touched.
    h.keep(h.coord.commit_offsets(OffsetCommitRequest("g", "a", 1, {Shard("t", 2): 50}), h.now))
    out = see(h, ExternalView(shards("t", 0), {Shard("t", 1): 11, Shard("t", 2): 3}))
    assert any("t:2" in n and "not adopted" in n for n in out.notes)
    offsets = h.group().offsets
    assert offsets[Shard("t", 1)].offset == 11 and offsets[Shard("t", 2)].offset == 50


def test_the_first_read_adopts_only_where_nothing_is_committed() -> None:
    h = Harness(topics={"t": 4})
    h.keep(h.coord.reset_offsets(OffsetResetRequest("g", {Shard("t", 0): 500}), h.now))
    see(h, None)
    out = see(h, ExternalView(EMPTY, {Shard("t", 0): 1, Shard("t", 1): 2}))
    assert h.group().offsets[Shard("t", 0)].offset == 500  # regroup's own stays
    assert h.group().offsets[Shard("t", 1)].offset == 2
    assert out.records[-1] == ExternalHoldRecord("g", ExternalHold(KAFKA, EMPTY))


def test_a_finished_migration_adopts_nothing_again_after_a_restart() -> None:
    h = migrating(held=shards("t", 0))
    see(h, ExternalView(EMPTY, {Shard("t", 0): 9}))
    h.ok(h.hb("a", 1, owned=EMPTY))
    h.keep(h.coord.commit_offsets(OffsetCommitRequest("g", "a", 1, {Shard("t", 0): 40}), h.now))
    rebuilt = Coordinator.recover(h.log, h.now, topics=TopicMetadata({"t": 4}))
    assert rebuilt.groups == h.coord.groups
    # The restarted coordinator declares the migration and reads the (empty) Kafka group again.
    assert rebuilt.external_owners("g", KAFKA, None, h.now).records == ()
    again = rebuilt.external_owners("g", KAFKA, ExternalView(EMPTY, {Shard("t", 0): 9}), h.now)
    assert again.records == ()
    assert rebuilt.groups["g"].offsets[Shard("t", 0)].offset == 40


def test_a_restart_keeps_blocking_what_was_held() -> None:
    h = migrating(held=shards("t", 0, 1))
    h.ok(h.hb("a", 1, owned=EMPTY))
    for rebuilt in (Coordinator.recover(h.log, h.now, topics=TopicMetadata({"t": 4})),
                    Coordinator.recover(h.coord.snapshot(), h.now, topics=TopicMetadata({"t": 4}))):
        assert rebuilt.groups == h.coord.groups
        h2 = Harness(topics={"t": 4})
        h2.coord = rebuilt
        h2.ok(h2.hb("a", 1, owned=shards("t", 2, 3)))
        assert h2.group().current["a"].assigned == shards("t", 2, 3)
        assert h2.group().current["a"].status is MemberStatus.UNRELEASED
        out = h2.keep(rebuilt.external_owners("g", KAFKA, ExternalView(EMPTY, {Shard("t", 0): 1}), h2.now))
        assert out.wake == frozenset({("g", "a")})
        assert h2.ok(h2.hb("a", 1, owned=shards("t", 2, 3))).assignment == ALL


def test_waiters_of_several_members_are_woken_only_for_their_partitions() -> None:
    h = migrating(held=ALL)
    h.ok(h.join("b"))
    assert h.ok(h.hb("a", 1, owned=EMPTY)).member_epoch == 2  # the new target epoch, still waiting
    target_a, target_b = h.group().target["a"], h.group().target["b"]
    only_a = frozenset(target_a)
    out = see(h, ExternalView(target_b, {}))
    assert out.wake == frozenset({("g", "a")})
    assert h.ok(h.hb("a", 2, owned=EMPTY)).assignment == only_a
    out = see(h, ExternalView(EMPTY, {}))
    assert out.wake == frozenset({("g", "b")})
    assert any("no committed offset" in n for n in out.notes)


def test_key_ranges_wait_for_the_whole_partition_and_take_its_offset() -> None:
    h = Harness(topics={"t": 2})
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    half = Shard("t", 0, 0, 1 << 31)
    h.keep(h.coord.reset_offsets(OffsetResetRequest("g", {half: 3}), h.now))
    see(h, None)
    see(h, ExternalView(shards("t", 0), {}))
    h.ok(h.join("a"))
    resp = h.ok(h.hb("a", 1, owned=EMPTY))
    assert {s.partition for s in resp.assignment or EMPTY} == {1}
    out = see(h, ExternalView(EMPTY, {Shard("t", 0): 77}))
    assert OffsetRecord("g", half, None) in out.records  # the fragment goes, the whole comes
    assert h.group().offsets_overlapping(half) == {Shard("t", 0): h.group().offsets[Shard("t", 0)]}
    assert out.wake == frozenset({("g", "a")})
    assert {s.partition for s in h.ok(h.hb("a", 1, owned=resp.assignment)).assignment or EMPTY} == {0, 1}


def test_an_operator_ends_a_migration() -> None:
    h = migrating(held=ALL)
    out = h.keep(h.coord.end_external_hold("g", h.now))
    assert out.records == (ExternalHoldRecord("g", None),)
    assert out.wake == frozenset({("g", "a")})
    assert h.ok(h.hb("a", 1, owned=EMPTY)).assignment == ALL
    assert h.coord.end_external_hold("g", h.now).records == ()
    nothing = h.coord.end_external_hold("nope", h.now)
    assert nothing.response.ok and nothing.records == ()


def test_another_external_group_starts_over() -> None:
    h = migrating(held=EMPTY, offsets={Shard("t", 0): 5})
    out = see(h, None, holder="kafka:other")
    assert out.records == (ExternalHoldRecord("g", ExternalHold("kafka:other", EMPTY, known=False)),)


def test_malformed_views_and_streams_groups_are_refused() -> None:
    h = Harness(topics={"t": 2})
    bad = [
        ("", KAFKA, None),
        ("g", "", None),
        ("g", KAFKA, ExternalView(frozenset({Shard("t", 0, 0, 5)}))),
        ("g", KAFKA, ExternalView(EMPTY, {Shard("t", 0): -1})),
    ]
    for gid, holder, view in bad:
        out = h.coord.external_owners(gid, holder, view, h.now)
        assert out.response.error is ErrorCode.INVALID_REQUEST and out.records == ()
    joined = h.coord.streams_heartbeat(StreamsHeartbeatRequest(
        "sg", "m", 0, process_id="p", rebalance_timeout_ms=1000, topology=Topology.of({"s": ["t"]}),
        owned=NO_TASKS, task_offsets={}), h.now)
    assert joined.response.error is ErrorCode.NONE, joined.response.message
    assert h.coord.external_owners("sg", KAFKA, None, h.now).response.error is ErrorCode.INVALID_REQUEST


def test_a_group_is_not_deleted_while_held() -> None:
    h = Harness(topics={"t": 4})
    see(h, None)
    refused = h.coord.delete_group("g").response
    assert refused.error is ErrorCode.NON_EMPTY_GROUP and "end the migration" in refused.message
    see(h, ExternalView(shards("t", 0), {Shard("t", 0): 5}))
    see(h, ExternalView(EMPTY, {Shard("t", 0): 7}))  # finished: nothing held any more
    assert h.keep(h.coord.delete_group("g")).response.ok
    assert "g" not in h.coord.groups


def test_a_first_read_of_a_group_with_no_members_and_no_offsets_releases_nothing() -> None:
    """Review finding: a mistyped Kafka group name (or the wrong cluster) reads as an empty group
    with no offsets; releasing on it would let regroup read every partition beside the live Kafka
    consumers. The hold stays unread until a read shows members or offsets."""
    h = Harness(topics={"t": 4})
    see(h, None)
    h.ok(h.join("a"))
    assert see(h, ExternalView(EMPTY, {})).records == ()
    assert h.group().external == ExternalHold(KAFKA, EMPTY, known=False)
    assert h.ok(h.hb("a", 1, owned=EMPTY)).member_epoch == 1
    assert h.group().current["a"].assigned == EMPTY
    # A group that committed but has no members any more: its offsets say it is the right one.
    out = see(h, ExternalView(EMPTY, {Shard("t", 1): 4}))
    assert ("g", "a") in out.wake
    assert h.coord.fetch_offsets(OffsetFetchRequest("g")).offsets[Shard("t", 1)].offset == 4
    h.ok(h.hb("a", 1, owned=EMPTY))
    assert h.group().current["a"].assigned == ALL


def test_a_streams_group_cannot_take_over_the_id_of_a_group_still_held() -> None:
    h = Harness(topics={"t": 4})
    see(h, None)  # declared, nobody joined: an empty consumer group with a hold
    req = StreamsHeartbeatRequest("g", "m", 0, process_id="p", rebalance_timeout_ms=1000,
                                  topology=Topology.of({"s": ["t"]}), owned=NO_TASKS, task_offsets={})
    refused = h.coord.streams_heartbeat(req, h.now).response
    assert refused.error is ErrorCode.INVALID_REQUEST and "migrating" in refused.message
    assert h.group().external is not None
