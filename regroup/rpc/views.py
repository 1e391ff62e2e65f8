"""The JSON views of the API's values: one builder per view, shared by every door that shows it.

`groups describe --json` and the dashboard's ``GET /api/groups/{group}`` print the same object, built
here, so the two cannot drift apart (docs/operations.md documents its fields).
"""

from __future__ import annotations

from typing import Any

from regroup.rpc.types import GroupDetails, MemberClient


def group_details_json(details: GroupDetails) -> dict[str, Any]:
    """The object ``regroup groups describe GROUP --json`` prints."""
    d = details.description
    return {
        "group": d.group_id, "state": d.state.value, "epoch": d.epoch, "target_epoch": d.target_epoch,
        "assignor": d.assignor, "subscribed_topics": d.subscribed_topics,
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id, "epoch": m.epoch,
            "previous_epoch": m.previous_epoch, "state": m.status.value,
            "assigned": sorted(map(str, m.assigned)),
            "pending_revocation": sorted(map(str, m.pending_revocation)),
            "awaiting": sorted(map(str, m.awaiting)), "target": sorted(map(str, m.target)),
            "subscribed_topics": sorted(m.subscribed_topics), "subscribed_regex": m.subscribed_regex,
            "client": _client_json(details.clients.get(m.member_id)),
        } for m in d.members],
        "offsets": [{"partition": str(o.shard), "topic": o.shard.topic, "partition_id": o.shard.partition,
                     "committed": o.committed, "log_end_offset": o.log_end_offset, "lag": o.lag,
                     "owner": o.owner} for o in details.offsets],
        "history": [{"at_unix_ms": h.at_unix_ms, "kind": h.kind, "epoch": h.epoch, "cause": h.cause}
                    for h in details.history],
    }


def _client_json(c: MemberClient | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"client_id": c.client_id, "host": c.client_host, "last_heartbeat_age_ms": c.last_heartbeat_age_ms}

