"""A partition split on the producer side while a shard is owned: where the lanes cut from it begin,
checked against the real coordinator core (tests/protocol/harness.py), not a scripted one.

The coordinator refuses a commit of an owned shard, or of a lane inside it, below the shard's
*floor* (regroup/protocol/offsets.py: the lowest fragment once fragments cover every key), and
promises an owner that it can always commit "provided each lane starts at least where its own keys
resume (`microbatch.clip`)". A lane cut at a split used to begin at the cut lane's position: a part
whose keys all have fragments above it then sat below them, and once the owner's commits of its
other lanes raised the rest of the shard, the floor rose above that part — every later commit of
the owner was refused until the part read past its own fragments (and a revocation's commit was
refused too, so the next owner read again what this one had done).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from regroup.client import consumer as consumer_module
from regroup.client.errors import CommitFailedError, OffsetFetchError
from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import KEY_SPACE, key_hash
from regroup.protocol.member import Assign, Revoke
from regroup.protocol.messages import OffsetCommitRequest, OffsetFetchRequest, OffsetResetRequest
from regroup.protocol.shard import Shard
from tests.client.test_consumer_shell import FakeMembership
from tests.protocol.harness import Harness
from tests.protocol.test_parallelism import Members

HALF = KEY_SPACE // 2
WHOLE, LOW, HIGH = Shard("t", 0), Shard("t", 0, 0, HALF), Shard("t", 0, HALF, KEY_SPACE)
KEYS = [f"k{i}".encode() for i in range(64)]
LOW_KEY = next(k for k in KEYS if key_hash(k, 0) < HALF)
HIGH_KEY = next(k for k in KEYS if key_hash(k, 0) >= HALF)


class CoreMembership(FakeMembership):
    """The consumer's session answered by the coordinator core: its commits and fetches are the
    core's, at the member's epoch there."""

    h: Harness
    member: str
    member_epoch: int

    def fetch_committed(self, shards: Collection[Shard]) -> dict[Shard, int]:
        req = OffsetFetchRequest("g", self.member, self.member_epoch, tuple(shards))
        got = self.h.coord.fetch_offsets(req)
        if got.error is not ErrorCode.NONE:
            raise OffsetFetchError(got.message)
        return {s: c.offset for s, c in got.offsets.items()}

    def commit(self, offsets: dict[Shard, int], metadata: str = "") -> None:
        req = OffsetCommitRequest("g", self.member, self.member_epoch, offsets, metadata)
        out = self.h.keep(self.h.coord.commit_offsets(req, self.h.now)).response
        self.commits.append(dict(offsets))
        if out.error is not ErrorCode.NONE:
            raise CommitFailedError(out.message, out.error)


def fragments(h: Harness) -> dict[Shard, int]:
    return {s: c.offset for s, c in h.group().offsets.items()}


def consumer(h: Harness, ms: Members, lg: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
             ) -> tuple[consumer_module.Consumer, CoreMembership]:
    monkeypatch.setattr(consumer_module, "Membership", CoreMembership)
    monkeypatch.setattr(consumer_module, "CoordinatorClient", lambda *a, **k: None)
    c = consumer_module.Consumer("g", coordinator="unused:1", log=lg, topics=["t"], max_batch_records=100)
    m = c._membership
    assert isinstance(m, CoreMembership)
    m.h, m.member, m.member_epoch = h, "a", ms.epoch["a"]
    return c, m


def drain(c: consumer_module.Consumer) -> list[Any]:
    out: list[Any] = []
    while batch := c.consume(100, 0.2):
        out += batch
    return out


def test_a_lane_cut_at_a_split_begins_where_its_own_keys_resume_so_the_owner_can_always_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(topics={"t": 1})
    # A former owner's progress: the lower half done below 10, the upper half below 30.
    reset = h.coord.reset_offsets(OffsetResetRequest("g", {LOW: 10, HIGH: 30}), h.now)
    assert h.keep(reset).response.error is ErrorCode.NONE
    ms = Members(h, ["a"])
    ms.settle()
    assert ms.owned["a"] == {WHOLE}
    lg = EmbeddedLog(tmp_path / "log", fsync="never")
    lg.create_topic("t", 1)
    lg.produce("t", 0, [LogRecord(LOW_KEY if i % 2 else HIGH_KEY, str(i).encode(), 0) for i in range(40)])
    c, m = consumer(h, ms, lg, monkeypatch)
    m.actions = [Assign(frozenset({WHOLE}))]
    c._run_actions()  # one piece: read as itself, from 10, skipping the upper half's records below 30
    assert c._positions == {WHOLE: 10}
    lg.split_partition("t", 0, 2)  # the pieces [0, HALF) and [HALF, KEY_SPACE): exactly LOW and HIGH
    assert lg.key_pieces("t", 0) == ((0, HALF), (HALF, KEY_SPACE))
    got = c.consume(100, 0.5)  # cut into LOW and HIGH; reads LOW's piece
    assert [int(r.value or b"") for r in got] == list(range(11, 40, 2))
    c.commit()
    assert fragments(h) == {LOW: 40, HIGH: 30}  # the floor is now 30
    lg.produce("t", 0, [LogRecord(LOW_KEY, str(i).encode(), 0) for i in range(40, 45)])
    assert [int(r.value or b"") for r in c.consume(100, 0.5)] == list(range(40, 45))  # LOW's turn again
    c.commit()  # HIGH has not read yet: still at or above the floor, so accepted
    assert fragments(h) == {LOW: 45, HIGH: 30}
    # HIGH's keys all resume at 30: it began there, not at the cut lane's 10 (nothing below 30 is its
    # to do anyway), so it was never below the floor.
    assert c._positions == {LOW: 45, HIGH: 30}
    # A revocation commits every lane, accepted: the next owner has nothing to read again.
    lg.produce("t", 0, [LogRecord(LOW_KEY, str(i).encode(), 0) for i in range(45, 48)])
    assert sorted(int(r.value or b"") for r in drain(c)) == [30, 32, 34, 36, 38, 45, 46, 47]
    m.actions = [Revoke(frozenset({WHOLE}))]
    c._run_actions()
    assert m.commits[-1][LOW] == 48 and fragments(h)[LOW] == 48
    lg.close()
