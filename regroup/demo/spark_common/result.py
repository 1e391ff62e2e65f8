"""What both PySpark demos' typed results share: how a result becomes JSON, and a member's processes.

Rules of this module:

1. A result is a tree of frozen dataclasses. Its JSON object (``--json``, ``results.json``) is made in
   one place, `json_object`: the fields by name, nested the same way, tuples as lists — so renaming a
   field changes the JSON contract — plus the properties a dataclass names in ``JSON_PROPERTIES``.
2. A member is everything that ran under its name and was let into the group: a static member's
   restart is the same member (`released_by_name`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from regroup.demo.spark_common.processes import MemberProcess

M = TypeVar("M", bound=MemberProcess)


@dataclass(frozen=True, slots=True)
class ProcessStats:
    pid: int
    end: str  # the process's last state: stopped, killed, failed...
    exit_status: int | None

    @classmethod
    def of(cls, member: MemberProcess) -> ProcessStats:
        return cls(member.popen.pid, member.state, member.popen.returncode)


def released_by_name(members: Iterable[M]) -> dict[str, list[M]]:
    """The processes of each member that was let into the group (rule 2), in the order they started."""
    out: dict[str, list[M]] = {}
    for m in members:
        if m.released_at is not None:
            out.setdefault(m.name, []).append(m)
    return out


def json_object(result: Any) -> dict[str, Any]:
    """A typed result as its JSON object (rule 1)."""
    out = _plain(result)
    assert isinstance(out, dict)
    return out


class JsonResult:
    """A demo's typed result (a frozen dataclass that subclasses this): its JSON object is made here."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object and ``results.json``: the fields by name, nested the same way (rule 1)."""
        return json_object(self)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {**fields, **{p: _plain(getattr(value, p)) for p in getattr(value, "JSON_PROPERTIES", ())}}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
