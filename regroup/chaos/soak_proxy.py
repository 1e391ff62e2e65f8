"""A loopback TCP proxy between the soak's members and its coordinator, to cut their connections.

Rules of this module:

1. The proxy listens on one loopback port for its whole life (members are given that address) and
   relays bytes, unchanged, to the coordinator's address (gRPC over HTTP/2 is just bytes to it).
2. `cut` aborts every relayed connection (an RST both ways: what a dead link or a firewall looks like)
   and stops listening, so that new connections are refused; `restore` listens again on the same port.
   Both return once done.
3. Everything runs on one asyncio loop in a daemon thread of its own; the other methods may be called
   from any thread. A connection whose upstream cannot be reached (the coordinator is down) is closed
   at once, as the coordinator itself would refuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Proxy:
    """``Proxy(upstream)``: `start` it, hand out `address`, `cut` and `restore` it, `close` it."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="soak-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Transport] = set()
        self.port = 0
        #: Connections relayed so far, and connections aborted by `cut`.
        self.accepted = 0
        self.aborted = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def open_ends(self) -> int:
        """Relayed connection ends open now (two per connection: the member's and the coordinator's).

        A connection its client closed stays counted until both directions have drained, which the
        loop does on its own time: wait for this to settle rather than assume it.
        """
        return len(self._conns)

    @property
    def cut_now(self) -> bool:
        return self._server is None

    def start(self) -> str:
        self._thread.start()
        self._call(self._listen())
        return self.address

    def cut(self) -> int:
        """Abort every connection and refuse new ones (rule 2); returns how many were aborted."""
        return self._call(self._cut())

    def restore(self) -> None:
        self._call(self._listen())

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    # ------------------------------------------------------------------ on the loop
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _listen(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> int:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        n = len(self._conns)
        for t in list(self._conns):
            t.abort()
        self._conns.clear()
        self.aborted += n
        return n

    async def _shutdown(self) -> None:
        await self._cut()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted just before a cut
            writer.transport.abort()
            return
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        ends: list[asyncio.Transport] = [writer.transport, up_writer.transport]  # type: ignore[list-item]
        self._conns.update(ends)
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the proxy is closing (`close`): end quietly, the loop stops next
        finally:
            for t in ends:
                self._conns.discard(t)
                t.abort()


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.write_eof() if dst.can_write_eof() else dst.close()
