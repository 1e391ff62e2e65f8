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


def _obj(props: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": [k for k in props if k not in optional]}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _STR, "message": _STR}),
    "GroupSummary": _obj({
        "group": _STR, "state": {"enum": ["empty", "assigning", "reconciling", "stable"]}, "epoch": _INT,
        "members": _INT, "lag": _nullable(_INT), "rebalances_last_hour": _INT}),
    "GroupList": _obj({"groups": {"type": "array", "items": {"$ref": "#/components/schemas/GroupSummary"}}}),
    "MemberClient": _obj({"client_id": _STR, "host": _STR, "last_heartbeat_age_ms": _INT}),
    "Member": _obj({
        "member_id": _STR, "instance_id": _nullable(_STR), "rack_id": _nullable(_STR), "epoch": _INT,
        "previous_epoch": _INT,
        "state": {"enum": ["stable", "unrevoked", "unreleased"],
                  "description": "The core's reconciliation state; the page shows unrevoked as 'revoking' "
                                 "and unreleased as 'waiting'."},
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
        "group": _STR, "state": {"enum": ["empty", "assigning", "reconciling", "stable"]}, "epoch": _INT,
        "target_epoch": _INT, "assignor": _nullable(_STR),
        "subscribed_topics": {"type": "object", "additionalProperties": _INT},
        "members": {"type": "array", "items": {"$ref": "#/components/schemas/Member"}},
        "offsets": {"type": "array", "items": {"$ref": "#/components/schemas/Offset"}},
        "history": {"type": "array", "items": {"$ref": "#/components/schemas/EpochChange"}},
        "timeline": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineStep"},
                     "description": "Bounded, oldest first, kept in memory (empty after a restart). Not in "
                                    "`groups describe --json`; everything else is the same object."}},
        optional=("timeline",)),
    "GroupEvent": _obj({"group": _STR, "epoch": _INT, "target_epoch": _INT, "at_unix_ms": _INT}),
}


def _json(ref: str, description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "regroup coordinator dashboard API", "version": "1",
             "description": "Read-only. With --token every request needs `Authorization: Bearer TOKEN` or "
                            "the `regroup_token` cookie that `/?token=TOKEN` sets."},
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
                          "401": _json("Error", "Missing or wrong token")}}},
        "/api/groups/{group}": {"get": {
            "operationId": "describeGroup",
            "summary": "One group: what `regroup groups describe GROUP --json` prints, plus its timeline",
            "parameters": [{"name": "group", "in": "path", "required": True, "schema": _STR}],
            "responses": {"200": _json("GroupDetails", "The group"),
                          "400": _json("Error", "Invalid group id"),
                          "401": _json("Error", "Missing or wrong token"),
                          "404": _json("Error", "No such group")}}},
        "/api/events": {"get": {
            "operationId": "events",
            "summary": "Server-sent events: `group` (data: GroupEvent) when a group's state changed, at "
                       "most ~4 per second per group; `groups` (data: {}) when a group was created or "
                       "deleted; a `: ping` comment every 15 s",
            "responses": {"200": {"description": "An event stream",
                                  "content": {"text/event-stream": {"schema": _STR}}},
                          "401": _json("Error", "Missing or wrong token")}}},
        "/api/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document",
            "responses": {"200": {"description": "OpenAPI 3.1",
                                  "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    },
}


def openapi_document() -> dict[str, Any]:
    return copy.deepcopy(_DOCUMENT)
