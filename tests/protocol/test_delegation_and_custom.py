"""Custom assignors chosen per group, and assignment delegated to a member."""

from __future__ import annotations

from regroup.protocol.assignors import default_registry
from regroup.protocol.assignors.base import Assignment, GroupSpec
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages import HeartbeatRequest
from regroup.protocol.shard import EMPTY
from regroup.protocol.topics import TopicMetadata
from tests.protocol.harness import Harness, shards


class AllToSmallest:
    """A deliberately lopsided custom assignor: everything to the smallest member id."""

    name = "all-to-smallest"

    def assign(self, spec: GroupSpec) -> Assignment:
        ids = sorted(spec.members)
        out: Assignment = {m: EMPTY for m in ids}
        topics = {t for m in spec.members.values() for t in m.topics}
        out[ids[0]] = frozenset(s for t in sorted(topics) for s in spec.topics.shards(t))
        return out


class Broken:
    name = "broken"

    def assign(self, spec: GroupSpec) -> Assignment:
        return {}


def harness_with(*extra: object) -> Harness:
    h = Harness(topics={"t": 4})
    reg = default_registry()
    for a in extra:
        reg.register(a)  # type: ignore[arg-type]
    h.coord = Coordinator(h.config, reg, TopicMetadata(h.topics))
    return h


def test_custom_server_assignor_chosen_by_members() -> None:
    h = harness_with(AllToSmallest())
    h.ok(h.join("a", assignor="all-to-smallest"))
    h.ok(h.join("b", assignor="all-to-smallest"))
    assert h.group().assignor == "all-to-smallest"
    assert h.group().target["a"] == shards("t", 0, 1, 2, 3) and h.group().target["b"] == EMPTY


def test_failing_custom_assignor_falls_back_with_a_note() -> None:
    h = harness_with(Broken())
    out = h.coord.heartbeat(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topics=("t",),
                                             assignor="broken", owned=EMPTY), h.now)
    assert out.response.error is ErrorCode.NONE and out.notes and "broken" in out.notes[0]
    assert h.coord.groups["g"].assignor == "uniform"


def test_delegation_flow() -> None:
    h = Harness(topics={"t": 4})
    r = h.ok(h.join("a", assignor="mine", client_assignors=("mine",)))
    assert r.should_compute_assignment
    spec = h.coord.assignment_spec("g", "a", r.member_epoch)
    assert spec.group_epoch == 1 and spec.assignor == "mine" and set(spec.spec.members) == {"a"}
    bad = h.coord.install_assignment("g", "a", r.member_epoch, 1, {"a": shards("t", 0)}, h.now)
    assert bad.response.error is ErrorCode.INVALID_ASSIGNMENT and "unassigned" in bad.response.message
    stale = h.coord.install_assignment("g", "a", r.member_epoch, 0, {"a": shards("t", 0, 1, 2, 3)}, h.now)
    assert stale.response.error is ErrorCode.INVALID_ASSIGNMENT
    good = h.keep(h.coord.install_assignment("g", "a", r.member_epoch, 1, {"a": shards("t", 0, 1, 2, 3)},
                                             h.now))
    assert good.response.ok and ("g", "a") in good.wake
    r = h.ok(h.hb("a", r.member_epoch, owned=EMPTY))
    assert r.assignment == shards("t", 0, 1, 2, 3) and r.member_epoch == 1
    assert not r.should_compute_assignment


def test_only_the_delegate_may_install() -> None:
    h = Harness(topics={"t": 4})
    h.ok(h.join("b", assignor="mine", client_assignors=("mine",)))
    h.ok(h.join("c", assignor="mine", client_assignors=("mine",)))
    out = h.coord.install_assignment("g", "c", h.group().current["c"].epoch, h.group().epoch, {}, h.now)
    assert out.response.error is ErrorCode.NOT_ASSIGNMENT_DELEGATE


def test_overdue_delegate_falls_back_to_server_assignor() -> None:
    h = Harness(topics={"t": 4})
    h.ok(h.join("a", assignor="mine", client_assignors=("mine",), rebalance_timeout_ms=10_000))
    out = h.advance(10_000)
    assert out.notes and h.group().target_epoch == 1 and h.group().assignor == "uniform"
    r = h.ok(h.hb("a", 0, owned=EMPTY))
    assert r.assignment == shards("t", 0, 1, 2, 3)


def test_unsupported_when_nobody_can_run_it() -> None:
    h = Harness()
    r = h.join("a", assignor="mine")
    assert r.error is ErrorCode.UNSUPPORTED_ASSIGNOR
