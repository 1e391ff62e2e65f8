"""What every simulated group looks like from a scenario: the same verbs whatever the protocol.

A scenario (or a fault plan) only says *what happens* — a member joins, crashes, restarts, shuts down,
stalls; a topic grows — and asks whether the group has settled. `Kip848System` (the real core, with
or without nudges) and `ClassicSystem` (the JoinGroup/SyncGroup baselines) both implement it, so the
same scenario runs against every protocol.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from regroup.sim.engine import Engine
from regroup.sim.metrics import Recorder
from regroup.sim.workload import Cadence, ProducedLog


class ProtocolKind(Enum):
    """The four ways of running a group that the simulator compares."""

    #: Classic JoinGroup/SyncGroup, eager: everyone revokes everything at every rebalance.
    CLASSIC_EAGER = "classic-eager"
    #: Classic with KIP-429 incremental cooperative rebalancing: two barrier rounds.
    CLASSIC_COOPERATIVE = "classic-cooperative"
    #: KIP-848 as Kafka ships it: the coordinator decides, members learn on their next heartbeat.
    KIP848 = "kip848"
    #: regroup: the same core, and members are nudged when there is something for them.
    REGROUP = "regroup"


@dataclass(frozen=True, slots=True)
class PollModel:
    """Consumers' processing time: each process polls every ``period`` ms, drawn per process."""

    period_min_ms: int = 50
    period_max_ms: int = 500

    def cadence(self, rng: random.Random) -> Cadence:
        period = rng.randint(self.period_min_ms, self.period_max_ms)
        return Cadence(rng.randint(0, period - 1), period)


class GroupSystem(Protocol):
    engine: Engine
    log: ProducedLog
    recorder: Recorder | None

    def add_member(self, slot: str, static: bool = False) -> None:
        """Start a new process in a new slot."""

    def crash(self, slot: str) -> None: ...

    def restart(self, slot: str) -> None:
        """Start the slot's process again (after a crash or a shutdown)."""

    def shutdown(self, slot: str, restart_after: int | None = None) -> None:
        """Stop the slot's process gracefully; start it again ``restart_after`` ms later if given."""

    def stall(self, slot: str, duration: int) -> None:
        """The slot's next batch takes ``duration`` ms."""

    def grow_topic(self, topic: str, partitions: int) -> None: ...

    def settled(self) -> bool:
        """Every partition processed by a live member, and the protocol at rest."""

    def slots(self) -> list[str]: ...

    def describe(self) -> str:
        """A one-paragraph account of where the group stands (for liveness reports)."""
