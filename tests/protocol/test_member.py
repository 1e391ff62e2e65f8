"""The member state machine: every transition and error, then random sequences checked against invariants."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from regroup.protocol.errors import ErrorCode
from regroup.protocol.member import (
    Action,
    Assign,
    ComputeAssignment,
    Fatal,
    Lost,
    MemberState,
    MemberStateMachine,
    MemberUsageError,
    Revoke,
)
from regroup.protocol.messages import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.shard import EMPTY, Shard, ShardSet

G, M = "g", "m-1"
A0, A1, A2, A3 = (Shard("a", p) for p in range(4))


def S(*shards: Shard) -> ShardSet:
    return frozenset(shards)


def ok(epoch: int, assignment: ShardSet | None = None, *, interval: int = 3000,
       compute: bool = False) -> HeartbeatResponse:
    return HeartbeatResponse(ErrorCode.NONE, member_id=M, member_epoch=epoch, heartbeat_interval_ms=interval,
                             assignment=assignment, should_compute_assignment=compute)


def err(code: ErrorCode, message: str = "") -> HeartbeatResponse:
    return HeartbeatResponse(code, message=message)


def member(**kw: object) -> MemberStateMachine:
    args: dict[str, object] = {"subscribed_topics": ("a",), "rebalance_timeout_ms": 60_000}
    args.update(kw)
    return MemberStateMachine(G, M, **args)  # type: ignore[arg-type]


def is_full(m: MemberStateMachine, req: HeartbeatRequest) -> bool:
    return (req.rebalance_timeout_ms is not None and req.subscribed_topics is not None
            and req.subscribed_regex is not None and req.client_assignors is not None
            and req.owned is not None and req.instance_id == m.instance_id)


def send(m: MemberStateMachine, now: int) -> HeartbeatRequest:
    req = m.next_request(now)
    assert req is not None, f"no request due at {now}: {m!r}"
    return req


def joined(owned: ShardSet = EMPTY, epoch: int = 1, now: int = 0, **kw: object) -> MemberStateMachine:
    """A member that joined and took ``owned`` at ``epoch``, acknowledged to the coordinator."""
    m = member(**kw)
    send(m, now)
    actions = m.on_response(ok(epoch, owned), now)
    if owned:
        assert actions == [Assign(owned)]
        m.assignment_done(owned, now)
    # After a join the member reports what it owns once more: a coordinator that already knew it
    # does not take the join's "owns nothing" as a report.
    send(m, now)
    assert m.on_response(ok(epoch), now) == []
    assert m.state is MemberState.STABLE and m.owned == owned
    return m


# --------------------------------------------------------------------------------------------------
# Joining and requests


def test_starts_joining_with_a_full_join_request() -> None:
    m = member(instance_id="i-1", rack_id="r1", assignor="range", client_assignors=("mine",),
               subscribed_topics=["b", "a", "a"], subscribed_regex="x.*")
    assert m.state is MemberState.JOINING and m.heartbeat_due(0) and m.next_heartbeat_at() == 0
    req = send(m, 10)
    assert req == HeartbeatRequest(G, M, 0, instance_id="i-1", rack_id="r1", rebalance_timeout_ms=60_000,
                                   subscribed_topics=("a", "b"), subscribed_regex="x.*", assignor="range",
                                   client_assignors=("mine",), owned=EMPTY)
    assert m.in_flight and m.next_request(10) is None and m.next_heartbeat_at() is None


def test_full_request_without_regex_sends_empty_regex() -> None:
    assert send(member(), 0).subscribed_regex == ""


def test_unsubscribed_until_a_subscription_arrives() -> None:
    m = MemberStateMachine(G, M)
    assert m.state is MemberState.UNSUBSCRIBED and m.next_request(0) is None and m.next_heartbeat_at() is None
    m.update_subscription(regex="t-.*")
    assert m.state is MemberState.JOINING
    req = send(m, 5)
    assert req.member_epoch == 0 and req.subscribed_regex == "t-.*" and req.subscribed_topics == ()


def test_constructor_validates() -> None:
    with pytest.raises(ValueError):
        MemberStateMachine("", M)
    with pytest.raises(ValueError):
        MemberStateMachine(G, "")
    with pytest.raises(ValueError):
        MemberStateMachine(G, M, instance_id="")
    with pytest.raises(ValueError):
        MemberStateMachine(G, M, rebalance_timeout_ms=0)
    with pytest.raises(TypeError):
        MemberStateMachine(G, M, subscribed_topics="abc")


def test_join_response_assigns_then_acknowledges_immediately() -> None:
    m = member()
    send(m, 0)
    assert m.on_response(ok(3, S(A0, A1), interval=2000), 100) == [Assign(S(A0, A1))]
    assert m.state is MemberState.RECONCILING and m.epoch == 3 and m.owned == EMPTY
    assert m.target == S(A0, A1) and m.pending == Assign(S(A0, A1))
    # Due at once: from now on the shards being taken are reported as held.
    assert m.heartbeat_due(100)
    req = send(m, 100)
    assert req == HeartbeatRequest(G, M, 3, owned=S(A0, A1))  # a delta: only owned changed
    assert m.on_response(ok(3), 120) == []
    assert m.assignment_done(S(A0, A1), 150) == []
    # Stable at once: the coordinator already counts them held, so there is nothing left to confirm.
    assert m.state is MemberState.STABLE and m.owned == S(A0, A1)
    req = send(m, 150)
    assert req.owned is None  # a delta with nothing changed


def test_join_response_without_assignment_means_nothing_yet() -> None:
    m = member()
    send(m, 0)
    assert m.on_response(ok(1), 0) == []
    assert m.state is MemberState.STABLE and m.target == EMPTY


def test_delta_requests_leave_unchanged_fields_out() -> None:
    m = joined(S(A0))
    req = send(m, 3000)
    assert req == HeartbeatRequest(G, M, 1)
    assert not is_full(m, req)


def test_interval_from_the_response_and_zero_keeps_the_previous_one() -> None:
    m = joined()
    assert m.next_heartbeat_at() == 3000
    send(m, 3000)
    m.on_response(ok(1, interval=7000), 3000)
    assert m.next_heartbeat_at() == 10_000
    send(m, 10_000)
    m.on_response(ok(1, interval=0), 10_000)
    assert m.next_heartbeat_at() == 17_000


def test_unchanged_assignment_emits_nothing() -> None:
    m = joined(S(A0, A1), epoch=2)
    send(m, 3000)
    assert m.on_response(ok(2, None), 3000) == []
    send(m, 6000)
    assert m.on_response(ok(2, S(A0, A1)), 6000) == []
    assert m.state is MemberState.STABLE and m.owned == S(A0, A1)


def test_member_adopts_member_id_from_response() -> None:
    m = member()
    send(m, 0)
    m.on_response(HeartbeatResponse(ErrorCode.NONE, member_id="server-id", member_epoch=1), 0)
    assert m.member_id == "server-id"


# --------------------------------------------------------------------------------------------------
# Reconciliation


def test_revoke_first_then_assign_after_acknowledgement() -> None:
    m = joined(S(A0, A1), epoch=2)
    send(m, 3000)
    assert m.on_response(ok(3, S(A1, A2)), 3000) == [Revoke(S(A0))]
    assert m.owned == S(A0, A1) and m.epoch == 3 and m.state is MemberState.RECONCILING
    assert m.revocation_done(S(A0), 3100) == [Assign(S(A2))]
    assert m.owned == S(A1) and m.heartbeat_due(3100)  # the coordinator must hear about it now
    req = send(m, 3100)
    # The Assign in progress counts as held: the coordinator must not think A2 free.
    assert req.owned == S(A1, A2) and req.member_epoch == 3
    assert m.on_response(ok(3), 3150) == []
    assert m.state is MemberState.RECONCILING  # still taking A2
    assert m.assignment_done(S(A2), 3200) == []
    assert m.owned == S(A1, A2) and m.state is MemberState.STABLE


def test_epoch_unchanged_while_revoking_then_bumped() -> None:
    """Kafka's flow: the coordinator sends `keep` at the same epoch, then the rest at the next epoch."""
    m = joined(S(A0, A1), epoch=4)
    send(m, 3000)
    assert m.on_response(ok(4, S(A1)), 3000) == [Revoke(S(A0))]
    assert m.epoch == 4
    assert m.revocation_done(S(A0), 3010) == []
    assert m.state is MemberState.ACKNOWLEDGING
    req = send(m, 3010)
    assert (req.member_epoch, req.owned) == (4, S(A1))
    assert m.on_response(ok(5, S(A1, A3)), 3020) == [Assign(S(A3))]
    assert m.epoch == 5


def test_target_change_during_revocation_uses_the_latest_target() -> None:
    m = joined(S(A0, A1), epoch=1)
    send(m, 3000)
    assert m.on_response(ok(1, S(A1)), 3000) == [Revoke(S(A0))]
    send(m, 6000)  # heartbeats continue while the driver revokes
    assert m.on_response(ok(2, S(A0, A2)), 6000) == []  # nothing new while a Revoke is outstanding
    # After the ack: A0 is back in the target (assign it again), A1 must go first.
    assert m.revocation_done(S(A0), 6100) == [Revoke(S(A1))]
    assert m.revocation_done(S(A1), 6200) == [Assign(S(A0, A2))]


def test_target_change_during_assignment() -> None:
    m = member()
    send(m, 0)
    assert m.on_response(ok(1, S(A0, A1)), 0) == [Assign(S(A0, A1))]
    send(m, 3000)
    assert m.on_response(ok(2, S(A1)), 3000) == []
    assert m.assignment_done(S(A0, A1), 3100) == [Revoke(S(A0))]
    assert m.owned == S(A0, A1)


def test_an_assign_waits_for_the_answer_to_the_request_in_flight() -> None:
    """Rule 4: the request in flight told the coordinator what we hold; a shard of the target we had
    not taken yet may be taken back in its answer, so the next Assign waits for that answer."""
    m = joined(S(A0, A1), epoch=1)
    send(m, 3000)
    assert m.on_response(ok(2, S(A1, A2)), 3000) == [Revoke(S(A0))]
    send(m, 6000)  # in flight, reporting A0 and A1: A2 is free to be taken back
    assert m.revocation_done(S(A0), 6001) == []
    assert m.state is MemberState.ACKNOWLEDGING and m.owned == S(A1)
    assert m.on_response(ok(3, S(A1)), 6010) == []  # it was taken back: nothing to assign
    assert m.state is MemberState.ACKNOWLEDGING and m.heartbeat_due(6010)  # owned changed: say so
    m = joined(S(A0, A1), epoch=1)
    send(m, 3000)
    m.on_response(ok(2, S(A1, A2)), 3000)
    send(m, 6000)
    assert m.revocation_done(S(A0), 6001) == []
    assert m.on_response(ok(2), 6010) == [Assign(S(A2))]  # confirmed: take it


def test_an_assign_waits_for_an_answer_after_a_lost_one() -> None:
    """Rule 4: a lost answer may have taken back shards of the target the member had not taken yet
    (and the coordinator may have given them to another member): the member does not go on to take
    them before an answer tells it its assignment. (Found by the property tests: a slow member
    finished one Assign and took, from its stale target, a shard another member processed.)"""
    m = member()
    send(m, 0)
    assert m.on_response(ok(1, S(A0)), 0) == [Assign(S(A0))]  # a slow driver: not acknowledged yet
    send(m, 3000)
    assert m.on_response(ok(2, S(A0, A1, A2)), 3000) == []  # one Assign at a time: A1, A2 wait
    send(m, 6000)
    m.request_failed(6000)  # its answer (A2 taken back) is lost
    assert m.assignment_done(S(A0), 6050) == []  # not Assign(A1, A2): the target may be stale
    assert m.state is MemberState.ACKNOWLEDGING and m.heartbeat_due(6050)
    req = send(m, 6050)
    assert is_full(m, req) and req.owned == S(A0)
    assert m.on_response(ok(3, S(A0, A1)), 6060) == [Assign(S(A1))]


def test_compute_assignment_is_surfaced() -> None:
    m = member()
    send(m, 0)
    assert m.on_response(ok(1, S(A0), compute=True), 0) == [Assign(S(A0)), ComputeAssignment()]


def test_acknowledgement_mismatch_is_a_driver_bug() -> None:
    m = member()
    send(m, 0)
    m.on_response(ok(1, S(A0, A1)), 0)
    with pytest.raises(MemberUsageError):
        m.assignment_done(S(A0), 0)
    with pytest.raises(MemberUsageError):
        m.revocation_done(S(A0, A1), 0)
    with pytest.raises(MemberUsageError):
        m.on_response(ok(1), 0)  # nothing in flight
    with pytest.raises(MemberUsageError):
        m.request_failed(0)


# --------------------------------------------------------------------------------------------------
# Losing the membership


@pytest.mark.parametrize(
    "code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND]
)
def test_fencing_errors_lose_everything_and_rejoin_with_the_same_id(code: ErrorCode) -> None:
    m = joined(S(A0, A1), epoch=5, instance_id="i")
    send(m, 3000)
    actions = m.on_response(err(code, "go away"), 3000)
    assert len(actions) == 1 and isinstance(actions[0], Lost) and actions[0].shards == S(A0, A1)
    assert code.value in actions[0].reason
    assert m.state is MemberState.JOINING and m.epoch == 0 and m.owned == EMPTY and m.target is None
    req = send(m, 3000)  # at once
    assert req.member_id == M and req.member_epoch == 0 and req.owned == EMPTY and is_full(m, req)


def test_fencing_with_an_assign_outstanding_loses_it_too_and_ignores_the_late_ack() -> None:
    m = joined(S(A0))
    send(m, 3000)
    assert m.on_response(ok(2, S(A0, A1)), 3000) == [Assign(S(A1))]
    send(m, 6000)
    assert m.on_response(err(ErrorCode.FENCED_MEMBER_EPOCH), 6000) == [
        Lost(S(A0, A1), "FENCED_MEMBER_EPOCH")]
    assert m.assignment_done(S(A1), 6010) == []  # stale, ignored
    assert m.owned == EMPTY and m.pending is None


def test_fenced_while_nothing_owned_emits_no_lost() -> None:
    m = joined()
    send(m, 3000)
    assert m.on_response(err(ErrorCode.UNKNOWN_MEMBER_ID), 3000) == []
    assert m.state is MemberState.JOINING


def test_fenced_join_is_retried_with_backoff() -> None:
    m = member(retry_backoff_ms=100)
    send(m, 0)
    assert m.on_response(err(ErrorCode.GROUP_ID_NOT_FOUND), 0) == []
    assert m.next_heartbeat_at() == 100 and m.next_request(50) is None
    assert send(m, 100).member_epoch == 0


def test_unreleased_instance_id_retries_the_join_after_backoff() -> None:
    m = member(instance_id="i", unreleased_instance_backoff_ms=2500)
    send(m, 0)
    assert m.on_response(err(ErrorCode.UNRELEASED_INSTANCE_ID, "held by m-0"), 0) == []
    assert m.state is MemberState.JOINING and m.next_heartbeat_at() == 2500
    assert m.next_request(2499) is None
    req = send(m, 2500)
    assert req.member_epoch == 0 and req.instance_id == "i" and is_full(m, req)


def test_fenced_instance_id_is_fatal_and_loses_partitions() -> None:
    m = joined(S(A0), instance_id="i")
    send(m, 3000)
    actions = m.on_response(err(ErrorCode.FENCED_INSTANCE_ID, "instance i belongs to m-9"), 3000)
    assert actions == [Lost(S(A0), "fatal error FENCED_INSTANCE_ID: instance i belongs to m-9"),
                       Fatal(ErrorCode.FENCED_INSTANCE_ID, "instance i belongs to m-9")]
    assert m.state is MemberState.FATAL and m.owned == EMPTY
    assert m.next_request(10**9) is None and m.next_heartbeat_at() is None and m.tick(10**9) == []
    assert m.leave(10**9) == [] and m.close() == []


@pytest.mark.parametrize("code", [ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.INVALID_REGULAR_EXPRESSION,
                                  ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_MAX_SIZE_REACHED])
def test_configuration_errors_are_fatal_with_the_coordinators_message(code: ErrorCode) -> None:
    m = member()
    send(m, 0)
    assert m.on_response(err(code, "fix your config"), 0) == [Fatal(code, "fix your config")]
    assert m.state is MemberState.FATAL and m.next_request(1) is None
    with pytest.raises(MemberUsageError):
        m.update_subscription(topics=("b",))


def test_unexpected_error_code_is_fatal() -> None:
    m = member()
    send(m, 0)
    [fatal] = m.on_response(err(ErrorCode.NOT_OWNED), 0)
    assert isinstance(fatal, Fatal) and fatal.error is ErrorCode.NOT_OWNED and "unexpected" in fatal.message


def test_stale_member_epoch_is_retried_with_a_full_request() -> None:
    m = joined(S(A0), epoch=2)
    send(m, 3000)
    assert m.on_response(err(ErrorCode.STALE_MEMBER_EPOCH), 3000) == []
    req = send(m, 3100)
    assert is_full(m, req) and req.member_epoch == 2 and m.owned == S(A0)


# --------------------------------------------------------------------------------------------------
# Transport failures and the session


def test_request_failure_backs_off_exponentially_and_resends_everything() -> None:
    m = joined(S(A0, A1), epoch=7, retry_backoff_ms=100, retry_backoff_max_ms=350)
    waits = []
    now = 3000
    for _ in range(4):
        send(m, now)
        assert m.request_failed(now) == []
        at = m.next_heartbeat_at()
        assert at is not None
        waits.append(at - now)
        now = at
    assert waits == [100, 200, 350, 350]
    req = send(m, now)
    # Full, same epoch and owned: the coordinator's lost-response rule accepts it.
    assert is_full(m, req) and req.member_epoch == 7 and req.owned == S(A0, A1)
    m.on_response(ok(8), now)
    assert m.state is MemberState.STABLE and m.epoch == 8
    send(m, now + 3000)
    m.request_failed(now + 3000)
    assert m.next_heartbeat_at() == now + 3100  # success reset the backoff


def test_session_expiry_loses_partitions_and_rejoins() -> None:
    m = joined(S(A0), now=1000, session_timeout_ms=10_000)
    assert m.session_deadline() == 11_000
    assert m.tick(10_999) == []
    send(m, 4000)  # never answered in time
    actions = m.tick(11_000)
    assert len(actions) == 1 and isinstance(actions[0], Lost) and actions[0].shards == S(A0)
    assert m.state is MemberState.JOINING and m.epoch == 0 and m.owned == EMPTY
    # The old request is still in flight: its late answer is void, then the join goes.
    assert m.next_request(11_000) is None
    assert m.on_response(ok(1, S(A0, A1)), 11_500) == []
    assert m.epoch == 0 and m.target is None
    req = send(m, 11_500)
    assert req.member_epoch == 0 and req.owned == EMPTY and is_full(m, req)


def test_a_late_acknowledgement_after_the_session_ran_out_loses_instead_of_taking_more() -> None:
    """Found by the long property run: a slow member acknowledged an Assign 65 s after its last
    answer; the next step (from a target the coordinator had since given to another member) was
    handed out. The acknowledgement must check the session like `tick` does."""
    m = joined(S(A0), now=0, session_timeout_ms=10_000)
    send(m, 3000)
    assert m.on_response(ok(2, S(A1, A2)), 3000) == [Revoke(S(A0))]  # A1, A2 wait for the revoke
    # The session (sent at 3000) ended at 13_000: nothing held any more, so nothing to drop, and
    # no Assign of A1, A2 -- the member rejoins instead.
    assert m.revocation_done(S(A0), 13_000) == []
    assert m.state is MemberState.JOINING and m.owned == EMPTY and m.pending is None
    # Before the deadline the same acknowledgement continues the reconciliation.
    m = joined(S(A0), now=0, session_timeout_ms=10_000)
    send(m, 3000)
    m.on_response(ok(2, S(A1, A2)), 3000)
    assert m.revocation_done(S(A0), 12_999) == [Assign(S(A1, A2))]
    [lost] = m.assignment_done(S(A1, A2), 13_000)
    assert isinstance(lost, Lost) and lost.shards == S(A1, A2) and "session timeout" in lost.reason


def test_a_delta_reports_owned_while_the_member_does_not_hold_its_target() -> None:
    """The coordinator reads an absent owned as "holds everything it was given". While the member
    has not reached its target, that would count shards it never took (and which may be taken back
    before it does) as held, and their revocation would wait until the revocation timeout: so the
    member reports owned until it holds its target. (Found by the streams member's random tests.)"""
    m = joined(S(A0, A1), now=0)
    send(m, 3000)
    assert m.on_response(ok(2, S(A0, A2)), 3000) == [Revoke(S(A1))]  # A2 waits for the revoke
    req = send(m, 6000)
    assert req.owned == S(A0, A1)  # unchanged since the last answer, but not the target: said anyway
    m.on_response(ok(2), 6000)
    assert m.revocation_done(S(A1), 6500) == [Assign(S(A2))]
    m.assignment_done(S(A2), 7000)
    send(m, 7000)
    m.on_response(ok(2), 7000)
    assert send(m, 10_000).owned is None  # holds its target: nothing to say


def test_session_is_measured_from_the_send_time_of_the_last_success() -> None:
    m = joined(session_timeout_ms=10_000)
    send(m, 3000)
    m.on_response(ok(1), 9000)
    assert m.session_deadline() == 13_000


def test_repeated_failures_end_in_lost() -> None:
    m = joined(S(A0), session_timeout_ms=10_000, retry_backoff_ms=1000, retry_backoff_max_ms=1000)
    now, sent_at, lost = 3000, [], list[Action]()  # the last successful request was sent at 0
    while not lost:
        send(m, now)
        sent_at.append(now)
        lost = m.request_failed(now)  # refused at once
        assert m.owned == S(A0) or lost
        now = m.next_heartbeat_at() or now
    [action] = lost
    assert isinstance(action, Lost) and action.shards == S(A0) and "session timeout 10000 ms" in action.reason
    assert sent_at == list(range(3000, 10_001, 1000))  # the failure at 10000 ends the session
    assert m.state is MemberState.JOINING and m.epoch == 0 and m.heartbeat_due(10_000)


# --------------------------------------------------------------------------------------------------
# Subscription changes


def test_subscription_update_goes_out_at_once_as_a_delta() -> None:
    m = joined(S(A0))
    m.update_subscription(topics=["c", "a"])
    assert m.heartbeat_due(1)
    req = send(m, 1)
    assert req == HeartbeatRequest(G, M, 1, subscribed_topics=("a", "c"))
    m.on_response(ok(2), 2)
    m.update_subscription(regex="z.*")
    assert send(m, 3).subscribed_regex == "z.*" and m.subscription == (("a", "c"), "z.*")
    m.on_response(ok(2), 3)
    m.update_subscription(regex="")
    req = send(m, 4)
    assert req.subscribed_regex == "" and req.subscribed_topics is None


def test_subscription_update_while_in_flight_is_sent_after_the_answer() -> None:
    m = joined()
    send(m, 3000)
    m.update_subscription(topics=("b",))
    m.on_response(ok(1), 3010)
    assert m.next_heartbeat_at() == 3010
    assert send(m, 3010).subscribed_topics == ("b",)


def test_owned_change_during_flight_is_sent_after_the_answer() -> None:
    m = joined(S(A0, A1))
    send(m, 3000)
    m.on_response(ok(1, S(A1)), 3000)
    send(m, 6000)
    m.revocation_done(S(A0), 6001)
    m.on_response(ok(1), 6010)  # answered the request that still listed A0
    assert m.state is MemberState.ACKNOWLEDGING and m.heartbeat_due(6010)
    assert send(m, 6010).owned == S(A1)


# --------------------------------------------------------------------------------------------------
# Leaving


def test_dynamic_leave_revokes_everything_then_sends_minus_one() -> None:
    m = joined(S(A0, A1), epoch=3)
    assert m.leave(100) == [Revoke(S(A0, A1))]
    assert m.state is MemberState.PREPARE_LEAVING
    assert m.leave(100) == []  # idempotent
    assert m.revocation_done(S(A0, A1), 200) == []
    assert m.state is MemberState.LEAVING and m.owned == EMPTY
    req = send(m, 200)
    assert req == HeartbeatRequest(G, M, -1)
    assert m.on_response(ok(-1), 210) == []
    assert m.state is MemberState.LEFT and m.next_request(10**9) is None and m.next_heartbeat_at() is None


def test_static_leave_is_temporary_unless_permanent() -> None:
    m = joined(S(A0), instance_id="i")
    assert m.leave(0) == [Revoke(S(A0))]
    m.revocation_done(S(A0), 0)
    assert send(m, 0) == HeartbeatRequest(G, M, -2, instance_id="i")
    m.on_response(err(ErrorCode.UNKNOWN_MEMBER_ID), 1)  # any answer ends it
    assert m.state is MemberState.LEFT

    m = joined(S(A0), instance_id="i")
    m.leave(0, permanent=True)
    m.revocation_done(S(A0), 0)
    assert send(m, 0).member_epoch == -1


def test_leave_waits_for_an_outstanding_assignment() -> None:
    m = member()
    send(m, 0)
    m.on_response(ok(1, S(A0)), 0)
    assert m.leave(10) == []
    assert m.assignment_done(S(A0), 20) == [Revoke(S(A0))]
    assert m.revocation_done(S(A0), 30) == []
    assert send(m, 30).member_epoch == -1


def test_heartbeats_continue_while_revoking_for_leave_and_take_nothing_new() -> None:
    m = joined(S(A0))
    m.leave(1000)
    send(m, 3000)
    assert m.on_response(ok(2, S(A0, A1), compute=True), 3000) == []
    assert m.target == S(A0, A1) and m.state is MemberState.PREPARE_LEAVING


def test_fenced_while_preparing_to_leave_ends_in_left() -> None:
    m = joined(S(A0))
    m.leave(0)
    send(m, 3000)
    assert m.on_response(err(ErrorCode.FENCED_MEMBER_EPOCH), 3000) == [Lost(S(A0), "FENCED_MEMBER_EPOCH")]
    assert m.state is MemberState.LEFT and m.revocation_done(S(A0), 3001) == []


def test_leave_before_joining_is_immediate() -> None:
    m = member()
    assert m.leave(0) == [] and m.state is MemberState.LEFT and m.next_request(0) is None


def test_leave_while_the_join_is_in_flight_sends_a_leave_after_the_answer() -> None:
    m = member()
    send(m, 0)
    assert m.leave(1) == [] and m.state is MemberState.LEAVING
    assert m.on_response(ok(1, S(A0)), 2) == []  # takes nothing
    assert send(m, 2).member_epoch == -1
    m.request_failed(3)
    assert m.state is MemberState.LEFT


def test_join_refused_while_leaving_ends_in_left() -> None:
    m = member(instance_id="i")
    send(m, 0)
    m.leave(1)
    assert m.on_response(err(ErrorCode.UNRELEASED_INSTANCE_ID), 2) == []
    assert m.state is MemberState.LEFT


def test_session_expiry_while_leaving_ends_in_left() -> None:
    m = joined(S(A0), session_timeout_ms=5000)
    m.leave(0)
    [lost] = m.tick(5000)
    assert isinstance(lost, Lost) and lost.shards == S(A0) and "5000 ms" in lost.reason
    assert m.state is MemberState.LEFT and m.next_request(5000) is None


def test_close_abandons_without_a_request() -> None:
    m = joined(S(A0))
    send(m, 3000)
    m.update_subscription(topics=("a",))
    assert m.close() == [Lost(S(A0), "member closed without leaving the group")]
    assert m.state is MemberState.LEFT and m.next_request(10**6) is None
    assert m.on_response(ok(1), 3001) == []  # the answer to the abandoned request is void
    assert m.close() == []


# --------------------------------------------------------------------------------------------------
# Random sequences against invariants

UNIVERSE = [Shard(t, p) for t in ("a", "b") for p in range(3)]
REJOIN = [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND]
FATAL = [ErrorCode.FENCED_INSTANCE_ID, ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.INVALID_REGULAR_EXPRESSION,
         ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_MAX_SIZE_REACHED]
# Recoverable errors far more often than fatal ones, so that runs go on long enough to be interesting.
ERRORS = REJOIN * 6 + [ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.STALE_MEMBER_EPOCH] * 3 + FATAL
shard_sets = st.frozensets(st.sampled_from(UNIVERSE))
#: Ending the run (leave, close) is drawn as one chance in eight.
rarely = st.sampled_from([False] * 7 + [True])


class MemberMachine(RuleBasedStateMachine):
    """A random coordinator and a random (but correct) driver around one member."""

    def __init__(self) -> None:
        super().__init__()
        self.m = MemberStateMachine(G, M, instance_id="i", subscribed_topics=("a", "b"),
                                    session_timeout_ms=20_000, heartbeat_interval_ms=3000)
        self.now = 0
        self.coord_epoch = 0
        self.inflight: HeartbeatRequest | None = None
        self.driver_owned: ShardSet = EMPTY  # what the driver has taken, by acknowledged actions only
        self.outstanding: Revoke | Assign | None = None  # the action the driver is working on
        self.cancelled: list[Revoke | Assign] = []
        self.expect_join = False
        self.expect_full = True
        self.terminal: MemberState | None = None
        #: The last request was answered successfully (rule 4: only then may an Assign be emitted).
        self.confirmed = False

    # -- helpers --

    def digest(self, actions: list[Action], owned_before: ShardSet) -> None:
        kinds = [type(a) for a in actions]
        assert not (Revoke in kinds and Assign in kinds), "a Revoke and an Assign emitted together"
        for a in actions:
            if isinstance(a, Lost):
                held = owned_before | (self.outstanding.shards if isinstance(self.outstanding, Assign)
                                       else EMPTY)
                assert owned_before <= a.shards <= held and a.shards
                assert self.m.owned == EMPTY and self.m.pending is None
                if self.outstanding is not None:
                    self.cancelled.append(self.outstanding)
                self.outstanding = None
                self.driver_owned = EMPTY
                self.expect_full = True
                if self.m.state is MemberState.JOINING:
                    assert self.m.epoch == 0
                    self.expect_join = True
            elif isinstance(a, Revoke | Assign):
                assert self.outstanding is None, "two actions outstanding at once"
                if isinstance(a, Revoke):
                    assert a.shards and a.shards <= self.driver_owned
                else:
                    assert a.shards and not (a.shards & self.driver_owned)
                    # Revoke first: nothing owned may still be waiting for its revocation.
                    target = self.m.target
                    assert target is not None and self.driver_owned <= target, "Assign before Revoke"
                    assert self.inflight is None and self.confirmed, (
                        "Assign from a target the coordinator has not confirmed (a request in flight, "
                        "or its last answer lost)")
                self.outstanding = a
            elif isinstance(a, Fatal):
                assert self.m.state is MemberState.FATAL
        if any(isinstance(a, Lost) for a in actions) and self.m.state is MemberState.JOINING:
            self.expect_join = True

    def respond(self, resp: HeartbeatResponse) -> None:
        before = self.m.owned
        self.inflight = None
        self.confirmed = resp.error is ErrorCode.NONE
        if resp.error is not ErrorCode.NONE:
            self.expect_full = True
        self.digest(self.m.on_response(resp, self.now), before)
        if resp.error in REJOIN and self.m.state is MemberState.JOINING:
            self.expect_join = True

    # -- rules --

    @rule(dt=st.integers(0, 25_000))
    def advance(self, dt: int) -> None:
        self.now += dt
        before = self.m.owned
        self.digest(self.m.tick(self.now), before)

    @rule()
    def send(self) -> None:
        at = self.m.next_heartbeat_at()
        if at is not None and at > self.now:
            self.advance(at - self.now)  # the driver sleeps until the heartbeat is due
        req = self.m.next_request(self.now)
        if self.m.state in (MemberState.LEFT, MemberState.FATAL, MemberState.UNSUBSCRIBED):
            assert req is None
        if req is None:
            return
        assert self.inflight is None, "two requests in flight"
        self.inflight = req
        if req.member_epoch >= 0:
            if self.expect_full:
                assert is_full(self.m, req), req
            if self.expect_join:
                assert req.member_epoch == 0 and req.owned == EMPTY
            if req.member_epoch == 0:
                assert req.owned == EMPTY and is_full(self.m, req)
            else:
                assert req.member_epoch == self.m.epoch
            self.expect_full = False
            self.expect_join = False

    @precondition(lambda self: self.inflight is not None)
    @rule(assignment=st.none() | shard_sets, bump=st.booleans(), compute=st.booleans())
    def respond_ok(self, assignment: ShardSet | None, bump: bool, compute: bool) -> None:
        assert self.inflight is not None
        if self.inflight.member_epoch == 0 or bump:
            self.coord_epoch += 1
        self.respond(ok(self.coord_epoch, assignment, compute=compute))

    @precondition(lambda self: self.inflight is None)
    @rule(assignment=st.none() | shard_sets, bump=st.booleans())
    def round_trip(self, assignment: ShardSet | None, bump: bool) -> None:
        """The common case in one step: the heartbeat goes out and is answered successfully."""
        self.send()
        if self.inflight is not None:
            self.respond_ok(assignment, bump, compute=False)

    @precondition(lambda self: self.inflight is not None)
    @rule(code=st.sampled_from(ERRORS))
    def respond_error(self, code: ErrorCode) -> None:
        self.respond(err(code, "boom"))

    @precondition(lambda self: self.inflight is not None)
    @rule()
    def fail(self) -> None:
        self.inflight = None
        self.expect_full = True
        self.confirmed = False
        before = self.m.owned
        self.digest(self.m.request_failed(self.now), before)

    @precondition(lambda self: self.outstanding is not None)
    @rule()
    def acknowledge(self) -> None:
        action, before = self.outstanding, self.m.owned
        assert action is not None and self.m.pending == action
        self.outstanding = None
        if isinstance(action, Revoke):
            self.driver_owned -= action.shards
            actions = self.m.revocation_done(action.shards, self.now)
        else:
            self.driver_owned |= action.shards
            actions = self.m.assignment_done(action.shards, self.now)
        assert self.m.owned == self.driver_owned
        self.digest(actions, before)

    @precondition(lambda self: bool(self.cancelled))
    @rule(data=st.data())
    def acknowledge_late(self, data: st.DataObject) -> None:
        action = data.draw(st.sampled_from(self.cancelled))
        self.cancelled.remove(action)
        owned, pending = self.m.owned, self.m.pending
        if pending == action:
            return  # indistinguishable from the live action: a driver would not do this
        if isinstance(action, Revoke):
            assert self.m.revocation_done(action.shards, self.now) == []
        else:
            assert self.m.assignment_done(action.shards, self.now) == []
        assert self.m.owned == owned and self.m.pending == pending

    @rule(go=rarely, permanent=st.booleans())
    def leave(self, go: bool, permanent: bool) -> None:
        if not go:
            return
        before = self.m.owned
        self.digest(self.m.leave(self.now, permanent=permanent), before)

    @rule(go=rarely, topics=st.sampled_from([("a",), ("a", "b"), ("b",)]))
    def resubscribe(self, go: bool, topics: tuple[str, ...]) -> None:
        if not go or self.m.state in (MemberState.LEFT, MemberState.FATAL):
            return
        self.m.update_subscription(topics=topics)

    @precondition(lambda self: self.m.state not in (MemberState.LEFT, MemberState.FATAL))
    @rule(go=rarely)
    def close(self, go: bool) -> None:
        if not go:
            return
        before = self.m.owned
        actions = self.m.close()
        self.digest(actions, before)
        if self.outstanding is not None:
            self.cancelled.append(self.outstanding)
            self.outstanding = None

    # -- invariants --

    @invariant()
    def owned_follows_acknowledgements(self) -> None:
        assert self.m.owned == self.driver_owned
        assert self.m.pending == self.outstanding

    @invariant()
    def terminal_states_stay(self) -> None:
        if self.terminal is not None:
            assert self.m.state is self.terminal
        elif self.m.state in (MemberState.LEFT, MemberState.FATAL):
            self.terminal = self.m.state
        if self.m.state in (MemberState.LEFT, MemberState.FATAL):
            assert self.m.next_heartbeat_at() is None and self.m.owned == EMPTY
            assert self.m.next_request(self.now + 10**9) is None

    @invariant()
    def states_are_consistent(self) -> None:
        m = self.m
        if m.state is MemberState.JOINING and (self.inflight is None or self.inflight.member_epoch != 0):
            self.expect_join = True  # it may not leave JOINING without sending a join
        if m.state is MemberState.RECONCILING:
            assert m.pending is not None
        if m.state is MemberState.STABLE:
            assert m.pending is None and m.owned == m.target
        if m.state is MemberState.ACKNOWLEDGING:
            # An Assign may be held back until an answer confirms the target (rule 4).
            assert m.pending is None and m.target is not None and m.owned <= m.target
            assert m.owned == m.target or self.inflight is not None or not self.confirmed
        if m.state is MemberState.JOINING:
            assert m.epoch == 0 and m.owned == EMPTY
        if isinstance(m.pending, Revoke):
            assert m.pending.shards <= m.owned
        if isinstance(m.pending, Assign):
            assert not (m.pending.shards & m.owned)


TestMemberMachine = MemberMachine.TestCase
TestMemberMachine.settings = settings(max_examples=100, stateful_step_count=60, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])

