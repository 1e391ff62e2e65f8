"""The tokens file (`regroup.coordinator.tokens`): parsing, strict validation, scopes, group patterns;
and the method table of `regroup.coordinator.auth` against the service's methods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest

from regroup.coordinator.auth import METHOD_SCOPES, presented_token
from regroup.coordinator.service import CoordinatorService
from regroup.coordinator.tokens import (
    Grant,
    Scope,
    TokenFileError,
    TokenSet,
    load_tokens,
    parse_tokens,
    token_sha256,
)
from regroup.rpc import regroup_pb2 as pb

SECRET = "s3cret-M3MB3R-token-4a1b"
READER = "r3ad-ONLY-token-77e0"
ADMIN = "adm1n-token-19fd"

TOML = f"""
[[token]]
name = "orders-members"
token = "{SECRET}"
scopes = ["member"]
groups = ["orders", "billing-*"]

[[token]]
name = "dashboard"
token_sha256 = "{token_sha256(READER)}"
scopes = ["read"]

[[token]]
name = "ops"
token_sha256 = "{token_sha256(ADMIN).upper()}"
scopes = ["admin"]
"""


def entry(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "e", "token": SECRET, "scopes": ["read"]}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


def refused(*entries: dict[str, Any], match: str) -> str:
    with pytest.raises(TokenFileError, match=match) as e:
        parse_tokens({"token": list(entries)}, source="t.toml")
    text = str(e.value)
    for secret in (SECRET, READER, ADMIN):
        assert secret not in text
    return text


# ------------------------------------------------------------------ reading a file


def test_a_toml_file_with_plain_and_hashed_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(TOML)
    tokens = load_tokens(path)
    assert [g.name for g in tokens.grants] == ["orders-members", "dashboard", "ops"]
    assert tokens.plain == ("orders-members",)
    member, reader, admin = (tokens.lookup(t) for t in (SECRET, READER, ADMIN))
    assert member is not None and member.name == "orders-members"
    assert member.scopes == {Scope.MEMBER} and member.groups == ("orders", "billing-*")
    assert reader is not None and reader.name == "dashboard" and reader.groups is None
    assert admin is not None and admin.name == "ops"
    assert tokens.lookup("wrong") is None and tokens.lookup("") is None
    assert tokens.lookup(SECRET + " ") is None and tokens.lookup(SECRET.encode()) is member


def test_the_same_file_as_json(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"token": [
        {"name": "m", "token_sha256": token_sha256(SECRET), "scopes": ["member", "read"], "groups": ["*"]}]}))
    grant = load_tokens(path).lookup(SECRET)
    assert grant is not None and grant.every_group and grant.allows(Scope.READ)


@pytest.mark.parametrize(("name", "text", "match"), [
    ("tokens.yaml", "token: []", r"name it \*\.toml or \*\.json"),
    ("tokens.toml", f'[[token]]\nname = "x"\ntoken = "{SECRET}\n', r"not valid TOML: .*line"),
    ("tokens.json", f'{{"token": [{{"name": "x", "token": "{SECRET}"', "not valid JSON"),
    ("tokens.toml", "", "no tokens"),
    ("tokens.json", "[]", "expected a table"),
    ("tokens.toml", "[[tokens]]\nname = 'x'", "unknown key.*'tokens'"),
])
def test_a_file_that_cannot_be_used(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TokenFileError, match=match) as e:
        load_tokens(path)
    assert SECRET not in str(e.value) and name in str(e.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read it"):
        load_tokens(tmp_path / "absent.toml")


# ------------------------------------------------------------------ strict validation, entry by entry


def test_each_bad_entry_is_named() -> None:
    ok = entry(name="first", token=READER)
    assert "entry 2 ('e')" in refused(ok, entry(scopes=["write"]), match="unknown scope 'write'")
    refused(entry(scopes=[]), match="'scopes' must be a non-empty list")
    refused(entry(scopes="read"), match="'scopes' must be a non-empty list")
    refused(entry(scopes=["read", "read"]), match="listed twice")
    refused(entry(token=""), match="'token' must be a non-empty string")
    refused(entry(token=7), match="'token' must be a non-empty string")
    refused(entry(token="has space"), match="printable ASCII without spaces")
    refused(entry(token=None), match="exactly one of 'token'")
    refused(entry(token_sha256=token_sha256(SECRET)), match="exactly one of 'token'")
    refused(entry(token=None, token_sha256="abc"), match="64 hex digits")
    refused(entry(scopes=["member"]), match="a member scope needs 'groups'")
    refused(entry(scopes=["member"], groups=[]), match="'groups' must be a non-empty list")
    refused(entry(scopes=["member"], groups=["orders", ""]), match="non-empty string")
    refused(entry(scopes=["member"], groups=["a", "a"]), match="group 'a' is listed twice")
    refused(entry(groups=["orders"]), match="'groups' limits member calls only")
    refused(entry(name=""), match="'name' must be")
    refused(entry(name=None), match="'name' must be")
    refused(entry(name="bad name"), match="'name' must be")
    refused(entry(secret=SECRET), match="unknown key.*'secret'")
    refused("not a table", match="expected a table")  # type: ignore[arg-type]


def test_a_token_or_a_name_given_twice() -> None:
    text = refused(entry(name="a"), entry(name="b", token=None, token_sha256=token_sha256(SECRET)),
                   match="the same token as entry 'a'")
    assert "entry 2 ('b')" in text
    refused(entry(name="a"), entry(name="a", token=READER), match="the name 'a' is used twice")


# ------------------------------------------------------------------ scopes and groups


def test_admin_implies_read_and_nothing_else_implies_anything() -> None:
    def grant(*scopes: Scope) -> Grant:
        return Grant("g", frozenset(scopes), ("*",) if Scope.MEMBER in scopes else None)

    assert grant(Scope.ADMIN).allows(Scope.READ) and not grant(Scope.ADMIN).allows(Scope.MEMBER)
    assert not grant(Scope.MEMBER).allows(Scope.READ) and not grant(Scope.MEMBER).allows(Scope.ADMIN)
    assert not grant(Scope.READ).allows(Scope.MEMBER) and not grant(Scope.READ).allows(Scope.ADMIN)
    everything = TokenSet.single(SECRET).lookup(SECRET)
    assert everything is not None and everything.every_group
    assert all(everything.allows(s) for s in Scope)
    with pytest.raises(ValueError, match="must not be empty"):
        TokenSet.single("")


@pytest.mark.parametrize(("gid", "allowed"), [
    ("orders", True), ("orders2", False), ("Orders", False), ("xorders", False),
    ("billing-eu", True), ("billing-", True), ("billing-eu/2", True), ("billing", False),
    ("a.b", True), ("axb", False),  # "." is itself
    ("q?", True), ("qq", False),  # so is "?"
    ("[x]", True), ("x", False),  # and "["
    ("pre-mid-post", True), ("pre-post", True), ("pre-pos", False),
    ("", False), ("line\nbreak", False),
])
def test_group_patterns_star_is_the_only_wildcard(gid: str, allowed: bool) -> None:
    grant = Grant("m", frozenset({Scope.MEMBER}), ("orders", "billing-*", "a.b", "q?", "[x]", "pre-*post"))
    assert not grant.every_group
    assert grant.allows_group(gid) is allowed


def test_a_lone_star_is_every_group() -> None:
    grant = Grant("m", frozenset({Scope.MEMBER}), ("orders", "*"))
    assert grant.every_group and grant.allows_group("anything at all")


def test_describe_names_scopes_and_groups_never_the_token() -> None:
    tokens = parse_tokens({"token": [entry(scopes=["read", "member"], groups=["o-*"])]})
    (grant,) = tokens.grants
    assert grant.describe() == "'e' (member,read for groups 'o-*')"


# ------------------------------------------------------------------ the method table


def test_every_method_has_exactly_one_scope() -> None:
    proto = {m.name for m in pb.DESCRIPTOR.services_by_name["Coordinator"].methods}
    served = set(CoordinatorService.method_handlers(MagicMock()))
    assert set(METHOD_SCOPES) == proto == served
    assert {m for m, s in METHOD_SCOPES.items() if s is Scope.MEMBER} == {
        "Heartbeat", "HeartbeatStream", "Watch", "CommitOffsets", "FetchOffsets", "GetAssignmentSpec",
        "InstallAssignment", "StreamsHeartbeat"}
    assert {m for m, s in METHOD_SCOPES.items() if s is Scope.ADMIN} == {
        "DeleteGroup", "ResetOffsets", "DeleteOffsets", "SetParallelism", "RefreshTopics"}


def test_member_methods_name_their_group_in_the_request() -> None:
    services = pb.DESCRIPTOR.services_by_name["Coordinator"]
    for method in services.methods:
        if METHOD_SCOPES[method.name] is Scope.MEMBER:
            assert "group_id" in method.input_type.fields_by_name, method.name


def test_the_bearer_token_of_the_metadata() -> None:
    assert presented_token([("x-client-id", "c"), ("authorization", f"Bearer {SECRET}")]) == SECRET
    assert presented_token([("authorization", SECRET)]) is None
    assert presented_token([("authorization", f"bearer {SECRET}")]) is None
    assert presented_token(None) is None and presented_token(()) is None
