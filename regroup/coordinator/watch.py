"""Open Watch streams, by member: where the service pushes the core's nudges.

Each stream owns a one-slot queue: a nudge for a member that has not yet read the previous one is
merged into it (one "heartbeat now" is as good as two). Streams are capped per member and in total,
so clients cannot make the coordinator hoard memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from regroup.protocol.timers import MemberKey

#: Sentinel pushed to end every stream at shutdown.
CLOSED = -(2**31)


class TooManyWatchers(Exception):
    pass


class Watchers:
    def __init__(self, max_total: int = 100_000, max_per_member: int = 4) -> None:
        self.max_total = max_total
        self.max_per_member = max_per_member
        self._streams: dict[MemberKey, set[asyncio.Queue[int]]] = {}
        self._count = 0
        self.on_change: Callable[[int], None] | None = None
        self.on_nudge: Callable[[int], None] | None = None

    def __len__(self) -> int:
        return self._count

    def subscribe(self, key: MemberKey) -> asyncio.Queue[int]:
        streams = self._streams.setdefault(key, set())
        if len(streams) >= self.max_per_member:
            raise TooManyWatchers(f"member {key[1]!r} of group {key[0]!r} already has {len(streams)} open "
                                  "Watch streams; close one first")
        if self._count >= self.max_total:
            raise TooManyWatchers(f"the coordinator already serves {self._count} Watch streams")
        q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        streams.add(q)
        self._count += 1
        self._changed()
        return q

    def unsubscribe(self, key: MemberKey, q: asyncio.Queue[int]) -> None:
        streams = self._streams.get(key)
        if streams is None or q not in streams:
            return
        streams.discard(q)
        self._count -= 1
        if not streams:
            del self._streams[key]
        self._changed()

    def watching(self, key: MemberKey) -> bool:
        """Whether the member has a stream open."""
        return key in self._streams

    def nudge(self, keys: Iterable[MemberKey], epoch_of: Callable[[str], int]) -> int:
        """Push to every stream of ``keys``; returns how many streams got something new."""
        sent = 0
        for key in keys:
            for q in self._streams.get(key, ()):
                if q.empty():
                    q.put_nowait(epoch_of(key[0]))
                    sent += 1
        if sent and self.on_nudge is not None:
            self.on_nudge(sent)
        return sent

    def close_all(self) -> None:
        for streams in self._streams.values():
            for q in streams:
                if not q.empty():
                    q.get_nowait()
                q.put_nowait(CLOSED)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self._count)
