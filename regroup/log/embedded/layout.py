"""A partition's key layout: how a split partition's key ranges are stored, and where each key's records are.

Producer-side split and merge (seed 003, second part). A partition starts as one *piece*: its own
files, every key, offsets from 0. Splitting an open piece seals it at its end ``e`` and opens
``into`` children, each holding an equal slice of the piece's key range, each its own files with its
own offsets starting at ``e``: producers of different keys then append in parallel, and a reader of a
child's keys reads only that child. Merging adjacent open pieces seals them and opens one piece over
their keys, starting at the highest of their ends. Pure: no files, no clock of its own (times are
passed in); `regroup.log.embedded.log` stores a layout in ``layout.json`` and does the I/O.

Rules of this module:

1. **Open pieces tile the key space.** At any time every point of ``[0, KEY_SPACE)`` (a record's key
   hash, `regroup.protocol.keyrange` rule 1) belongs to exactly one open piece: a produced record
   goes there. Sealed pieces never grow again.
2. **Each key's offsets only grow, across pieces.** Children start at their parent's sealed end; a
   merged piece starts at the highest end of the pieces it replaces. So for any key, the pieces that
   ever held it have consecutive, non-overlapping offset intervals, and a position (an offset) means
   the same thing whichever piece it falls in: the records of that key below it are done. This is
   what keeps committed offsets, key-range resumes and skips valid across a split and a merge, with
   no translation.
3. **A reader of a key range** reads the sealed pieces that hold keys of it at or above its
   position, in offset order (records of several sealed pieces at one offset: in piece-id order),
   then the one open piece that holds its keys. A range whose keys lie in two open pieces cannot be
   read as one sequence (each open piece's offsets grow on their own), so it is refused
   (`SpansOpenPieces`); the reader reads it as one range per open piece.
4. **Keyless records** are placed by their offset (keyrange rule 1), which a producer cannot know
   before the piece is chosen; so they are accepted only while the partition is one open piece over
   the whole key space.
5. **A layout change is announced, then committed.** ``pending`` names the pieces being sealed, with
   a deadline: writers of those pieces let go of them, and producers wait for the change, until then.
   The change itself is the next layout (higher generation, nothing pending). A pending change past
   its deadline is void (its maker died): writers carry on with the layout as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from regroup.protocol.shard import KEY_SPACE

#: The most pieces one split may create (and the least key points a piece must have per child).
MAX_SPLIT = 256


class LayoutError(ValueError):
    """A split or merge that the layout refuses (the message names what was wrong)."""


class SpansOpenPieces(LayoutError):
    """A key range read as one sequence has keys in more than one open piece (rule 3)."""


@dataclass(frozen=True, slots=True)
class Piece:
    """Part of a partition: the keys ``[lo, hi)`` from offset ``start``; ``end`` None while open."""

    id: int
    lo: int
    hi: int
    start: int
    end: int | None = None

    @property
    def open(self) -> bool:
        return self.end is None

    def overlaps(self, lo: int, hi: int) -> bool:
        return self.lo < hi and lo < self.hi

    def holds_from(self, position: int) -> bool:
        """Whether the piece can hold records at or above ``position``."""
        return self.end is None or self.end > position

    def __str__(self) -> str:
        span = f"{self.start}.." if self.end is None else f"{self.start}..{self.end - 1}"
        return f"piece {self.id} [{self.lo:#x}, {self.hi:#x}) offsets {span}"


@dataclass(frozen=True, slots=True)
class Pending:
    """A split or merge under way: ``pieces`` are being sealed; void after ``deadline_ms``."""

    pieces: tuple[int, ...]
    deadline_ms: int
    token: str


@dataclass(frozen=True, slots=True)
class Reading:
    """What a reader of a key range reads next (rule 3): sealed pieces in order, then the open one."""

    sealed: tuple[Piece, ...]
    open: Piece | None


@dataclass(frozen=True, slots=True)
class Layout:
    """Every piece a partition ever had (by id), the generation, and any change under way."""

    pieces: tuple[Piece, ...] = (Piece(0, 0, KEY_SPACE, 0),)
    generation: int = 0
    pending: Pending | None = None

    def __post_init__(self) -> None:
        _check(self)

    # ----------------------------------------------------------------------------- questions

    @property
    def whole(self) -> bool:
        """One open piece over every key, and no change under way: a partition never split, or
        merged back whole. Keyless records may be produced (rule 4)."""
        opened = self.open_pieces()
        return len(opened) == 1 and opened[0].lo == 0 and opened[0].hi == KEY_SPACE

    @property
    def trivial(self) -> bool:
        """The layout of a partition that was never split: its own files hold everything."""
        return len(self.pieces) == 1 and self.pending is None

    def open_pieces(self) -> tuple[Piece, ...]:
        """The open pieces, in key order (rule 1: they tile the key space)."""
        return tuple(sorted((p for p in self.pieces if p.open), key=lambda p: p.lo))

    def piece(self, piece_id: int) -> Piece:
        for p in self.pieces:
            if p.id == piece_id:
                return p
        known = ", ".join(str(p.id) for p in self.pieces)
        raise LayoutError(f"there is no piece {piece_id} (pieces: {known})")

    def open_piece_at(self, point: int) -> Piece:
        """The open piece that takes a record whose key hash is ``point`` (rule 1)."""
        for p in self.open_pieces():
            if p.lo <= point < p.hi:
                return p
        raise AssertionError(f"no open piece holds point {point}")  # rule 1 makes this impossible

    def pending_for(self, now_ms: int) -> Pending | None:
        """The change under way, unless its deadline passed (rule 5)."""
        if self.pending is not None and now_ms <= self.pending.deadline_ms:
            return self.pending
        return None

    def reading(self, lo: int, hi: int, position: int) -> Reading:
        """What a reader of keys ``[lo, hi)`` at ``position`` reads (rule 3)."""
        if not 0 <= lo < hi <= KEY_SPACE:
            raise LayoutError(f"key range [{lo}, {hi}) is not inside [0, {KEY_SPACE})")
        opened = [p for p in self.open_pieces() if p.overlaps(lo, hi)]
        if len(opened) > 1:
            raise SpansOpenPieces(
                f"keys [{lo:#x}, {hi:#x}) are in {len(opened)} open pieces of a split partition "
                f"({', '.join(str(p) for p in opened)}); read them as one range per open piece")
        sealed = tuple(sorted((p for p in self.pieces
                               if not p.open and p.overlaps(lo, hi) and p.holds_from(position)),
                              key=lambda p: (p.start, p.id)))
        return Reading(sealed, opened[0] if opened else None)

    def cuts(self) -> tuple[int, ...]:
        """Where the open pieces begin, past 0: the key points a reader must not read across."""
        return tuple(p.lo for p in self.open_pieces() if p.lo > 0)

    # ----------------------------------------------------------------------------- changes

    def announce(self, piece_ids: Iterable[int], deadline_ms: int, token: str) -> Layout:
        """Rule 5: the pieces that a split or merge will seal, until ``deadline_ms``."""
        ids = tuple(sorted(set(piece_ids)))
        for i in ids:
            if not self.piece(i).open:
                raise LayoutError(f"piece {i} is sealed already")
        return Layout(self.pieces, self.generation, Pending(ids, deadline_ms, token))

    def split(self, piece_id: int, into: int, end: int) -> Layout:
        """Seal open piece ``piece_id`` at ``end`` and open ``into`` children over equal slices of its
        keys, each starting at ``end`` (rule 2)."""
        parent = self.piece(piece_id)
        if not parent.open:
            raise LayoutError(f"piece {piece_id} is sealed; only an open piece can be split")
        if not isinstance(into, int) or not 2 <= into <= MAX_SPLIT:
            raise LayoutError(f"a piece splits into 2..{MAX_SPLIT} pieces, got {into!r}")
        if end < parent.start:
            raise LayoutError(f"end {end} is below piece {piece_id}'s start {parent.start}")
        width = parent.hi - parent.lo
        if width < into:
            raise LayoutError(f"piece {piece_id} has {width} key points, too few to split into {into}")
        bounds = [parent.lo + i * width // into for i in range(into + 1)]
        first = self._next_id()
        children = tuple(Piece(first + i, bounds[i], bounds[i + 1], end) for i in range(into))
        sealed = Piece(parent.id, parent.lo, parent.hi, parent.start, end)
        rest = tuple(p for p in self.pieces if p.id != piece_id)
        return Layout(tuple(sorted((*rest, sealed, *children), key=lambda p: p.id)), self.generation + 1)

    def merge(self, ends: Mapping[int, int]) -> Layout:
        """Seal the adjacent open pieces ``ends`` names, each at its end, and open one piece over
        their keys starting at the highest of those ends (rule 2)."""
        if len(ends) < 2:
            raise LayoutError("a merge needs at least two open pieces")
        merging = sorted((self.piece(i) for i in ends), key=lambda p: p.lo)
        for p in merging:
            if not p.open:
                raise LayoutError(f"piece {p.id} is sealed; only open pieces can be merged")
            if ends[p.id] < p.start:
                raise LayoutError(f"end {ends[p.id]} is below piece {p.id}'s start {p.start}")
        for a, b in pairwise(merging):
            if a.hi != b.lo:
                raise LayoutError(f"pieces {a.id} and {b.id} are not adjacent (keys [{a.lo:#x}, {a.hi:#x}) "
                                  f"and [{b.lo:#x}, {b.hi:#x})); only adjacent pieces merge")
        merged = Piece(self._next_id(), merging[0].lo, merging[-1].hi, max(ends.values()))
        sealed = {p.id: Piece(p.id, p.lo, p.hi, p.start, ends[p.id]) for p in merging}
        pieces = (*(sealed.get(p.id, p) for p in self.pieces), merged)
        return Layout(pieces, self.generation + 1)

    def _next_id(self) -> int:
        return max(p.id for p in self.pieces) + 1

    # ----------------------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        pending = None if self.pending is None else {
            "pieces": list(self.pending.pieces), "deadline_ms": self.pending.deadline_ms,
            "token": self.pending.token}
        return {"generation": self.generation, "pending": pending,
                "pieces": [[p.id, p.lo, p.hi, p.start, p.end] for p in self.pieces]}

    @classmethod
    def from_json(cls, raw: Any) -> Layout:
        """A layout from ``layout.json``'s content; :class:`LayoutError` naming what is wrong."""
        try:
            pieces = tuple(_piece(entry) for entry in raw["pieces"])
            pend = raw.get("pending")
            pending = None if pend is None else Pending(
                tuple(_int(i) for i in pend["pieces"]), _int(pend["deadline_ms"]), str(pend["token"]))
            return cls(pieces, _int(raw["generation"]), pending)
        except LayoutError:
            raise
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise LayoutError(f"not a partition layout: {e!r}") from e


def _int(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise LayoutError(f"expected an integer, got {v!r}")
    return v


def _piece(entry: Any) -> Piece:
    if not isinstance(entry, list) or len(entry) != 5:
        raise LayoutError(f"a piece is [id, lo, hi, start, end], got {entry!r}")
    return Piece(_int(entry[0]), _int(entry[1]), _int(entry[2]), _int(entry[3]),
                 None if entry[4] is None else _int(entry[4]))


def _check(layout: Layout) -> None:
    """The invariants every layout keeps (rules 1 and 2's shape); a file that breaks one is refused."""
    ids = [p.id for p in layout.pieces]
    if not ids or len(set(ids)) != len(ids):
        raise LayoutError(f"piece ids must be present and unique, got {ids}")
    for p in layout.pieces:
        if not 0 <= p.lo < p.hi <= KEY_SPACE or p.start < 0 or (p.end is not None and p.end < p.start):
            raise LayoutError(f"bad piece {p.id}: keys [{p.lo}, {p.hi}), offsets from {p.start} to {p.end}")
    at = 0
    for p in layout.open_pieces():
        if p.lo != at:
            raise LayoutError(f"open pieces do not tile the key space: a gap or overlap at {at:#x} ({p})")
        at = p.hi
    if at != KEY_SPACE:
        raise LayoutError(f"open pieces do not cover the key space: they end at {at:#x}")
    if layout.generation < 0:
        raise LayoutError(f"generation must be >= 0, got {layout.generation}")
