"""API access: who may call which method for which group (bearer tokens with scopes), and TLS.

Clients send ``authorization: Bearer <token>`` metadata (`regroup.rpc.client.CoordinatorClient` does
when given ``token=``). The tokens and their scopes are `regroup.coordinator.tokens` (``--token T``:
one token with every scope; ``--tokens-file``: several). Rules:

1. Authentication first: a call without a known token ends with UNAUTHENTICATED before it reaches the
   service, whatever the method.
2. Then the method's scope (`METHOD_SCOPES`): a known token whose scopes do not cover it ends with
   PERMISSION_DENIED. A method missing from the table is refused (fail closed); a test checks that
   the table names exactly the service's methods.
3. Then, for member methods and a token limited to some groups, the group: every request message is
   checked once decoded (a server interceptor sees only the method and the metadata), a request
   stream's messages each as the handler takes it (HeartbeatStream), before the service sees it. A
   request for another group ends the call with PERMISSION_DENIED (answers already sent stay sent).
   A request the service could not decode (`Malformed`) goes through: the service refuses it with
   INVALID_ARGUMENT before anything happens.
4. No secret anywhere: statuses, messages and log lines name the method, the token's ``name``, the
   group and the peer, never a token nor any other metadata. Each refusal is one warning line on
   the ``regroup.coordinator`` logger.

Without TLS tokens cross the network in clear text: use TLS (``--tls-cert``, ``--tls-key``) whenever
the coordinator listens beyond the loopback interface.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeAlias

import grpc
import grpc.aio

from regroup.coordinator.handlers import Malformed
from regroup.coordinator.tokens import Grant, Scope, TokenSet
from regroup.rpc.wire import AUTH_HEADER, SERVICE_NAME

log = logging.getLogger("regroup.coordinator")

#: The scope each method of `SERVICE_NAME` needs (``admin`` also covers ``read``; see tokens rule 2).
METHOD_SCOPES: Mapping[str, Scope] = {
    **dict.fromkeys(("Heartbeat", "HeartbeatStream", "Watch", "CommitOffsets", "FetchOffsets",
                     "GetAssignmentSpec", "InstallAssignment", "StreamsHeartbeat"), Scope.MEMBER),
    **dict.fromkeys(("DescribeGroup", "DescribeStreamsGroup", "ListGroups", "Topics"), Scope.READ),
    **dict.fromkeys(("DeleteGroup", "ResetOffsets", "DeleteOffsets", "SetParallelism", "RefreshTopics"),
                    Scope.ADMIN),
}
UNAUTHENTICATED_MESSAGE = "a valid API token is required: pass token=... (authorization: Bearer <token>)"
_PREFIX = f"/{SERVICE_NAME}/"

Ctx = grpc.aio.ServicerContext[Any, Any]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # (not subscriptable at run time)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def presented_token(metadata: Any) -> str | None:
    """The token of ``authorization: Bearer <token>`` in a call's metadata (None: none given)."""
    for key, value in metadata or ():
        if key == AUTH_HEADER:
            text = value if isinstance(value, str) else bytes(value).decode(errors="replace")
            return text[len("Bearer "):] if text.startswith("Bearer ") else None
    return None


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Rules 1-4 for every call of the server it is installed in."""

    def __init__(self, tokens: TokenSet | str) -> None:
        self.tokens = TokenSet.single(tokens) if isinstance(tokens, str) else tokens

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None  # UNIMPLEMENTED, as without tokens
        full = handler_call_details.method
        method = full[len(_PREFIX):] if full.startswith(_PREFIX) else full
        token = presented_token(handler_call_details.invocation_metadata)
        grant = self.tokens.lookup(token) if token is not None else None
        if grant is None:
            return _refuse(handler, method, grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE,
                           "no or wrong API token")
        scope = METHOD_SCOPES.get(method) if full.startswith(_PREFIX) else None
        if scope is None:
            message = f"no scope covers method {method!r}: refused"
            return _refuse(handler, method, grpc.StatusCode.PERMISSION_DENIED, message, message)
        if not grant.allows(scope):
            message = (f"token {grant.name!r} may not call {method}: it needs the {scope.value} scope"
                       f"{' (or admin)' if scope is Scope.READ else ''}")
            return _refuse(handler, method, grpc.StatusCode.PERMISSION_DENIED, message, message)
        if scope is Scope.MEMBER and not grant.every_group:
            return _group_checked(handler, method, grant)
        return handler


def _refuse(handler: Handler, method: str, code: grpc.StatusCode, message: str, logged: str) -> Handler:
    log.warning("%s refused with %s: %s", method, code.name, logged)

    async def abort_unary(_request: Any, context: Ctx) -> Any:
        await context.abort(code, message)

    async def abort_stream(_request: Any, context: Ctx) -> Any:
        await context.abort(code, message)
        yield None  # pragma: no cover - abort raises

    return _like(handler, abort_stream if handler.response_streaming else abort_unary)


def _like(handler: Handler, behaviour: Callable[..., Any]) -> Handler:
    """A handler of the same kind and (de)serializers as ``handler`` with another behaviour."""
    kind = {(False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler}
    make: Callable[..., Handler] = kind[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(behaviour, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


def _group_checked(handler: Handler, method: str, grant: Grant) -> Handler:
    """``handler`` whose every request (rule 3) must name one of the grant's groups."""
    async def check(request: Any, context: Ctx) -> None:
        if isinstance(request, Malformed):
            return
        gid = getattr(request, "group_id", None)
        if isinstance(gid, str) and grant.allows_group(gid):
            return
        shown = repr(gid[:255]) if isinstance(gid, str) else "(none)"
        message = f"token {grant.name!r} may not call {method} for group {shown}: not one of its groups"
        log.warning("%s from %s refused with PERMISSION_DENIED: %s", method, context.peer() or "a client",
                    message)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)

    if handler.request_streaming:
        inner_stream = _behaviour(handler.stream_stream if handler.response_streaming
                                  else handler.stream_unary)

        async def vetted(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
            async for request in requests:
                await check(request, context)
                yield request

        if handler.response_streaming:
            async def stream_stream(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
                async with contextlib.aclosing(inner_stream(vetted(requests, context), context)) as out:
                    async for answer in out:
                        yield answer
            return _like(handler, stream_stream)

        async def stream_unary(requests: AsyncIterator[Any], context: Ctx) -> Any:
            return await inner_stream(vetted(requests, context), context)
        return _like(handler, stream_unary)

    if handler.response_streaming:
        inner_out = _behaviour(handler.unary_stream)

        async def unary_stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            await check(request, context)
            async with contextlib.aclosing(inner_out(request, context)) as out:
                async for answer in out:
                    yield answer
        return _like(handler, unary_stream)

    inner = _behaviour(handler.unary_unary)

    async def unary_unary(request: Any, context: Ctx) -> Any:
        await check(request, context)
        return await inner(request, context)
    return _like(handler, unary_unary)


def _behaviour(fn: Callable[..., Any] | None) -> Callable[..., Any]:
    if fn is None:  # pragma: no cover - a handler has the behaviour of its kind
        raise TypeError("a method handler without the behaviour of its kind")
    return fn


def server_credentials(cert_file: str, key_file: str) -> grpc.ServerCredentials:
    """TLS credentials from PEM files (the certificate may include its chain)."""
    with open(cert_file, "rb") as f:
        cert = f.read()
    with open(key_file, "rb") as f:
        key = f.read()
    return grpc.ssl_server_credentials([(key, cert)])
