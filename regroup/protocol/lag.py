"""How far a group's committed offsets are behind the log: per committed fragment, and per partition.

The log's side comes in as *spans*: ``(lo, hi, start, end)``, the keys ``[lo, hi)`` whose records a
part of the partition holds at offsets ``[start, end)``. A partition never split is one span, every
key, from 0 to its end. A partition split on the producer side (`regroup.log.embedded.layout`) is
one span per piece, sealed or open, each with offsets of its own (an open piece's ``end`` is where
its writer is now): its end offset as one number is only its highest piece's, so ``end − offset``
would count records that are not there. Pure; the shell reads the spans.

Rules:

1. **A fragment's lag** (a committed key range, or a whole partition, at ``offset``) is the number of
   records at or above ``offset`` in the spans holding its keys: ``end − max(start, offset)`` summed
   over them. For a partition never split that is ``end − offset`` as always. It is exact when those
   spans hold only the fragment's keys (a consumer's lane of one piece, committed on its own), and
   otherwise counts the other keys' records too (an upper bound, as for key ranges of one partition).
2. **A partition's lag** counts each span once, from the lowest committed offset among the
   fragments of its keys: ``Σ over spans (end − max(start, lowest))``. For a split partition whose
   open pieces each have one position (the consumer's lanes) it is exactly the records still to
   read — the sum over the pieces of ``piece end − position`` — where a sum over fragments of rule 1
   would count a sealed piece shared by several once per fragment. Spans with no fragment over their
   keys count nothing (nothing committed there: unknown, as for a partition nobody committed).
3. **A group's lag** is the sum over its partitions: rule 2 for split partitions (given their spans),
   and for the others the sum of rule 1 over their fragments, which for a group without key ranges
   is the plain ``Σ end − committed``. None when no partition has both an end and an offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from regroup.protocol.shard import KEY_SPACE, Shard

__all__ = ["Span", "fragment_lag", "group_lag", "partition_lag", "whole_span"]

#: Keys ``[lo, hi)`` whose records lie at offsets ``[start, end)`` of one part of a partition.
Span = tuple[int, int, int, int]


def whole_span(end: int) -> tuple[Span]:
    """The one span of a partition never split: every key, offsets from 0 to ``end``."""
    return ((0, KEY_SPACE, 0, end),)


def _holds(span: Span, shard: Shard) -> bool:
    return span[0] < shard.hi and shard.lo < span[1]


def fragment_lag(spans: Iterable[Span], shard: Shard, offset: int) -> int:
    """Rule 1: the records at or above ``offset`` in the spans holding ``shard``'s keys."""
    return sum(max(0, end - max(start, offset)) for lo, hi, start, end in spans
               if lo < shard.hi and shard.lo < hi)


def partition_lag(spans: Iterable[Span], fragments: Mapping[Shard, int]) -> int | None:
    """Rule 2: each span from the lowest committed offset of its keys (None: no span has one)."""
    total: int | None = None
    for span in spans:
        held = [o for f, o in fragments.items() if _holds(span, f)]
        if held:
            _, _, start, end = span
            total = (total or 0) + max(0, end - max(start, min(held)))
    return total


def group_lag(
    offsets: Mapping[Shard, int], ends: Mapping[Shard, int], split: Mapping[Shard, Sequence[Span]],
) -> int | None:
    """Rule 3: ``offsets`` are a group's committed fragments; ``ends`` each partition's end
    (``Shard(topic, partition)``: its highest piece's, for a split one); ``split`` the spans of the
    partitions split on the producer side."""
    by_partition: dict[Shard, dict[Shard, int]] = {}
    for s, o in offsets.items():
        by_partition.setdefault(Shard(s.topic, s.partition), {})[s] = o
    total: int | None = None
    for whole, fragments in by_partition.items():
        spans = split.get(whole)
        if spans is not None:
            lag = partition_lag(spans, fragments)
        elif (end := ends.get(whole)) is not None:
            lag = sum(fragment_lag(whole_span(end), f, o) for f, o in fragments.items())
        else:
            lag = None
        if lag is not None:
            total = (total or 0) + lag
    return total
