"""Error codes of the protocol, and the exception the core raises to carry one.

Every rejection carries a message that tells the user what was wrong and what to do about it. The
shells turn a `ProtocolError` into a response with the same code and message; they never invent
errors of their own for protocol decisions.
"""

from __future__ import annotations

from enum import Enum


class ErrorCode(Enum):
    NONE = "NONE"
    INVALID_REQUEST = "INVALID_REQUEST"
    UNSUPPORTED_ASSIGNOR = "UNSUPPORTED_ASSIGNOR"
    GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
    GROUP_MAX_SIZE_REACHED = "GROUP_MAX_SIZE_REACHED"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    FENCED_MEMBER_EPOCH = "FENCED_MEMBER_EPOCH"
    STALE_MEMBER_EPOCH = "STALE_MEMBER_EPOCH"
    UNRELEASED_INSTANCE_ID = "UNRELEASED_INSTANCE_ID"
    FENCED_INSTANCE_ID = "FENCED_INSTANCE_ID"
    INVALID_REGULAR_EXPRESSION = "INVALID_REGULAR_EXPRESSION"
    NOT_OWNED = "NOT_OWNED"
    NON_EMPTY_GROUP = "NON_EMPTY_GROUP"
    OFFSET_OUT_OF_ORDER = "OFFSET_OUT_OF_ORDER"
    INVALID_ASSIGNMENT = "INVALID_ASSIGNMENT"
    NOT_ASSIGNMENT_DELEGATE = "NOT_ASSIGNMENT_DELEGATE"


class ProtocolError(Exception):
    """A request the core refused: ``code`` says which rule, ``message`` says what to fix."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
