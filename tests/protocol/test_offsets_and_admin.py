"""Offset commits fenced by epoch and ownership, admin operations, and group deletion."""

from __future__ import annotations

import pytest

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest, OffsetResetRequest
from regroup.protocol.shard import Shard
from regroup.protocol.state import GroupState
from tests.protocol.harness import Harness, shards

T0, T1 = Shard("t", 0), Shard("t", 1)


def commit(h: Harness, member: str, epoch: int, offsets: dict[Shard, int], group: str = "g") -> ErrorCode:
    out = h.keep(h.coord.commit_offsets(OffsetCommitRequest(group, member, epoch, offsets), h.now))
    return out.response.error


def reset(h: Harness, offsets: dict[Shard, int], group: str = "g") -> ErrorCode:
    out = h.keep(h.coord.reset_offsets(OffsetResetRequest(group, offsets), h.now))
    return out.response.error


def test_owner_commits_and_fetches() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    assert commit(h, "a", 1, {T0: 10, T1: 5}) is ErrorCode.NONE
    resp = h.coord.fetch_offsets(OffsetFetchRequest("g", "a", 1))
    assert {s: o.offset for s, o in resp.offsets.items()} == {T0: 10, T1: 5}
    assert resp.offsets[T0].commit_epoch == 1
    assert h.coord.fetch_offsets(OffsetFetchRequest("g", "a", 0)).error is ErrorCode.STALE_MEMBER_EPOCH


def test_stale_epoch_unknown_member_and_not_owned() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    assert commit(h, "a", 2, {T0: 1}) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit(h, "zz", 1, {T0: 1}) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(h, "a", 1, {Shard("other", 0): 1}) is ErrorCode.NOT_OWNED
    assert commit(h, "a", 1, {T0: 1}, group="nope") is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.group().offsets == {}


def test_commit_is_all_or_nothing_and_never_backwards() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    assert commit(h, "a", 1, {T0: 10}) is ErrorCode.NONE
    assert commit(h, "a", 1, {T0: 9, T1: 3}) is ErrorCode.OFFSET_OUT_OF_ORDER
    assert T1 not in h.group().offsets and h.group().offsets[T0].offset == 10
    assert commit(h, "a", 1, {T0: 10}) is ErrorCode.NONE  # idempotent re-commit is fine


def test_member_pending_revocation_may_commit_then_zombie_cannot() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    h.ok(h.join("b"))
    ra = h.ok(h.hb("a", 1, owned=shards("t", 0, 1)))
    revoked = next(iter(shards("t", 0, 1) - (ra.assignment or frozenset())))
    assert commit(h, "a", 1, {revoked: 7}) is ErrorCode.NONE  # clean hand-off: commit, then release
    h.ok(h.hb("a", 1, owned=ra.assignment))
    assert commit(h, "a", 1, {revoked: 8}) is ErrorCode.STALE_MEMBER_EPOCH  # a zombie write
    assert commit(h, "a", 2, {revoked: 8}) is ErrorCode.NOT_OWNED


def test_invalid_commits() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    assert commit(h, "a", 1, {}) is ErrorCode.INVALID_REQUEST
    assert commit(h, "a", 1, {T0: -1}) is ErrorCode.INVALID_REQUEST
    out = h.coord.commit_offsets(OffsetCommitRequest("g", "a", 1, {T0: 1}, metadata="x" * 5000), h.now)
    assert out.response.error is ErrorCode.INVALID_REQUEST and "metadata" in out.response.message
    # An in-process caller's wrong types get an answer naming the field, not an exception.
    out = h.coord.commit_offsets(OffsetCommitRequest("g", "a", 1, {T0: 1}, metadata=None), h.now)  # type: ignore[arg-type]
    assert out.response.error is ErrorCode.INVALID_REQUEST and "metadata" in out.response.message
    fetched = h.coord.fetch_offsets(OffsetFetchRequest("g", "", "1", None))  # type: ignore[arg-type]
    assert fetched.error is ErrorCode.INVALID_REQUEST and "member_epoch" in fetched.message


def test_admin_only_on_empty_group_and_may_rewind() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    assert commit(h, "a", 1, {T0: 10}) is ErrorCode.NONE
    assert reset(h, {T0: 0}) is ErrorCode.NON_EMPTY_GROUP
    assert h.coord.delete_offsets("g", None).response.error is ErrorCode.NON_EMPTY_GROUP
    assert h.coord.delete_group("g").response.error is ErrorCode.NON_EMPTY_GROUP
    h.ok(h.hb("a", -1))
    assert reset(h, {T0: 0}) is ErrorCode.NONE  # reset backwards on an empty group
    assert h.group().offsets[T0].offset == 0
    assert reset(h, {T0: 3}, group="fresh") is ErrorCode.NONE  # before anyone joined
    assert h.coord.groups["fresh"].state is GroupState.EMPTY


def test_delete_offsets_and_group() -> None:
    h = Harness(topics={"t": 2})
    assert reset(h, {T0: 1, T1: 2}) is ErrorCode.NONE
    assert h.keep(h.coord.delete_offsets("g", (T0,))).response.ok
    assert set(h.group().offsets) == {T1}
    assert h.keep(h.coord.delete_group("g")).response.ok
    assert "g" not in h.coord.groups
    assert h.coord.delete_group("g").response.error is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.coord.fetch_offsets(OffsetFetchRequest("g")).offsets == {}


def test_only_members_commit_an_operator_resets() -> None:
    h = Harness(topics={"t": 2})
    assert commit(h, "", -1, {T0: 3}) is ErrorCode.INVALID_REQUEST
    refused = h.coord.commit_offsets(OffsetCommitRequest("g", "", -1, {T0: 3}), h.now).response
    assert "ResetOffsets" in refused.message
    assert "g" not in h.coord.groups
    assert reset(h, {T0: 3}) is ErrorCode.NONE and h.group().offsets[T0].commit_epoch == -1
    assert reset(h, {}) is ErrorCode.INVALID_REQUEST
    assert reset(h, {T0: -1}) is ErrorCode.INVALID_REQUEST
    assert reset(h, {T0: 1}, group="") is ErrorCode.INVALID_REQUEST


def test_operator_requests_are_validated_by_the_core() -> None:
    h = Harness(topics={"t": 2})
    long_id = "x" * 300
    assert h.coord.fetch_offsets(OffsetFetchRequest("")).error is ErrorCode.INVALID_REQUEST
    assert h.coord.fetch_offsets(OffsetFetchRequest("g", long_id, 1)).error is ErrorCode.INVALID_REQUEST
    bad_shard = OffsetFetchRequest("g", shards=(Shard("t", -1),))
    assert h.coord.fetch_offsets(bad_shard).error is ErrorCode.INVALID_REQUEST
    assert h.coord.delete_offsets("", None).response.error is ErrorCode.INVALID_REQUEST
    assert h.coord.delete_offsets("g", (Shard("", 0),)).response.error is ErrorCode.INVALID_REQUEST
    assert h.coord.delete_group(long_id).response.error is ErrorCode.INVALID_REQUEST
    assert h.coord.watch("g", "").error is ErrorCode.INVALID_REQUEST
    assert h.coord.watch("", "a").error is ErrorCode.INVALID_REQUEST
    assert h.coord.watch("g", "a").ok  # a member may watch before it joins
    with pytest.raises(ProtocolError) as e:
        h.coord.describe_group("")
    assert e.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(ProtocolError) as e:
        h.coord.assignment_spec("g", long_id, 1)
    assert e.value.code is ErrorCode.INVALID_REQUEST
    bad_install = h.coord.install_assignment("", "a", 1, 1, {}, h.now)
    assert bad_install.response.error is ErrorCode.INVALID_REQUEST and bad_install.records == ()

