from collections.abc import Mapping

from regroup.protocol.assignors.base import MemberSpec
from regroup.protocol.shard import ShardSet

def scan_grown(
    members: Mapping[str, MemberSpec], targets: dict[str, ShardSet], topics: frozenset[str],
    empty: ShardSet, quota: int,
) -> tuple[dict[str, ShardSet], list[str], list[ShardSet], list[int], int] | None: ...
