"""The invariants, checked at every event of a simulation.

The rules about the coordinator's state (who holds a shard, epochs, committed offsets, replay) are
pure functions here, asked of the core's values; the simulator's `InvariantChecker` and the
coordinator's property tests (tests/protocol/properties) ask the same functions, so each is stated
once. The rules about processing (gaps, duplicates) live in the checker alone.

The checker is fed observations and never looks at the simulator itself, so a test can hand it a bad
trace and see it object. Two kinds of observations:

* from the consumers (`ShardObserver`): who acquires, processes and releases which shard;
* from the coordinator: every record it emits (the durable facts, in order) and, after a restart,
  the state it rebuilt.

Invariants (docs/simulation.md explains each):

``single-owner``
    a shard is held by at most one consumer process at a time (acquire .. release), and is in at most
    one member's assigned ∪ pending-revocation set in the coordinator's state;
``revoke-before-assign``
    the coordinator gives a member a shard only when no other member holds it any more;
``epochs-monotonic``
    group and target epochs never go back, ``member epoch ≤ target epoch ≤ group epoch``, a member's
    epoch never goes back while it is in the group (coordinator side) nor, short of rejoining from
    0, on the member's side;
``offsets-monotonic``
    a committed offset never goes back, and never runs ahead of what was processed;
``at-least-once``
    processing never skips a record (no gap), and by the end every record is processed;
``exactly-once``
    a record is processed twice only if an *unclean* hand-off (crash, fencing, lost membership, failed
    commit) happened after it was first processed: clean hand-offs duplicate nothing;
``key-order``
    key-range runs only (regroup/sim/key_invariants.py states the key-level rules): a record is never
    processed for the first time after a later record of its key was;
``replay``
    a coordinator rebuilt from its records (or from a snapshot) equals the one that wrote them;
``liveness``
    once churn stops, every shard is owned and every member stable within a bound, and stays so;
``protocol``
    no exception, no fatal error and no driver misuse reported by the state machines.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from regroup.protocol.messages import JOIN_EPOCH, STATIC_LEAVE_EPOCH
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    OffsetRecord,
    TargetEpochRecord,
)
from regroup.protocol.shard import Shard, ShardSet
from regroup.protocol.state import Group
from regroup.protocol.streams.records import StreamsRecord
from regroup.sim.keyranges import Run

SINGLE_OWNER = "single-owner"
REVOKE_BEFORE_ASSIGN = "revoke-before-assign"
EPOCHS_MONOTONIC = "epochs-monotonic"
OFFSETS_MONOTONIC = "offsets-monotonic"
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
KEY_ORDER = "key-order"
REPLAY = "replay"
LIVENESS = "liveness"
PROTOCOL = "protocol"

ALL_INVARIANTS = (SINGLE_OWNER, REVOKE_BEFORE_ASSIGN, EPOCHS_MONOTONIC, OFFSETS_MONOTONIC, AT_LEAST_ONCE,
                  EXACTLY_ONCE, KEY_ORDER, REPLAY, LIVENESS, PROTOCOL)


# ------------------------------------------------------------------------------ the rules, pure
# Each function asks one invariant's question of the core's values and answers in words: None (or
# nothing) when the rule holds. They keep no state: the checker below feeds them one record or
# observation at a time and files the answers as `Violation`s; the property tests of the coordinator
# (tests/protocol/properties) compare its state before and after each call and assert on the same
# answers. So each rule is written once, whoever holds the state.


def member_epoch(c: CurrentAssignment) -> int:
    """A member's real epoch: a static member away (-2) keeps the one it had."""
    return c.previous_epoch if c.epoch == STATIC_LEAVE_EPOCH else c.epoch


def held(c: CurrentAssignment) -> ShardSet:
    """What a member holds in the coordinator's state: it may still be processing all of it."""
    return c.assigned | c.pending_revocation


def holders_of(current: Mapping[str, CurrentAssignment]) -> dict[Shard, set[str]]:
    """The members holding each shard, by the coordinator's state."""
    holders: dict[Shard, set[str]] = {}
    for mid, c in current.items():
        for s in held(c):
            holders.setdefault(s, set()).add(mid)
    return holders


def held_twice(group_id: str, holders: Mapping[Shard, Collection[str]],
               shards: Iterable[Shard]) -> list[tuple[Shard, str]]:
    """``single-owner`` (coordinator): which of ``shards`` more than one member holds."""
    return [(s, f"group {group_id}: {s} is held by {sorted(holders[s])} in the coordinator's state")
            for s in sorted(shards) if len(holders.get(s, ())) > 1]


def taken_while_held(taker: str, shard: Shard, holders: Collection[str]) -> str | None:
    """``single-owner`` (processes): ``taker`` starts on ``shard`` while others still hold it."""
    others = sorted(set(holders) - {taker})
    return f"{taker} takes {shard} while {', '.join(others)} still holds it" if others else None


def given_while_held(group_id: str, member_id: str, gained: Iterable[Shard],
                     holders: Mapping[Shard, Collection[str]]) -> list[tuple[Shard, str]]:
    """``revoke-before-assign``: the shards ``member_id`` gains that other members still hold
    (assigned or pending revocation)."""
    return [(s, f"group {group_id}: {member_id} is given {s} while {sorted(holders[s])} still hold it")
            for s in sorted(gained) if holders.get(s)]


def group_epoch_went_back(group_id: str, old: int, new: int) -> str | None:
    """``epochs-monotonic``: the group epoch never goes back."""
    return f"group {group_id}: group epoch went back from {old} to {new}" if new < old else None


def target_epoch_went_back(group_id: str, old: int, new: int) -> str | None:
    """``epochs-monotonic``: the target epoch never goes back."""
    return f"group {group_id}: target epoch went back from {old} to {new}" if new < old else None


def target_ahead_of_group(group_id: str, group_epoch: int, target_epoch: int) -> str | None:
    """``epochs-monotonic``: target epoch ≤ group epoch."""
    if target_epoch <= group_epoch:
        return None
    return f"group {group_id}: target epoch {target_epoch} is ahead of the group epoch {group_epoch}"


def member_ahead_of_target(group_id: str, member_id: str, c: CurrentAssignment,
                           target_epoch: int) -> str | None:
    """``epochs-monotonic``: member epoch ≤ target epoch (a member away at -2 keeps an old one)."""
    if c.epoch == STATIC_LEAVE_EPOCH or c.epoch <= target_epoch:
        return None
    return (f"group {group_id}: member {member_id} is at epoch {c.epoch}, ahead of the target epoch "
            f"{target_epoch}")


def member_epoch_went_back(group_id: str, member_id: str, last: int, new: CurrentAssignment) -> str | None:
    """``epochs-monotonic`` (coordinator): a member's epoch never goes back while it is in the group;
    ``last`` is its real epoch before. Stepping out at -2 is not going back."""
    if new.epoch == STATIC_LEAVE_EPOCH or new.epoch >= last:
        return None
    return f"group {group_id}: member {member_id}'s epoch went back from {last} to {new.epoch}"


def process_epoch_went_back(owner: str, old: int, new: int) -> str | None:
    """``epochs-monotonic`` (member side): a member's own epoch goes back only to 0, to rejoin."""
    if new >= old or new == JOIN_EPOCH:
        return None
    return f"member {owner}'s epoch went back from {old} to {new} without rejoining"


def offset_went_back(group_id: str, shard: Shard, old: int | None, new: int) -> str | None:
    """``offsets-monotonic``: a committed offset never goes back."""
    if old is None or new >= old:
        return None
    return f"group {group_id}: committed offset of {shard} went back from {old} to {new}"


#: The fields a replay difference is reported by.
_GROUP_FIELDS = ("epoch", "target_epoch", "assignor", "subscribed_topics", "members", "current",
                 "target", "offsets", "parallelism", "static_members", "owners", "range_holders",
                 "offset_ranges")


def rebuilt_differs(before: Mapping[str, Group], after: Mapping[str, Group], how: str) -> str | None:
    """``replay``: a coordinator rebuilt ``how`` (from its records, from a snapshot) equals the one
    that wrote them; if not, what differs."""
    if dict(before) == dict(after):
        return None
    diffs: list[str] = []
    for gid in sorted(set(before) | set(after)):
        b, a = before.get(gid), after.get(gid)
        if b == a:
            continue
        if b is None or a is None:
            diffs.append(f"group {gid} {'missing' if a is None else 'appeared'}")
            continue
        for name in _GROUP_FIELDS:
            if getattr(b, name) != getattr(a, name):
                diffs.append(f"group {gid}: {name} differs")
    return f"the coordinator rebuilt {how} differs from the one that wrote them: " + "; ".join(diffs[:5])


@dataclass(frozen=True, slots=True)
class Violation:
    at_ms: int
    invariant: str
    message: str
    #: The shard concerned, when there is one.
    shard: Shard | None = None

    def __str__(self) -> str:
        return f"t={self.at_ms} ms [{self.invariant}] {self.message}"


@dataclass
class _GroupView:
    """The coordinator's state as far as the invariants need it, rebuilt from its records."""

    epoch: int = 0
    target_epoch: int = 0
    current: dict[str, CurrentAssignment] = field(default_factory=dict)
    holders: dict[Shard, set[str]] = field(default_factory=dict)
    offsets: dict[Shard, int] = field(default_factory=dict)


class InvariantChecker:
    """Collects `Violation`s from the observations it is fed."""

    def __init__(self, max_violations: int = 50) -> None:
        self.violations: list[Violation] = []
        self.max_violations = max_violations
        #: Consumer processes holding each shard (acquire .. release); more than one is a violation.
        self.holders: dict[Shard, set[str]] = {}
        #: Processes the coordinator fenced while they held a shard and that have not noticed yet.
        self.zombies: dict[Shard, set[str]] = {}
        self.zombie_records = 0
        #: Offsets below this were processed at least once.
        self.processed_hw: dict[Shard, int] = {}
        #: Offsets below this may be processed again (an unclean hand-off happened after them).
        self.unclean_hw: dict[Shard, int] = {}
        self.duplicates = 0
        self.clean_handoffs = 0
        self.unclean_handoffs = 0
        #: Time of the last acquire or release (stability checks).
        self.last_ownership_change = 0
        self._groups: dict[str, _GroupView] = {}

    @property
    def ok(self) -> bool:
        return not self.violations

    def fail(self, t: int, invariant: str, message: str, shard: Shard | None = None) -> None:
        if len(self.violations) < self.max_violations:
            self.violations.append(Violation(t, invariant, message, shard))

    def holder(self, shard: Shard) -> str | None:
        """The process holding ``shard`` (one of them, if the invariant is broken)."""
        holders = self.holders.get(shard)
        return min(holders) if holders else None

    # ---------------------------------------------------------------- consumers
    def on_acquire(self, t: int, owner: str, shard: Shard) -> None:
        holders = self.holders.setdefault(shard, set())
        if (broken := taken_while_held(owner, shard, holders)) is not None:
            self.fail(t, SINGLE_OWNER, broken, shard)
        holders.add(owner)
        self.last_ownership_change = t

    def on_activate(self, t: int, owner: str, shard: Shard, offset: int) -> None:
        if owner not in self.holders.get(shard, ()):
            self.fail(t, SINGLE_OWNER, f"{owner} starts {shard} without holding it", shard)
        hw = self.processed_hw.get(shard, 0)
        if offset > hw:
            self.fail(t, AT_LEAST_ONCE, f"{owner} starts {shard} at offset {offset}, but only offsets below "
                                        f"{hw} were processed: records {hw}..{offset - 1} skipped", shard)

    def on_fenced(self, t: int, owner: str) -> None:
        """The coordinator fenced ``owner`` (a timeout): what it still holds may be given away.

        Until it notices, it is a zombie: its processing is wasted work (it can no longer commit),
        counted but not held against the invariants, and its shards' hand-off is unclean.
        """
        for shard in sorted(s for s, hs in self.holders.items() if owner in hs):
            holders = self.holders[shard]
            holders.discard(owner)
            if not holders:
                del self.holders[shard]
            self.zombies.setdefault(shard, set()).add(owner)
            self.unclean_handoffs += 1
            hw = self.processed_hw.get(shard, 0)
            if hw > self.unclean_hw.get(shard, 0):
                self.unclean_hw[shard] = hw
            self.last_ownership_change = t

    def _zombie(self, owner: str, shard: Shard) -> bool:
        zombies = self.zombies.get(shard)
        return zombies is not None and owner in zombies

    def on_processed(self, t: int, owner: str, shard: Shard, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        if self._zombie(owner, shard):
            self.zombie_records += hi - lo
            self.duplicates += hi - lo
            return
        if owner not in self.holders.get(shard, ()):
            self.fail(t, SINGLE_OWNER, f"{owner} processed {shard} [{lo}, {hi}) without holding it "
                                       f"(holder: {self.holder(shard)})", shard)
        hw = self.processed_hw.get(shard, 0)
        if lo > hw:
            self.fail(t, AT_LEAST_ONCE, f"{owner} processed {shard} from {lo}, but only offsets below "
                                        f"{hw} were processed before: a gap", shard)
        dup_hi = min(hi, hw)
        if lo < dup_hi:
            self.duplicates += dup_hi - lo
            allowed = self.unclean_hw.get(shard, 0)
            if dup_hi > allowed:
                self.fail(t, EXACTLY_ONCE,
                          f"{owner} processed {shard} [{max(lo, allowed)}, {dup_hi}) again, though no "
                          f"unclean hand-off happened after they were processed (duplicates allowed "
                          f"below {allowed})", shard)
        if hi > hw:
            self.processed_hw[shard] = hi

    def on_records(self, t: int, owner: str, shard: Shard, runs: Sequence[Run]) -> None:
        """Records processed, key by key: only key-range runs report them, and only
        `KeyRangeChecker` (regroup/sim/key_invariants.py) checks them."""

    def on_stop(self, t: int, owner: str, shard: Shard) -> None:
        pass

    def on_release(self, t: int, owner: str, shard: Shard, clean: bool) -> None:
        if self._zombie(owner, shard):
            zombies = self.zombies[shard]
            zombies.discard(owner)
            if not zombies:
                del self.zombies[shard]
            return
        holders = self.holders.get(shard)
        if holders is None or owner not in holders:
            self.fail(t, SINGLE_OWNER, f"{owner} releases {shard}, held by {self.holder(shard)}", shard)
        else:
            holders.discard(owner)
            if not holders:
                del self.holders[shard]
        if clean:
            self.clean_handoffs += 1
        else:
            self.unclean_handoffs += 1
            hw = self.processed_hw.get(shard, 0)
            if hw > self.unclean_hw.get(shard, 0):
                self.unclean_hw[shard] = hw
        self.last_ownership_change = t

    def member_epoch(self, t: int, owner: str, old: int, new: int) -> None:
        """A member state machine's epoch moved from ``old`` to ``new``."""
        if (broken := process_epoch_went_back(owner, old, new)) is not None:
            self.fail(t, EPOCHS_MONOTONIC, broken)

    def all_processed(self, t: int, ends: Mapping[Shard, int]) -> None:
        """End of run: every record below ``ends[shard]`` must have been processed."""
        for shard, end in sorted(ends.items()):
            hw = self.processed_hw.get(shard, 0)
            if hw < end:
                self.fail(t, AT_LEAST_ONCE, f"{shard}: records {hw}..{end - 1} were never processed", shard)

    # ---------------------------------------------------------------- coordinator
    def records(self, t: int, records: Iterable[AnyRecord]) -> None:
        """Records of one coordinator step, in the order they were emitted (consumer groups only:
        the simulator runs no streams groups yet)."""
        touched: set[tuple[str, Shard]] = set()
        for r in records:
            if isinstance(r, StreamsRecord):
                continue
            view = self._groups.setdefault(r.group_id, _GroupView())
            if isinstance(r, GroupEpochRecord):
                self._group_epoch(t, r, view)
            elif isinstance(r, TargetEpochRecord):
                for broken in (target_epoch_went_back(r.group_id, view.target_epoch, r.target_epoch),
                               target_ahead_of_group(r.group_id, view.epoch, r.target_epoch)):
                    if broken is not None:
                        self.fail(t, EPOCHS_MONOTONIC, broken)
                view.target_epoch = r.target_epoch
            elif isinstance(r, CurrentAssignmentRecord):
                touched.update((r.group_id, s) for s in self._current(t, r, view))
            elif isinstance(r, OffsetRecord):
                self._offset(t, r, view)
        for gid, shard in sorted(touched):
            for s, broken in held_twice(gid, self._groups[gid].holders, [shard]):
                self.fail(t, SINGLE_OWNER, broken, s)

    def _group_epoch(self, t: int, r: GroupEpochRecord, view: _GroupView) -> None:
        if r.epoch is None:
            self._groups.pop(r.group_id, None)
            return
        if (broken := group_epoch_went_back(r.group_id, view.epoch, r.epoch)) is not None:
            self.fail(t, EPOCHS_MONOTONIC, broken)
        view.epoch = r.epoch

    def _current(self, t: int, r: CurrentAssignmentRecord, view: _GroupView) -> set[Shard]:
        mid = r.member_id
        old = view.current.pop(mid, None)
        touched: set[Shard] = set()
        if old is not None:
            for s in held(old):
                holders = view.holders.get(s)
                if holders is not None:
                    holders.discard(mid)
                    if not holders:
                        del view.holders[s]
        new = r.current
        if new is None:
            return touched
        gained = new.assigned - old.assigned if old is not None else new.assigned
        for s, given in given_while_held(r.group_id, mid, gained, view.holders):
            self.fail(t, REVOKE_BEFORE_ASSIGN, given, s)
        if old is not None and (broken := member_epoch_went_back(r.group_id, mid, member_epoch(old), new)):
            self.fail(t, EPOCHS_MONOTONIC, broken)
        if (broken := member_ahead_of_target(r.group_id, mid, new, view.target_epoch)) is not None:
            self.fail(t, EPOCHS_MONOTONIC, broken)
        view.current[mid] = new
        for s in held(new):
            view.holders.setdefault(s, set()).add(mid)
            touched.add(s)
        return touched

    def _offset(self, t: int, r: OffsetRecord, view: _GroupView) -> None:
        if r.offset is None:
            view.offsets.pop(r.shard, None)
            return
        if (broken := offset_went_back(r.group_id, r.shard, view.offsets.get(r.shard), r.offset)) is not None:
            self.fail(t, OFFSETS_MONOTONIC, broken, r.shard)
        hw = self.processed_hw.get(r.shard, 0)
        if r.offset > hw:
            self.fail(t, OFFSETS_MONOTONIC, f"group {r.group_id}: offset {r.offset} committed for "
                                            f"{r.shard}, but only offsets below {hw} were processed", r.shard)
        view.offsets[r.shard] = r.offset

    def recovered(self, t: int, before: Mapping[str, Group], after: Mapping[str, Group], how: str) -> None:
        """A coordinator rebuilt (``how``: from its records, or from a snapshot) must equal the old one."""
        if (broken := rebuilt_differs(before, after, how)) is not None:
            self.fail(t, REPLAY, broken)
