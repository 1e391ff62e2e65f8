"""Offsets retention under any sequence of joins, leaves, operators' resets and deletions, checks at
any wall-clock time and restarts: a group is never deleted before it has been unused for the whole
retention, always deleted at the first check a retention after the check that marked it, and the
records replay to the same groups and marks."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.messages import OffsetResetRequest
from regroup.protocol.records import GroupEpochRecord
from regroup.protocol.shard import Shard
from regroup.protocol.topics import TopicMetadata
from tests.protocol.harness import Harness

R = 1_000
GROUPS = ("a", "b", "c")
group_ids = st.sampled_from(GROUPS)


class RetentionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(topics={"t": 2}, config=CoordinatorConfig(offsets_retention_ms=R))
        self.wall = 1_000_000
        self.members: dict[str, str] = {}  # group -> its one member
        self.joins = 0
        #: Groups that exist, unused since (wall time of their last join, leave or operator write).
        self.idle_since: dict[str, int] = {}
        #: Idle groups a check has seen since they became idle: the wall time of that check.
        self.marked_at: dict[str, int] = {}

    def exists(self, gid: str) -> bool:
        return gid in self.h.coord.groups

    @rule(gid=group_ids)
    def join(self, gid: str) -> None:
        if gid in self.members:
            return
        self.joins += 1
        member = f"{gid}-{self.joins}"
        self.h.ok(self.h.join(member, group=gid))
        self.members[gid] = member
        self.idle_since.pop(gid, None)
        self.marked_at.pop(gid, None)

    @rule(gid=group_ids)
    def leave(self, gid: str) -> None:
        member = self.members.pop(gid, None)
        if member is None:
            return
        self.h.ok(self.h.hb(member, -1, group=gid))
        self.idle_since[gid] = self.wall
        self.marked_at.pop(gid, None)

    @rule(gid=group_ids)
    def join_and_leave(self, gid: str) -> None:
        """A consumer that comes and goes between two checks: only the group epoch shows it."""
        self.join(gid)
        self.leave(gid)

    @rule(gid=group_ids, offset=st.integers(0, 100))
    def reset(self, gid: str, offset: int) -> None:
        if gid in self.members:
            return
        out = self.h.keep(self.h.coord.reset_offsets(OffsetResetRequest(gid, {Shard("t", 0): offset}), 0))
        assert out.response.ok, out.response.message
        self.idle_since[gid] = self.wall  # an operator's write restarts the clock
        self.marked_at.pop(gid, None)

    @rule(gid=group_ids)
    def delete(self, gid: str) -> None:
        if gid in self.members or not self.exists(gid):
            return
        assert self.h.keep(self.h.coord.delete_group(gid)).response.ok
        self.idle_since.pop(gid, None)
        self.marked_at.pop(gid, None)

    @rule(dt=st.sampled_from([0, 1, R // 3, R - 1, R, R + 1]) | st.integers(0, 3 * R))
    def check(self, dt: int) -> None:
        self.check_at(self.wall + dt)

    @precondition(lambda self: bool(self.marked_at))
    @rule(data=st.data(), off=st.sampled_from([-1, 0, 1]))
    def check_at_the_boundary(self, data: st.DataObject, off: int) -> None:
        """A check one ms before, at or after the retention of a marked group passes."""
        gid = data.draw(st.sampled_from(sorted(self.marked_at)))
        self.check_at(max(self.wall, self.marked_at[gid] + R + off))

    def check_at(self, wall: int) -> None:
        self.wall = wall
        out = self.h.keep(self.h.coord.expire_offsets(self.wall))
        deleted = {r.group_id for r in out.records if isinstance(r, GroupEpochRecord) and r.epoch is None}
        for gid in sorted(self.idle_since):
            marked = self.marked_at.get(gid)
            due = marked is not None and self.wall - marked >= R
            assert (gid in deleted) == due, (gid, self.wall, marked, self.idle_since[gid])
            if due:  # never before the group was unused for the whole retention
                assert self.wall - self.idle_since[gid] >= R
                del self.idle_since[gid], self.marked_at[gid]
            elif marked is None:
                self.marked_at[gid] = self.wall
        assert deleted <= set(GROUPS) - set(self.members)
        assert {g: m.since_ms for g, m in self.h.coord.retention.marks.items()} == self.marked_at

    @rule()
    def restart(self) -> None:
        self.h.coord = Coordinator.recover(self.h.log, 0, self.h.config, topics=TopicMetadata(self.h.topics))

    @precondition(lambda self: bool(self.h.log))
    @invariant()
    def replays(self) -> None:
        topics = TopicMetadata(self.h.topics)
        for rebuilt in (Coordinator.recover(self.h.log, 0, self.h.config, topics=topics),
                        Coordinator.recover(self.h.coord.snapshot(), 0, self.h.config, topics=topics)):
            assert rebuilt.groups == self.h.coord.groups
            assert rebuilt.retention.marks == self.h.coord.retention.marks
        assert set(self.h.coord.groups) == set(self.idle_since) | set(self.members)


RetentionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestRetention = RetentionMachine.TestCase
