"""Who may heartbeat as whom: epoch fencing, static identities, and the member's metadata.

Pure checks that raise `ProtocolError` before the coordinator changes anything. The identity rules
(`epoch_fence`, `check_instance`, `check_leaving_instance`, `static_predecessor`) hold for every kind
of group — consumer and streams groups alike — and are written against the little they need of one
(`Members`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from regroup.protocol.assignors.base import AssignorRegistry
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.messages import STATIC_LEAVE_EPOCH, HeartbeatRequest
from regroup.protocol.records import CurrentAssignment, MemberMetadata
from regroup.protocol.state import Group
from regroup.protocol.subscriptions import compile_regex


class _Epochs(Protocol):
    @property
    def epoch(self) -> int: ...


class Members(Protocol):
    """What the identity rules need of a group, of any kind."""

    @property
    def group_id(self) -> str: ...
    @property
    def static_members(self) -> Mapping[str, str]: ...
    @property
    def current(self) -> Mapping[str, _Epochs]: ...


class _Identified(Protocol):
    @property
    def member_id(self) -> str: ...
    @property
    def instance_id(self) -> str | None: ...


class _Registered(Protocol):
    @property
    def instance_id(self) -> str | None: ...


def epoch_fence(epoch: int, current_epoch: int, previous_epoch: int, resend_is_safe: bool) -> str | None:
    """Why a request at ``epoch`` is fenced (None: it is not).

    The current epoch passes. A member whose last response was lost resends its previous epoch; that
    is accepted when ``resend_is_safe`` — everything it reports owning is still assigned to it, so it
    cannot be holding anything that moved on.
    """
    if epoch == current_epoch:
        return None
    if epoch > current_epoch:
        return (f"epoch {epoch} is newer than the coordinator's {current_epoch}" if current_epoch >= 0
                else "the member left the group temporarily and must rejoin with epoch 0")
    if epoch == previous_epoch and resend_is_safe:
        return None
    return f"epoch {epoch} is older than the member's current epoch {current_epoch}"


def check_epoch(group: Group, req: HeartbeatRequest, current: CurrentAssignment) -> None:
    """FENCED_MEMBER_EPOCH unless the epoch is current, or is the previous one after a lost response.

    Owned must be a subset of what is *assigned*, pending revocation excluded, as in Kafka
    (``isSubset(owned, assignedPartitions)``): a member that lost two answers and still holds shards
    it is being asked to revoke is fenced and rejoins. Its rejoin's "owns nothing" is not a report,
    so those shards are freed by the heartbeat after the rejoin (test_properties.py has the path).
    """
    # Asked only of a resend (the subset check is the one cost of a full heartbeat that passes).
    resend_is_safe = (req.member_epoch != current.epoch and req.owned is not None
                      and req.owned <= current.assigned)
    why = epoch_fence(req.member_epoch, current.epoch, current.previous_epoch, resend_is_safe)
    if why is not None:
        raise ProtocolError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"member {req.member_id!r} of group {group.group_id!r} is fenced: {why}; release all "
            "partitions without committing and rejoin with epoch 0")


def check_instance(group: Members, req: _Identified, meta: _Registered | None,
                   joining: bool = False) -> None:
    """A static member's instance id must still be bound to this member id.

    On a join, a different holder is `static_predecessor`'s business (take over, or refuse).
    """
    if req.instance_id is None:
        return
    holder = None if joining else group.static_members.get(req.instance_id)
    if meta is not None and meta.instance_id != req.instance_id:
        raise ProtocolError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"member {req.member_id!r} is registered with instance id {meta.instance_id!r}, not "
            f"{req.instance_id!r}; an instance id cannot change, join with a new member id")
    if holder is not None and holder != req.member_id:
        raise ProtocolError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"instance id {req.instance_id!r} of group {group.group_id!r} now belongs to member "
            f"{holder!r}: another process with the same instance id replaced this one; stop it, or give "
            "each process its own instance id")


def check_leaving_instance(group: Members, req: _Identified) -> None:
    """A leave (-1 or -2) that names an instance id is resolved by the instance id first, as Kafka
    does: UNKNOWN_MEMBER_ID when no member holds it, FENCED_INSTANCE_ID when another member id holds
    it. Only then is the member id itself looked at (a leave without instance id starts there).
    """
    if req.instance_id is None:
        return
    holder = group.static_members.get(req.instance_id)
    if holder is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"no member of group {group.group_id!r} holds instance id {req.instance_id!r} (it left, or "
            "was fenced after its session timed out); nothing to leave")
    if holder != req.member_id:
        raise ProtocolError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"instance id {req.instance_id!r} of group {group.group_id!r} belongs to member {holder!r}, "
            f"not {req.member_id!r}: another process with the same instance id replaced this one; it "
            "cannot leave for it — stop this process, or give each process its own instance id")


def static_predecessor(group: Members, req: _Identified) -> str | None:
    """On a static join: the member id this join takes over (a holder away with -2), or None.

    UNRELEASED_INSTANCE_ID when a live member still holds the instance id.
    """
    if req.instance_id is None:
        return None
    holder = group.static_members.get(req.instance_id)
    if holder is None or holder == req.member_id:
        return None
    if group.current[holder].epoch != STATIC_LEAVE_EPOCH:
        raise ProtocolError(
            ErrorCode.UNRELEASED_INSTANCE_ID,
            f"instance id {req.instance_id!r} of group {group.group_id!r} is still held by live member "
            f"{holder!r}; it is released when that member leaves with epoch -2 or its session times "
            "out — retry later, and make sure only one process uses this instance id")
    return holder


def merged_metadata(
    base: MemberMetadata | None, req: HeartbeatRequest, cfg: CoordinatorConfig, registry: AssignorRegistry,
) -> MemberMetadata:
    """The member's metadata after this request (None fields keep the previous value)."""
    topics = frozenset(req.subscribed_topics) if req.subscribed_topics is not None else (
        base.subscribed_topics if base else frozenset())
    if req.subscribed_regex is None:
        regex = base.subscribed_regex if base else None
    else:
        regex = req.subscribed_regex or None
    if regex is not None:
        compile_regex(regex)
    timeout = req.rebalance_timeout_ms if req.rebalance_timeout_ms is not None else (
        base.rebalance_timeout_ms if base else cfg.max_rebalance_timeout_ms)
    client_assignors = req.client_assignors if req.client_assignors is not None else (
        base.client_assignors if base else ())
    assignor = req.assignor if req.assignor is not None else (base.assignor if base else None)
    if assignor is not None and assignor not in registry and assignor not in client_assignors:
        registry.get(assignor)  # raises UNSUPPORTED_ASSIGNOR with the list of choices
    meta = MemberMetadata(
        instance_id=req.instance_id if req.instance_id is not None else (base.instance_id if base else None),
        rack_id=req.rack_id if req.rack_id is not None else (base.rack_id if base else None),
        rebalance_timeout_ms=min(timeout, cfg.max_rebalance_timeout_ms),
        subscribed_topics=topics,
        subscribed_regex=regex,
        assignor=assignor,
        client_assignors=tuple(client_assignors),
    )
    return base if meta == base and base is not None else meta


def subscription_changed(old: MemberMetadata, new: MemberMetadata) -> bool:
    """Changes that can change the target assignment, and so bump the group epoch."""
    return (old.subscribed_topics != new.subscribed_topics
            or old.subscribed_regex != new.subscribed_regex
            or old.assignor != new.assignor
            or old.rack_id != new.rack_id)
