"""The coordinator service: the asyncio gRPC servicer around the coordinator runtime.

Every handler decodes the request (`regroup.rpc.wire`), goes through the runtime's door (`_step` for
a change, `_ask` for a read: the core runs synchronously on the event loop, it is fast and never
blocks), performs the step's effects (history, nudges to Watch streams, the timer at the next
deadline, logs and metrics), awaits the durability the runtime names, then encodes the answer. The
service decides nothing about the protocol and validates nothing the core validates. Besides
requests it reports two facts to the core as steps: a member's Watch stream opened
(`connection_restored`), and a member's last Watch stream ended without the service ending it — its
process died and its kernel closed the socket, or the network dropped it (`connection_lost`); what
that means for the member is `regroup.protocol.failover`'s rule. The migration poller
(`regroup.coordinator.migration`) reports what a Kafka group a group migrates from holds the same way
(`external_owners`). On a tick it runs the offsets-retention check with the wall-clock time
(`expire_offsets`), and before a commit it reads where partitions end when the core may need it
(`regroup.coordinator.ends`) — only once the core's own checks of the commit passed
(`Coordinator.commit_refusal`), so that a commit they refuse never waits on the log.

Fail-stop: if the store cannot write, or the core raises an unexpected exception in a call that
changes state, memory may no longer match the disk. The service then refuses further calls and asks
the server to stop; a restart recovers from the durable records.

Logs (`regroup.coordinator.logs`): every step's membership changes as the core reported them (joins,
leaves, take-overs, fences with their reason), every error answered to a client at warning (its code
and message, never the call's metadata), unexpected exceptions at error with their traceback.

A request body that is not the method's protobuf message never reaches a handler: its deserializer
returns `Malformed` and the call is answered INVALID_ARGUMENT ("malformed Heartbeat request: ...");
the deserializers and the guard around every method are `regroup.coordinator.handlers`'.

A request body over the core's ``large_request_bytes`` is not parsed on the event loop: its
deserializer returns it `Encoded`, and `regroup.coordinator.large` parses and converts it on the lane
of large requests — a heartbeat of either kind also checked there by the core's own shape check
(`validate_heartbeat`, a streams member's `regroup.protocol.streams.fencing.validate`), whose
refusal is answered as the step would have answered it (a lane that is full: RESOURCE_EXHAUSTED with
the core's message naming the limit) — so that the largest legal heartbeats of some clients do not
delay everyone's heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio

from regroup.coordinator import history as hist
from regroup.coordinator.ends import LogEnds
from regroup.coordinator.handlers import Malformed, abort, generic_handler, method_handlers
from regroup.coordinator.handlers import Stopped as _Stopped
from regroup.coordinator.handlers import peer as _peer
from regroup.coordinator.large import Encoded, LargeRequests, TooManyLargeRequests
from regroup.coordinator.logs import instance_lookup, log_step
from regroup.coordinator.metrics import Metrics
from regroup.coordinator.runtime import Effects, Runtime
from regroup.coordinator.sources import TopicRefresher
from regroup.coordinator.spans import spans
from regroup.coordinator.store import DurableStore, StoreError
from regroup.coordinator.watch import CLOSED, TooManyWatchers, Watchers
from regroup.protocol.coordinator import Coordinator, Outcome
from regroup.protocol.describe import GroupDescription
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.external import ExternalView
from regroup.protocol.lag import Span, fragment_lag, group_lag, whole_span
from regroup.protocol.messages import STATIC_LEAVE_EPOCH, Ack, HeartbeatResponse, OffsetFetchResponse
from regroup.protocol.shard import Shard
from regroup.protocol.streams.fencing import validate as validate_streams_heartbeat
from regroup.protocol.streams.messages import StreamsHeartbeatResponse
from regroup.protocol.timers import MemberKey
from regroup.protocol.topics import TopicMetadata
from regroup.protocol.validation import validate_heartbeat
from regroup.rpc import regroup_pb2 as pb
from regroup.rpc import streams_wire, wire
from regroup.rpc.errors import WireError
from regroup.rpc.types import GroupDetails, MemberClient, OffsetStatus, TopicsInfo
from regroup.rpc.wire import CLIENT_ID_HEADER

log = logging.getLogger("regroup.coordinator")


R = TypeVar("R")
T = TypeVar("T")
Ctx = grpc.aio.ServicerContext[Any, Any]


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def unix_ms() -> int:
    return int(time.time() * 1000)










@dataclass(frozen=True, slots=True)
class ServiceOptions:
    #: The address shown as COORDINATOR by describe.
    address: str = ""
    #: How often the per-group gauges are refreshed from the core's state.
    metrics_interval_s: float = 5.0
    #: Bound on the log backend's end-offset lookup of a describe.
    end_offsets_timeout_s: float = 2.0


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    epoch: int
    members: int
    #: Sum of the partitions' lags where the log end and a committed offset are known (None: nowhere).
    lag: int | None


class CoordinatorService:
    def __init__(
        self,
        coord: Coordinator,
        store: DurableStore,
        *,
        metrics: Metrics | None = None,
        history: hist.EpochHistory | None = None,
        watchers: Watchers | None = None,
        refresher: TopicRefresher | None = None,
        options: ServiceOptions | None = None,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.coord = coord
        self.store = store
        self.runtime = Runtime(coord, store, unix_ms)
        self.metrics = metrics or Metrics()
        self.history = history or hist.EpochHistory()
        self.watchers = watchers or Watchers()
        self.refresher = refresher
        self.options = options or ServiceOptions()
        self.clock = clock
        #: Where partitions end in the log, for the core's check of commits and resets (`ends`).
        self.ends = LogEnds(getattr(refresher.source, "end_offsets", None) if refresher is not None else None,
                            self.options.end_offsets_timeout_s)
        self.clients: dict[MemberKey, tuple[str, str, int]] = {}
        #: Where requests over ``large_request_bytes`` are read and checked (`regroup.coordinator.large`).
        self.large = LargeRequests(coord.config)
        self.large.on_result = lambda result: self.metrics.large_requests.labels(result).inc()
        #: Told of every step that wrote records (the dashboard's feed); must be cheap.
        self.on_step: Callable[[Effects[Any]], None] | None = None
        self.stopped = asyncio.Event()
        self.fatal_reason = ""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._ending = False  # shutting down: streams that end are not broken connections
        self._tasks: list[asyncio.Task[None]] = []
        self._observe_handle: asyncio.TimerHandle | None = None
        self._hb_counters = {c: self.metrics.heartbeats.labels(c.value) for c in ErrorCode}
        self.watchers.on_change = self.metrics.watch_streams.set
        self.watchers.on_nudge = self.metrics.nudges.inc
        store.on_failure = lambda exc: self.fail(f"the record store failed: {exc!r}")
        store.stats.on_commit = self.metrics.on_commit
        store.stats.on_compact = self.metrics.on_compact
        if refresher is not None:
            refreshes = self.metrics.topic_refreshes
            refresher.on_result = lambda ok: refreshes.labels("ok" if ok else "error").inc()

    # ================================================================= lifecycle
    def start(self) -> None:
        self.metrics.topics.set(len(self.coord.topics))
        self._observe()
        # Recovered members that do not show up soon are fenced (`regroup.protocol.failover` rule 4).
        with contextlib.suppress(_Stopped):
            self._step(lambda c: c.serving(self.clock()))
        self._rearm_timer(self.coord.next_deadline())
        self._tasks.append(asyncio.create_task(self._observe_loop(), name="regroup-metrics"))
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="regroup-retention"))
        if self.refresher is not None:
            self._tasks.append(asyncio.create_task(self.refresher.run(), name="regroup-topics"))

    async def close(self) -> None:
        """Stop timers and tasks and end Watch streams (the store is closed by the server)."""
        for handle in (self._timer, self._observe_handle):
            if handle is not None:
                handle.cancel()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.watchers.close_all()
        self.large.close()
        if self.refresher is not None:
            self.refresher.close()

    def fail(self, reason: str) -> None:
        if self.fatal_reason:
            return
        self.fatal_reason = reason
        log.critical("stopping the coordinator: %s; restart it to recover from the durable records", reason)
        self.stopped.set()

    # ================================================================= the runtime's doors
    def _step(self, decide: Callable[[Coordinator], Outcome[R]], requester: MemberKey | None = None,
              instance_id: str | None = None) -> Effects[R]:
        """Run one state-changing call through the runtime and perform its effects (``instance_id``:
        the requester's claim, for the log of a member that is gone after the step)."""
        if self.fatal_reason:
            raise _Stopped(self.fatal_reason)
        core_seconds: list[float] = []

        def timed(c: Coordinator) -> Outcome[R]:
            # Only the core's decision is timed (the assignment metric), not the persisting after it.
            t0 = time.perf_counter()
            out = decide(c)
            core_seconds.append(time.perf_counter() - t0)
            return out

        try:
            eff = self.runtime.step(timed, requester)
        except StoreError as e:
            self.fail(f"the record store failed: {e}")
            raise _Stopped(self.fatal_reason) from e
        except Exception as e:
            # Memory may no longer match the disk, whichever part raised: stop and recover.
            where = "the coordinator runtime" if core_seconds else "the protocol core"
            log.exception("%s raised while changing state", where)
            self.fail(f"{where} raised {type(e).__name__}: {e}")
            raise _Stopped(self.fatal_reason) from e
        if eff.installed_target:
            self.metrics.assignment_seconds.observe(core_seconds[0])
        self._perform(eff, requester, instance_id)
        return eff

    async def _ask(self, answer: Callable[[Coordinator], R]) -> R:
        """A read through the runtime: answered once the state it shows is durable."""
        return await self._released(self.runtime.read(answer))

    async def _released(self, eff: Effects[R]) -> R:
        """The step's response, once every record it may reflect is durable."""
        try:
            await self.store.durable(eff.durable_seq)
        except StoreError as e:
            raise _Stopped(str(e)) from e
        return eff.response

    def _perform(self, eff: Effects[Any], requester: MemberKey | None = None,
                 instance_id: str | None = None) -> None:
        if eff.epoch_events or eff.fences or eff.departed:
            claimed = {requester: instance_id} if requester is not None else None
            log_step(log, eff.epoch_events, eff.fences, eff.departed, instance_lookup(self.coord, claimed),
                     requester)
        if eff.records:
            self.history.apply(eff.history)
            self.metrics.observe_records(eff.records)
            self.metrics.records_since_snapshot.set(self.store.records_since_snapshot)
            self._observe_soon()
            if self.on_step is not None:
                self.on_step(eff)
        for key in eff.departed:
            self.clients.pop(key, None)
        for note in eff.notes:
            log.warning("%s", note)
        for f in eff.fences:
            self.metrics.fenced.labels(f.group_id).inc()
        if eff.nudges:
            self.watchers.nudge(eff.nudges, self._epoch_of)
        self._rearm_timer(eff.next_deadline)

    def _epoch_of(self, group_id: str) -> int:
        group = self.coord.groups.get(group_id) or self.coord.streams.groups.get(group_id)
        return group.epoch if group is not None else 0

    # ================================================================= timers and topics
    def _rearm_timer(self, deadline: int | None) -> None:
        if deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._timer_at = None
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= deadline:
            return  # an earlier wake-up is already scheduled; it re-arms when it fires
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        delay = max(0, deadline - self.clock() + 1) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self.fatal_reason:
            return
        with contextlib.suppress(_Stopped):
            self._step(lambda c: c.expire(self.clock()))

    def apply_topics(self, topics: TopicMetadata) -> None:
        """New metadata from the log backend (called by the refresher on the event loop)."""
        if self.fatal_reason:
            return
        try:
            self._step(lambda c: c.update_topics(topics, self.clock()))
        except _Stopped:
            return
        self.metrics.topics.set(len(topics))

    async def _retention_loop(self) -> None:
        """Offsets retention, checked on a tick with the wall-clock time (`regroup.protocol.retention`)."""
        interval_s = self.coord.config.retention_check_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            self.expire_offsets()

    def expire_offsets(self) -> Effects[None] | None:
        """One retention check now; None when the service has stopped."""
        if self.fatal_reason:
            return None
        with contextlib.suppress(_Stopped):
            return self._step(lambda c: c.expire_offsets(self.runtime.unix_ms()))
        return None

    def external_owners(self, group_id: str, holder: str, view: ExternalView | None) -> Effects[Ack] | None:
        """A read of a group outside regroup that ``group_id`` migrates from (the migration poller, on
        the event loop); None when the service has stopped."""
        with contextlib.suppress(_Stopped):
            return self._step(lambda c: c.external_owners(group_id, holder, view, self.clock()))
        return None

    def end_external_hold(self, group_id: str) -> Effects[Ack] | None:
        """An operator ended the group's migration (``--end-migration``)."""
        with contextlib.suppress(_Stopped):
            return self._step(lambda c: c.end_external_hold(group_id, self.clock()))
        return None

    def _observe(self) -> None:
        self._observe_handle = None
        self.metrics.observe_groups(self.coord)

    def _observe_soon(self) -> None:
        """Refresh the per-group gauges within a second of a change (at most once a second)."""
        if self._observe_handle is None:
            self._observe_handle = asyncio.get_running_loop().call_later(1.0, self._observe)

    async def _observe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.options.metrics_interval_s)
            self._observe()

    # ================================================================= heartbeat and watch
    async def heartbeat(self, request: pb.HeartbeatRequest, context: Ctx) -> pb.HeartbeatResponse:
        return await self._member_heartbeat(
            "Heartbeat", request, context,
            lambda msg: wire.heartbeat_request_from_pb(msg, self.coord.config.max_owned_shards),
            lambda c, req: c.heartbeat(req, self.clock()), wire.heartbeat_response_to_pb, HeartbeatResponse,
            check=lambda req: validate_heartbeat(req, self.coord.config))

    async def streams_heartbeat(self, request: pb.StreamsHeartbeatRequest, context: Ctx,
                                ) -> pb.StreamsHeartbeatResponse:
        """A streams member's heartbeat: the consumer heartbeat's path, with tasks in roles."""
        return await self._member_heartbeat(
            "StreamsHeartbeat", request, context,
            lambda msg: streams_wire.streams_heartbeat_request_from_pb(
                msg, self.coord.config.max_owned_shards),
            lambda c, req: c.streams_heartbeat(req, self.clock()),
            streams_wire.streams_heartbeat_response_to_pb, StreamsHeartbeatResponse,
            check=lambda req: validate_streams_heartbeat(req, self.coord.config))

    async def _member_heartbeat(self, method: str, request: Any, context: Ctx, decode: Callable[[Any], Any],
                                call: Callable[[Coordinator, Any], Outcome[Any]], encode: Callable[[Any], R],
                                refused: Callable[..., Any], check: Callable[[Any], None] | None = None) -> R:
        """Either kind of heartbeat: decode (a malformed one is INVALID_REQUEST), one step through
        the runtime, remember the member's client, answer once durable. A large one is parsed,
        decoded and checked by the core's ``check`` on the lane of large requests first (its refusal
        is the core's answer), and freed there."""
        t0 = time.perf_counter()
        large = isinstance(request, Encoded)
        try:
            if large:
                request, req = await self._prepare_large(method, request, context, decode, check)
                if isinstance(req, (WireError, ProtocolError)):
                    raise req
            else:
                req = decode(request)
        except (WireError, ProtocolError) as e:
            code, text = (e.code, e.message) if isinstance(e, ProtocolError) else (ErrorCode.INVALID_REQUEST,
                                                                                   str(e))
            resp = refused(code, text, request.member_id, request.member_epoch,
                           self.coord.config.heartbeat_interval_ms)
            self._hb_counters[resp.error].inc()
            self._refused(method, resp.error, resp.message, context, (request.group_id, request.member_id))
            return encode(resp)
        key = (req.group_id, req.member_id)
        epoch, instance_id = req.member_epoch, req.instance_id
        try:
            eff = self._step(lambda c: call(c, req), key, instance_id)
        finally:
            if large:
                box = [req]
                del req  # (also the step's closure's): the lane frees the request's shards
                self.large.dispose(box)
        resp = eff.response
        if resp.error is ErrorCode.NONE and resp.member_epoch >= 0:
            self._seen(key, context)
        await self._released(eff)
        self._hb_counters[resp.error].inc()
        self.metrics.heartbeat_latency.observe(time.perf_counter() - t0)
        if resp.error is not ErrorCode.NONE:
            self._refused(method, resp.error, resp.message, context, key)
        elif epoch == STATIC_LEAVE_EPOCH:
            # No epoch moves, so the core reports no cause: the answer is the news.
            log.info("group %r: member %r (instance %r) stepped out; it keeps its assignment until its "
                     "session times out", key[0], key[1], instance_id)
        return encode(resp)

    async def _prepare_large(self, method: str, request: Encoded, context: Ctx, decode: Callable[[Any], T],
                             check: Callable[[T], None] | None,
                             ) -> tuple[Any, T | WireError | ProtocolError]:
        """A large request's message and what it decodes to, parsed, decoded and checked on the lane:
        the decoded value, or what ``decode`` (`WireError`) or ``check`` (`ProtocolError`) raised."""
        def work() -> tuple[Any, T | WireError | ProtocolError | None]:
            msg = request.parse(request.data)
            if isinstance(msg, Malformed):
                return msg, None
            try:
                value = decode(msg)
                if check is not None:
                    check(value)
            except (WireError, ProtocolError) as e:
                return msg, e
            return msg, value

        msg, out = await self._lane(method, context, work)
        if isinstance(msg, Malformed) or out is None:
            await self._abort(context, method, grpc.StatusCode.INVALID_ARGUMENT, msg.message)
        return msg, out

    async def _lane(self, method: str, context: Ctx, work: Callable[[], T]) -> T:
        """``work`` on the lane of large requests; a refusal (the core's rule) ends the call."""
        try:
            return await self.large.prepare(_peer(context), work)
        except TooManyLargeRequests as e:
            await self._abort(context, method, grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))

    async def parsed(self, method: str, request: Any, context: Ctx) -> Any:
        """A request's message: parsed on the lane when it arrived `Encoded`."""
        if not isinstance(request, Encoded):
            return request
        encoded = request
        msg = await self._lane(method, context, lambda: encoded.parse(encoded.data))
        if isinstance(msg, Malformed):
            await self._abort(context, method, grpc.StatusCode.INVALID_ARGUMENT, msg.message)
        return msg

    async def heartbeat_stream(self, requests: AsyncIterator[pb.HeartbeatRequest], context: Ctx,
                               ) -> AsyncGenerator[pb.HeartbeatResponse, None]:
        """Heartbeats on one stream, answered in order (see proto: HeartbeatStream)."""
        self.metrics.heartbeat_streams.inc()
        try:
            async for request in requests:
                if isinstance(request, Malformed):
                    await self._abort(context, "HeartbeatStream", grpc.StatusCode.INVALID_ARGUMENT,
                                      request.message)
                if self.fatal_reason:
                    await self._abort(context, "HeartbeatStream", grpc.StatusCode.UNAVAILABLE,
                                      f"the coordinator is stopping: {self.fatal_reason}")
                try:
                    yield await self.heartbeat(request, context)
                except _Stopped as e:
                    await self._abort(context, "HeartbeatStream", grpc.StatusCode.UNAVAILABLE,
                                      f"the coordinator is stopping: {e}")
        finally:
            self.metrics.heartbeat_streams.dec()

    def end_streams(self) -> None:
        """At shutdown: end the Watch streams (heartbeat streams end with the server's grace period).
        From now on a stream that ends is not reported as a broken connection: we are ending it."""
        self._ending = True
        self.watchers.close_all()

    def _seen(self, key: MemberKey, context: Ctx) -> None:
        client_id = ""
        for k, v in context.invocation_metadata() or ():
            if k == CLIENT_ID_HEADER:
                client_id = (v if isinstance(v, str) else v.decode(errors="replace"))[:255]
                break
        self.clients[key] = (client_id, _host_of(context.peer() or ""), self.clock())

    async def watch(self, request: pb.WatchRequest, context: Ctx) -> AsyncGenerator[pb.Nudge, None]:
        key = (request.group_id, request.member_id)
        # The ids check shows no state: no wait for durability here, where a nudge for this member
        # would be lost between the check and the subscription.
        ack = self.runtime.read(lambda c: c.watch(*key)).response
        if not ack.ok:
            self._refused("Watch", ack.error, ack.message, context, key)
            yield pb.Nudge(kind=pb.NUDGE_KIND_SUBSCRIBED, group_id=request.group_id[:255],
                           member_id=request.member_id[:255], error=wire.error_to_pb(ack.error),
                           message=ack.message)
            return
        try:
            queue = self.watchers.subscribe(key)
        except TooManyWatchers as e:
            await self._abort(context, "Watch", grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        # The member is connected again: before it hears so (SUBSCRIBED), the core forgets a grace
        # its broken stream started (regroup.protocol.failover rules 3 and 8).
        self._connection(key, lost=False)
        ended_by_us = False
        try:
            yield pb.Nudge(kind=pb.NUDGE_KIND_SUBSCRIBED, group_id=key[0], member_id=key[1],
                           group_epoch=self._epoch_of(key[0]))
            while True:
                epoch = await queue.get()
                if epoch == CLOSED:
                    ended_by_us = True
                    return
                yield pb.Nudge(kind=pb.NUDGE_KIND_HEARTBEAT_NOW, group_id=key[0], member_id=key[1],
                               group_epoch=epoch)
        finally:
            self.watchers.unsubscribe(key, queue)
            # Anything but our own ending (cancelled: the client went away — its process died and
            # its kernel closed the socket, or the network dropped it, or it closed the stream) is a
            # broken connection once no other stream of the member is open. The core decides.
            if not ended_by_us and not self._ending and not self.watchers.watching(key):
                self._connection(key, lost=True)

    def _connection(self, key: MemberKey, *, lost: bool) -> None:
        """Report a member's broken (or restored) connection to the core, as a step of its own."""
        now = self.clock()
        log.debug("group %r: member %r %s", key[0], key[1],
                  "has no open stream left" if lost else "opened a stream")
        with contextlib.suppress(_Stopped):
            if lost:
                self._step(lambda c: c.connection_lost(key[0], key[1], now))
            else:
                self._step(lambda c: c.connection_restored(key[0], key[1], now))

    # ================================================================= offsets
    async def commit_offsets(self, request: pb.OffsetCommitRequest, context: Ctx) -> pb.Ack:
        try:
            req = wire.commit_request_from_pb(request)
        except WireError as e:
            return self._ack("CommitOffsets", Ack(ErrorCode.INVALID_REQUEST, str(e)), context)
        ends: dict[Shard, int] = {}
        topics = self.ends.to_look_up(req.offsets, self.coord.topics)
        # The core's own checks first (member, epoch, ownership): a commit they refuse is answered by
        # the step below at once; only one they pass waits for the log's ends (ends rule 4).
        if topics and self.runtime.read(lambda c: c.commit_refusal(req)).response is None:
            ends = await self.ends.fresh(topics)
        ack = await self._released(self._step(lambda c: c.commit_offsets(req, self.clock(), ends)))
        return self._ack("CommitOffsets", ack, context)

    async def fetch_offsets(self, request: pb.OffsetFetchRequest, context: Ctx) -> pb.OffsetFetchResponse:
        try:
            req = wire.fetch_request_from_pb(request)
        except WireError as e:
            resp = OffsetFetchResponse(ErrorCode.INVALID_REQUEST, str(e))
        else:
            resp = await self._ask(lambda c: c.fetch_offsets(req))
        self._count("FetchOffsets", resp.error, resp.message, context)
        return wire.fetch_response_to_pb(resp)

    async def reset_offsets(self, request: pb.ResetOffsetsRequest, context: Ctx) -> pb.Ack:
        try:
            req = wire.reset_request_from_pb(request)
        except WireError as e:
            return self._ack("ResetOffsets", Ack(ErrorCode.INVALID_REQUEST, str(e)), context)
        ack = await self._released(self._step(lambda c: c.reset_offsets(req, self.clock())))
        return self._ack("ResetOffsets", ack, context)

    async def delete_offsets(self, request: pb.DeleteOffsetsRequest, context: Ctx) -> pb.Ack:
        try:
            group_id, shards = wire.delete_offsets_from_pb(request)
        except WireError as e:
            return self._ack("DeleteOffsets", Ack(ErrorCode.INVALID_REQUEST, str(e)), context)
        ack = await self._released(self._step(lambda c: c.delete_offsets(group_id, shards)))
        return self._ack("DeleteOffsets", ack, context)

    async def set_parallelism(self, request: pb.SetParallelismRequest, context: Ctx) -> pb.Ack:
        group_id, topic, parallelism = request.group_id, request.topic, request.parallelism
        ack = await self._released(self._step(lambda c: c.set_parallelism(group_id, topic, parallelism,
                                                                          self.clock())))
        return self._ack("SetParallelism", ack, context)

    # ================================================================= delegated assignment
    async def get_assignment_spec(self, request: pb.AssignmentSpecRequest, context: Ctx,
                                  ) -> pb.AssignmentSpecResponse:
        try:
            spec = await self._ask(lambda c: c.assignment_spec(request.group_id, request.member_id,
                                                               request.member_epoch))
        except ProtocolError as e:
            self._count("GetAssignmentSpec", e.code, e.message, context)
            return pb.AssignmentSpecResponse(error=wire.error_to_pb(e.code), message=e.message)
        self._count("GetAssignmentSpec", ErrorCode.NONE)
        return wire.spec_response_to_pb(spec)

    async def install_assignment(self, request: pb.InstallAssignmentRequest, context: Ctx) -> pb.Ack:
        try:
            assignment: dict[str, Iterable[Shard]] = dict(wire.install_assignment_from_pb(request))
        except WireError as e:
            return self._ack("InstallAssignment", Ack(ErrorCode.INVALID_REQUEST, str(e)), context)
        ack = await self._released(self._step(lambda c: c.install_assignment(
            request.group_id, request.member_id, request.member_epoch, request.group_epoch, assignment,
            self.clock())))
        return self._ack("InstallAssignment", ack, context)

    # ================================================================= administration
    async def describe_group(self, request: pb.DescribeGroupRequest, context: Ctx,
                             ) -> pb.DescribeGroupResponse:
        try:
            details = await self.group_details(request.group_id)
        except ProtocolError as e:  # also: deleted while we asked the log
            self._count("DescribeGroup", e.code, e.message, context)
            return pb.DescribeGroupResponse(error=wire.error_to_pb(e.code), message=e.message)
        self._count("DescribeGroup", ErrorCode.NONE)
        return pb.DescribeGroupResponse(error=wire.error_to_pb(ErrorCode.NONE),
                                        group=wire.group_details_to_pb(details))

    async def describe_streams_group(self, request: pb.DescribeGroupRequest, context: Ctx,
                                     ) -> pb.DescribeStreamsGroupResponse:
        try:
            d = await self._ask(lambda c: c.describe_streams_group(request.group_id))
        except ProtocolError as e:
            self._count("DescribeStreamsGroup", e.code, e.message, context)
            return pb.DescribeStreamsGroupResponse(error=wire.error_to_pb(e.code), message=e.message)
        self._count("DescribeStreamsGroup", ErrorCode.NONE)
        return pb.DescribeStreamsGroupResponse(error=wire.error_to_pb(ErrorCode.NONE),
                                               group=streams_wire.streams_description_to_pb(d))

    async def group_details(self, gid: str) -> GroupDetails:
        """What DescribeGroup answers (and the dashboard shows); ProtocolError as the core raises it."""
        # The core's checks (and GROUP_ID_NOT_FOUND) before asking the log for end offsets.
        counts = self.runtime.read(lambda c: c.describe_group(gid)).response.subscribed_topics
        ends, split = await self._ends_and_spans(counts)
        return await self._ask(lambda c: self._details(c.describe_group(gid), ends, split))

    async def group_summaries(self) -> list[GroupSummary]:
        """One line per group for the dashboard's list: cheap (no member details), one end-offset
        lookup for all of the groups' topics."""
        counts = self.runtime.read(lambda c: {t: n for g in c.groups.values()
                                              for t, n in g.subscribed_topics.items()}).response
        ends, split = await self._ends_and_spans(counts)

        def summaries(c: Coordinator) -> list[GroupSummary]:
            out = []
            for gid, g in sorted(c.groups.items()):
                lag = group_lag({s: o.offset for s, o in g.offsets.items()}, ends, split)  # lag rule 3
                out.append(GroupSummary(gid, g.state.value, g.epoch, len(g.members), lag))
            return out

        return await self._ask(summaries)

    async def _ends_and_spans(
        self, counts: Mapping[str, int],
    ) -> tuple[dict[Shard, int], dict[Shard, tuple[Span, ...]]]:
        """The end offsets of the topics ``counts`` names (with their partition counts) and the pieces
        of their split partitions (`regroup.coordinator.spans`): asked side by side, so that a describe
        waits one timeout at most, not one per lookup; each fails open on its own (no ends, no spans)."""
        source = self.refresher.source if self.refresher is not None else None
        partitions = [Shard(t, p) for t, n in sorted(counts.items()) for p in range(n)]
        ends, split = await asyncio.gather(self._end_offsets(sorted(counts)),
                                           spans(source, partitions, self.options.end_offsets_timeout_s))
        return ends, split

    def _details(self, d: GroupDescription, ends: dict[Shard, int],
                 split: dict[Shard, tuple[Span, ...]] | None = None) -> GroupDetails:
        gid = d.group_id
        now = self.clock()
        clients = {}
        for m in d.members:
            seen = self.clients.get((gid, m.member_id))
            if seen is not None:
                clients[m.member_id] = MemberClient(seen[0], seen[1], max(0, now - seen[2]))
        owners = {s: m.member_id for m in d.members for s in m.assigned | m.pending_revocation}
        # A partition's committed key-range fragments stand for it (lag per fragment: the partition's
        # low watermark is the lowest of them); a partition with none is listed whole.
        fragmented = {(s.topic, s.partition) for s in d.offsets if not s.whole}
        shards = {Shard(t, p) for t, n in d.subscribed_topics.items() for p in range(n)
                  if (t, p) not in fragmented} | set(d.offsets)
        offsets = []
        for s in sorted(shards):
            committed = d.offsets.get(s)
            end = ends.get(Shard(s.topic, s.partition))
            pieces = (split or {}).get(Shard(s.topic, s.partition))
            if pieces is not None:  # split: where its keys' pieces end, and lag over them (lag rule 1)
                end = max((e for lo, hi, _, e in pieces if lo < s.hi and s.lo < hi), default=end)
            if committed is None:
                offsets.append(OffsetStatus(s, None, "", -1, end, None, owners.get(s)))
            else:
                lag = None if end is None else fragment_lag(pieces or whole_span(end), s, committed.offset)
                offsets.append(OffsetStatus(s, committed.offset, committed.metadata, committed.commit_epoch,
                                            end, lag, owners.get(s)))
        return GroupDetails(d, clients, tuple(offsets), self.history.of(gid), self.options.address)

    async def _end_offsets(self, topics: list[str]) -> dict[Shard, int]:
        source = self.refresher.source if self.refresher is not None else None
        end_offsets = getattr(source, "end_offsets", None)
        if end_offsets is None or not topics:
            return {}

        def lookup() -> dict[Shard, int]:
            return {Shard(t, p): o for t in topics for p, o in end_offsets(t).items()}

        try:
            loop = asyncio.get_running_loop()
            return await asyncio.wait_for(loop.run_in_executor(None, lookup),
                                          self.options.end_offsets_timeout_s)
        except Exception as e:
            log.info("describe: log end offsets unavailable (%s: %s)", type(e).__name__, e)
            return {}

    async def list_groups(self, _request: pb.ListGroupsRequest, _context: Ctx) -> pb.ListGroupsResponse:
        """Both kinds of group, each in its own list."""
        consumer, streams = await self._ask(lambda c: (c.list_groups(), c.list_streams_groups()))
        self._count("ListGroups", ErrorCode.NONE)
        return wire.list_groups_to_pb(consumer, streams)

    async def delete_group(self, request: pb.DeleteGroupRequest, context: Ctx) -> pb.Ack:
        ack = await self._released(self._step(lambda c: c.delete_group(request.group_id)))
        return self._ack("DeleteGroup", ack, context)

    async def topics(self, _request: pb.TopicsRequest, _context: Ctx) -> pb.TopicsResponse:
        return wire.topics_to_pb(self._topics_info())

    async def refresh_topics(self, _request: pb.TopicsRequest, _context: Ctx) -> pb.TopicsResponse:
        if self.refresher is not None:
            await self.refresher.refresh()
        return wire.topics_to_pb(await self._ask(lambda _: self._topics_info()))

    def _topics_info(self) -> TopicsInfo:
        r = self.refresher
        if r is None:
            return TopicsInfo(dict(self.coord.topics), -1, "no topic source configured (--log)")
        return TopicsInfo(dict(self.coord.topics), r.age_ms, r.error)

    # ================================================================= helpers
    def _ack(self, method: str, ack: Ack, context: Ctx) -> pb.Ack:
        self._count(method, ack.error, ack.message, context)
        return wire.ack_to_pb(ack)

    def _count(self, method: str, code: ErrorCode, message: str = "", context: Ctx | None = None) -> None:
        self.metrics.requests.labels(method, code.value).inc()
        if code is not ErrorCode.NONE:
            self._refused(method, code, message, context)

    @staticmethod
    def _refused(method: str, code: ErrorCode, message: str, context: Ctx | None,
                 key: tuple[str, str] | None = None) -> None:
        """An error answered to a client, in the log (warning): the call, the client, code and message."""
        about = f" (group {key[0]!r}, member {key[1]!r})" if key is not None else ""
        log.warning("%s from %s%s answered %s: %s", method, _peer(context), about, code.value, message)

    _abort = staticmethod(abort)

    # ================================================================= gRPC wiring
    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler serving `SERVICE_NAME` (`regroup.coordinator.handlers`)."""
        return generic_handler(self)

    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        """Handlers by method name, as declared in proto/regroup.proto."""
        return method_handlers(self)


def _host_of(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``; ``ipv6:[::1]:5000`` -> ``::1``; else as given."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("[") and "]" in rest:
        return rest[1:rest.index("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return peer
