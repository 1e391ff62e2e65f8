"""Property: whatever the actives do — write, flush, crash mid-batch or after a flush, get fenced and
write on as zombies (even deliver a BEGIN late), get taken over by another member or restart — every
restore equals a model dict.

The model is the coordinator's view: the state and source offsets at the last COMMIT whose offset
commit it accepted. A fresh copy given that commit must restore exactly it; every copy, at every
step, must hold exactly the state some active had at the COMMIT it reports as applied, and a copy
that never was active must never hold anything the coordinator did not accept.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from regroup.log import open_log
from regroup.protocol.streams.topology import TaskId
from regroup.streams.changelog import begin_record, change_records, commit_record
from regroup.streams.store import Role, TaskStore

TASK = TaskId("agg", 0)
TOPIC = "g-agg-changelog"
KEYS = [b"a", b"b", b"c", b"d", b"e"]
MEMBERS = 3

member = st.integers(0, MEMBERS - 1)
values = st.binary(max_size=3)


def state(store: TaskStore) -> dict[bytes, bytes]:
    return dict(store.items())


class Churn(RuleBasedStateMachine):
    """Members 0..2 of one task, the coordinator's view, and a snapshot of every COMMIT's state."""

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory()
        root = self.root = Path(self._tmp.name)
        self.log = open_log(f"embedded://{root / 'log'}?fsync=never")
        self.stores: dict[int, TaskStore] = {}
        self.active: int | None = None
        self.working: dict[int, dict[bytes, bytes]] = {}  # each writing store's state, unflushed included
        self.unflushed: dict[int, dict[bytes, bytes | None]] = {}
        self.snapshots: dict[int | None, dict[bytes, bytes]] = {None: {}}  # COMMIT offset -> state
        self.ever_active: set[int] = set()
        self.committed: int | None = None  # the coordinator's view
        self.committed_state: dict[bytes, bytes] = {}
        self.committed_src: dict[str, int] = {}
        self.epoch = 0
        self.src = 0
        self.fresh = 0

    def open(self, name: str) -> TaskStore:
        return TaskStore(self.root / name, self.log, "g", TASK, partitions=2)

    @initialize(first=member)
    def start(self, first: int) -> None:
        self.open_copy((first + 1) % MEMBERS)  # a standby from the start
        self.takeover(first, False)

    # -------------------------------------------------------------------------------- the active

    def has_active(self) -> bool:
        return self.active is not None

    def zombies(self) -> list[int]:
        return [i for i, s in self.stores.items() if s.role is Role.ACTIVE and i != self.active]

    @precondition(has_active)
    @rule(key=st.sampled_from(KEYS), value=values)
    def put(self, key: bytes, value: bytes) -> None:
        assert self.active is not None
        self.stores[self.active].put(key, value)
        self.working[self.active][key] = value
        self.unflushed[self.active][key] = value

    @precondition(has_active)
    @rule(key=st.sampled_from(KEYS))
    def delete(self, key: bytes) -> None:
        assert self.active is not None
        self.stores[self.active].delete(key)
        self.working[self.active].pop(key, None)
        self.unflushed[self.active][key] = None

    @precondition(has_active)
    @rule(accepted=st.booleans(), learned=st.booleans())
    def flush(self, accepted: bool, learned: bool) -> None:
        """A flush; the coordinator accepts its offset commit or not; the active learns it or not."""
        assert self.active is not None
        s = self.stores[self.active]
        self.src += 1
        commit = s.flush({"src": self.src})
        self.snapshots[commit] = dict(self.working[self.active])
        self.unflushed[self.active] = {}
        if accepted:
            self.committed, self.committed_src = commit, {"src": self.src}
            self.committed_state = dict(self.working[self.active])
            if learned:
                s.confirm(commit)

    @precondition(has_active)
    @rule(mid_batch=st.booleans())
    def crash(self, mid_batch: bool) -> None:
        """The active's process dies, after writing its unflushed changes but no COMMIT if mid_batch."""
        assert self.active is not None
        if mid_batch and self.unflushed[self.active]:
            gen = self.stores[self.active].generation
            assert gen is not None
            self.log.produce(TOPIC, TASK.partition, change_records(gen, self.unflushed[self.active].items()))
        self.stores.pop(self.active).close()
        self.active = None

    @rule(i=member, old_writes_on=st.booleans())
    def takeover(self, i: int, old_writes_on: bool) -> None:
        """Member i becomes the active; the previous one stops, or writes on as a zombie."""
        old = self.active
        if old is not None and old != i and not old_writes_on:
            self.stores.pop(old).close()
        s = self.stores.get(i)
        if s is None:
            s = self.stores[i] = self.open(f"m{i}")
        elif s.role is Role.ACTIVE:  # this member's active (or zombie) learns it must take over afresh
            s.release()
        self.epoch += 1
        s.become_active(self.committed, self.epoch,
                        committed_offsets=self.committed_src if self.committed is not None else None)
        assert state(s) == self.committed_state and s.source_offsets == self.committed_src
        self.active = i
        self.ever_active.add(i)
        self.working[i], self.unflushed[i] = dict(self.committed_state), {}

    @precondition(lambda self: bool(self.zombies()))
    @rule(key=st.sampled_from(KEYS), value=values)
    def zombie_write(self, key: bytes, value: bytes) -> None:
        z = self.zombies()[0]
        s = self.stores[z]
        s.put(key, value)
        self.working[z][key] = value
        commit = s.flush({"src": s.source_offsets.get("src", 0) + 1})
        self.snapshots[commit] = dict(self.working[z])
        self.unflushed[z] = {}

    # --------------------------------------------------------------------------------- the copies

    @precondition(lambda self: self.epoch > 1)
    @rule(key=st.sampled_from(KEYS), value=values)
    def late_begin(self, key: bytes, value: bytes) -> None:
        """A member granted the task at an earlier epoch, and fenced since, delivers its BEGIN late
        and writes a segment after it."""
        gen = self.log.produce(TOPIC, TASK.partition, [begin_record(self.committed, self.epoch - 1)])
        self.log.produce(TOPIC, TASK.partition, change_records(gen, [(key, value)]))
        self.log.produce(TOPIC, TASK.partition, [commit_record(gen, {"src": 10**6}, self.committed)])

    @rule(i=member)
    def open_copy(self, i: int) -> None:
        if i not in self.stores:
            self.stores[i] = self.open(f"m{i}")
            self.check_copy(i)

    @rule(i=member, records=st.integers(1, 8), hint=st.booleans())
    def copy_step(self, i: int, records: int, hint: bool) -> None:
        s = self.stores.get(i)
        if s is not None and s.role is Role.COPY:
            s.restore(records, committed=self.committed if hint else None)
            self.check_copy(i)

    @rule(i=member)
    def close_copy(self, i: int) -> None:
        if i in self.stores and i != self.active:
            self.stores.pop(i).close()

    def check_copy(self, i: int) -> None:
        s = self.stores[i]
        assert state(s) == self.snapshots[s.applied_commit]
        if i not in self.ever_active:
            assert s.applied_commit is None or s.applied_commit <= (self.committed or 0)

    @rule()
    def check(self) -> None:
        self.fresh += 1
        with self.open(f"fresh{self.fresh}") as copy:
            progress = copy.restore_to_end(committed=self.committed)
            assert progress.commit_offset == self.committed
            assert state(copy) == self.committed_state
            assert dict(copy.source_offsets) == self.committed_src
        for i, s in self.stores.items():
            if s.role is Role.COPY:
                s.restore_to_end(committed=self.committed)
                self.check_copy(i)
                if i not in self.ever_active:
                    assert s.applied_commit == self.committed and state(s) == self.committed_state

    def teardown(self) -> None:
        try:
            self.check()
        finally:
            for s in self.stores.values():
                s.close()
            self.log.close()
            self._tmp.cleanup()


TestChurn = Churn.TestCase
TestChurn.settings = settings(max_examples=100, stateful_step_count=50, deadline=None, derandomize=True,
                              database=None)
