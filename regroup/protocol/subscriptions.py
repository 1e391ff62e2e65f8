"""Subscriptions: topic names and regular expressions, resolved against topic metadata.

Patterns are compiled with RE2 (google-re2): matching is linear in the topic name whatever the
pattern, and constructs that need backtracking (backreferences, lookaround) are refused, so a user's
pattern can never stall the coordinator. A pattern must match a topic name in full.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

from regroup.protocol.errors import ErrorCode, ProtocolError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the error goes back to the member in the response, not to stderr


@lru_cache(maxsize=4096)
def compile_regex(pattern: str) -> Any:
    """The compiled pattern; INVALID_REGULAR_EXPRESSION with RE2's reason when it does not compile."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ProtocolError(
            ErrorCode.INVALID_REGULAR_EXPRESSION,
            f"subscription pattern {pattern!r} is not a valid RE2 expression ({reason}); RE2 has no "
            "backreferences or lookaround, see https://github.com/google/re2/wiki/Syntax",
        ) from None


def resolve_regex(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """Topic names that ``pattern`` matches in full."""
    rx = compile_regex(pattern)
    return frozenset(t for t in topic_names if rx.fullmatch(t) is not None)
