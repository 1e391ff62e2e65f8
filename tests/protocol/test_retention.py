"""Offsets retention (`regroup.protocol.retention`), the bounds on what requests can store, and the
check of commits against the log's end: time is passed in, records replay to the same state."""

from __future__ import annotations

import pytest

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.errors import ErrorCode
from regroup.protocol.external import ExternalView
from regroup.protocol.keyrange import range_shards
from regroup.protocol.messages import Ack, HeartbeatRequest, OffsetCommitRequest, OffsetResetRequest
from regroup.protocol.records import EmptySinceRecord, GroupEpochRecord, OffsetRecord
from regroup.protocol.retention import EmptySince, duration
from regroup.protocol.shard import EMPTY, Shard
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse
from regroup.protocol.streams.topology import Topology
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import MAX_OFFSET
from tests.protocol.harness import Harness

R = 10_000  # the retention of these tests (ms)
W0 = 1_700_000_000_000  # a wall-clock time (unix ms)
T0, T1 = Shard("t", 0), Shard("t", 1)


def harness(**config: int) -> Harness:
    return Harness(topics={"t": 2}, config=CoordinatorConfig(offsets_retention_ms=R, **config))


def check(h: Harness, wall_ms: int) -> Outcome[None]:
    """One retention check at ``wall_ms``, its records kept, and replay checked after it."""
    out = h.coord.expire_offsets(wall_ms)
    h.keep(out)
    assert_replays(h)
    return out


def assert_replays(h: Harness) -> None:
    topics = TopicMetadata(h.topics)
    for rebuilt in (Coordinator.recover(h.log, h.now, h.config, topics=topics),
                    Coordinator.recover(h.coord.snapshot(), h.now, h.config, topics=topics)):
        assert rebuilt.groups == h.coord.groups
        assert rebuilt.streams.groups == h.coord.streams.groups
        assert rebuilt.retention.marks == h.coord.retention.marks


def reset(h: Harness, offsets: dict[Shard, int], group: str = "g") -> Outcome[Ack]:
    out = h.coord.reset_offsets(OffsetResetRequest(group, offsets), h.now)
    h.keep(out)
    return out


def join_streams(h: Harness, group: str = "s") -> Outcome[StreamsHeartbeatResponse]:
    """The first member of streams group ``group`` joins (topology: one subtopology reading t)."""
    out = h.coord.streams_heartbeat(StreamsHeartbeatRequest(
        group, "m", 0, process_id="P", rebalance_timeout_ms=5000, topology=Topology.of({"count": ["t"]})),
        h.now)
    h.keep(out)
    return out


def commit(h: Harness, member: str, epoch: int, offsets: dict[Shard, int],
           ends: dict[Shard, int] | None = None) -> Outcome[Ack]:
    out = h.coord.commit_offsets(OffsetCommitRequest("g", member, epoch, offsets), h.now, ends)
    h.keep(out)
    return out


# ------------------------------------------------------------------------------------ retention
def test_a_group_created_by_a_reset_expires_exactly_at_the_boundary_not_before() -> None:
    h = harness()
    assert reset(h, {T0: 5, T1: 7}).response.ok
    first = check(h, W0)  # the first check marks the group: its clock starts now
    assert first.records == (EmptySinceRecord("g", W0, 0),)
    assert h.coord.retention.marks == {"g": EmptySince(W0, 0)}
    assert check(h, W0 + R - 1).records == ()  # one ms short: nothing happens
    assert "g" in h.coord.groups
    out = check(h, W0 + R)
    assert "g" not in h.coord.groups and h.coord.list_groups() == []
    assert set(out.records) >= {OffsetRecord("g", T0, None), OffsetRecord("g", T1, None),
                                GroupEpochRecord("g", None), EmptySinceRecord("g", None)}
    assert h.coord.retention.marks == {}
    assert out.notes == ("group 'g': no members for 10 s (offsets retention 10 s): its 2 committed "
                         "offset(s) expired and the group was deleted",)
    assert [e.group_id for e in out.epoch_events] == ["g"]  # GroupDeleted: the log says "deleted"
    assert check(h, W0 + 2 * R).records == ()


def test_members_leaving_start_the_clock_and_a_member_joining_before_expiry_cancels_it() -> None:
    h = harness()
    h.ok(h.join("a"))
    assert commit(h, "a", 1, {T0: 3}).response.ok
    assert check(h, W0).records == ()  # in use: nothing to mark
    h.ok(h.hb("a", -1))
    check(h, W0 + 1)  # empty: marked
    assert h.coord.retention.marks["g"].since_ms == W0 + 1
    h.ok(h.join("b"))  # joins before the retention passes
    out = check(h, W0 + 1 + R)
    assert out.records == (EmptySinceRecord("g", None),)  # in use again: the mark goes
    assert h.group().offsets[T0].offset == 3
    h.ok(h.hb("b", -1))
    check(h, W0 + 5 * R)  # empty again: a new clock
    assert h.coord.retention.marks["g"].since_ms == W0 + 5 * R
    assert check(h, W0 + 6 * R - 1).records == ()
    check(h, W0 + 6 * R)
    assert "g" not in h.coord.groups


def test_a_join_and_leave_between_two_checks_restarts_the_clock() -> None:
    h = harness()
    reset(h, {T0: 1})
    check(h, W0)
    h.ok(h.join("a"))
    h.ok(h.hb("a", -1))  # in and out before the next check: only the epoch shows it
    out = check(h, W0 + R)
    assert "g" in h.coord.groups and out.records == (EmptySinceRecord("g", W0 + R, h.group().epoch),)
    check(h, W0 + 2 * R)
    assert "g" not in h.coord.groups


def test_an_operators_write_restarts_the_clock_in_the_same_step() -> None:
    h = harness()
    reset(h, {T0: 1})
    check(h, W0)
    again = reset(h, {T0: 2})
    assert again.records[-1] == EmptySinceRecord("g", None) and "g" not in h.coord.retention.marks
    check(h, W0 + R - 5)  # marked again from here
    check(h, W0 + R)
    assert "g" in h.coord.groups
    deleted = h.keep(h.coord.delete_offsets("g", (T0,)))
    assert deleted.records[-1] == EmptySinceRecord("g", None)
    check(h, W0 + 2 * R)
    assert h.keep(h.coord.set_parallelism("g", "t", 2, h.now)).records[-1] == EmptySinceRecord("g", None)
    gone = h.keep(h.coord.delete_group("g"))
    assert gone.response.ok and "g" not in h.coord.retention.marks
    assert_replays(h)


def test_a_restart_replays_the_marks_and_the_clock_goes_on() -> None:
    h = harness()
    reset(h, {T0: 1})
    check(h, W0)
    h.coord = Coordinator.recover(h.log, h.now + 99_999, h.config, topics=TopicMetadata(h.topics))
    assert h.coord.retention.marks == {"g": EmptySince(W0, 0)}
    assert check(h, W0 + R - 1).records == ()
    check(h, W0 + R)  # counted from before the restart, not from it
    assert "g" not in h.coord.groups


def test_key_range_fragments_expire_with_the_rest() -> None:
    h = harness()
    h.keep(h.coord.set_parallelism("g", "t", 2, h.now))
    resp = h.ok(h.join("a"))
    owned = resp.assignment or EMPTY
    resp = h.ok(h.hb("a", resp.member_epoch, owned=owned))
    ranges = sorted(owned)
    assert ranges == sorted(range_shards("t", 0, 2) + range_shards("t", 1, 2))
    assert commit(h, "a", resp.member_epoch, dict.fromkeys(ranges, 4)).response.ok
    assert h.group().offset_ranges  # kept in fragments
    h.ok(h.hb("a", -1))
    check(h, W0)
    out = check(h, W0 + R)
    assert "g" not in h.coord.groups
    assert {r.shard for r in out.records if isinstance(r, OffsetRecord)} == set(ranges)


def test_a_group_still_held_by_the_group_it_migrates_from_does_not_expire() -> None:
    h = harness()
    declared = h.keep(h.coord.external_owners("g", "kafka:g", None, h.now))  # holds everything until read
    assert declared.response.ok
    check(h, W0)
    check(h, W0 + 2 * R)
    assert "g" in h.coord.groups and h.coord.retention.marks == {}
    read = ExternalView(frozenset(), {T0: 42}, settled=True)  # Kafka's group let go, with its offset
    h.keep(h.coord.external_owners("g", "kafka:g", read, h.now))
    check(h, W0 + 3 * R)  # the clock starts at the first check after the release
    check(h, W0 + 4 * R - 1)
    assert h.group().offsets[T0].offset == 42
    check(h, W0 + 4 * R)
    assert "g" not in h.coord.groups


def test_an_empty_streams_group_expires_too() -> None:
    h = harness()
    epoch = join_streams(h).response.member_epoch
    assert commit_streams(h, epoch).response.ok
    check(h, W0)
    assert h.coord.retention.marks == {}
    h.keep(h.coord.streams_heartbeat(StreamsHeartbeatRequest("s", "m", -1), h.now))
    check(h, W0 + 1)
    assert check(h, W0 + R).records == ()
    out = check(h, W0 + 1 + R)
    assert "s" not in h.coord.streams.groups and out.notes[0].startswith("streams group 's': no members")


def commit_streams(h: Harness, epoch: int) -> Outcome[Ack]:
    out = h.coord.commit_offsets(OffsetCommitRequest("s", "m", epoch, {T0: 9}), h.now)
    h.keep(out)
    return out


def test_a_streams_take_over_drops_the_consumer_groups_mark() -> None:
    h = harness()
    reset(h, {T0: 1}, group="s")
    check(h, W0)
    out = join_streams(h)
    assert out.response.error is ErrorCode.NONE and EmptySinceRecord("s", None) in out.records
    assert h.coord.retention.marks == {}
    assert_replays(h)


def test_retention_must_be_positive() -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="offsets_retention_ms must be a positive"):
            CoordinatorConfig(offsets_retention_ms=bad)
    assert CoordinatorConfig().offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert CoordinatorConfig().retention_check_ms == 60_000
    assert CoordinatorConfig(offsets_retention_ms=2_000).retention_check_ms == 200
    assert CoordinatorConfig(offsets_retention_ms=1).retention_check_ms == 100


def test_durations_read_like_an_operator_says_them() -> None:
    assert [duration(ms) for ms in (1_500, 90 * 60_000, 5 * 3600_000, 7 * 86400_000, 50 * 3600_000)] == \
        ["1.5 s", "90 min", "5 h", "7 d", "2 d 2 h"]


# ------------------------------------------------------------------------------------ limits
def test_a_coordinator_holds_at_most_max_groups_groups() -> None:
    h = harness(max_groups=2)
    assert reset(h, {T0: 1}, group="a").response.ok
    assert reset(h, {T0: 1}, group="b").response.ok
    full = reset(h, {T0: 1}, group="c")
    assert full.response.error is ErrorCode.GROUP_MAX_SIZE_REACHED and not full.records
    assert "already holds 2 groups, the most it allows (max_groups)" in full.response.message
    assert reset(h, {T0: 2}, group="a").response.ok  # an existing group is no new group
    join = h.join("m", group="c")
    assert join.error is ErrorCode.GROUP_MAX_SIZE_REACHED and "c" not in h.coord.groups
    assert h.coord.set_parallelism("c", "t", 2, h.now).response.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.coord.external_owners("c", "kafka:c", None, h.now).response.error \
        is ErrorCode.GROUP_MAX_SIZE_REACHED
    streams = h.coord.streams_heartbeat(StreamsHeartbeatRequest(
        "c", "m", 0, process_id="P", rebalance_timeout_ms=5000, topology=Topology.of({"x": ["t"]})), h.now)
    assert streams.response.error is ErrorCode.GROUP_MAX_SIZE_REACHED and "c" not in h.coord.streams.groups
    assert h.coord.heartbeat(HeartbeatRequest("c", "m", 1), h.now).response.error \
        is ErrorCode.GROUP_ID_NOT_FOUND  # not a join: the usual answer
    assert h.keep(h.coord.delete_group("a")).response.ok
    assert h.ok(h.join("m", group="c")).member_epoch == 1  # room again


def test_one_reset_sets_at_most_max_reset_offsets() -> None:
    h = harness(max_reset_offsets=3)
    too_many = reset(h, {Shard("t", p): 1 for p in range(4)})
    assert too_many.response.error is ErrorCode.INVALID_REQUEST and not too_many.records
    assert too_many.response.message == ("an offset reset sets at most 3 offsets (max_reset_offsets), "
                                         "this one 4; split it into several resets")
    assert reset(h, {Shard("t", p): 1 for p in range(3)}).response.ok


def test_an_absurd_offset_is_refused_and_cannot_poison_a_partition() -> None:
    h = harness()
    h.ok(h.join("a"))
    for huge in (2**63 - 1, MAX_OFFSET + 1):
        refused = commit(h, "a", 1, {T0: huge})
        assert refused.response.error is ErrorCode.INVALID_REQUEST and not refused.records
        assert f"offset {huge} for t:0 is beyond any log" in refused.response.message
    assert commit(h, "a", 1, {T0: 10}).response.ok  # the partition takes ordinary commits on
    assert commit(h, "a", 1, {T0: MAX_OFFSET}).response.ok  # the bound itself is an offset
    h.ok(h.hb("a", -1))
    assert reset(h, {T0: 2**63 - 1}).response.error is ErrorCode.INVALID_REQUEST
    assert reset(h, {T0: 0}).response.ok  # an operator repairs what the bound let through


def test_a_commit_beyond_the_known_log_end_is_refused() -> None:
    h = harness()
    h.ok(h.join("a"))
    ends = {T0: 100, T1: 50}
    beyond = commit(h, "a", 1, {T0: 100, T1: 51}, ends)
    assert beyond.response.error is ErrorCode.INVALID_REQUEST and not beyond.records  # all or nothing
    assert beyond.response.message == (
        "offset 51 for t:1 is beyond the end of the partition in the log (50, the offset its next record "
        "gets); a committed offset names the next record to read, so it is at most the log's end")
    assert commit(h, "a", 1, {T0: 100, T1: 50}, ends).response.ok  # at the end: everything read
    assert commit(h, "a", 1, {T0: 10**6}, {T1: 50}).response.ok  # where the end is unknown: no check
    half = range_shards("t", 1, 2)[0]
    assert commit(h, "a", 1, {half: 51}, ends).response.error is ErrorCode.INVALID_REQUEST
    h.ok(h.hb("a", -1))
    assert reset(h, {T1: 51}).response.ok  # an operator's reset is not checked: another one undoes it


def test_a_zombie_hears_it_is_one_before_it_hears_about_the_log_end() -> None:
    h = harness()
    h.ok(h.join("a"))
    stale = commit(h, "a", 7, {T0: 10**9}, {T0: 5})
    assert stale.response.error is ErrorCode.STALE_MEMBER_EPOCH  # fencing answers first
    assert commit(h, "gone", 1, {T0: 10**9}, {T0: 5}).response.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_streams_groups_commits_are_checked_against_the_log_end_too() -> None:
    h = harness()
    epoch = join_streams(h).response.member_epoch
    ends = {T0: 5}
    out = h.keep(h.coord.commit_offsets(OffsetCommitRequest("s", "m", epoch, {T0: 6}), h.now, ends))
    assert out.response.error is ErrorCode.INVALID_REQUEST and "beyond the end" in out.response.message
    zombie = h.coord.commit_offsets(OffsetCommitRequest("s", "m", epoch + 3, {T0: 6}), h.now, ends)
    assert zombie.response.error is ErrorCode.STALE_MEMBER_EPOCH
    done = h.coord.commit_offsets(OffsetCommitRequest("s", "m", epoch, {T0: 5}), h.now, ends)
    assert h.keep(done).response.ok
