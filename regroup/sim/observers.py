"""What a simulated consumer tells the outside world about the shards it works on.

A process *acquires* a shard when it starts taking it over (before it reads the committed offset),
*activates* it when it starts processing from an offset, *stops* processing it (revocation or loss),
reports the offset ranges it *processed*, and finally *releases* it — cleanly after committing its
last position, or uncleanly (crash, fencing, lost membership) without. In a key-range run
(regroup/sim/keyranges.py) it also reports which *records* it processed, key by key (``on_records``;
``on_processed`` then gives the range's scan positions, which move past other ranges' records too).
The invariant checker and the metrics recorder both listen; `Fanout` passes every call to several
listeners.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from regroup.protocol.shard import Shard
from regroup.sim.keyranges import Run


class ShardObserver(Protocol):
    def on_acquire(self, t: int, owner: str, shard: Shard) -> None: ...

    def on_activate(self, t: int, owner: str, shard: Shard, offset: int) -> None: ...

    def on_processed(self, t: int, owner: str, shard: Shard, lo: int, hi: int) -> None: ...

    def on_records(self, t: int, owner: str, shard: Shard, runs: Sequence[Run]) -> None:
        """Key-range runs only: the records processed, as runs of one key each."""

    def on_stop(self, t: int, owner: str, shard: Shard) -> None: ...

    def on_release(self, t: int, owner: str, shard: Shard, clean: bool) -> None: ...


class NullObserver:
    """Listens to nothing."""

    def on_acquire(self, t: int, owner: str, shard: Shard) -> None:
        pass

    def on_activate(self, t: int, owner: str, shard: Shard, offset: int) -> None:
        pass

    def on_processed(self, t: int, owner: str, shard: Shard, lo: int, hi: int) -> None:
        pass

    def on_records(self, t: int, owner: str, shard: Shard, runs: Sequence[Run]) -> None:
        pass

    def on_stop(self, t: int, owner: str, shard: Shard) -> None:
        pass

    def on_release(self, t: int, owner: str, shard: Shard, clean: bool) -> None:
        pass


class Fanout:
    """Forwards every observation to each listener, in order."""

    def __init__(self, *listeners: ShardObserver) -> None:
        self.listeners = listeners

    def on_acquire(self, t: int, owner: str, shard: Shard) -> None:
        for listener in self.listeners:
            listener.on_acquire(t, owner, shard)

    def on_activate(self, t: int, owner: str, shard: Shard, offset: int) -> None:
        for listener in self.listeners:
            listener.on_activate(t, owner, shard, offset)

    def on_processed(self, t: int, owner: str, shard: Shard, lo: int, hi: int) -> None:
        for listener in self.listeners:
            listener.on_processed(t, owner, shard, lo, hi)

    def on_records(self, t: int, owner: str, shard: Shard, runs: Sequence[Run]) -> None:
        for listener in self.listeners:
            listener.on_records(t, owner, shard, runs)

    def on_stop(self, t: int, owner: str, shard: Shard) -> None:
        for listener in self.listeners:
            listener.on_stop(t, owner, shard)

    def on_release(self, t: int, owner: str, shard: Shard, clean: bool) -> None:
        for listener in self.listeners:
            listener.on_release(t, owner, shard, clean)
