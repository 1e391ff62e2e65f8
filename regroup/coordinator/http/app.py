"""The dashboard's HTTP side: the page, its read-only JSON API, the live event stream, and access.

Rules:
1. Read-only: every route is a GET; nothing here changes a group.
2. One object per view: a group's JSON is `regroup.rpc.views.group_details_json` (what
   ``groups describe --json`` prints) plus the feed's timeline; a streams group's is
   `regroup.rpc.views.streams_group_json` (what ``groups describe --json`` prints for it) plus its
   epoch history and the feed's timeline. The OpenAPI document (`regroup.coordinator.http.openapi`)
   describes exactly what these handlers return.
3. With tokens (``--token`` or ``--tokens-file``), every request shows one (``Authorization: Bearer``
   or the ``regroup_token`` cookie that ``/?token=T`` sets), looked up as gRPC calls' tokens are
   (`regroup.coordinator.tokens`): none or an unknown one is 401, a token without the read scope
   (admin implies it; a member token has not) is 403, and ``/?token=T`` sets the cookie only for a
   token that may read. Without tokens the dashboard is open, which the server warns about unless
   it is bound to loopback. Never a token in a response or the log.
4. Runs on the coordinator's event loop; handlers only read the core through the service's doors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
import time
from collections.abc import Awaitable, Callable, Iterable
from importlib import resources
from typing import Any, TypeVar

from aiohttp import web

from regroup.coordinator.http.feed import CLOSED, Feed
from regroup.coordinator.http.openapi import openapi_document
from regroup.coordinator.service import CoordinatorService, unix_ms
from regroup.coordinator.tokens import Grant, Scope, TokenSet
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.rpc.types import EpochChange, GroupDetails
from regroup.rpc.views import group_details_json, history_json, streams_group_json

log = logging.getLogger("regroup.coordinator.http")

COOKIE = "regroup_token"
#: A comment line on every event stream this often, so that proxies and browsers keep it open.
PING_S = 15.0
HOUR_MS = 3_600_000
#: A group's JSON is built once for all the pages that re-fetch it, as long as no record was written
#: since and it is younger than this: building a large group's JSON holds the event loop for
#: milliseconds, and heartbeats wait behind it. Heartbeat ages and log-end lags may lag this much.
GROUP_CACHE_S = 5.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
R = TypeVar("R")


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


def _encode(details: GroupDetails, timeline: list[dict[str, Any]]) -> bytes:
    body = group_details_json(details)
    body["timeline"] = timeline
    return json.dumps(body).encode()


def rebalances_since(history: Iterable[EpochChange], since_unix_ms: int) -> int:
    """Group epoch bumps in a group's (persisted, bounded) epoch history since that time."""
    return sum(1 for h in history if h.kind == "group" and h.epoch > 0 and h.at_unix_ms >= since_unix_ms)


class Dashboard:
    def __init__(self, service: CoordinatorService, feed: Feed, *, tokens: TokenSet | None = None,
                 ping_s: float = PING_S) -> None:
        self.service = service
        self.feed = feed
        self.tokens = tokens
        self.ping_s = ping_s
        self._streams: set[asyncio.Task[Any]] = set()
        #: group id -> (store tail, monotonic time, JSON body) of the last build.
        self._built: dict[str, tuple[int, float, bytes]] = {}

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._access])
        app.router.add_get("/", self.index)
        app.router.add_get("/static/{path:.+}", self.static)
        app.router.add_get("/api/groups", self.groups)
        app.router.add_get("/api/groups/{group}", self.group)
        app.router.add_get("/api/events", self.events)
        app.router.add_get("/api/openapi.json", self.openapi)
        return app

    # ------------------------------------------------------------------ access
    def _shown_token(self, request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer "):]
        return request.cookies.get(COOKIE)

    @web.middleware
    async def _access(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.tokens is None:
            return await handler(request)
        given = request.query.get("token") if request.path == "/" else None
        if given is not None:
            refused = self._refusal(self.tokens.lookup(given))
            if refused is not None:
                return refused
            resp = web.HTTPFound("/")
            resp.set_cookie(COOKIE, given, httponly=True, samesite="Strict", path="/")
            return resp
        shown = self._shown_token(request)
        refused = self._refusal(self.tokens.lookup(shown) if shown is not None else None)
        return refused if refused is not None else await handler(request)

    @staticmethod
    def _refusal(grant: Grant | None) -> web.Response | None:
        """None when the token's grant may read (rule 3); else the 401 or 403 answer."""
        if grant is None:
            return _error(401, "UNAUTHENTICATED", "give the coordinator's token: Authorization: Bearer "
                          "TOKEN, or open /?token=TOKEN once")
        if not grant.allows(Scope.READ):
            return _error(403, "PERMISSION_DENIED", f"token {grant.name!r} may not open the dashboard: it "
                          "needs the read (or admin) scope")
        return None

    # ------------------------------------------------------------------ the page
    async def index(self, _request: web.Request) -> web.StreamResponse:
        return self._static_file("index.html")

    async def static(self, request: web.Request) -> web.StreamResponse:
        return self._static_file(request.match_info["path"])

    def _static_file(self, path: str) -> web.StreamResponse:
        parts = path.split("/")
        if any(not p or p.startswith(".") or "\\" in p for p in parts):
            return _error(404, "NOT_FOUND", f"no such file {path!r}")
        f = resources.files("regroup.coordinator.http").joinpath("static", *parts)
        if not f.is_file():
            return _error(404, "NOT_FOUND", f"no such file {path!r}")
        ctype = mimetypes.guess_type(parts[-1])[0] or "application/octet-stream"
        return web.Response(body=f.read_bytes(), content_type=ctype,
                            charset="utf-8" if ctype.startswith("text/") else None,
                            headers={"Cache-Control": "no-cache"})

    # ------------------------------------------------------------------ the API
    async def _read(self, answer: Callable[[Coordinator], R]) -> R:
        """A read through the runtime's door, answered once the state it shows is durable."""
        eff = self.service.runtime.read(answer)
        await self.service.store.durable(eff.durable_seq)
        return eff.response

    async def groups(self, _request: web.Request) -> web.StreamResponse:
        since = unix_ms() - HOUR_MS
        history = self.service.history
        rows = [{"group": g.group_id, "kind": "consumer", "state": g.state, "epoch": g.epoch,
                 "members": g.members, "lag": g.lag,
                 "rebalances_last_hour": rebalances_since(history.of(g.group_id), since)}
                for g in await self.service.group_summaries()]
        streams = await self._read(lambda c: [(gid, g.state.value, g.epoch, len(g.members))
                                              for gid, g in sorted(c.streams.groups.items())])
        # A streams group's lag is per task copy, on its page; no total here.
        rows += [{"group": gid, "kind": "streams", "state": state, "epoch": epoch, "members": members,
                  "lag": None, "rebalances_last_hour": rebalances_since(history.of(gid), since)}
                 for gid, state, epoch, members in streams]
        rows.sort(key=lambda r: str(r["group"]))
        return web.json_response({"groups": rows})

    async def group(self, request: web.Request) -> web.StreamResponse:
        gid = request.match_info["group"]
        tail = self.service.store.tail
        built = self._built.get(gid)
        if built is not None and built[0] == tail and time.monotonic() - built[1] < GROUP_CACHE_S:
            return web.Response(body=built[2], content_type="application/json")
        try:
            if self.service.runtime.read(lambda c: gid in c.streams.groups).response:
                raw = await self._streams_group(gid)
            else:
                raw = _encode(await self.service.group_details(gid), self.feed.timeline(gid))
        except ProtocolError as e:
            status = 404 if e.code is ErrorCode.GROUP_ID_NOT_FOUND else 400
            return _error(status, e.code.value, e.message)
        if self.service.store.tail == tail:  # nothing was written while the log was asked for its ends
            if len(self._built) >= 1_000:
                self._built.clear()
            self._built[gid] = (tail, time.monotonic(), raw)
        return web.Response(body=raw, content_type="application/json")

    async def _streams_group(self, gid: str) -> bytes:
        """What ``groups describe GROUP --json`` prints for a streams group, with its epoch history
        and timeline; ProtocolError as the core raises it (deleted meanwhile: GROUP_ID_NOT_FOUND)."""
        body = streams_group_json(await self._read(lambda c: c.describe_streams_group(gid)))
        body["history"] = history_json(self.service.history.of(gid))
        body["timeline"] = self.feed.timeline(gid)
        return json.dumps(body).encode()

    async def openapi(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response(openapi_document())

    async def events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        client = self.feed.subscribe()
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        try:
            await resp.write(b": connected\n\n")
            while True:
                try:
                    event = await asyncio.wait_for(client.queue.get(), self.ping_s)
                except TimeoutError:
                    await resp.write(b": ping\n\n")
                    continue
                if event is CLOSED:
                    break
                await resp.write(f"event: {event.kind}\ndata: {json.dumps(event.data)}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the browser went away, or the server is stopping
        finally:
            self.feed.unsubscribe(client)
            if task is not None:
                self._streams.discard(task)
        return resp


class DashboardServer:
    """The dashboard bound to a host and port on the running event loop."""

    def __init__(self, dashboard: Dashboard, host: str, port: int) -> None:
        self.dashboard = dashboard
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Listen; returns the bound port (port 0: any free one)."""
        self._runner = web.AppRunner(self.dashboard.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        addresses = self._runner.addresses
        self.port = int(addresses[0][1]) if addresses else self.port
        return self.port

    async def stop(self) -> None:
        """End the event streams, then stop listening."""
        self.dashboard.feed.close()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None


def parse_http(spec: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> (host, port); ValueError when malformed."""
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--http {spec!r}: expected HOST:PORT, e.g. 127.0.0.1:9651")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
