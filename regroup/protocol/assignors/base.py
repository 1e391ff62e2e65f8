"""The assignor plugin interface, the registry of assignors, and validation of any assignment.

An assignor is a pure function from a group's subscriptions (and the assignment it currently aims
for, to be sticky) to a new target assignment. It runs on the coordinator (server-side assignment) or
on a member that the coordinator delegated the computation to; either way the coordinator validates
the result with `validate_assignment` before installing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from regroup.protocol.errors import ErrorCode, ProtocolError
from regroup.protocol.shard import EMPTY, Shard, ShardSet, format_shards
from regroup.protocol.topics import TopicMetadata


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows about one member.

    ``topics`` is the member's subscription resolved to existing topic names (explicit names and
    regex matches). ``current`` is the member's current *target* assignment, the stickiness input.
    """

    member_id: str
    topics: frozenset[str]
    current: ShardSet = EMPTY
    instance_id: str | None = None
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """The whole input of an assignor."""

    members: Mapping[str, MemberSpec]
    topics: TopicMetadata


#: The output of an assignor: every member id of the input mapped to its shards.
Assignment = dict[str, ShardSet]


@runtime_checkable
class Assignor(Protocol):
    """A named, pure assignment strategy.

    ``assign`` must return an entry for every member; give every shard of every topic that at least
    one member subscribes to to exactly one subscriber of that topic; and be deterministic (the same
    input gives the same output). Stickiness and balance are the strategy's business.
    """

    name: str

    def assign(self, spec: GroupSpec) -> Assignment: ...


class AssignorRegistry:
    """Assignors by name. The first registered is the default of a group that names none."""

    def __init__(self, assignors: Iterable[Assignor] = ()) -> None:
        self._by_name: dict[str, Assignor] = {}
        for a in assignors:
            self.register(a)

    def register(self, assignor: Assignor) -> None:
        name = getattr(assignor, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"an assignor needs a non-empty string `name`, got {name!r}")
        if not callable(getattr(assignor, "assign", None)):
            raise ValueError(f"assignor {name!r} has no assign(spec) method")
        if name in self._by_name:
            raise ValueError(f"an assignor named {name!r} is already registered")
        self._by_name[name] = assignor

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    @property
    def default(self) -> Assignor:
        if not self._by_name:
            raise ValueError("no assignor is registered")
        return next(iter(self._by_name.values()))

    def get(self, name: str | None) -> Assignor:
        """The assignor called ``name`` (the default when None); UNSUPPORTED_ASSIGNOR otherwise."""
        if name is None:
            return self.default
        found = self._by_name.get(name)
        if found is None:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"assignor {name!r} is not available on this coordinator; choose one of "
                f"{', '.join(self.names)} or register a custom assignor under that name",
            )
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._by_name


def validate_assignment(spec: GroupSpec, result: Mapping[str, Iterable[Shard]]) -> Assignment:
    """Check an assignment computed elsewhere (a custom assignor, a delegate member).

    Rules: exactly the input's members; every shard exists; a member only gets topics it subscribes
    to; no shard given twice; every shard of a subscribed topic given once. Returns the assignment
    with frozensets; raises INVALID_ASSIGNMENT naming the first rule broken.
    """

    def bad(msg: str) -> ProtocolError:
        return ProtocolError(ErrorCode.INVALID_ASSIGNMENT, msg)

    extra = set(result) - set(spec.members)
    if extra:
        raise bad(f"assignment names members that are not in the group: {sorted(extra)}")
    missing = set(spec.members) - set(result)
    if missing:
        raise bad(f"assignment leaves out members of the group: {sorted(missing)}")
    out: Assignment = {}
    owner: dict[Shard, str] = {}
    for member_id, shards in result.items():
        fs = shards if isinstance(shards, frozenset) else frozenset(shards)
        subscribed = spec.members[member_id].topics
        for s in fs:
            if not isinstance(s, Shard):
                raise bad(f"member {member_id!r} was given {s!r}, which is not a Shard")
            if not spec.topics.contains(s):
                raise bad(f"member {member_id!r} was given {s}, which does not exist")
            if s.topic not in subscribed:
                raise bad(f"member {member_id!r} was given {s} but does not subscribe to {s.topic!r}")
            prev = owner.get(s)
            if prev is not None:
                raise bad(f"{s} was given to both {prev!r} and {member_id!r}")
            owner[s] = member_id
        out[member_id] = fs
    wanted = {t for m in spec.members.values() for t in m.topics if t in spec.topics}
    unassigned = [s for t in sorted(wanted) for s in spec.topics.shards(t) if s not in owner]
    if unassigned:
        raise bad(f"assignment leaves subscribed shards unassigned: {format_shards(unassigned[:20])}")
    return out
