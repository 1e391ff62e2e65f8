"""The values the fuzzer draws from, and the `Chooser` that draws them.

Every choice the generators make goes through a `Chooser`: `RandomChooser` (a seeded
`random.Random`: `regroup chaos fuzz --seed S` is reproducible) or, in the tests, one backed by
hypothesis' ``data.draw`` so that hypothesis explores and shrinks the very same generators. The pools
hold the values worth trying on every field of their type: the boundaries of the protobuf types and
of the coordinator's documented limits (docs/protocol.md, docs/operations.md), empty and huge
strings, unicode, control characters, markup, paths and regexes that RE2 refuses.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1

#: Boundaries of int32 fields: epochs (-2, -1, 0 are special), partitions, timeouts.
INT32_POOL: tuple[int, ...] = (0, 1, 2, 3, -1, -2, -3, 7, 255, 256, 1_000, 30_000, 60_000,
                               INT32_MAX, INT32_MAX - 1, INT32_MIN, INT32_MIN + 1)
#: int64 fields (offsets, lags) add the 64-bit boundaries.
INT64_POOL: tuple[int, ...] = (*INT32_POOL, INT64_MAX, INT64_MIN, INT64_MAX - 1, 2**53 + 1, 2**32)

#: Strings around the limits: ids 255, topic names 249, regexes 1,000, offset metadata 4,096.
LIMIT_STRINGS: tuple[str, ...] = ("x" * 255, "x" * 256, "t" * 249, "t" * 250, "r" * 1_000, "r" * 1_001,
                                  "m" * 4_096, "m" * 4_097)
HOSTILE_STRINGS: tuple[str, ...] = (
    "", " ", "a", "-", "--", "--help", "a-b", "a/b", "/", "../../etc/passwd", "a\\b", ".", "..",
    "[/bold]", "[red]x[/red]", "[bold]", "<script>alert(1)</script>", "%s%n%x", "{}", "{0}", "null",
    "'; DROP TABLE records; --", "\x00", "a\x00b", "\n", "\r\n", "\t", "\x1b[31mred\x1b[0m", "\x7f",
    "\u202eevil", "\ufeff", "\u200b", "a\u2028b", "\x85", "a\nINFO forged",
    "ünïcödé", "名前", "🙂" * 10, "\U0010ffff", "é" * 128, "€" * 85,
    "g", "m", "orders", "0", "-1", "NaN",
)
#: A few strings far over every limit (a huge id must be refused, not stored).
HUGE_STRINGS: tuple[str, ...] = ("h" * 100_000, "🙂" * 30_000)
STRING_POOL: tuple[str, ...] = (*HOSTILE_STRINGS, *LIMIT_STRINGS)

#: Subscription patterns: valid, RE2-refused (backreferences, lookaround), pathological, oversized.
REGEX_POOL: tuple[str, ...] = (
    ".*", "fz-.*", "fz-a|fz-b", "orders", "", "(a)\\1", "(?=a)a", "[", "(", "*", "a{1000}{1000}",
    "(((a*)*)*)*$", "(x+x+)+y", "\\p{L}+", "[^\\x00-\\x7f]+", "r" * 1_001, "\x00", "[/bold]",
)
#: Lengths of repeated fields: empty, a few (duplicates come from small pools), many.
REPEAT_COUNTS: tuple[int, ...] = (0, 0, 1, 1, 2, 3, 5, 20)
#: Lengths of a packed integer list when it goes big (a partition listed this often).
HUGE_COUNTS: tuple[int, ...] = (1_000, 10_000, 100_000)


class Chooser(Protocol):
    """Where every choice of a generator comes from."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]``."""
        ...

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options`` (not empty)."""
        ...

    def chance(self, percent: int) -> bool:
        """True about ``percent`` times in a hundred."""
        ...

    def text(self, max_size: int) -> str:
        """Any unicode text (no lone surrogates: protobuf strings are UTF-8) of at most ``max_size``."""
        ...

    def binary(self, max_size: int) -> bytes:
        """Any bytes, at most ``max_size`` of them."""
        ...


class RandomChooser:
    """A `Chooser` on a seeded `random.Random`: the same seed, the same choices."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def chance(self, percent: int) -> bool:
        return self.rng.randrange(100) < percent

    def text(self, max_size: int) -> str:
        n = self.rng.randint(0, max_size)
        out = []
        for _ in range(n):
            kind = self.rng.randrange(4)
            if kind == 0:
                cp = self.rng.randint(0x20, 0x7E)
            elif kind == 1:
                cp = self.rng.randint(0, 0x1F)
            elif kind == 2:
                cp = self.rng.randint(0x80, 0xFFFF)
            else:
                cp = self.rng.randint(0x10000, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:  # a lone surrogate cannot be encoded as UTF-8
                cp = 0xFFFD
            out.append(chr(cp))
        return "".join(out)

    def binary(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))


def int32(value: int) -> int:
    """``value`` clamped into int32 (an epoch plus one stays a valid field value)."""
    return max(INT32_MIN, min(INT32_MAX, value))


def pick_int(ch: Chooser, bits: int, signed: bool = True) -> int:
    """An integer for a field of this width: a boundary most of the time, else anything in range."""
    if signed:
        lo, hi = (INT32_MIN, INT32_MAX) if bits == 32 else (INT64_MIN, INT64_MAX)
        pool = INT32_POOL if bits == 32 else INT64_POOL
    else:
        lo, hi = 0, (2**bits - 1)
        pool = tuple(v for v in (INT64_POOL if bits == 64 else INT32_POOL) if 0 <= v <= hi)
    if ch.chance(70):
        return ch.pick(pool)
    if ch.chance(50):
        return ch.integer(max(lo, -5), min(hi, 10))
    return ch.integer(lo, hi)


def pick_string(ch: Chooser) -> str:
    """A string for any string field: a hostile or limit value, random unicode, rarely a huge one."""
    if ch.chance(65):
        return ch.pick(STRING_POOL)
    if ch.chance(97):
        return ch.text(40)
    return ch.pick(HUGE_STRINGS)
