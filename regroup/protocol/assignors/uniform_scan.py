"""The uniform assignor's pass over a group that only grew since its last assignment.

Rules of this module:

1. `scan_grown` decides nothing that the assignor's rules decide; it answers one question: is this
   group the remembered result ``targets`` plus joiners? That is, ``members`` is a dict holding
   every member of ``targets``, each holding its target (the same object or an equal one); its
   other members (the joiners) hold nothing (``empty`` or a set equal to it); and every member
   subscribes to ``topics`` (the same object or an equal one). If so it returns (`Grown`) every
   member's current set by member id (in the order of ``members``), the members whose size is not
   ``quota``, and the sum of the sizes. Otherwise None, and the assignor takes its general path.
   The assignor then moves shards between the members off quota; the others keep their sets.
2. There are two implementations with the same answers: a C one (`_uniform_scan.c`, built by the
   package's install, used when it imports) and `scan_grown_python` here, the reference the tests
   hold the C one to. `NATIVE` tells which one `scan_grown` is.
3. Why it exists: a coordinator assigns a group on every join. For a group that only grew, the
   assignment is this one pass plus a few moves, where the general path makes about ten passes
   over the members (grouping subscriptions, reading the current sets, checking them against the
   memory, counting sizes, building the result). Kafka's Java assignor takes 10 µs for 100
   members and 0.5 ms for 5000; in Python these passes alone took longer (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat

from regroup.protocol.assignors.base import MemberSpec
from regroup.protocol.shard import ShardSet

__all__ = ["NATIVE", "Grown", "scan_grown", "scan_grown_python"]


#: What `scan_grown` finds in a group that is a remembered result plus joiners:
#: (every member id -> its current set, in the order of the group's members;
#:  the ids of the members whose size is not the quota, their current sets, the sets' sizes,
#:  in the same order;
#:  the sum of every member's size).
Grown = tuple[dict[str, ShardSet], list[str], list[ShardSet], list[int], int]


#: A member id's target when the remembered result has none (a joiner).
_JOINER: ShardSet = frozenset({None})  # type: ignore[arg-type]  # no member ever holds it


def scan_grown_python(members: Mapping[str, MemberSpec], targets: dict[str, ShardSet],
                      topics: frozenset[str], empty: ShardSet, quota: int) -> Grown | None:
    """The reference implementation of `scan_grown` (see the module's rule 1)."""
    if type(members) is not dict or type(targets) is not dict or len(members) < len(targets):
        return None
    specs = list(members.values())
    if any(m.topics is not topics and m.topics != topics for m in specs):
        return None
    final = {mid: m.current for mid, m in members.items()}
    wanted = list(map(targets.get, final, repeat(_JOINER)))
    if len(final) - sum(w is _JOINER for w in wanted) != len(targets):  # one of targets left
        return None
    if list(final.values()) != [empty if w is _JOINER else w for w in wanted]:
        return None
    off = [(mid, s, len(s)) for mid, s in final.items() if len(s) != quota]
    return (final, [o[0] for o in off], [o[1] for o in off], [o[2] for o in off],
            sum(map(len, final.values())))


try:  # (imported as a name of the package: import-linter cannot read a compiled module)
    from regroup.protocol.assignors import _uniform_scan
except ImportError:  # not built (an install without a C compiler): the same answers, slower
    scan_grown = scan_grown_python
    NATIVE = False
else:
    scan_grown = _uniform_scan.scan_grown
    NATIVE = True
