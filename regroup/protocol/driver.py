"""The member driver: what every shell does with the actions of its `MemberStateMachine`.

`member.py` decides *what* the coordinator wants of a member (Revoke, Assign, Lost, Fatal). This module
decides how the shells carry those actions out — the Python consumer inside ``poll()``, the PySpark
source at a micro-batch boundary, the simulator's member at its poll boundaries in virtual time — so
that the three cannot drift apart. It is pure like the rest of the core: the shell does the I/O
(commits, offset fetches, asking the log where it ends) and hands the results in.

Rules:

1. In order. Actions are carried out in the order the state machine emitted them; one that cannot be
   carried out yet holds back those behind it (rule 4). `Backlog` keeps that order across boundaries.
2. Commit, then release. A Revoke commits the positions of its shards that moved past the offset known
   to be committed, and only then releases the shards and acknowledges, so that the next owner starts
   exactly where this member stopped. A refused commit does not hold the release back: the coordinator
   decides what is safe, and keeping the shards would only stall the group.
3. Where a shard starts. An Assign begins each shard at the group's committed offset; a shard without
   one begins per the reset policy: ``earliest`` at offset 0, ``latest`` where the log ends now. A
   key range (or a partition whose progress is kept in key-range fragments) begins at the lowest
   fragment it overlaps and skips the records its fragments say are done (`keyrange.resume`). Where
   the log ends is per open piece for a partition split on the producer side (each piece has offsets
   of its own): under ``latest`` the keys of each piece begin at that piece's end, so a shard over
   several begins at the lowest of their ends and skips, in the pieces that end higher, the records
   below their ends — exactly as if those ends were committed fragments. Beginning every piece at
   the highest end instead would never read what a lower piece gets between its end and that one.
4. Unknown is not "none". Committed offsets that could not be read are never taken as "no committed
   offset" — that would rewind the shard to its beginning. The Assign waits, with everything behind
   it, for the next boundary; unless a Lost is queued behind it: then everything before the last Lost
   is moot (the state machine cancelled the Assign), and the shell carries on from that Lost.
5. Lost drops everything held — what the shell owns and the Lost's shards — WITHOUT committing: another
   member may own them already. Fatal is surfaced to the user. ComputeAssignment is ignored: the shells
   offer no client-side assignor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from enum import Enum

from regroup.protocol.keyrange import Resume, resume
from regroup.protocol.member import Action, Assign, Lost
from regroup.protocol.shard import Shard, ShardSet


class OffsetReset(Enum):
    """Where a shard with no committed offset begins (rule 3)."""

    EARLIEST = "earliest"
    LATEST = "latest"


def advanced(positions: Mapping[Shard, int], committed: Mapping[Shard, int]) -> dict[Shard, int]:
    """The positions past the offset known to be committed (all of them where none is known):
    committing the others would tell the coordinator nothing new."""
    return {s: o for s, o in positions.items() if committed.get(s, -1) < o}


def commit_before_release(
    positions: Mapping[Shard, int], committed: Mapping[Shard, int], revoked: Collection[Shard]
) -> dict[Shard, int]:
    """What a Revoke of ``revoked`` commits before the shards are released (rule 2).

    ``positions`` is where the shell stopped (the next offset to process) for the shards it owns;
    ``committed`` what it knows to be committed — a shell that keeps no record of its commits passes
    ``{}`` and commits every position.
    """
    return advanced({s: o for s, o in positions.items() if s in revoked}, committed)


def topics_to_look_up(
    shards: Iterable[Shard], committed: Mapping[Shard, int], reset: OffsetReset
) -> list[str]:
    """The topics whose log ends `start_positions` needs: only under ``latest``, and only those of
    shards with no committed offset (so that the common case asks the log nothing)."""
    if reset is not OffsetReset.LATEST:
        return []
    return sorted({s.topic for s in shards if s not in committed or not s.whole})


def start_positions(
    shards: Iterable[Shard],
    committed: Mapping[Shard, int],
    reset: OffsetReset,
    log_ends: Mapping[Shard, int],
) -> dict[Shard, int]:
    """Where each newly assigned shard begins, in shard order (rule 3); see `resumes`."""
    return {s: r.start for s, r in resumes(shards, committed, reset, log_ends).items()}


def resumes(
    shards: Iterable[Shard],
    committed: Mapping[Shard, int],
    reset: OffsetReset,
    log_ends: Mapping[Shard, int],
) -> dict[Shard, Resume]:
    """Where each newly assigned shard begins and what it skips, in shard order (rule 3).

    ``committed`` must be what the coordinator answered — never a guess after a failed fetch (rule 4);
    for key ranges it holds every committed fragment of their partitions that the fetch returned.
    ``log_ends`` says where the log ends now: by whole partition (``Shard(topic, p)``), or for a
    partition split on the producer side by open piece (a key-range shard per piece, as
    `PartitionedLog.piece_ends` gives them). It is read only for the shards of `topics_to_look_up`;
    keys of a partition missing there start at 0.
    """
    fragments = _by_partition(committed)
    ends = _by_partition(log_ends) if reset is OffsetReset.LATEST else {}
    out: dict[Shard, Resume] = {}
    for s in sorted(shards):
        mine = fragments.get(s.partition_key, {})
        if len(mine) == 1 and s in mine:
            out[s] = Resume(mine[s])  # its own offset and nothing else: the common case
            continue
        # The keys no fragment covers begin where the reset policy says, piece by piece: as if
        # committed there (rule 3), so that `keyrange.resume` makes one `Resume` of it all.
        reset_at = _reset_fragments(ends.get(s.partition_key, {}), mine, s)
        out[s] = resume({**mine, **reset_at}, s, 0)
    return out


def _reset_fragments(
    pieces: Mapping[Shard, int], fragments: Collection[Shard], shard: Shard
) -> dict[Shard, int]:
    """The parts of ``shard``'s keys that no committed fragment covers, cut at the log's ``pieces``
    (each with where it ends), each beginning at its piece's end (rule 3, ``latest``)."""
    out: dict[Shard, int] = {}
    for piece, end in pieces.items():
        lo, hi = max(piece.lo, shard.lo), min(piece.hi, shard.hi)
        if lo >= hi:
            continue
        at = lo
        for f in sorted((f for f in fragments if f.lo < hi and lo < f.hi), key=lambda f: f.lo):
            if at < f.lo:
                out[Shard(shard.topic, shard.partition, at, f.lo)] = end
            at = max(at, f.hi)
        if at < hi:
            out[Shard(shard.topic, shard.partition, at, hi)] = end
    return out


def _by_partition(committed: Mapping[Shard, int]) -> dict[tuple[str, int], dict[Shard, int]]:
    out: dict[tuple[str, int], dict[Shard, int]] = {}
    for s, o in committed.items():
        out.setdefault(s.partition_key, {})[s] = o
    return out


def held_when_lost(lost: Lost, owned: Collection[Shard]) -> ShardSet:
    """What a Lost drops without committing (rule 5): the shell's shards and the Lost's (those of a
    cancelled Assign the shell may have begun to take)."""
    return frozenset(owned) | lost.shards


def from_last_lost(actions: list[Action]) -> list[Action] | None:
    """The actions from the last `Lost` on, or None without one (rule 4)."""
    for i in range(len(actions) - 1, -1, -1):
        if isinstance(actions[i], Lost):
            return actions[i:]
    return None


class Backlog:
    """The actions a shell has still to carry out, oldest first (rules 1 and 4).

    Usage at every boundary::

        backlog.add(membership.take_actions())
        while (action := backlog.next()) is not None:
            ...                                   # carry it out
            # an Assign whose committed offsets could not be read:
            if backlog.defer(action):
                break                             # wait for the next boundary
    """

    def __init__(self) -> None:
        self._queue: deque[Action] = deque()

    def add(self, actions: Iterable[Action]) -> None:
        """Actions the state machine emitted since the last call (behind any deferred ones)."""
        self._queue.extend(actions)

    def next(self) -> Action | None:
        """The next action to carry out, or None when there is none."""
        return self._queue.popleft() if self._queue else None

    def defer(self, assign: Assign) -> bool:
        """``assign`` (just taken from `next`) cannot begin: its committed offsets are unknown.

        True: it waits, with everything behind it, for the next boundary — take no more actions until
        then. False: a Lost behind it made it moot; carry on with `next`, which returns that Lost.
        """
        later = from_last_lost(list(self._queue))
        if later is not None:
            self._queue = deque(later)
            return False
        self._queue.appendleft(assign)
        return True

    def __len__(self) -> int:
        return len(self._queue)
