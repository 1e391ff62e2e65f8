"""The simulated member processes: a `MemberStateMachine` each, and what the process around it does.

Rules of this module:

1. A process is what the consumer would be: it may be paused (a GC pause: no heartbeats, but it keeps
   processing and committing), dead, slow (it acknowledges revocations and assignments only when the
   driver says so), flaky (its messages fare as FLAKY_PATTERN says), or deaf (its requests arrive,
   their answers do not, until it gives up and rejoins).
2. What it may be reading is ``processing``: the shards it acknowledged plus those of an Assign it is
   still taking. The checks hold that against the coordinator's state.
3. Its state changes only through the driver; this module holds no protocol rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from regroup.protocol.member import Assign, Fatal, MemberState, MemberStateMachine
from regroup.protocol.shard import ShardSet
from tests.protocol.properties.model import Sub

TERMINAL = frozenset({MemberState.LEFT, MemberState.FATAL})
IN_GROUP = frozenset({MemberState.RECONCILING, MemberState.ACKNOWLEDGING, MemberState.STABLE})

#: A flaky process's n-th request fares as FLAKY_PATTERN[n % 6]: two answers lost in a row let the
#: coordinator move its epoch twice while it still sends the old one.
FLAKY_PATTERN = ("deliver", "lose_response", "lose_response", "deliver", "lose_request", "deliver")


@dataclass
class Proc:
    pid: int
    sm: MemberStateMachine
    sub: Sub
    slow: bool
    rto: int
    #: Its network loses messages (FLAKY_PATTERN) in rounds and pumps.
    flaky: bool = False
    sent: int = 0
    #: Its requests arrive but no answer comes back (an asymmetric partition), until it gives up and
    #: rejoins: the coordinator keeps it alive meanwhile.
    deaf: bool = False
    #: Its answered heartbeats in a row that left its member UNREVOKED although it held none of the
    #: shards to revoke (check 12, `checks.assert_revocation_heard`); emptied when that revocation ends.
    unrevoked_answers: list[str] = field(default_factory=list)
    paused: bool = False
    dead: bool = False
    fatal: list[Fatal] = field(default_factory=list)
    #: The member epoch last seen, to check it never goes back except to 0 on a rejoin.
    last_epoch: int = 0

    @property
    def mid(self) -> str:
        return self.sm.member_id

    @property
    def instance(self) -> str | None:
        return self.sm.instance_id

    @property
    def active(self) -> bool:
        return not self.dead and self.sm.state not in TERMINAL

    @property
    def running(self) -> bool:
        return self.active and not self.paused

    @property
    def processing(self) -> ShardSet:
        """What the process may be reading: acknowledged shards and those of an Assign it is
        still taking."""
        pending = self.sm.pending
        return self.sm.owned | pending.shards if isinstance(pending, Assign) else self.sm.owned

    def __repr__(self) -> str:
        flags = "".join(f for f, on in ((" paused", self.paused), (" slow", self.slow),
                                        (" flaky", self.flaky), (" deaf", self.deaf)) if on)
        return f"P{self.pid}({self.sm!r}{flags})"
