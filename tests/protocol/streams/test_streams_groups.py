"""StreamsGroups, one rule at a time: joins, readiness, standbys, promotion by event, failover,
static restarts, fencing, and replay."""

from __future__ import annotations

from regroup.protocol.causes import Fence, GroupEpochBumped, MemberJoined, WarmupCaughtUp
from regroup.protocol.errors import ErrorCode
from regroup.protocol.records import MemberStatus
from regroup.protocol.streams.assignment import NO_TASKS, MemberTasks
from regroup.protocol.streams.coordinator import StreamsConfig, StreamsGroups
from regroup.protocol.streams.messages import StreamsHeartbeatRequest
from regroup.protocol.streams.state import StreamsGroupState, replay
from regroup.protocol.streams.topology import Topology
from regroup.protocol.topics import TopicMetadata
from tests.protocol.streams.fake_members import GROUP, REBALANCE_MS, TOPOLOGY, Deployment, source, task

ALL4 = frozenset(task(i) for i in range(4))
LIMIT = 10_000


def bumps(d: Deployment) -> list[GroupEpochBumped]:
    return [e for o in d.outcomes for e in o.epoch_events if isinstance(e, GroupEpochBumped)]


def test_first_member_gets_every_task_active() -> None:
    d = Deployment()
    a = d.join("a", "P1")
    assert a.epoch == 1 and a.owned == MemberTasks(active=ALL4)
    assert a.last is not None and a.last.status.ready
    assert bumps(d)[0].causes[0] == MemberJoined("a")
    assert d.group().state is StreamsGroupState.STABLE


def test_a_join_must_say_its_process_and_the_first_its_topology() -> None:
    sg = StreamsGroups(topics=TopicMetadata({"in": 4}))
    no_topology = sg.heartbeat(StreamsHeartbeatRequest(GROUP, "a", 0, process_id="P1",
                                                       rebalance_timeout_ms=1000), 0)
    assert no_topology.response.error is ErrorCode.INVALID_REQUEST and not no_topology.records
    no_process = sg.heartbeat(StreamsHeartbeatRequest(GROUP, "a", 0, rebalance_timeout_ms=1000,
                                                      topology=TOPOLOGY), 0)
    assert no_process.response.error is ErrorCode.INVALID_REQUEST
    assert "process id" in no_process.response.message


def test_not_ready_topology_assigns_nothing_until_the_topics_exist() -> None:
    d = Deployment(topics=TopicMetadata({"other": 1}))
    a = d.join("a", "P1")
    assert a.last is not None and a.last.error is ErrorCode.NONE
    assert not a.last.status.ready and "'in'" in a.last.status.message
    assert a.owned == NO_TASKS and d.group().state is StreamsGroupState.NOT_READY
    out = d.sg.update_topics(TopicMetadata({"in": 4, "other": 1}), d.now)
    assert ("g", "a") in out.wake
    d.heartbeat("a")
    assert a.owned == MemberTasks(active=ALL4) and a.last.status.ready


def test_partitions_added_to_the_source_topic_add_tasks() -> None:
    d = Deployment(topics=TopicMetadata({"in": 4}))
    a = d.join("a", "P1")
    assert a.owned.active == ALL4
    d.sg.update_topics(TopicMetadata({"in": 6}), d.now)
    d.heartbeat("a")
    assert a.owned.active == frozenset(task(i) for i in range(6))


def test_partitions_added_to_one_side_of_a_join_revoke_everything_and_say_why() -> None:
    join = Topology.of({"j": ["left", "right"]})
    sg = StreamsGroups(topics=TopicMetadata({"left": 2, "right": 2}))
    first = sg.heartbeat(StreamsHeartbeatRequest(GROUP, "a", 0, process_id="P1", rebalance_timeout_ms=1000,
                                                 topology=join), 0).response
    assert first.assignment is not None and len(first.assignment.active) == 2
    sg.update_topics(TopicMetadata({"left": 3, "right": 2}), 1)
    resp = sg.heartbeat(StreamsHeartbeatRequest(GROUP, "a", first.member_epoch, owned=first.assignment),
                        2).response
    assert resp.assignment == NO_TASKS  # revoke everything: joining mismatched partitions is wrong
    assert not resp.status.ready and "'left' has 3" in resp.status.message
    assert sg.groups[GROUP].state is StreamsGroupState.NOT_READY


def test_standbys_sit_on_another_process_than_the_active() -> None:
    d = Deployment(config=StreamsConfig(standby_replicas=1))
    d.join("a", "P1")
    d.join("b", "P2")
    d.settle()
    for t in ALL4:
        roles = {(mid, role) for mid in "ab" for role, ts in d.target(mid).roles() if t in ts}
        assert {r for _, r in roles} == {"active", "standby"}, roles
        assert len({m for m, _ in roles}) == 2


def test_caught_up_warmup_is_promoted_through_revoke_release_assign_with_nudges() -> None:
    d = Deployment(config=StreamsConfig(acceptable_recovery_lag=LIMIT))
    a = d.join("a", "P1")
    d.commit("a", 50_000)
    d.heartbeat("a")
    b = d.join("b", "P2")
    d.settle(restore=False)
    warm = b.owned.warmup
    assert len(warm) == 2 and not b.owned.active and a.owned.active == ALL4
    # b restores, but not enough: no bump, however often it says so
    epoch = d.group().epoch
    d.restore("b", 50_000 - LIMIT - 1)
    d.heartbeat("b")
    d.heartbeat("b")
    assert d.group().epoch == epoch
    # one record more: caught up -> the epoch moves at once, with the cause
    d.restore("b", 1)
    d.heartbeat("b")
    out = d.outcomes[-1]
    assert d.group().epoch == epoch + 1
    causes = [c for e in out.epoch_events if isinstance(e, GroupEpochBumped) for c in e.causes]
    assert {c.task for c in causes if isinstance(c, WarmupCaughtUp)} == {str(t) for t in warm}
    assert (GROUP, "a") in out.wake  # the owner must give them up
    assert d.target("b").active == warm
    # b waits for a: still a warm-up, not active, meanwhile
    assert b.owned.active == frozenset() and b.owned.warmup == warm
    assert d.group().current["b"].status is MemberStatus.UNRELEASED
    # a revokes ...
    d.heartbeat("a")
    assert d.group().current["a"].status is MemberStatus.UNREVOKED
    assert a.owned.active == ALL4 - warm
    assert d.actives()[sorted(warm)[0]] == "a"  # pending revocation still counts as held
    # ... and releases on its next heartbeat, which nudges b
    d.heartbeat("a")
    assert (GROUP, "b") in d.outcomes[-1].wake
    d.heartbeat("b")
    assert b.owned.active == warm and not b.owned.warmup


def test_a_zombie_report_does_not_promote() -> None:
    d = Deployment()
    d.join("a", "P1")
    d.commit("a", 50_000)
    d.heartbeat("a")
    b = d.join("b", "P2")
    d.settle(restore=False)
    stale = b.epoch - 1
    epoch = d.group().epoch
    req = StreamsHeartbeatRequest(GROUP, "b", stale, owned=MemberTasks(active=ALL4),
                                  task_offsets={t: {source(t): 50_000} for t in ALL4})
    out = d.sg.heartbeat(req, d.now)
    assert out.response.error is ErrorCode.FENCED_MEMBER_EPOCH
    assert not out.records and d.group().epoch == epoch
    assert d.sg.describe_group(GROUP).members[1].lags.get(sorted(b.owned.warmup)[0]) != 0


def test_a_dead_members_tasks_go_to_its_caught_up_standbys() -> None:
    d = Deployment(config=StreamsConfig(standby_replicas=1))
    for mid, pid in (("a", "P1"), ("b", "P2"), ("c", "P3")):
        d.join(mid, pid)
    d.settle()
    for mid in "abc":
        d.commit(mid, 100_000)
    d.settle()
    standby_of = {t: m for m in "bc" for t in d.target(m).standby}
    lost = d.target("a").active
    assert lost
    del d.members["a"]  # crashes: no leave; the others keep heartbeating
    for _ in range(10):
        d.now += 5_000
        d.heartbeat("b")
        d.heartbeat("c")
        fenced = d.expire()
        if fenced.fences:
            break
    assert [f.member_id for f in fenced.fences] == ["a"]
    for t in lost:
        assert t in d.target(standby_of[t]).active, (t, standby_of[t])
    d.settle()
    assert set(d.actives()) == ALL4


def test_static_restart_keeps_tasks_without_an_epoch_bump() -> None:
    d = Deployment()
    d.join("a1", "P1", instance_id="i1")
    d.join("b", "P2")
    d.settle()
    tasks = d.target("a1")
    epoch = d.group().epoch
    d.leave("a1", static=True)
    assert d.group().current["a1"].epoch == -2
    d.join("a2", "P1", instance_id="i1")  # the restarted process, a new member id
    assert d.group().epoch == epoch
    assert d.target("a2") == tasks and d.members["a2"].owned == tasks
    assert "a1" not in d.group().members


def test_a_static_member_stepping_out_while_revoking_releases_those_tasks_at_once() -> None:
    """Issue 14: a static member that leaves temporarily (-2) while it must give tasks up stopped
    them before leaving, so the members waiting for them get them now, not at its session timeout."""
    d = Deployment(config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=LIMIT))
    d.join("a1", "P1", instance_id="i1")
    d.commit("a1", 50_000)
    d.heartbeat("a1")
    b = d.join("b", "P2")
    d.settle(restore=False)
    d.restore("b")
    d.heartbeat("b")  # b's copies caught up: the target moves half the tasks to b
    moving = d.target("b").active
    assert moving and not b.owned.active
    d.heartbeat("a1")  # told to revoke...
    assert d.group().current["a1"].status is MemberStatus.UNREVOKED
    d.heartbeat("b")
    assert d.group().current["b"].status is MemberStatus.UNRELEASED
    d.leave("a1", static=True)  # ...and steps out instead (its tasks stopped and committed)
    away = d.group().current["a1"]
    assert away.epoch == -2 and away.pending_revocation == NO_TASKS
    assert (GROUP, "b") in d.outcomes[-1].wake  # nudged: the tasks it waits for are free
    d.heartbeat("b")
    assert b.owned.active == moving
    d.join("a2", "P1", instance_id="i1")  # back: what it kept, nothing it released
    assert d.members["a2"].owned.active.isdisjoint(moving)
    d.settle()
    assert set(d.actives()) == ALL4


def test_a_fenced_member_is_told_to_rejoin_and_its_old_epoch_is_refused() -> None:
    d = Deployment()
    a = d.join("a", "P1")
    d.join("b", "P2")
    d.settle()
    # a misses its session; b keeps going
    d.now += d.sg.limits.session_timeout_ms - 1
    d.heartbeat("b")
    d.now += 2
    d.expire()
    assert "a" not in d.group().members
    old_epoch = a.epoch
    resp = d.heartbeat("a")
    assert resp.error is ErrorCode.UNKNOWN_MEMBER_ID and a.epoch == 0 and a.owned == NO_TASKS
    # an epoch newer than the coordinator's is fenced too
    req = StreamsHeartbeatRequest(GROUP, "b", d.members["b"].epoch + 5, owned=NO_TASKS)
    assert d.sg.heartbeat(req, d.now).response.error is ErrorCode.FENCED_MEMBER_EPOCH
    assert old_epoch > 0


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    d = Deployment()
    d.join("a", "P1")
    d.commit("a", 5)
    d.heartbeat("a")
    d.disks["P2"] = dict.fromkeys(ALL4, 0)  # an old copy, 5 records behind: b can take over at once
    d.join("b", "P2")
    d.heartbeat("b")
    d.heartbeat("a")
    assert d.group().current["a"].status is MemberStatus.UNREVOKED
    # a keeps heartbeating but never stops reporting what it must give up
    stuck = StreamsHeartbeatRequest(GROUP, "a", d.members["a"].epoch, owned=MemberTasks(active=ALL4))
    fences: list[Fence] = []
    while not fences and d.now <= REBALANCE_MS:
        d.now += 5_000
        d.heartbeat("b")
        assert d.sg.heartbeat(stuck, d.now).response.error is ErrorCode.NONE
        fences.extend(d.expire().fences)
    assert [(f.member_id, f.reason.value) for f in fences] == [("a", "revocation timeout")]


def test_replay_and_snapshot_rebuild_the_same_groups() -> None:
    d = Deployment(config=StreamsConfig(standby_replicas=1))
    d.join("a", "P1", instance_id="i1")
    d.commit("a", 30_000)
    d.join("b", "P2")
    d.join("c", "P3")
    d.settle()
    d.leave("c")
    d.heartbeat("a")
    assert replay(d.records) == d.sg.groups  # type: ignore[arg-type]
    assert replay(d.sg.snapshot()) == d.sg.groups
    before = d.sg.groups
    d.restart_coordinator(from_snapshot=True)
    assert d.sg.groups == before
    d.restart_coordinator()
    assert d.sg.groups == before
    d.settle()  # members re-report; nothing is lost


def test_describe_shows_roles_lags_and_warmup_progress() -> None:
    d = Deployment()
    d.join("a", "P1")
    d.commit("a", 50_000)
    d.heartbeat("a")
    d.join("b", "P2")
    d.settle(restore=False)
    d.restore("b", 1_000)
    d.heartbeat("b")
    desc = d.sg.describe_group(GROUP)
    a, b = desc.members
    assert (a.process_id, b.process_id) == ("P1", "P2")
    assert a.assigned.active and all(a.lags[t] == 0 for t in a.assigned.active)
    assert [(w.lag, w.caught_up) for w in b.warmups] == [(49_000, False)] * 2


def test_a_lost_response_is_retried_at_the_previous_epoch_only_owning_what_was_given() -> None:
    d = Deployment()
    a = d.join("a", "P1")
    d.join("b", "P2")
    d.disks["P2"] = dict.fromkeys(ALL4, 0)
    d.settle()
    cur = d.group().current["a"]
    assert cur.previous_epoch < cur.epoch
    safe = StreamsHeartbeatRequest(GROUP, "a", cur.previous_epoch, owned=cur.assigned)
    assert d.sg.heartbeat(safe, d.now).response.error is ErrorCode.NONE
    unsafe = StreamsHeartbeatRequest(GROUP, "a", cur.previous_epoch, owned=MemberTasks(active=ALL4))
    assert a.owned != MemberTasks(active=ALL4)
    assert d.sg.heartbeat(unsafe, d.now).response.error is ErrorCode.FENCED_MEMBER_EPOCH


def test_a_static_member_back_on_another_process_inherits_nothing() -> None:
    d = Deployment()
    d.join("a1", "P1", instance_id="i1")
    d.join("b", "P2")
    d.settle()
    epoch = d.group().epoch
    d.leave("a1", static=True)
    d.join("a2", "P3", instance_id="i1")  # its state directory is not on P3
    bumped = bumps(d)[-1]
    assert d.group().epoch == epoch + 1
    assert [type(c).__name__ for c in bumped.causes] == ["StaticTakeOver"]
    assert "a1" not in d.group().members
    d.settle()
    assert set(d.actives()) == ALL4


def test_lagging_copies_that_catch_up_take_their_share_at_once() -> None:
    d = Deployment(config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=LIMIT))
    a = d.join("a", "P1")
    d.commit("a", 50_000)
    d.heartbeat("a")
    b = d.join("b", "P2")
    d.settle(restore=False)
    # a copy of every task on P2: two warm-ups (the budget), standbys for the rest
    assert not b.owned.active and len(b.owned.warmup) == 2 and b.owned.standby | b.owned.warmup == ALL4
    epoch = d.group().epoch
    d.restore("b")
    d.heartbeat("b")
    assert d.group().epoch == epoch + 1
    assert any(isinstance(c, WarmupCaughtUp) for c in bumps(d)[-1].causes)
    d.settle()
    assert len(a.owned.active) == len(b.owned.active) == 2
    assert a.owned.standby == b.owned.active and b.owned.standby == a.owned.active


def test_a_standby_seen_lagging_that_catches_up_bumps_like_a_warmup() -> None:
    d = Deployment(config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=LIMIT, max_warmups=0))
    a = d.join("a", "P1")
    d.commit("a", 50_000)
    d.heartbeat("a")
    b = d.join("b", "P2")
    d.settle(restore=False)
    assert b.owned == MemberTasks(standby=ALL4) and a.owned.active == ALL4
    d.restore("b", 1_000)
    d.heartbeat("b")  # reported, still behind: no news
    epoch = d.group().epoch
    d.restore("b")
    d.heartbeat("b")
    assert d.group().epoch == epoch + 1
    assert any(isinstance(c, WarmupCaughtUp) for c in bumps(d)[-1].causes)
    d.settle()
    assert len(a.owned.active) == len(b.owned.active) == 2


def test_a_standby_hovering_around_the_acceptable_lag_bumps_only_when_the_target_would_change() -> None:
    """A standby whose lag crosses the acceptable recovery lag back and forth (its active commits in
    bursts) changes nothing the assignor would do: no epoch bump at each crossing."""
    d = Deployment(config=StreamsConfig(standby_replicas=1, acceptable_recovery_lag=LIMIT))
    a, b = d.join("a", "P1"), d.join("b", "P2")
    d.settle()
    assert len(a.owned.active) == len(b.owned.active) == 2 and b.owned.standby == a.owned.active
    book = d.sg.lags[GROUP]
    for crossing in range(3):
        d.commit("a", 2 * LIMIT)  # a burst: b's standbys of a's actives fall behind...
        d.heartbeat("b")
        # ...and the last target computation saw them there (as it would have, had one run now)
        book.seen.update({("P2", t): 2 * LIMIT for t in b.owned.standby})
        epoch, target = d.group().epoch, d.target("b")
        d.restore("b")
        d.heartbeat("b")  # caught up again
        assert d.group().epoch == epoch and d.target("b") == target, f"crossing {crossing}"
        assert all(book.seen[("P2", t)] <= LIMIT for t in b.owned.standby)


def test_a_warm_up_promoted_in_a_lost_answer_resends_its_previous_epoch_without_being_fenced() -> None:
    """The resend rule judges actives as actives and copies by any role: a warm-up still reported
    as a warm-up, that the lost answer made active, runs nothing it was not given."""
    d = Deployment()
    d.join("a", "P1")
    d.join("b", "P2")
    d.settle()
    cur = d.group().current["b"]
    promoted = MemberTasks(active=cur.assigned.active)
    assert promoted.active and cur.previous_epoch < cur.epoch
    as_copy = StreamsHeartbeatRequest(GROUP, "b", cur.previous_epoch,
                                      owned=MemberTasks(warmup=promoted.active))
    assert d.sg.heartbeat(as_copy, d.now).response.error is ErrorCode.NONE
    ungiven = frozenset(ALL4 - cur.assigned.active - cur.assigned.standby - cur.assigned.warmup)
    stray = StreamsHeartbeatRequest(GROUP, "b", cur.previous_epoch, owned=MemberTasks(standby=ungiven))
    assert ungiven and d.sg.heartbeat(stray, d.now).response.error is ErrorCode.FENCED_MEMBER_EPOCH
