"""The JSON views of the API's values: one builder per view, shared by every door that shows it.

`groups describe --json` and the dashboard's ``GET /api/groups/{group}`` print the same object, built
here, so the two cannot drift apart (docs/operations.md documents its fields): `group_details_json`
for a consumer group, `streams_group_json` for a streams group (``"kind": "streams"``). Keys are
never renamed or removed; lists are sorted, so equal groups print equal documents.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.rpc.types import EpochChange, GroupDetails, MemberClient


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
        "history": history_json(details.history),
    }


def history_json(history: Iterable[EpochChange]) -> list[dict[str, Any]]:
    """A group's epoch changes, oldest first (either kind of group)."""
    return [{"at_unix_ms": h.at_unix_ms, "kind": h.kind, "epoch": h.epoch, "cause": h.cause} for h in history]


def _client_json(c: MemberClient | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"client_id": c.client_id, "host": c.client_host, "last_heartbeat_age_ms": c.last_heartbeat_age_ms}


def streams_group_json(d: StreamsGroupDescription) -> dict[str, Any]:
    """The object ``regroup groups describe GROUP --json`` prints for a streams group (``"kind":
    "streams"``); tasks are spelled ``subtopology_partition`` as Kafka spells them, a key-range task
    ``subtopology_partition.RofK`` (range R of K); ``parallelism`` gives each subtopology's K (1: whole
    partitions). ``lags`` are the
    member's process's copies (the same for every member of a process); ``warmups`` the warm-ups of
    its target with their lag (null: not reported yet) against the acceptable recovery lag."""
    return {
        "group": d.group_id, "kind": "streams", "state": d.state.value, "epoch": d.epoch,
        "target_epoch": d.target_epoch,
        "ready": d.status.ready, "not_ready_reasons": list(d.status.reasons),
        "topology": {} if d.topology is None else {
            s.subtopology_id: sorted(s.source_topics) for s in d.topology.subtopologies},
        "parallelism": {} if d.topology is None else {
            s.subtopology_id: s.parallelism for s in d.topology.subtopologies},
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id, "process_id": m.process_id,
            "epoch": m.epoch, "previous_epoch": m.previous_epoch, "state": m.status.value,
            "assigned": tasks_json(m.assigned), "pending_revocation": tasks_json(m.pending_revocation),
            "target": tasks_json(m.target),
            "lags": {str(t): lag for t, lag in sorted(m.lags.items())},
            "warmups": [{"task": str(w.task), "lag": w.lag, "acceptable_lag": w.acceptable_lag,
                         "caught_up": w.caught_up} for w in m.warmups],
        } for m in d.members],
    }


def tasks_json(t: MemberTasks) -> dict[str, list[str]]:
    return {"active": sorted(map(str, t.active)), "standby": sorted(map(str, t.standby)),
            "warmup": sorted(map(str, t.warmup))}
