"""The streams member state machine, with the coordinator's answers scripted: every transition and
error, then random answers checked against the member's invariants."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from regroup.protocol.errors import ErrorCode
from regroup.protocol.shard import Shard
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.member import (
    Fatal,
    LostTasks,
    MemberUsageError,
    StartTasks,
    StopTasks,
    StreamsAction,
    StreamsMemberState,
    StreamsMemberStateMachine,
    format_tasks,
)
from regroup.protocol.streams.messages import (
    READY,
    GroupStatus,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResponse,
    TaskOffsets,
)
from regroup.protocol.streams.topology import TaskId, Topology

G, M, P = "g", "m-1", "P1"
TOPOLOGY = Topology.of({"s": ["in"]})
T0, T1, T2, T3 = (TaskId("s", p) for p in range(4))
S = StreamsMemberState


def roles(active: tuple[TaskId, ...] = (), standby: tuple[TaskId, ...] = (),
          warmup: tuple[TaskId, ...] = ()) -> MemberTasks:
    return MemberTasks(frozenset(active), frozenset(standby), frozenset(warmup))


def A(*tasks: TaskId) -> MemberTasks:
    return roles(active=tasks)


def offsets(**reached: int) -> TaskOffsets:
    """``offsets(s_0=5)``: task s_0's copy reached offset 5 of partition 0 of ``in``."""
    out: dict[TaskId, Mapping[Shard, int]] = {}
    for name, at in reached.items():
        sub, p = name.rsplit("_", 1)
        out[TaskId(sub, int(p))] = {Shard("in", int(p)): at}
    return out


def ok(epoch: int, assignment: MemberTasks | None = None, *, interval: int = 3000,
       status: GroupStatus = READY) -> StreamsHeartbeatResponse:
    return StreamsHeartbeatResponse(ErrorCode.NONE, member_id=M, member_epoch=epoch,
                                    heartbeat_interval_ms=interval, assignment=assignment, status=status)


def err(code: ErrorCode, message: str = "") -> StreamsHeartbeatResponse:
    return StreamsHeartbeatResponse(code, message=message)


def member(**kw: object) -> StreamsMemberStateMachine:
    args: dict[str, object] = {"rebalance_timeout_ms": 60_000}
    args.update(kw)
    return StreamsMemberStateMachine(G, M, P, TOPOLOGY, **args)  # type: ignore[arg-type]


def is_full(m: StreamsMemberStateMachine, req: StreamsHeartbeatRequest) -> bool:
    return (req.rebalance_timeout_ms is not None and req.process_id == m.process_id
            and req.owned is not None and req.instance_id == m.instance_id
            and req.task_offsets == m.task_offsets)


def send(m: StreamsMemberStateMachine, now: int) -> StreamsHeartbeatRequest:
    req = m.next_request(now)
    assert req is not None, f"no request due at {now}: {m!r}"
    return req


def state(m: StreamsMemberStateMachine) -> StreamsMemberState:
    """The state, read through a call: mypy would keep an earlier ``assert m.state is ...``."""
    return m.state


def joined(owned: MemberTasks = NO_TASKS, epoch: int = 1, now: int = 0,
           **kw: object) -> StreamsMemberStateMachine:
    """A member that joined and started ``owned`` at ``epoch``, acknowledged to the coordinator."""
    m = member(**kw)
    send(m, now)
    actions = m.on_response(ok(epoch, owned), now)
    if owned != NO_TASKS:
        assert actions == [StartTasks(owned)]
        m.tasks_started(owned, now)
    # As in consumer groups, a join's "owns nothing" is not taken as a report: owned goes out again.
    send(m, now)
    assert m.on_response(ok(epoch), now) == []
    assert m.state is S.STABLE and m.owned == owned
    return m


# --------------------------------------------------------------------------------------------------
# Joining and requests


def test_starts_joining_with_a_full_join_carrying_the_topology_and_the_local_copies() -> None:
    m = member(instance_id="i-1")
    m.report_offsets(offsets(s_0=40, s_3=7), 0)
    assert m.state is S.JOINING and m.heartbeat_due(0) and m.next_heartbeat_at() == 0
    req = send(m, 10)
    assert req == StreamsHeartbeatRequest(G, M, 0, instance_id="i-1", process_id=P,
                                          rebalance_timeout_ms=60_000, topology=TOPOLOGY, owned=NO_TASKS,
                                          task_offsets=offsets(s_0=40, s_3=7))
    assert m.in_flight and m.next_request(10) is None and m.next_heartbeat_at() is None


def test_a_join_without_any_report_says_nothing_about_local_copies() -> None:
    req = send(member(), 0)
    assert req.task_offsets is None and req.topology == TOPOLOGY


@pytest.mark.parametrize(("kw", "error", "words"), [
    ({"group_id": ""}, ValueError, "group_id"),
    ({"member_id": ""}, ValueError, "UUID"),
    ({"process_id": ""}, ValueError, "process_id"),
    ({"topology": {"s": ["in"]}}, TypeError, "Topology"),
    ({"instance_id": ""}, ValueError, "instance_id"),
    ({"rebalance_timeout_ms": 0}, ValueError, "rebalance_timeout_ms"),
    ({"rebalance_timeout_ms": 1.5}, TypeError, "rebalance_timeout_ms"),
    ({"session_timeout_ms": 0}, ValueError, "session_timeout_ms"),
    ({"heartbeat_interval_ms": -1}, ValueError, "heartbeat_interval_ms"),
    ({"retry_backoff_ms": -1}, ValueError, "retry_backoff_ms"),
    ({"retry_backoff_max_ms": True}, TypeError, "retry_backoff_max_ms"),
    ({"unreleased_instance_backoff_ms": -5}, ValueError, "unreleased_instance_backoff_ms"),
])
def test_constructor_names_the_bad_argument(kw: dict[str, object], error: type[Exception],
                                            words: str) -> None:
    args: dict[str, object] = {"group_id": G, "member_id": M, "process_id": P, "topology": TOPOLOGY}
    args.update(kw)
    with pytest.raises(error, match=words):
        StreamsMemberStateMachine(**args)  # type: ignore[arg-type]


def test_join_response_starts_the_tasks_and_reports_them_held_while_they_start() -> None:
    m = member()
    send(m, 0)
    given = roles(active=(T0, T1), standby=(T2,))
    assert m.on_response(ok(3, given, interval=2000), 100) == [StartTasks(given)]
    assert m.state is S.RECONCILING and m.epoch == 3 and m.owned == NO_TASKS
    assert m.target == given and m.pending == StartTasks(given)
    assert m.heartbeat_due(100)  # the copies being started are held: say so now
    assert send(m, 100) == StreamsHeartbeatRequest(G, M, 3, owned=given)  # a delta
    assert m.on_response(ok(3), 120) == []
    assert m.state is S.RECONCILING
    assert m.tasks_started(given, 150) == []
    assert state(m) is S.STABLE and m.owned == given  # the coordinator already counts them held
    assert send(m, 150) == StreamsHeartbeatRequest(G, M, 3)


def test_join_response_without_assignment_means_nothing_yet() -> None:
    m = member()
    send(m, 0)
    assert m.on_response(ok(1), 0) == []
    assert m.state is S.STABLE and m.target == NO_TASKS


def test_only_the_join_carries_the_topology_even_after_a_failure() -> None:
    m = joined(A(T0))
    req = send(m, 3000)
    assert req == StreamsHeartbeatRequest(G, M, 1)
    m.request_failed(3000)
    req = send(m, 5000)
    assert is_full(m, req) and req.topology is None and req.owned == A(T0)


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
    m = joined(roles(active=(T0,), warmup=(T1,)), epoch=2)
    send(m, 3000)
    assert m.on_response(ok(2, None), 3000) == []
    send(m, 6000)
    assert m.on_response(ok(2, roles(active=(T0,), warmup=(T1,))), 6000) == []
    assert m.state is S.STABLE


def test_member_adopts_member_id_from_response() -> None:
    m = member()
    send(m, 0)
    m.on_response(StreamsHeartbeatResponse(ErrorCode.NONE, member_id="server-id", member_epoch=1), 0)
    assert m.member_id == "server-id"


def test_the_groups_status_says_why_nothing_is_assigned() -> None:
    m = member()
    assert m.group_status is None and m.status_message is None
    send(m, 0)
    m.on_response(ok(1, NO_TASKS, status=GroupStatus(False, ("topic 'in' does not exist",))), 0)
    assert m.status_message == "topic 'in' does not exist" and m.group_status is not None
    send(m, 3000)
    m.on_response(ok(2, A(T0)), 3000)
    assert m.status_message is None and m.group_status == READY


# --------------------------------------------------------------------------------------------------
# Reconciliation by role


def test_stop_first_then_start_after_acknowledgement() -> None:
    m = joined(roles(active=(T0, T1), standby=(T2,)), epoch=2)
    send(m, 3000)
    assert m.on_response(ok(3, roles(active=(T1, T3), warmup=(T0,))), 3000) == [
        StopTasks(roles(active=(T0,), standby=(T2,)))]
    assert m.epoch == 3 and m.state is S.RECONCILING
    assert m.tasks_stopped(roles(active=(T0,), standby=(T2,)), 3100) == [
        StartTasks(roles(active=(T3,), warmup=(T0,)))]
    assert m.owned == A(T1) and m.heartbeat_due(3100)
    req = send(m, 3100)
    assert req.owned == roles(active=(T1, T3), warmup=(T0,))  # the Start in progress counts as held
    m.on_response(ok(3), 3150)
    assert m.tasks_started(roles(active=(T3,), warmup=(T0,)), 3200) == []
    assert state(m) is S.STABLE and m.owned == roles(active=(T1, T3), warmup=(T0,))


def test_promotion_stops_the_warmup_then_starts_the_active() -> None:
    m = joined(roles(active=(T0,), warmup=(T1,)), epoch=4)
    send(m, 3000)
    # The previous owner has not released T1 yet: the coordinator answers with the warm-up as it is.
    assert m.on_response(ok(5, roles(active=(T0,), warmup=(T1,))), 3000) == []
    assert m.epoch == 5 and m.state is S.STABLE
    m.nudge(3500)  # released: the coordinator wakes us
    send(m, 3500)
    assert m.on_response(ok(5, A(T0, T1)), 3500) == [StopTasks(roles(warmup=(T1,)))]
    assert m.tasks_stopped(roles(warmup=(T1,)), 3600) == [StartTasks(A(T1))]
    assert send(m, 3600).owned == A(T0, T1)
    m.on_response(ok(5), 3600)
    assert m.tasks_started(A(T1), 3700) == [] and m.owned == A(T0, T1)


def test_demotion_stops_the_active_and_reports_it_gone_before_the_standby_starts() -> None:
    """The coordinator revokes an active that becomes a standby here: it first answers with what
    the member may keep, and grants the standby once the member no longer reports the task."""
    m = joined(A(T0, T1), epoch=2)
    send(m, 3000)
    assert m.on_response(ok(2, A(T0)), 3000) == [StopTasks(A(T1))]
    assert m.tasks_stopped(A(T1), 3050) == []
    assert m.state is S.ACKNOWLEDGING
    assert send(m, 3050) == StreamsHeartbeatRequest(G, M, 2, owned=A(T0))
    assert m.on_response(ok(3, roles(active=(T0,), standby=(T1,))), 3060) == [
        StartTasks(roles(standby=(T1,)))]


def test_owned_goes_out_while_it_differs_from_the_assignment() -> None:
    """Found by the property run against the coordinator: an assignment grew while a Start was out,
    the member kept saying "owned unchanged", which the coordinator reads as "holds everything it
    was given"; when the new active was then taken back, the coordinator waited for a revocation
    the member had nothing to do for, until the revocation timeout fenced it."""
    m = member()
    send(m, 0)
    assert m.on_response(ok(1, roles(standby=(T2,))), 0) == [StartTasks(roles(standby=(T2,)))]
    assert send(m, 0).owned == roles(standby=(T2,))
    m.on_response(ok(1), 0)
    send(m, 3000)
    assert m.on_response(ok(2, roles(active=(T0,), standby=(T2,))), 3000) == []  # the Start is still out
    assert send(m, 6000).owned == roles(standby=(T2,))  # not None: T0 is not started
    m.on_response(ok(2, roles(standby=(T2,))), 6000)  # T0 taken back
    assert m.tasks_started(roles(standby=(T2,)), 6100) == []
    assert m.state is S.STABLE
    assert send(m, 9100).owned is None  # holds its target: "unchanged" is true again


def test_target_change_during_a_stop_uses_the_latest_target() -> None:
    m = joined(A(T0, T1))
    send(m, 3000)
    assert m.on_response(ok(1, A(T1)), 3000) == [StopTasks(A(T0))]
    send(m, 6000)  # heartbeats go on while the driver stops
    assert m.on_response(ok(2, roles(active=(T2,), standby=(T0,))), 6000) == []
    assert m.tasks_stopped(A(T0), 6100) == [StopTasks(A(T1))]
    assert m.tasks_stopped(A(T1), 6200) == [StartTasks(roles(active=(T2,), standby=(T0,)))]


def test_target_change_during_a_start() -> None:
    m = member()
    send(m, 0)
    assert m.on_response(ok(1, A(T0, T1)), 0) == [StartTasks(A(T0, T1))]
    send(m, 3000)
    assert m.on_response(ok(2, A(T1)), 3000) == []
    assert m.tasks_started(A(T0, T1), 3100) == [StopTasks(A(T0))]


def test_a_start_waits_for_the_answer_to_the_request_in_flight() -> None:
    """Rule 4: the request in flight told the coordinator what we hold; a task of the target we had
    not started may be taken back in its answer (and given to another member), so the next Start
    waits for that answer."""
    m = joined(A(T0, T1), epoch=1)
    send(m, 3000)
    assert m.on_response(ok(2, A(T1, T2)), 3000) == [StopTasks(A(T0))]
    assert send(m, 6000).owned == A(T0, T1)  # in flight: T2 is not reported, free to be taken back
    assert m.tasks_stopped(A(T0), 6001) == []  # not StartTasks(A(T2)): the target may be stale
    assert state(m) is S.ACKNOWLEDGING and m.owned == A(T1) and m.pending is None
    assert m.on_response(ok(3, A(T1)), 6010) == []  # it was taken back: nothing to start
    assert state(m) is S.ACKNOWLEDGING and m.heartbeat_due(6010)  # owned changed: say so
    assert send(m, 6010).owned == A(T1)
    m.on_response(ok(3), 6020)
    assert state(m) is S.STABLE
    # Had the answer confirmed the target, the Start goes out with it.
    m = joined(A(T0, T1), epoch=1)
    send(m, 3000)
    m.on_response(ok(2, A(T1, T2)), 3000)
    send(m, 6000)
    assert m.tasks_stopped(A(T0), 6001) == []
    assert m.on_response(ok(2), 6010) == [StartTasks(A(T2))]


@pytest.mark.parametrize("role", ["active", "standby", "warmup"])
def test_a_start_waits_for_an_answer_after_a_lost_one(role: str) -> None:
    """Rule 4: a lost answer may have taken back tasks of the target the member had not started (an
    active given to another member, a copy to another member of this process): the member does not
    go on to start them before an answer tells it its assignment. (A slow driver finished one Start
    and the member started, from its stale target, an active another member was running.)"""
    def grown(*tasks: TaskId) -> MemberTasks:
        return plus(A(T0), roles(**{role: tasks}))

    m = member()
    send(m, 0)
    assert m.on_response(ok(1, A(T0)), 0) == [StartTasks(A(T0))]  # a slow driver: not acknowledged yet
    send(m, 3000)
    assert m.on_response(ok(2, grown(T1, T2)), 3000) == []  # one Start at a time: T1, T2 wait
    assert send(m, 6000).owned == A(T0)
    assert m.request_failed(6000) == []  # its answer (T2 taken back) is lost
    assert m.tasks_started(A(T0), 6050) == []  # not a Start of T1, T2: the target may be stale
    assert state(m) is S.ACKNOWLEDGING and m.heartbeat_due(6050)
    req = send(m, 6050)
    assert is_full(m, req) and req.owned == A(T0)
    assert m.on_response(ok(3, grown(T1)), 6060) == [StartTasks(roles(**{role: (T1,)}))]


def test_a_start_waits_for_an_answer_after_an_error() -> None:
    m = joined(A(T0), epoch=1)
    send(m, 3000)
    assert m.on_response(ok(2, A(T1)), 3000) == [StopTasks(A(T0))]
    send(m, 6000)
    assert m.on_response(err(ErrorCode.STALE_MEMBER_EPOCH), 6000) == []
    assert m.tasks_stopped(A(T0), 6050) == [] and state(m) is S.ACKNOWLEDGING
    req = send(m, 6050)  # at once, not after the backoff: owned changed
    assert is_full(m, req) and req.owned == NO_TASKS
    assert m.on_response(ok(2), 6060) == [StartTasks(A(T1))]


def test_a_stop_never_waits_for_an_answer() -> None:
    """Only a Start can act on a task the coordinator gave away meanwhile; stopping what the member
    runs is always safe, and the coordinator waits for it."""
    m = member()
    send(m, 0)
    assert m.on_response(ok(1, A(T0, T1)), 0) == [StartTasks(A(T0, T1))]
    send(m, 3000)
    assert m.on_response(ok(2, A(T1)), 3000) == []
    send(m, 6000)  # in flight
    assert m.tasks_started(A(T0, T1), 6001) == [StopTasks(A(T0))]
    assert m.request_failed(6001) == []
    assert m.tasks_stopped(A(T0), 6002) == []  # the answer was lost, but nothing is left to start
    assert state(m) is S.ACKNOWLEDGING and m.owned == A(T1) and m.heartbeat_due(6002)


def test_an_assignment_with_a_task_in_two_roles_is_fatal() -> None:
    m = joined(A(T0))
    send(m, 3000)
    actions = m.on_response(ok(2, roles(active=(T0, T1), standby=(T1,))), 3000)
    assert [type(a) for a in actions] == [LostTasks, Fatal]
    fatal = actions[1]
    assert isinstance(fatal, Fatal) and fatal.error is ErrorCode.INVALID_ASSIGNMENT and "s_1" in fatal.message
    assert m.state is S.FATAL


def test_acknowledgement_mismatch_is_a_driver_bug() -> None:
    m = member()
    send(m, 0)
    m.on_response(ok(1, A(T0, T1)), 0)
    with pytest.raises(MemberUsageError, match="StartTasks"):
        m.tasks_started(A(T0), 0)
    with pytest.raises(MemberUsageError):
        m.tasks_started(roles(standby=(T0, T1)), 0)  # right tasks, wrong role
    with pytest.raises(MemberUsageError):
        m.tasks_stopped(A(T0, T1), 0)
    with pytest.raises(TypeError, match="MemberTasks"):
        m.tasks_started({T0, T1}, 0)  # type: ignore[arg-type]
    with pytest.raises(MemberUsageError):
        m.on_response(ok(1), 0)  # nothing in flight
    with pytest.raises(MemberUsageError):
        m.request_failed(0)
    assert m.tasks_started(MemberTasks(active={T0, T1}), 0) == []  # type: ignore[arg-type]


def test_format_tasks() -> None:
    assert format_tasks(roles(active=(T1, T0), warmup=(T2,))) == "active s_0, s_1; warm-up s_2"
    assert format_tasks(NO_TASKS) == "nothing"


# --------------------------------------------------------------------------------------------------
# Task offsets


def test_changed_offsets_ride_the_next_heartbeat_without_making_it_due() -> None:
    m = joined(A(T0))
    m.report_offsets(offsets(s_0=10), 100)
    assert not m.heartbeat_due(2999)  # no heartbeat per record
    assert send(m, 3000) == StreamsHeartbeatRequest(G, M, 1, task_offsets=offsets(s_0=10))
    m.on_response(ok(1), 3000)
    m.report_offsets(offsets(s_0=10), 3100)  # the same again
    assert send(m, 6000).task_offsets is None
    m.on_response(ok(1), 6000)
    m.report_offsets(offsets(s_0=12), 6100)
    assert send(m, 9000).task_offsets == offsets(s_0=12)


def test_an_urgent_report_goes_out_at_once() -> None:
    m = joined(roles(warmup=(T1,)))
    m.report_offsets(offsets(s_1=99), 500, urgent=True)
    assert m.heartbeat_due(500)
    assert send(m, 500).task_offsets == offsets(s_1=99)
    m.on_response(ok(1), 510)
    assert m.next_heartbeat_at() == 3510


def test_an_urgent_report_while_in_flight_goes_right_after_the_answer() -> None:
    m = joined(roles(warmup=(T1,)))
    send(m, 3000)
    m.report_offsets(offsets(s_1=99), 3001, urgent=True)
    assert m.next_heartbeat_at() is None
    m.on_response(ok(1), 3010)
    assert m.next_heartbeat_at() == 3010 and send(m, 3010).task_offsets == offsets(s_1=99)


def test_offsets_go_out_whole_after_a_failure_and_after_an_error() -> None:
    m = joined(A(T0))
    m.report_offsets(offsets(s_0=10), 0)
    send(m, 3000)
    m.on_response(ok(1), 3000)
    send(m, 6000)
    m.request_failed(6000)
    assert send(m, 6100).task_offsets == offsets(s_0=10)  # unchanged, but the answer may be lost
    m.on_response(err(ErrorCode.STALE_MEMBER_EPOCH), 6100)
    assert send(m, m.next_heartbeat_at() or 0).task_offsets == offsets(s_0=10)


def test_the_report_is_a_copy() -> None:
    m = member()
    report = {T0: {Shard("in", 0): 5}}
    m.report_offsets(report, 0)
    report[T0][Shard("in", 0)] = 6
    report[T1] = {}
    assert send(m, 0).task_offsets == offsets(s_0=5)


@pytest.mark.parametrize(("report", "error", "words"), [
    ([(T0, {})], TypeError, "mapping"),
    ({("s", 0): {}}, TypeError, "not a TaskId"),
    ({T0: 5}, TypeError, "s_0"),
    ({T0: {("in", 0): 5}}, TypeError, "not a Shard"),
    ({T0: {Shard("in", 0): -1}}, ValueError, "non-negative"),
    ({T0: {Shard("in", 0): True}}, ValueError, "non-negative"),
])
def test_a_bad_report_names_what_is_wrong(report: object, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        member().report_offsets(report, 0)  # type: ignore[arg-type]


def test_the_local_copies_survive_a_lost_membership_and_go_with_the_rejoin() -> None:
    m = joined(A(T0))
    m.report_offsets(offsets(s_0=10, s_1=4), 0)
    send(m, 3000)
    m.on_response(err(ErrorCode.UNKNOWN_MEMBER_ID), 3000)
    req = send(m, 3000)
    assert req.member_epoch == 0 and req.task_offsets == offsets(s_0=10, s_1=4)


def test_offsets_a_join_carried_are_not_sent_again_and_reports_after_the_end_are_ignored() -> None:
    m = member()
    m.report_offsets(offsets(s_0=1), 0)
    assert send(m, 0).task_offsets == offsets(s_0=1)
    m.on_response(ok(1), 0)
    assert send(m, 0).task_offsets is None  # owned goes again after a join; the offsets need not
    m.on_response(ok(1), 0)
    m.close()
    m.report_offsets(offsets(s_0=2), 3001)  # ignored: nobody left to tell
    assert m.task_offsets == offsets(s_0=1)


# --------------------------------------------------------------------------------------------------
# Losing the membership


@pytest.mark.parametrize(
    "code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND])
def test_fencing_errors_lose_everything_and_rejoin_with_the_same_id(code: ErrorCode) -> None:
    m = joined(roles(active=(T0,), standby=(T1,)), epoch=5, instance_id="i")
    send(m, 3000)
    [lost] = m.on_response(err(code, "go away"), 3000)
    assert isinstance(lost, LostTasks) and lost.tasks == roles(active=(T0,), standby=(T1,))
    assert code.value in lost.reason
    assert m.state is S.JOINING and m.epoch == 0 and m.owned == NO_TASKS and m.target is None
    req = send(m, 3000)  # at once
    assert req.member_id == M and req.member_epoch == 0 and req.owned == NO_TASKS and is_full(m, req)
    assert req.topology == TOPOLOGY


def test_fencing_with_a_start_outstanding_loses_it_too_and_ignores_the_late_ack() -> None:
    m = joined(A(T0))
    send(m, 3000)
    assert m.on_response(ok(2, roles(active=(T0,), warmup=(T1,))), 3000) == [StartTasks(roles(warmup=(T1,)))]
    send(m, 6000)
    assert m.on_response(err(ErrorCode.FENCED_MEMBER_EPOCH), 6000) == [
        LostTasks(roles(active=(T0,), warmup=(T1,)), "FENCED_MEMBER_EPOCH")]
    assert m.tasks_started(roles(warmup=(T1,)), 6010) == []  # stale, ignored
    assert m.owned == NO_TASKS and m.pending is None


def test_fenced_while_nothing_owned_emits_nothing() -> None:
    m = joined()
    send(m, 3000)
    assert m.on_response(err(ErrorCode.UNKNOWN_MEMBER_ID), 3000) == []
    assert m.state is S.JOINING


def test_a_refused_join_is_retried_with_backoff() -> None:
    m = member(retry_backoff_ms=100)
    send(m, 0)
    assert m.on_response(err(ErrorCode.GROUP_ID_NOT_FOUND), 0) == []
    assert m.next_heartbeat_at() == 100 and m.next_request(50) is None
    assert send(m, 100).member_epoch == 0


def test_unreleased_instance_id_retries_the_join_after_backoff() -> None:
    m = member(instance_id="i", unreleased_instance_backoff_ms=2500)
    send(m, 0)
    assert m.on_response(err(ErrorCode.UNRELEASED_INSTANCE_ID, "held by m-0"), 0) == []
    assert m.state is S.JOINING and m.next_heartbeat_at() == 2500
    assert m.next_request(2499) is None
    req = send(m, 2500)
    assert req.member_epoch == 0 and req.instance_id == "i" and is_full(m, req)


def test_fenced_instance_id_is_fatal_and_loses_the_tasks() -> None:
    m = joined(A(T0), instance_id="i")
    send(m, 3000)
    actions = m.on_response(err(ErrorCode.FENCED_INSTANCE_ID, "instance i belongs to m-9"), 3000)
    assert actions == [LostTasks(A(T0), "fatal error FENCED_INSTANCE_ID: instance i belongs to m-9"),
                       Fatal(ErrorCode.FENCED_INSTANCE_ID, "instance i belongs to m-9")]
    assert m.state is S.FATAL and m.owned == NO_TASKS
    assert m.next_request(10**9) is None and m.next_heartbeat_at() is None and m.tick(10**9) == []
    assert m.session_deadline() is None and m.leave(10**9) == [] and m.close() == []


@pytest.mark.parametrize("code", [ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_MAX_SIZE_REACHED])
def test_configuration_errors_are_fatal_with_the_coordinators_message(code: ErrorCode) -> None:
    m = member()
    send(m, 0)
    assert m.on_response(err(code, "fix your config"), 0) == [Fatal(code, "fix your config")]
    assert m.state is S.FATAL and m.next_request(1) is None


def test_unexpected_error_code_is_fatal() -> None:
    m = member()
    send(m, 0)
    [fatal] = m.on_response(err(ErrorCode.NOT_OWNED), 0)
    assert isinstance(fatal, Fatal) and fatal.error is ErrorCode.NOT_OWNED and "unexpected" in fatal.message


def test_stale_member_epoch_is_retried_with_a_full_request() -> None:
    m = joined(A(T0), epoch=2)
    send(m, 3000)
    assert m.on_response(err(ErrorCode.STALE_MEMBER_EPOCH), 3000) == []
    req = send(m, 3100)
    assert is_full(m, req) and req.member_epoch == 2 and m.owned == A(T0)


# --------------------------------------------------------------------------------------------------
# Transport failures, the session, nudges


def test_request_failure_backs_off_exponentially_and_resends_everything() -> None:
    m = joined(A(T0, T1), epoch=7, retry_backoff_ms=100, retry_backoff_max_ms=350)
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
    assert is_full(m, req) and req.member_epoch == 7 and req.owned == A(T0, T1)
    m.on_response(ok(8), now)
    assert m.state is S.STABLE and m.epoch == 8
    send(m, now + 3000)
    m.request_failed(now + 3000)
    assert m.next_heartbeat_at() == now + 3100  # success reset the backoff


def test_session_expiry_loses_the_tasks_and_rejoins() -> None:
    m = joined(A(T0), now=1000, session_timeout_ms=10_000)
    assert m.session_deadline() == 11_000
    assert m.tick(10_999) == []
    send(m, 4000)  # never answered in time
    [lost] = m.tick(11_000)
    assert isinstance(lost, LostTasks) and lost.tasks == A(T0) and "session timeout 10000 ms" in lost.reason
    assert m.state is S.JOINING and m.epoch == 0 and m.owned == NO_TASKS
    # The old request is still in flight: its late answer is void, then the join goes.
    assert m.next_request(11_000) is None
    assert m.on_response(ok(1, A(T0, T1)), 11_500) == []
    assert m.epoch == 0 and m.target is None
    req = send(m, 11_500)
    assert req.member_epoch == 0 and req.owned == NO_TASKS and is_full(m, req)


def test_a_late_acknowledgement_after_the_session_ran_out_loses_instead_of_starting_more() -> None:
    """The consumer member's regression, kept here from the start: a slow driver acknowledged long
    after its last answer and was handed the next step of a target the coordinator had since given
    to another member. An acknowledgement checks the session like `tick` does."""
    m = joined(A(T0), now=0, session_timeout_ms=10_000)
    send(m, 3000)
    assert m.on_response(ok(2, A(T1, T2)), 3000) == [StopTasks(A(T0))]
    # The session (sent at 3000) ended at 13_000: nothing held any more, so nothing to drop, and
    # no Start of T1, T2 -- the member rejoins instead.
    assert m.tasks_stopped(A(T0), 13_000) == []
    assert m.state is S.JOINING and m.owned == NO_TASKS and m.pending is None
    # Before the deadline the same acknowledgement continues the reconciliation.
    m = joined(A(T0), now=0, session_timeout_ms=10_000)
    send(m, 3000)
    m.on_response(ok(2, A(T1, T2)), 3000)
    assert m.tasks_stopped(A(T0), 12_999) == [StartTasks(A(T1, T2))]
    [lost] = m.tasks_started(A(T1, T2), 13_000)
    assert isinstance(lost, LostTasks) and lost.tasks == A(T1, T2) and "session timeout" in lost.reason


def test_session_is_measured_from_the_send_time_of_the_last_success() -> None:
    m = joined(session_timeout_ms=10_000)
    send(m, 3000)
    m.on_response(ok(1), 9000)
    assert m.session_deadline() == 13_000


def test_repeated_failures_end_in_lost() -> None:
    m = joined(A(T0), session_timeout_ms=10_000, retry_backoff_ms=1000, retry_backoff_max_ms=1000)
    now, sent_at, lost = 3000, [], list[StreamsAction]()  # the last successful request was sent at 0
    while not lost:
        send(m, now)
        sent_at.append(now)
        lost = m.request_failed(now)
        now = m.next_heartbeat_at() or now
    assert lost == [LostTasks(A(T0), lost[0].reason)] and isinstance(lost[0], LostTasks)  # type: ignore[union-attr]
    assert sent_at == list(range(3000, 10_001, 1000))  # the failure at 10000 ends the session
    assert m.state is S.JOINING and m.epoch == 0 and m.heartbeat_due(10_000)


def test_a_nudge_makes_the_heartbeat_due_now_or_right_after_the_answer_in_flight() -> None:
    m = joined()
    assert not m.heartbeat_due(1000)
    m.nudge(1000)
    assert m.heartbeat_due(1000)
    send(m, 1000)
    m.nudge(1001)  # the answer on its way may predate the news: ask again right after it
    m.on_response(ok(1), 1002)
    assert m.next_heartbeat_at() == 1002
    send(m, 1002)
    m.on_response(ok(1), 1003)
    assert m.next_heartbeat_at() == 4003  # the nudge is spent
    m.close()
    m.nudge(5000)
    assert m.next_heartbeat_at() is None


# --------------------------------------------------------------------------------------------------
# Leaving


def test_dynamic_leave_stops_everything_then_sends_minus_one() -> None:
    m = joined(roles(active=(T0,), standby=(T1,)), epoch=3)
    assert m.leave(100) == [StopTasks(roles(active=(T0,), standby=(T1,)))]
    assert m.state is S.PREPARE_LEAVING and m.leave(100) == []  # idempotent
    assert m.tasks_stopped(roles(active=(T0,), standby=(T1,)), 200) == []
    assert state(m) is S.LEAVING and m.owned == NO_TASKS
    assert send(m, 200) == StreamsHeartbeatRequest(G, M, -1)
    assert m.on_response(ok(-1), 210) == []
    assert state(m) is S.LEFT and m.next_request(10**9) is None and m.next_heartbeat_at() is None


def test_static_leave_is_temporary_unless_permanent() -> None:
    m = joined(A(T0), instance_id="i")
    assert m.leave(0) == [StopTasks(A(T0))]
    m.tasks_stopped(A(T0), 0)
    assert send(m, 0) == StreamsHeartbeatRequest(G, M, -2, instance_id="i")
    m.on_response(err(ErrorCode.UNKNOWN_MEMBER_ID), 1)  # any answer ends it
    assert m.state is S.LEFT

    m = joined(A(T0), instance_id="i")
    m.leave(0, permanent=True)
    m.tasks_stopped(A(T0), 0)
    assert send(m, 0).member_epoch == -1


def test_leave_waits_for_an_outstanding_start() -> None:
    m = member()
    send(m, 0)
    m.on_response(ok(1, A(T0)), 0)
    assert m.leave(10) == []
    assert m.tasks_started(A(T0), 20) == [StopTasks(A(T0))]
    assert m.tasks_stopped(A(T0), 30) == []
    assert send(m, 30).member_epoch == -1


def test_heartbeats_go_on_while_stopping_for_leave_and_take_nothing_new() -> None:
    m = joined(A(T0))
    m.leave(1000)
    send(m, 3000)
    assert m.on_response(ok(2, A(T0, T1)), 3000) == []
    assert m.target == A(T0, T1) and m.state is S.PREPARE_LEAVING and m.next_heartbeat_at() == 6000


def test_fenced_while_preparing_to_leave_ends_in_left() -> None:
    m = joined(A(T0))
    m.leave(0)
    send(m, 3000)
    assert m.on_response(err(ErrorCode.FENCED_MEMBER_EPOCH), 3000) == [
        LostTasks(A(T0), "FENCED_MEMBER_EPOCH")]
    assert m.state is S.LEFT and m.tasks_stopped(A(T0), 3001) == []


def test_leave_before_joining_is_immediate() -> None:
    m = member()
    assert m.leave(0) == [] and m.state is S.LEFT and m.next_request(0) is None


def test_leave_while_the_join_is_in_flight_sends_a_leave_after_the_answer() -> None:
    m = member()
    send(m, 0)
    assert m.leave(1) == [] and m.state is S.LEAVING
    assert m.on_response(ok(1, A(T0)), 2) == []  # takes nothing
    assert send(m, 2).member_epoch == -1
    m.request_failed(3)
    assert state(m) is S.LEFT


def test_session_expiry_while_leaving_ends_in_left() -> None:
    m = joined(A(T0), session_timeout_ms=5000)
    m.leave(0)
    [lost] = m.tick(5000)
    assert isinstance(lost, LostTasks) and lost.tasks == A(T0) and "5000 ms" in lost.reason
    assert m.state is S.LEFT and m.next_request(5000) is None


def test_close_abandons_without_a_request() -> None:
    m = joined(A(T0))
    send(m, 3000)
    assert m.close() == [LostTasks(A(T0), "member closed without leaving the group")]
    assert m.state is S.LEFT and m.next_request(10**6) is None
    assert m.on_response(ok(1), 3001) == []  # the answer to the abandoned request is void
    assert m.close() == []


# --------------------------------------------------------------------------------------------------
# Random answers against the member's invariants

UNIVERSE = [TaskId("s", p) for p in range(5)]
REJOIN = [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND]
FATAL = [ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_MAX_SIZE_REACHED]
# Recoverable errors far more often than fatal ones, so that runs go on long enough to be interesting.
ERRORS = REJOIN * 6 + [ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.STALE_MEMBER_EPOCH] * 3 + FATAL
#: Each task in at most one role (an assignment the coordinator could give).
assignments = st.lists(st.sampled_from(["active", "standby", "warm-up", None]),
                       min_size=len(UNIVERSE), max_size=len(UNIVERSE)).map(
    lambda picks: MemberTasks(*(frozenset(t for t, r in zip(UNIVERSE, picks, strict=True) if r == role)
                                for role in ("active", "standby", "warm-up"))))
rarely = st.sampled_from([False] * 7 + [True])


def _all(tasks: MemberTasks) -> frozenset[TaskId]:
    return tasks.active | tasks.standby | tasks.warmup


def plus(a: MemberTasks, b: MemberTasks) -> MemberTasks:
    return MemberTasks(a.active | b.active, a.standby | b.standby, a.warmup | b.warmup)


def minus(a: MemberTasks, b: MemberTasks) -> MemberTasks:
    return MemberTasks(a.active - b.active, a.standby - b.standby, a.warmup - b.warmup)


class StreamsMemberMachine(RuleBasedStateMachine):
    """A random coordinator and a random (but correct) driver around one member."""

    def __init__(self) -> None:
        super().__init__()
        self.m = StreamsMemberStateMachine(G, M, P, TOPOLOGY, instance_id="i", session_timeout_ms=20_000,
                                           heartbeat_interval_ms=3000)
        self.now = 0
        self.coord_epoch = 0
        self.inflight: StreamsHeartbeatRequest | None = None
        self.running = NO_TASKS  # what the driver runs, by acknowledged actions only
        self.outstanding: StopTasks | StartTasks | None = None
        self.expect_full = True
        #: The last request was answered successfully (rule 4: only then may a Start be emitted).
        self.confirmed = False

    def digest(self, actions: list[StreamsAction]) -> None:
        kinds = [type(a) for a in actions]
        assert not (StopTasks in kinds and StartTasks in kinds), "a Stop and a Start emitted together"
        for a in actions:
            if isinstance(a, LostTasks):
                assert a.tasks != NO_TASKS and self.m.owned == NO_TASKS and self.m.pending is None
                self.outstanding = None
                self.running = NO_TASKS
                self.expect_full = True
            elif isinstance(a, StopTasks | StartTasks):
                assert self.outstanding is None, "two actions outstanding at once"
                mine = a.tasks
                if isinstance(a, StopTasks):
                    assert mine.active <= self.running.active and mine.standby <= self.running.standby
                    assert mine.warmup <= self.running.warmup
                else:
                    # Stop first: nothing runs in a role the target does not give it, and a task
                    # never starts in a second role.
                    target = self.m.target
                    assert target is not None and self.m.owned == self.running
                    for role, ts in self.running.roles():
                        assert ts <= dict(target.roles())[role], f"Start before Stop of {role}"
                    assert _all(mine).isdisjoint(_all(self.running))
                    assert self.inflight is None and self.confirmed, (
                        "Start from a target the coordinator has not confirmed (a request in flight, "
                        "or its last answer lost)")
                self.outstanding = a

    @rule(dt=st.integers(0, 25_000))
    def advance(self, dt: int) -> None:
        self.now += dt
        self.digest(self.m.tick(self.now))

    @rule()
    def send(self) -> None:
        at = self.m.next_heartbeat_at()
        if at is not None and at > self.now:
            self.advance(at - self.now)
        req = self.m.next_request(self.now)
        if req is None:
            return
        assert self.inflight is None, "two requests in flight"
        self.inflight = req
        if req.member_epoch >= 0:
            if self.expect_full:
                assert is_full(self.m, req), req
            if req.member_epoch == 0:
                assert req.owned == NO_TASKS and req.topology == TOPOLOGY and is_full(self.m, req)
            else:
                assert req.member_epoch == self.m.epoch and req.topology is None
                pending = self.m.pending
                held = plus(self.running, pending.tasks) if isinstance(pending, StartTasks) else self.running
                # An absent owned means "holds everything it was given" to the coordinator.
                assert req.owned is not None or held == self.m.target, (req, held, self.m.target)
            self.expect_full = False

    @precondition(lambda self: self.inflight is not None)
    @rule(assignment=st.none() | assignments, bump=st.booleans())
    def respond_ok(self, assignment: MemberTasks | None, bump: bool) -> None:
        assert self.inflight is not None
        if self.inflight.member_epoch == 0 or bump:
            self.coord_epoch += 1
        self.inflight = None
        self.confirmed = True
        self.digest(self.m.on_response(ok(self.coord_epoch, assignment), self.now))

    @precondition(lambda self: self.inflight is not None)
    @rule(code=st.sampled_from(ERRORS))
    def respond_error(self, code: ErrorCode) -> None:
        self.inflight = None
        self.expect_full = True
        self.confirmed = False
        self.digest(self.m.on_response(err(code, "boom"), self.now))

    @precondition(lambda self: self.inflight is not None)
    @rule()
    def fail(self) -> None:
        self.inflight = None
        self.expect_full = True
        self.confirmed = False
        self.digest(self.m.request_failed(self.now))

    @precondition(lambda self: self.outstanding is not None)
    @rule()
    def acknowledge(self) -> None:
        action = self.outstanding
        assert action is not None and self.m.pending == action
        self.outstanding = None
        if isinstance(action, StopTasks):
            self.running = minus(self.running, action.tasks)
            actions = self.m.tasks_stopped(action.tasks, self.now)
        else:
            self.running = plus(self.running, action.tasks)
            actions = self.m.tasks_started(action.tasks, self.now)
        if not any(isinstance(a, LostTasks) for a in actions):
            assert self.m.owned == self.running
        self.digest(actions)

    @rule(at=st.integers(0, 100), urgent=st.booleans())
    def report(self, at: int, urgent: bool) -> None:
        self.m.report_offsets({t: {Shard("in", t.partition): at} for t in _all(self.running)}, self.now,
                              urgent=urgent)
        if urgent and self.m.state not in (S.LEFT, S.FATAL) and self.inflight is None:
            assert self.m.heartbeat_due(self.now)

    @rule(go=rarely, permanent=st.booleans())
    def leave(self, go: bool, permanent: bool) -> None:
        if go:
            self.digest(self.m.leave(self.now, permanent=permanent))

    @rule(go=rarely)
    def close(self, go: bool) -> None:
        if go:
            self.digest(self.m.close())

    @invariant()
    def owned_follows_acknowledgements(self) -> None:
        assert self.m.owned == self.running
        assert self.m.pending == self.outstanding

    @invariant()
    def states_are_consistent(self) -> None:
        m = self.m
        if m.state is S.RECONCILING:
            assert m.pending is not None
        if m.state is S.STABLE:
            assert m.pending is None and m.owned == m.target
        if m.state is S.ACKNOWLEDGING:
            # A Start may be held back until an answer confirms the target (rule 4).
            assert m.pending is None and m.target is not None and minus(m.owned, m.target) == NO_TASKS
            assert m.owned == m.target or self.inflight is not None or not self.confirmed
        if m.state is S.JOINING:
            assert m.epoch == 0 and m.owned == NO_TASKS
        if m.state in (S.LEFT, S.FATAL):
            assert m.owned == NO_TASKS and m.next_heartbeat_at() is None
        # A task runs in one role at a time.
        a, s, w = m.owned.active, m.owned.standby, m.owned.warmup
        assert not (a & s) and not (a & w) and not (s & w)


TestStreamsMemberMachine = StreamsMemberMachine.TestCase
TestStreamsMemberMachine.settings = settings(max_examples=100, stateful_step_count=60, deadline=None,
                                             derandomize=True, database=None,
                                             suppress_health_check=[HealthCheck.too_slow])
