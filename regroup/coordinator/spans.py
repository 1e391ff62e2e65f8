"""Where a split partition's records are, for describe's lag (`regroup.protocol.lag` decides).

A partition split on the producer side (`regroup.log.embedded.layout`) has pieces with offsets of
their own, so its end offset as one number says little about how far a group is behind it. This
module asks a log that can tell (the embedded log: ``layout`` and ``piece_ends``) for every split
partition's pieces as `Span`s — sealed pieces with their end, open ones with their writer's — on a
thread, within the describe's time bound. Rules:

1. Only split partitions are returned: for the others the end offset is the whole story.
2. Fail open, as the ends do (`regroup.coordinator.ends` rule 3): a source that cannot tell (Kafka,
   ``static:``), or a lookup that fails or takes too long, gives no spans, and lag falls back to the
   end offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from regroup.protocol.lag import Span
from regroup.protocol.shard import Shard

log = logging.getLogger("regroup.coordinator")


def read_spans(source: Any, partitions: Iterable[Shard]) -> dict[Shard, tuple[Span, ...]]:
    """The spans of the split partitions among ``partitions`` (blocking: the log's files)."""
    layout_of = getattr(source, "layout", None)
    piece_ends = getattr(source, "piece_ends", None)
    if layout_of is None or piece_ends is None:
        return {}
    out: dict[Shard, tuple[Span, ...]] = {}
    for s in partitions:
        layout = layout_of(s.topic, s.partition)
        if layout.trivial:
            continue
        ends = piece_ends(s.topic, s.partition)
        out[s] = tuple((p.lo, p.hi, p.start, ends.get((p.lo, p.hi), p.start) if p.end is None else p.end)
                       for p in layout.pieces)
    return out


async def spans(source: Any, partitions: Iterable[Shard], timeout_s: float) -> dict[Shard, tuple[Span, ...]]:
    """`read_spans` on a thread, bounded by ``timeout_s`` (rule 2)."""
    if getattr(source, "layout", None) is None:
        return {}
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    try:
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(None, read_spans, source, wanted), timeout_s)
    except Exception as e:
        log.info("describe: pieces of split partitions unavailable (%s: %s)", type(e).__name__, e)
        return {}
