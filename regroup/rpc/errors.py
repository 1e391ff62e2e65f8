"""Exceptions of the RPC layer.

Protocol decisions are never exceptions: they come back as the core's `ErrorCode` inside the response
objects (`HeartbeatResponse.error`, `Ack.error`, ...), exactly as the core returned them. Exceptions are
for what is not a protocol decision:

* `CoordinatorUnavailable` — the call did not complete: no connection, deadline exceeded, the server
  shutting down or out of resources, a message over the size limit. Retrying later is reasonable.
* `AuthenticationFailed` — the server wants a (different) token or TLS: a configuration error.
* `RequestRejected` — raised only by calls that return a value and not a response object
  (`describe_group`, `assignment_spec`, `watch`) when the core refused: carries ``code`` and ``message``.
* `WireError` — a message that cannot be converted (a server answers it with INVALID_REQUEST).

A request the coordinator could not read at all (gRPC INVALID_ARGUMENT, before any handler saw it) is
refused like one a handler could not convert: INVALID_REQUEST, in the response object of calls that
return one, as `RequestRejected` otherwise. Never `CoordinatorUnavailable`: sending it again fails again.
"""

from __future__ import annotations

from regroup.protocol.errors import ErrorCode


class CoordinatorError(Exception):
    """Base class of the RPC layer's exceptions."""


class CoordinatorUnavailable(CoordinatorError):
    """A call failed in transport (connection, deadline, server shutdown): retry later."""


class AuthenticationFailed(CoordinatorError):
    """The coordinator refused the credentials (missing or wrong token): fix the configuration."""


class RequestRejected(CoordinatorError):
    """The protocol core refused a request whose client method returns a value, not a response (or the
    coordinator could not read the request: INVALID_REQUEST)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


class WireError(ValueError):
    """A protobuf message that does not convert to the core's values (e.g. a shard listed twice)."""
