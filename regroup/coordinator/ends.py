"""Where partitions end in the log, for checking commits against it (the core decides).

The core refuses a commit beyond its partition's end when it is given that end
(`regroup.protocol.offsets.check_within_ends`). This module finds ends worth giving it, so that a
legitimate commit is never refused and the log is not asked on every commit:

1. **Only a fresh end refuses.** An end handed to the core was read from the log *after* the request
   arrived. A consumer read its records before it sent the commit, and a partition's end only grows,
   so such an end is at least any offset a consumer can legitimately commit — however fast the
   partition grows. An older (cached) end is only used to let an offset through without asking: at
   or below it, the offset is inside the log.
2. **One lookup at a time per topic, shared.** A request that needs a topic's ends while a lookup of
   it is running queues the next one, and every request arriving until that one starts waits for it
   too (it starts after they all arrived): under a burst of commits the log is asked about a topic
   at most once per lookup time, not once per commit.
3. **Fail open.** No end, no check beyond the absolute bound the core always applies: a topic the
   coordinator's metadata does not know (a request cannot make the coordinator ask the log about
   arbitrary names), a source that cannot tell ends (``static:``, ``file:``), or a lookup that failed
   or took longer than the timeout. Commits never wait on the log longer than that timeout.
4. **Only for a commit that may pass.** The service looks ends up (`fresh`) only for a commit the
   core's own checks accept (`Coordinator.commit_refusal`: its member, epoch, ownership): a commit
   from a member that left or was fenced is answered without waiting on the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Container, Mapping

from regroup.protocol.shard import Shard

log = logging.getLogger("regroup.coordinator")

#: ``topic -> {partition: end}``: the log backend's ``end_offsets`` (it may block: run on a thread).
Lookup = Callable[[str], Mapping[int, int]]


class LogEnds:
    """Ends of partitions, looked up on demand and cached (see the module's rules)."""

    def __init__(self, lookup: Lookup | None, timeout_s: float = 2.0) -> None:
        self.lookup = lookup
        self.timeout_s = timeout_s
        #: topic -> {partition: end}, from its latest lookup.
        self._cached: dict[str, dict[int, int]] = {}
        #: topic -> its latest lookup (running, or queued behind the one before).
        self._latest: dict[str, asyncio.Future[dict[int, int]]] = {}
        #: topic -> a lookup that has not started yet: requests arriving now can share it (rule 2).
        self._queued: dict[str, asyncio.Future[dict[int, int]]] = {}
        #: Lookups started (for tests and metrics).
        self.lookups = 0

    async def for_offsets(self, offsets: Mapping[Shard, int], known: Container[str]) -> dict[Shard, int]:
        """Ends the core may check ``offsets`` against: those read after this call (rule 1) for the
        topics where an offset is above the cached end; empty when every offset is inside the log as
        far as the cache knows, or nothing can be known (rule 3)."""
        return await self.fresh(self.to_look_up(offsets, known))

    def to_look_up(self, offsets: Mapping[Shard, int], known: Container[str]) -> list[str]:
        """The topics of ``offsets`` whose ends must be read fresh: an offset above the cached end (or
        none cached) of a topic the coordinator knows (rule 3); empty when no lookup can tell more."""
        if self.lookup is None:
            return []
        ask: set[str] = set()
        for shard, offset in offsets.items():
            topic = shard.topic
            if topic in ask or topic not in known:
                continue
            end = self._cached.get(topic, {}).get(shard.partition)
            if end is None or offset > end:
                ask.add(topic)
        return sorted(ask)

    async def fresh(self, topics: list[str]) -> dict[Shard, int]:
        """The ends of ``topics``, each read by a lookup that starts after this call (rules 1 to 3)."""
        if not topics:
            return {}
        found = await asyncio.gather(*(self._fresh(t) for t in topics))
        return {Shard(t, p): e for t, ends in zip(topics, found, strict=True) for p, e in ends.items()}

    async def _fresh(self, topic: str) -> dict[int, int]:
        """The ends of a lookup of ``topic`` that starts after now (rules 1 and 2)."""
        task = self._queued.get(topic)
        if task is None:
            task = asyncio.ensure_future(self._look_up(topic, self._latest.get(topic)))
            self._queued[topic] = self._latest[topic] = task
            task.add_done_callback(functools.partial(self._finished, topic))
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except Exception as e:  # timeout, an unknown topic, the log down: fail open (rule 3)
            log.debug("end offsets of topic %r unavailable (%s: %s); commits to it are not checked "
                      "against the log end", topic, type(e).__name__, e)
            return {}

    async def _look_up(self, topic: str, before: asyncio.Future[dict[int, int]] | None) -> dict[int, int]:
        if before is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(before)
        if self._queued.get(topic) is asyncio.current_task():
            del self._queued[topic]  # starting: a request arriving from now on needs the next one
        assert self.lookup is not None
        self.lookups += 1
        lookup = self.lookup

        def read() -> dict[int, int]:
            return {p: e for p, e in lookup(topic).items() if isinstance(p, int) and isinstance(e, int)}

        ends = await asyncio.get_running_loop().run_in_executor(None, read)
        self._cached[topic] = ends
        return ends

    def _finished(self, topic: str, task: asyncio.Future[dict[int, int]]) -> None:
        if self._queued.get(topic) is task:
            del self._queued[topic]
        if self._latest.get(topic) is task:
            del self._latest[topic]
        with contextlib.suppress(BaseException):
            task.exception()  # retrieved: a failed lookup nobody waits for any more is not logged

    def cached(self, topic: str) -> dict[int, int] | None:
        """The last ends read of ``topic`` (None: never read)."""
        cached = self._cached.get(topic)
        return dict(cached) if cached is not None else None
