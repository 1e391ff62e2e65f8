"""The lane of large requests: read and check them off the event loop that answers heartbeats.

Rules:
1. A request body over ``large_request_bytes`` (`CoordinatorConfig`) is not parsed by the gRPC
   deserializer on the event loop: it arrives as `Encoded`, and its handler asks `LargeRequests` to
   run the work on the lane's one thread (`prepare`): parse it, convert it (`regroup.rpc.wire`) and,
   for a heartbeat of either kind, run the core's checks of its shape (those its step runs first). The
   largest legal heartbeat (a million owned
   partitions, about 3 MB) takes about 0.2 s of CPU there; the loop meanwhile answers everyone else,
   and the step itself (the core) then runs on the loop as for any request.
2. Whether one more large request may wait is the core's rule (`large_request_refusal`: per client
   — one connection — and in all); a refused one ends with RESOURCE_EXHAUSTED and the core's message
   naming the limit, as any shed call: the request is legal, the client sends it again later.
3. One thread, first come first served: large requests do not compete with each other for the
   interpreter, and each client has at most its limit waiting, so one client's large requests delay
   another's by at most that many. The thread shares the interpreter lock with the loop: Python code
   on it yields the lock every switch interval (5 ms), a single long step in C does not — so the work
   keeps those steps short (the core reads a listing in slices and never builds a million `Shard`s:
   `regroup.protocol.validation.ListedShards`).
4. What a large request decoded into is freed on the lane too (`dispose`), not on the loop.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.validation import large_request_refusal

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Encoded:
    """A request body over ``large_request_bytes``, not parsed yet: ``parse`` (the method's
    deserializer: the message, or `Malformed`) runs on the lane."""

    method: str
    data: bytes
    parse: Callable[[bytes], Any]


class TooManyLargeRequests(Exception):
    """The core's `large_request_refusal`: the message names the limit."""


class LargeRequests:
    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="regroup-large")
        self._waiting: collections.Counter[str] = collections.Counter()
        self._total = 0
        #: Counted for `regroup chaos abuse` and the metrics: served (read) and refused.
        self.served = 0
        self.refused = 0
        #: Told ``"read"`` or ``"refused"`` as each large request is (the metrics); must be cheap.
        self.on_result: Callable[[str], None] | None = None

    async def prepare(self, client: str, work: Callable[[], T]) -> T:
        """``work`` (parse, convert, check) on the lane, once the core's rule lets ``client`` wait;
        `TooManyLargeRequests` when it does not."""
        refusal = large_request_refusal(self._waiting[client], self._total, self.config)
        if refusal is not None:
            self.refused += 1
            if self.on_result is not None:
                self.on_result("refused")
            raise TooManyLargeRequests(refusal)
        self._waiting[client] += 1
        self._total += 1
        try:
            done = await asyncio.get_running_loop().run_in_executor(self._pool, work)
        finally:
            self._total -= 1
            self._waiting[client] -= 1
            if not self._waiting[client]:
                del self._waiting[client]
        self.served += 1
        if self.on_result is not None:
            self.on_result("read")
        return done

    def dispose(self, box: list[Any]) -> None:
        """Empty ``box`` (holding a large decoded request, and nothing else holds it) on the lane."""
        self._pool.submit(box.clear)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
