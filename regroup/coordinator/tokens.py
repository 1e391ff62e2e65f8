"""API tokens and what each may do: scopes, the groups of a member token, and the tokens file.

Rules:
1. A token is known by the SHA-256 of its text only. A presented token is hashed and compared with
   every known hash by `hmac.compare_digest`, without stopping at the first match; the text is never
   kept, logged or put in a message (a token is named by its entry's ``name``).
2. Three scopes (`Scope`): ``member`` (a group's members: heartbeats, nudges, offsets, delegated
   assignment), ``read`` (describe, list, topics, the dashboard), ``admin`` (offset resets and
   deletions, group deletion, parallelism, topic refresh). ``admin`` implies ``read``, nothing else
   implies anything: a member token cannot read the dashboard, an admin token cannot join a group
   (give an entry both scopes when it must).
3. A member scope names its groups: exact ids or patterns where ``*`` stands for any run of
   characters (every other character, ``?`` and ``[`` included, is itself); ``"*"`` alone is every
   group. The groups limit member calls only: read and admin calls cover every group.
4. ``--token T`` is one token with every scope for every group (`TokenSet.single`).
5. The tokens file (`load_tokens`; ``.toml`` or ``.json``) is read once at start-up and checked
   strictly: an unknown key, a missing or empty name, token or scope list, an unknown scope, a
   member scope without groups, groups without a member scope, a name or token given twice — each
   raises `TokenFileError` naming the file and the entry (by index and name), never a token.

TOML::

    [[token]]
    name = "orders-members"
    token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    scopes = ["member"]
    groups = ["orders", "orders-*"]

JSON: ``{"token": [{"name": ..., "token": ..., "scopes": [...], "groups": [...]}]}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Scope(StrEnum):
    MEMBER = "member"
    READ = "read"
    ADMIN = "admin"


ALL_SCOPES = frozenset(Scope)
#: What a scope lets its holder do besides itself (rule 2).
IMPLIES: Mapping[Scope, frozenset[Scope]] = {Scope.ADMIN: frozenset({Scope.READ})}
_ENTRY_KEYS = frozenset({"name", "token", "token_sha256", "scopes", "groups"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: Printable ASCII without spaces: what travels intact in ``authorization: Bearer TOKEN``.
_TOKEN_TEXT = re.compile(r"[\x21-\x7e]+")


class TokenFileError(ValueError):
    """A tokens file that cannot be used; the message names the file and the entry, never a token."""


def token_sha256(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 text (what ``token_sha256`` holds in a tokens file)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _patterns(groups: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join("(?:" + ".*".join(re.escape(part) for part in g.split("*")) + ")"
                               for g in groups), re.DOTALL)


@dataclass(frozen=True, slots=True, eq=False)
class Grant:
    """What one token may do: its scopes and, for member calls, its groups (None: every group)."""

    name: str
    scopes: frozenset[Scope]
    groups: tuple[str, ...] | None = None
    _match: re.Pattern[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.groups is not None and "*" not in self.groups:
            object.__setattr__(self, "_match", _patterns(self.groups))

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or any(scope in IMPLIES.get(s, ()) for s in self.scopes)

    @property
    def every_group(self) -> bool:
        """Whether member calls are allowed for every group (no per-request check needed)."""
        return self._match is None

    def allows_group(self, group_id: str) -> bool:
        return self._match is None or self._match.fullmatch(group_id) is not None

    def describe(self) -> str:
        """For the log: the name, scopes and groups (never the token)."""
        scopes = ",".join(s.value for s in Scope if s in self.scopes)
        groups = "" if self.groups is None or Scope.MEMBER not in self.scopes else \
            f" for groups {', '.join(map(repr, self.groups))}"
        return f"{self.name!r} ({scopes}{groups})"


@dataclass(frozen=True, slots=True)
class TokenSet:
    """The known tokens: (SHA-256 digest, grant) pairs."""

    entries: tuple[tuple[bytes, Grant], ...]
    #: Names of the entries given as plain tokens in the file (not as ``token_sha256``).
    plain: tuple[str, ...] = ()

    @classmethod
    def single(cls, token: str) -> TokenSet:
        """``--token T``: every scope, every group."""
        if not token:
            raise ValueError("the API token must not be empty")
        return cls(((hashlib.sha256(token.encode()).digest(), Grant("--token", ALL_SCOPES)),))

    def lookup(self, token: str | bytes) -> Grant | None:
        """The grant of a presented token; None if unknown. Every entry is compared (rule 1)."""
        digest = hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()
        found = None
        for known, grant in self.entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = grant
        return found

    @property
    def grants(self) -> tuple[Grant, ...]:
        return tuple(g for _, g in self.entries)


def load_tokens(path: str | Path) -> TokenSet:
    """Read and check a tokens file (rule 5); `TokenFileError` when it cannot be used."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise TokenFileError(f"tokens file {str(p)!r}: name it *.toml or *.json (the format)")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TokenFileError(f"tokens file {str(p)!r}: cannot read it ({e.strerror or e})") from None
    try:
        data = json.loads(raw) if suffix == ".json" else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, TOMLDecodeError: positions only
        kind = "JSON" if suffix == ".json" else "TOML"
        detail = str(e) if isinstance(e, (json.JSONDecodeError, tomllib.TOMLDecodeError)) else "not UTF-8"
        raise TokenFileError(f"tokens file {str(p)!r}: not valid {kind}: {detail}") from None
    return parse_tokens(data, source=str(p))


def parse_tokens(data: Any, *, source: str = "tokens file") -> TokenSet:
    """Check a decoded tokens file (``{"token": [entry, ...]}``) and build its `TokenSet`."""
    where = f"tokens file {source!r}"
    if not isinstance(data, dict):
        raise TokenFileError(f"{where}: expected a table with a 'token' list of entries")
    if unknown := sorted(set(data) - {"token"}):
        raise TokenFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}: "
                             "only 'token' (a list of entries, [[token]] in TOML)")
    items = data.get("token")
    if not isinstance(items, list) or not items:
        raise TokenFileError(f"{where}: no tokens: give at least one [[token]] entry "
                             "(every call would be refused)")
    entries: list[tuple[bytes, Grant]] = []
    plain: list[str] = []
    by_digest: dict[bytes, str] = {}
    names: set[str] = set()
    for i, item in enumerate(items, 1):
        digest, grant, was_plain = _entry(item, f"{where}, entry {i}")
        if grant.name in names:
            raise TokenFileError(f"{where}, entry {i}: the name {grant.name!r} is used twice")
        if digest in by_digest:
            raise TokenFileError(f"{where}, entry {i} ({grant.name!r}): the same token as entry "
                                 f"{by_digest[digest]!r}; give each token once, with all its scopes")
        names.add(grant.name)
        by_digest[digest] = grant.name
        entries.append((digest, grant))
        if was_plain:
            plain.append(grant.name)
    return TokenSet(tuple(entries), tuple(plain))


def _entry(item: Any, where: str) -> tuple[bytes, Grant, bool]:
    if not isinstance(item, dict):
        raise TokenFileError(f"{where}: expected a table (name, token or token_sha256, scopes, groups)")
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TokenFileError(f"{where}: 'name' must be 1-64 characters of letters, digits and ._:@- "
                             "(starting with a letter or digit): it names the token in logs and errors")
    where = f"{where} ({name!r})"
    if unknown := sorted(set(item) - _ENTRY_KEYS):
        raise TokenFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(sorted(_ENTRY_KEYS))}")
    digest = _digest(item, where)
    scopes = _scopes(item.get("scopes"), where)
    groups = item.get("groups")
    if Scope.MEMBER in scopes:
        if groups is None:
            raise TokenFileError(f"{where}: a member scope needs 'groups': the group ids (or patterns "
                                 "with *) its members may join; [\"*\"] for every group")
        groups = _groups(groups, where)
    elif groups is not None:
        raise TokenFileError(f"{where}: 'groups' limits member calls only, and this entry has no "
                             "member scope (read and admin cover every group)")
    return digest, Grant(name, scopes, groups), "token" in item


def _digest(item: Mapping[str, Any], where: str) -> bytes:
    if ("token" in item) == ("token_sha256" in item):
        raise TokenFileError(f"{where}: give exactly one of 'token' (the token itself) and "
                             "'token_sha256' (its hex SHA-256, which keeps the secret out of the file)")
    if "token" in item:
        token = item["token"]
        if not isinstance(token, str) or not token:
            raise TokenFileError(f"{where}: 'token' must be a non-empty string")
        if not _TOKEN_TEXT.fullmatch(token):
            raise TokenFileError(f"{where}: 'token' must be printable ASCII without spaces "
                                 "(it travels in an HTTP/2 header)")
        return hashlib.sha256(token.encode()).digest()
    hexed = item["token_sha256"]
    if not isinstance(hexed, str) or not _HEX64.fullmatch(hexed.lower()):
        raise TokenFileError(f"{where}: 'token_sha256' must be 64 hex digits "
                             "(printf %s \"$TOKEN\" | sha256sum)")
    return bytes.fromhex(hexed)


def _scopes(value: Any, where: str) -> frozenset[Scope]:
    known = ", ".join(s.value for s in Scope)
    if not isinstance(value, list) or not value:
        raise TokenFileError(f"{where}: 'scopes' must be a non-empty list of: {known}")
    out: set[Scope] = set()
    for s in value:
        if not isinstance(s, str) or s not in {sc.value for sc in Scope}:
            raise TokenFileError(f"{where}: unknown scope {s!r}; known: {known}")
        if Scope(s) in out:
            raise TokenFileError(f"{where}: scope {s!r} is listed twice")
        out.add(Scope(s))
    return frozenset(out)


def _groups(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise TokenFileError(f"{where}: 'groups' must be a non-empty list of group ids or patterns "
                             "(* for any run of characters)")
    seen: list[str] = []
    for g in value:
        if not isinstance(g, str) or not g:
            raise TokenFileError(f"{where}: every group must be a non-empty string, got {g!r}")
        if g in seen:
            raise TokenFileError(f"{where}: group {g!r} is listed twice")
        seen.append(g)
    return tuple(seen)
