"""The OpenAPI 3.1 description of the dashboard's JSON API (served at /api/openapi.json).

The schemas are JSON Schema 2020-12, as OpenAPI 3.1 has them, and strict (no unknown properties): the
tests validate real answers of a real coordinator against them, so a field added to a view without
being described here fails a test.
"""

from __future__ import annotations

import copy
from typing import Any

_INT = {"type": "integer"}
_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}
_BOOL = {"type": "boolean"}
_CONSUMER_STATES = ["empty", "assigning", "reconciling", "stable"]
_STREAMS_STATES = ["empty", "not ready", "assigning", "reconciling", "stable"]
_MEMBER_STATE = {"enum": ["stable", "unrevoked", "unreleased"],
                 "description": "The core's reconciliation state; the page shows unrevoked as 'revoking' "
                                "and unreleased as 'waiting'."}


def _obj(props: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": [k for k in props if k not in optional]}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _STR, "message": _STR}),
    "GroupSummary": _obj({
        "group": _STR, "kind": {"enum": ["consumer", "streams"]},
        "state": {"enum": sorted({*_CONSUMER_STATES, *_STREAMS_STATES}),
                  "description": "A consumer group's or a streams group's state, as its kind has them."},
        "epoch": _INT, "members": _INT,
        "lag": {**_nullable(_INT), "description": "Log end minus committed, summed over the partitions "
                "where both are known; always null for a streams group (its page has each task "
                "copy's lag)."},
        "rebalances_last_hour": _INT}),
    "GroupList": _obj({"groups": {"type": "array", "items": {"$ref": "#/components/schemas/GroupSummary"}}}),
    "MemberClient": _obj({"client_id": _STR, "host": _STR, "last_heartbeat_age_ms": _INT}),
    "Member": _obj({
        "member_id": _STR, "instance_id": _nullable(_STR), "rack_id": _nullable(_STR), "epoch": _INT,
        "previous_epoch": _INT, "state": _MEMBER_STATE,
        "assigned": _STRS, "pending_revocation": _STRS, "awaiting": _STRS, "target": _STRS,
        "subscribed_topics": _STRS, "subscribed_regex": _nullable(_STR),
        "client": _nullable({"$ref": "#/components/schemas/MemberClient"})}),
    "Offset": _obj({
        "partition": _STR, "topic": _STR, "partition_id": _INT, "committed": _nullable(_INT),
        "log_end_offset": _nullable(_INT), "lag": _nullable(_INT), "owner": _nullable(_STR)}),
    "EpochChange": _obj({"at_unix_ms": _INT, "kind": {"enum": ["group", "target"]}, "epoch": _INT,
                         "cause": _STR}),
    "TimelineStep": _obj({
        "at_unix_ms": _INT, "member_id": _STR,
        "step": {"enum": ["joined", "left", "fenced", "revoking", "released", "granted"]},
        "partitions": _STRS, "epoch": _INT,
        "handoff_ms": {**_nullable(_INT), "description": "On granted: from the previous owner's release to "
                       "this grant; on released: from the revocation request to the release."}}),
    "GroupDetails": _obj({
        "group": _STR, "state": {"enum": _CONSUMER_STATES}, "epoch": _INT,
        "target_epoch": _INT, "assignor": _nullable(_STR),
        "subscribed_topics": {"type": "object", "additionalProperties": _INT},
        "members": {"type": "array", "items": {"$ref": "#/components/schemas/Member"}},
        "offsets": {"type": "array", "items": {"$ref": "#/components/schemas/Offset"}},
        "history": {"type": "array", "items": {"$ref": "#/components/schemas/EpochChange"}},
        "timeline": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineStep"},
                     "description": "Bounded, oldest first, kept in memory (empty after a restart). Not in "
                                    "`groups describe --json`; everything else is the same object."}},
        optional=("timeline",)),
    "Tasks": {**_obj({"active": _STRS, "standby": _STRS, "warmup": _STRS}),
              "description": "Tasks by role, each spelled subtopology_partition (Kafka's spelling), sorted."},
    "WarmupProgress": _obj({
        "task": _STR, "lag": {**_nullable(_INT), "description": "Records still to restore; null until "
                              "the process reports the copy."},
        "acceptable_lag": _INT, "caught_up": _BOOL}),
    "StreamsMember": _obj({
        "member_id": _STR, "instance_id": _nullable(_STR), "process_id": _STR, "epoch": _INT,
        "previous_epoch": _INT, "state": _MEMBER_STATE,
        "assigned": {"$ref": "#/components/schemas/Tasks"},
        "pending_revocation": {"$ref": "#/components/schemas/Tasks"},
        "target": {"$ref": "#/components/schemas/Tasks"},
        "lags": {"type": "object", "additionalProperties": _INT,
                 "description": "Task -> records its process's copy is behind the committed offsets, for "
                                "every copy the process reported (soft state: empty after a restart "
                                "until it reports again). The same for every member of a process."},
        "warmups": {"type": "array", "items": {"$ref": "#/components/schemas/WarmupProgress"},
                    "description": "The warm-ups of the member's target."}}),
    "StreamsGroupDetails": _obj({
        "group": _STR, "kind": {"const": "streams"}, "state": {"enum": _STREAMS_STATES}, "epoch": _INT,
        "target_epoch": _INT, "ready": _BOOL,
        "not_ready_reasons": {**_STRS, "description": "Why the topology cannot run on the topics (empty "
                              "when ready); nothing is assigned until they are fixed."},
        "topology": {"type": "object", "additionalProperties": _STRS,
                     "description": "Subtopology -> its source topics (empty until a member sent one)."},
        "parallelism": {"type": "object", "additionalProperties": _INT,
                        "description": "Subtopology -> its key ranges per partition (1: whole partitions; "
                                       "K > 1: tasks are spelled subtopology_partition.RofK)."},
        "members": {"type": "array", "items": {"$ref": "#/components/schemas/StreamsMember"}},
        "history": {"type": "array", "items": {"$ref": "#/components/schemas/EpochChange"},
                    "description": "Not in `groups describe --json`."},
        "timeline": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineStep"},
                     "description": "Joins, leaves and fences (task hand-offs are not in it). Not in "
                                    "`groups describe --json`; everything else is the same object."}},
        optional=("history", "timeline")),
    "GroupEvent": _obj({"group": _STR, "epoch": _INT, "target_epoch": _INT, "at_unix_ms": _INT}),
}


def _json(ref: str, description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "regroup coordinator dashboard API", "version": "1",
             "description": "Read-only. With --token or --tokens-file every request needs a token with "
                            "the read (or admin) scope: `Authorization: Bearer TOKEN` or the "
                            "`regroup_token` cookie that `/?token=TOKEN` sets."},
    "components": {
        "schemas": SCHEMAS,
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                            "cookie": {"type": "apiKey", "in": "cookie", "name": "regroup_token"}},
    },
    "security": [{}, {"bearer": []}, {"cookie": []}],
    "paths": {
        "/api/groups": {"get": {
            "operationId": "listGroups", "summary": "Every group with its lag and recent rebalances",
            "responses": {"200": _json("GroupList", "The groups"),
                          "401": _json("Error", "Missing or wrong token"),
                          "403": _json("Error", "A token without the read scope")}}},
        "/api/groups/{group}": {"get": {
            "operationId": "describeGroup",
            "summary": "One group: what `regroup groups describe GROUP --json` prints, plus its timeline "
                       "(a streams group: plus its epoch history too)",
            "parameters": [{"name": "group", "in": "path", "required": True, "schema": _STR}],
            "responses": {"200": {"description": "The group: a consumer group, or a streams group "
                                                 "(`kind` is `streams`)",
                                  "content": {"application/json": {"schema": {"oneOf": [
                                      {"$ref": "#/components/schemas/GroupDetails"},
                                      {"$ref": "#/components/schemas/StreamsGroupDetails"}]}}}},
                          "400": _json("Error", "Invalid group id"),
                          "401": _json("Error", "Missing or wrong token"),
                          "403": _json("Error", "A token without the read scope"),
                          "404": _json("Error", "No such group")}}},
        "/api/events": {"get": {
            "operationId": "events",
            "summary": "Server-sent events: `group` (data: GroupEvent) when a group's state changed, at "
                       "most ~4 per second per group; `groups` (data: {}) when a group was created or "
                       "deleted; a `: ping` comment every 15 s",
            "responses": {"200": {"description": "An event stream",
                                  "content": {"text/event-stream": {"schema": _STR}}},
                          "401": _json("Error", "Missing or wrong token"),
                          "403": _json("Error", "A token without the read scope")}}},
        "/api/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document",
            "responses": {"200": {"description": "OpenAPI 3.1",
                                  "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    },
}


def openapi_document() -> dict[str, Any]:
    return copy.deepcopy(_DOCUMENT)
