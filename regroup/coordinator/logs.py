"""The coordinator's log: Python logging on stderr, one line per event, worded from what the core reports.

Rules:
1. Lines about groups and members are worded from the step's effects as the protocol core reported
   them (`regroup.protocol.causes`: the causes of each epoch bump, the fences with their reason, the
   members that departed), never re-derived from the records. The core itself logs nothing.
2. Ids a client chose (groups, members, instances) appear as Python literals (``'orders'``), and every
   control character of a message is escaped (``\\x1b``): a client cannot forge a line or drive the
   operator's terminal.
3. Never a secret: no token, no metadata of a call, no log-spec options (they may carry a password).

Levels: info for membership (joins, leaves, take-overs, fences with their reason, groups created and
deleted) and the start-up; debug adds every epoch bump with its causes and every target installed;
warning for every error answered to a client (code and message) and the core's notes; error, with a
traceback, for unexpected exceptions.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from regroup.protocol.causes import (
    EpochEvent,
    Fence,
    GroupCreated,
    GroupDeleted,
    GroupEpochBumped,
    MemberFenced,
    MemberJoined,
    MemberLeft,
    StaticTakeOver,
    TargetInstalled,
    describe_cause,
)
from regroup.protocol.timers import MemberKey

if TYPE_CHECKING:
    from regroup.protocol.coordinator import Coordinator

__all__ = ["FORMAT", "LogLevel", "configure", "escape_controls", "instance_lookup", "log_step", "redact_spec"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogLevel(StrEnum):
    """The levels ``--log-level`` accepts."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


# C0 and C1 control characters and DEL, shown as \xNN, and the Unicode line and paragraph
# separators (which str.splitlines() and many log viewers break lines at), shown as \uNNNN: a newline
# in an id cannot start a forged line, an escape sequence cannot reach the terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | \
    {c: f"\\u{c:04x}" for c in (0x2028, 0x2029)}


def escape_controls(text: str) -> str:
    """``text`` with every control character written as ``\\xNN``."""
    return text if text.isprintable() else text.translate(_CONTROLS)


class _Formatter(logging.Formatter):
    """`FORMAT`, with control characters of the message escaped (the traceback keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def configure(level: str) -> None:
    """Log to stderr at ``level`` (one of `LogLevel`), replacing any handler already configured.

    ``debug`` is the coordinator's own debug lines; the libraries (gRPC, asyncio, aiohttp) stay at info.
    """
    lvl = LogLevel(level.lower())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    numeric = logging.getLevelNamesMapping()[lvl.value.upper()]
    root.setLevel(max(numeric, logging.INFO))
    logging.getLogger("regroup").setLevel(numeric)


def redact_spec(spec: str | None) -> str:
    """A topic source spec fit for the log: ``kafka://b:9092?sasl.password=x`` -> ``kafka://b:9092
    (options: sasl.password)``; user info in the address is dropped too."""
    if spec is None:
        return "none (the groups' recorded topics)"
    scheme, sep, rest = spec.partition("://")
    if not sep:
        return spec
    body, _, query = rest.partition("?")
    if "@" in body:
        body = "***@" + body.rpartition("@")[2]
    keys = [k for k, _ in parse_qsl(query, keep_blank_values=True)] if query else []
    return f"{scheme}://{body}" + (f" (options: {', '.join(keys)})" if keys else "")


def _who(member_id: str, instance_id: str | None) -> str:
    return f"member {member_id!r}" + (f" (instance {instance_id!r})" if instance_id is not None else "")


def log_step(log: logging.Logger, events: tuple[EpochEvent, ...], fences: tuple[Fence, ...],
             departed: tuple[MemberKey, ...], instance_of: Callable[[str, str], str | None],
             requester: MemberKey | None = None) -> None:
    """The lines of one step's effects (rule 1).

    ``instance_of(group, member)`` names a member's static instance id (None: dynamic or unknown);
    ``requester`` is the member whose request made the step, if any (a member departed without a
    cause of its own was replaced by it: a static member that came back under a new id).
    """
    explained: set[MemberKey] = set()
    created = {e.group_id for e in events if isinstance(e, GroupCreated)}
    for e in events:
        gid = e.group_id
        if isinstance(e, GroupCreated):
            log.info("group %r created", gid)
        elif isinstance(e, GroupDeleted):
            if gid in created:
                log.info("group %r: the empty group previously under this id was deleted", gid)
            else:
                log.info("group %r deleted", gid)
        elif isinstance(e, TargetInstalled):
            if log.isEnabledFor(logging.DEBUG):
                log.debug("group %r: target epoch %d installed (assignor %r; %d member target(s) changed)",
                          gid, e.target_epoch, e.assignor, e.changed_members)
        elif isinstance(e, GroupEpochBumped):
            for c in e.causes:
                if isinstance(c, MemberJoined):
                    log.info("group %r: %s joined; group epoch %d", gid,
                             _who(c.member_id, instance_of(gid, c.member_id)), e.epoch)
                elif isinstance(c, MemberLeft):
                    explained.add((gid, c.member_id))
                    log.info("group %r: %s left; group epoch %d", gid,
                             _who(c.member_id, instance_of(gid, c.member_id)), e.epoch)
                elif isinstance(c, MemberFenced):
                    explained.add((gid, c.member_id))  # worded from the step's fences below
                elif isinstance(c, StaticTakeOver):
                    explained.add((gid, c.old_member_id))
                    log.info("group %r: member %r took over static instance %r from member %r with a new "
                             "subscription; group epoch %d", gid, c.new_member_id, c.instance_id,
                             c.old_member_id, e.epoch)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("group %r: group epoch %d (%s)", gid, e.epoch,
                          "; ".join(describe_cause(c) for c in e.causes) or "no cause reported")
    for f in fences:
        explained.add((f.group_id, f.member_id))
        still = f"; it still held {', '.join(sorted(map(str, f.revoking)))}" if f.revoking else ""
        log.info("group %r: member %r fenced (%s)%s", f.group_id, f.member_id, f.reason.value, still)
    for gid, mid in departed:
        if (gid, mid) in explained:
            continue
        if requester is not None and requester[0] == gid and requester[1] != mid:
            log.info("group %r: member %r replaced by %s (a static member back under a new id)",
                     gid, mid, _who(requester[1], instance_of(*requester)))
        else:
            log.info("group %r: member %r removed", gid, mid)


def instance_lookup(coord: Coordinator, fallback: Mapping[MemberKey, str | None] | None = None,
                    ) -> Callable[[str, str], str | None]:
    """``instance_of`` for `log_step` from the core's state (consumer and streams groups), then from
    ``fallback`` (the requester's own claim, for a member that is no longer in its group)."""
    def instance_of(gid: str, mid: str) -> str | None:
        consumer = coord.groups.get(gid)
        member = consumer.members.get(mid) if consumer is not None else None
        if member is not None:
            return member.instance_id
        streams = coord.streams.groups.get(gid)
        streams_member = streams.members.get(mid) if streams is not None else None
        if streams_member is not None:
            return streams_member.instance_id
        return (fallback or {}).get((gid, mid))
    return instance_of
