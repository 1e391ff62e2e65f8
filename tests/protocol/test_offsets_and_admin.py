"""Offset commits fenced by epoch and ownership, admin operations, and group deletion."""

from __future__ import annotations

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.protocol.state import GroupState
from tests.protocol.harness import Harness, shards

T0, T1 = Shard("t", 0), Shard("t", 1)


def commit(h: Harness, member: str, epoch: int, offsets: dict[Shard, int], group: str = "g") -> ErrorCode:
    out = h.keep(h.coord.commit_offsets(OffsetCommitRequest(group, member, epoch, offsets), h.now))
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


def test_admin_only_on_empty_group_and_may_rewind() -> None:
    h = Harness(topics={"t": 2})
    h.ok(h.join("a"))
    assert commit(h, "a", 1, {T0: 10}) is ErrorCode.NONE
    assert commit(h, "", -1, {T0: 0}) is ErrorCode.NON_EMPTY_GROUP
    assert h.coord.delete_offsets("g", None).response.error is ErrorCode.NON_EMPTY_GROUP
    assert h.coord.delete_group("g").response.error is ErrorCode.NON_EMPTY_GROUP
    h.ok(h.hb("a", -1))
    assert commit(h, "", -1, {T0: 0}) is ErrorCode.NONE  # reset backwards on an empty group
    assert h.group().offsets[T0].offset == 0
    assert commit(h, "", -1, {T0: 3}, group="fresh") is ErrorCode.NONE  # before anyone joined
    assert h.coord.groups["fresh"].state is GroupState.EMPTY


def test_delete_offsets_and_group() -> None:
    h = Harness(topics={"t": 2})
    assert commit(h, "", -1, {T0: 1, T1: 2}) is ErrorCode.NONE
    assert h.keep(h.coord.delete_offsets("g", (T0,))).response.ok
    assert set(h.group().offsets) == {T1}
    assert h.keep(h.coord.delete_group("g")).response.ok
    assert "g" not in h.coord.groups
    assert h.coord.delete_group("g").response.error is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.coord.fetch_offsets(OffsetFetchRequest("g")).offsets == {}
