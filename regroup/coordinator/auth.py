"""API authentication: a shared bearer token checked on every call, and TLS when given a certificate.

Clients send ``authorization: Bearer <token>`` metadata (`regroup.rpc.client.CoordinatorClient` does
when given ``token=``). A call without the right token ends with gRPC status UNAUTHENTICATED before it
reaches the service. Without TLS the token crosses the network in clear text: use TLS (``--tls-cert``,
``--tls-key``) whenever the coordinator listens beyond the loopback interface.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from regroup.rpc.wire import AUTH_HEADER


def bearer(token: str) -> str:
    return f"Bearer {token}"


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the API token must not be empty")
        self._expected = bearer(token).encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or self._authorized(handler_call_details):
            return handler
        return _deny(handler)

    def _authorized(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == AUTH_HEADER:
                got = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(got, self._expected)
        return False


def _deny(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    message = "a valid API token is required: pass token=... (authorization: Bearer <token>)"

    async def abort_unary(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def abort_stream(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield None  # pragma: no cover - abort raises

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(
            abort_stream, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            abort_stream, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(
        abort_unary, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)


def server_credentials(cert_file: str, key_file: str) -> grpc.ServerCredentials:
    """TLS credentials from PEM files (the certificate may include its chain)."""
    with open(cert_file, "rb") as f:
        cert = f.read()
    with open(key_file, "rb") as f:
        key = f.read()
    return grpc.ssl_server_credentials([(key, cert)])
