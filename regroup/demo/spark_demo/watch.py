"""The group as the coordinator describes it, sampled while the PySpark demo runs.

Rules of this module:

1. The coordinator's describe is the only source: who owns which partition, the group epoch, committed
   offsets. Nothing here asks the members (their progress files are `processes`'s).
2. A describe that fails (the coordinator is busy or restarting) leaves the last view in place and
   makes the group not stable: the demo carries on and asks again.
3. Member ids are named by the rebalance timeout each member was given (`rebalance_tag`): the source
   does not let a query name itself in describe otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from regroup.demo.common import GROUP, Workload
from regroup.demo.spark_demo.processes import Proc, rebalance_tag
from regroup.protocol.describe import GroupDescription
from regroup.protocol.records import MemberStatus
from regroup.protocol.state import GroupState
from regroup.rpc.client import CoordinatorClient
from regroup.rpc.types import GroupDetails

#: At most this often (s) the coordinator is asked to describe the group.
SAMPLE_EVERY_S = 0.4


@dataclass
class Sample:
    """The group as the coordinator described it at ``t``: who owns which partition."""

    t: float
    epoch: int
    state: str
    owners: dict[int, str]
    #: Partitions whose owner is not processing: killed, or a static member between stop and restart.
    absent: frozenset[int] = frozenset()


class GroupWatch:
    """The latest description of the group, every sample taken, and the names of member ids."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.details: GroupDetails | None = None
        self.samples: list[Sample] = []
        self.ids: dict[str, str] = {}  # coordinator member id -> member name
        self._last_sample = 0.0

    def refresh(self, client: CoordinatorClient | None, procs: Sequence[Proc]) -> None:
        """Describe the group, unless that was done less than `SAMPLE_EVERY_S` ago."""
        now = time.time()
        if client is None or now - self._last_sample < SAMPLE_EVERY_S:
            return
        self._last_sample = now
        try:
            self.details = client.describe_group(GROUP)
        except Exception:  # the coordinator is busy or restarting: keep the last view
            self.details = None
        if self.details is not None:
            d = self.details.description
            self._map_ids(d, procs)
            self.samples.append(Sample(now, d.epoch, d.state.value, self.owners(d), self.absent(d, procs)))

    def _map_ids(self, d: GroupDescription, procs: Sequence[Proc]) -> None:
        for m in d.members:
            if m.member_id in self.ids:
                continue
            candidates = [p for p in procs if p.in_group and p.member_id is None
                          and rebalance_tag(p.name) == m.rebalance_timeout_ms]
            if candidates:
                proc = min(candidates, key=lambda p: p.released_at or 0.0)
                proc.member_id = m.member_id
                self.ids[m.member_id] = proc.name

    def owners(self, d: GroupDescription) -> dict[int, str]:
        out: dict[int, str] = {}
        for m in d.members:
            for s in m.assigned | m.pending_revocation:
                if s.topic == self.topic:
                    out[s.partition] = self.ids.get(m.member_id, "?")
        return out

    def absent(self, d: GroupDescription, procs: Sequence[Proc]) -> frozenset[int]:
        """Partitions assigned to a member id whose process is gone (the coordinator does not know yet,
        or keeps them for a static member's return)."""
        live = {p.member_id for p in procs if p.in_group}
        return frozenset(s.partition for m in d.members if m.member_id not in live
                         for s in m.assigned | m.pending_revocation if s.topic == self.topic)

    def stable(self, procs: Sequence[Proc]) -> bool:
        """Every member in the group is known, at the group epoch, with nothing left to move."""
        if self.details is None:
            return False
        d = self.details.description
        want = {p.member_id for p in procs if p.in_group}
        have = {m.member_id for m in d.members}
        return (d.state is GroupState.STABLE and None not in want and want == have
                and all(m.status is MemberStatus.STABLE and m.epoch == d.epoch for m in d.members))

    def drained(self, workload: Workload | None) -> bool:
        """Every partition's committed offset is the log's end (and the log holds what was produced)."""
        if self.details is None or workload is None:
            return False
        offs = [o for o in self.details.offsets if o.shard.topic == self.topic]
        ends = sum(o.log_end_offset or 0 for o in offs)
        return (len(offs) == self.partitions and ends == workload.produced
                and all(o.committed == o.log_end_offset for o in offs))

    def epoch(self) -> int:
        return self.details.description.epoch if self.details is not None else -1

    def current_owners(self) -> dict[int, str]:
        return dict(self.samples[-1].owners) if self.samples else {}
