"""Failover in seconds (`regroup.protocol.failover`): a broken connection shortens a dynamic member's
session to the grace, on the coordinator's side; a member cut off from the coordinator for the grace
stops working, on the member's side. Rule by rule, then the invariants with Hypothesis."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from regroup.protocol.causes import Fence, FenceReason, GroupEpochBumped, MemberFenced
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.errors import ErrorCode
from regroup.protocol.failover import Contact, grace_deadline, member_grace, restart_deadline
from regroup.protocol.messages import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.shard import EMPTY, ShardSet
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.topics import TopicMetadata
from tests.protocol.harness import Harness, fenced
from tests.protocol.streams.fake_members import Deployment

SESSION, GRACE, INTERVAL = 10_000, 1_000, 2_000


def config(grace: int = GRACE) -> CoordinatorConfig:
    return CoordinatorConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=INTERVAL,
                             failover_grace_ms=grace)


def settled(h: Harness, *members: str) -> dict[str, tuple[int, ShardSet]]:
    """Heartbeat until nothing moves; each member's (epoch, owned), reporting what it was given."""
    state = {m: (0, EMPTY) for m in members}
    for m in members:
        r = h.ok(h.join(m, instance_id="i-" + m) if m.startswith("static") else h.join(m))
        state[m] = (r.member_epoch, r.assignment or EMPTY)
    for _ in range(4):
        for m in members:
            epoch, owned = state[m]
            r = h.ok(h.hb(m, epoch, owned=owned))
            state[m] = (r.member_epoch, r.assignment if r.assignment is not None else owned)
    return state


# ------------------------------------------------------------------------------ coordinator side
class TestCoordinatorRule:
    def test_a_dynamic_members_broken_connection_fences_it_at_the_end_of_the_grace(self) -> None:
        h = Harness(config=config())
        st_ = settled(h, "a", "b")
        epoch = h.group().epoch
        assert h.coord.connection_lost("g", "b", h.now).records == ()  # nothing durable
        assert h.coord.next_deadline() == h.now + GRACE
        assert fenced(h.advance(GRACE - 1)) == []
        out = h.advance(1)
        assert out.fences == (Fence("g", "b", FenceReason.CONNECTION_LOST, EMPTY),)
        [bump] = [e for e in out.epoch_events if isinstance(e, GroupEpochBumped)]
        assert MemberFenced("b", FenceReason.CONNECTION_LOST) in bump.causes
        assert "b" not in h.group().members and h.group().epoch == epoch + 1
        # a is told to take b's shards
        r = h.ok(h.hb("a", st_["a"][0], owned=st_["a"][1]))
        assert r.assignment is not None and len(r.assignment) == 6

    def test_a_heartbeat_within_the_grace_keeps_everything(self) -> None:
        h = Harness(config=config())
        st_ = settled(h, "a", "b")
        h.coord.connection_lost("g", "b", h.now)
        h.advance(GRACE - 10)
        h.ok(h.hb("b", *st_["b"]))  # the stream broke, but the member is alive
        assert fenced(h.advance(GRACE)) == []
        assert "b" in h.group().members
        # the normal session still applies, from b's heartbeat
        out = h.advance(SESSION)
        assert ("g", "b") in fenced(out)
        assert {f.reason for f in out.fences} == {FenceReason.SESSION_TIMEOUT}

    def test_a_restored_connection_goes_back_to_the_deadline_of_the_last_heartbeat(self) -> None:
        h = Harness(config=config())
        settled(h, "a", "b")
        last_heartbeat = h.now
        h.advance(500)
        h.coord.connection_lost("g", "b", h.now)
        h.advance(300)
        assert h.coord.connection_restored("g", "b", h.now).records == ()
        assert fenced(h.advance(GRACE)) == []
        sessions = h.coord.consumer.timers
        assert sessions.session_deadline("g", "b") == last_heartbeat + SESSION

    def test_a_static_member_waits_for_its_session_timeout(self) -> None:
        h = Harness(config=config())
        settled(h, "a", "static-b")
        last_heartbeat = h.now
        h.coord.connection_lost("g", "static-b", h.now)
        assert fenced(h.advance(GRACE * 5)) == []
        assert "static-b" in h.group().members
        out = h.advance(last_heartbeat + SESSION - h.now)
        assert out.fences and out.fences[0].reason is FenceReason.SESSION_TIMEOUT

    def test_grace_zero_turns_it_off(self) -> None:
        h = Harness(config=config(grace=0))
        settled(h, "a", "b")
        h.coord.connection_lost("g", "b", h.now)
        assert fenced(h.advance(SESSION - 1)) == []

    def test_a_loss_never_lengthens_a_session(self) -> None:
        h = Harness(config=config())
        settled(h, "a", "b")
        h.advance(SESSION - 300)  # b's session ends in 300 ms
        h.ok(h.hb("a", h.group().current["a"].epoch))
        h.coord.connection_lost("g", "b", h.now)
        out = h.advance(300)
        assert out.fences == (Fence("g", "b", FenceReason.SESSION_TIMEOUT, EMPTY),)

    def test_unknown_members_and_groups_are_ignored(self) -> None:
        h = Harness(config=config())
        settled(h, "a")
        for gid, mid in (("g", "ghost"), ("nope", "a")):
            assert h.coord.connection_lost(gid, mid, h.now).records == ()
            assert h.coord.connection_restored(gid, mid, h.now).records == ()
        assert h.coord.next_deadline() == h.now + SESSION

    def test_answers_say_the_grace_that_applies(self) -> None:
        h = Harness(config=config())
        assert h.ok(h.join("a")).failover_grace_ms == GRACE
        assert h.ok(h.join("b", instance_id="i-b")).failover_grace_ms == 0
        assert h.hb("ghost", 3).failover_grace_ms == 0  # error answers say nothing

    def test_a_restarted_coordinator_gives_every_member_a_full_session_until_it_serves(self) -> None:
        h = Harness(config=config())
        settled(h, "a", "b")
        h.coord.connection_lost("g", "b", h.now)
        coord = Coordinator.recover(h.log, h.now, config(), topics=TopicMetadata(h.topics))
        assert coord.next_deadline() == h.now + SESSION
        assert coord.expire(h.now + GRACE).fences == ()

    def test_once_serving_a_dynamic_member_that_does_not_show_up_is_fenced_after_interval_plus_grace(
            self) -> None:
        h = Harness(config=config())
        settled(h, "a", "b", "static-c")
        recovered_at = h.now + 3_000  # the coordinator was down 3 s
        coord = Coordinator.recover(h.log, recovered_at, config(), topics=TopicMetadata(h.topics))
        serving_at = recovered_at + 500  # topics read, port bound
        assert coord.serving(serving_at).records == ()  # nothing durable
        assert coord.next_deadline() == serving_at + INTERVAL + GRACE
        # a heartbeats (its interval came), b never shows up (it died while the coordinator was down)
        epoch_a = coord.groups["g"].current["a"].epoch
        owned_a = coord.groups["g"].current["a"].assigned
        req = HeartbeatRequest("g", "a", epoch_a, owned=owned_a)
        r = coord.heartbeat(req, serving_at + INTERVAL).response
        assert r.error is ErrorCode.NONE
        assert coord.expire(serving_at + INTERVAL + GRACE - 1).fences == ()
        out = coord.expire(serving_at + INTERVAL + GRACE)
        assert [(f.member_id, f.reason) for f in out.fences] == [("b", FenceReason.CONNECTION_LOST)]
        # the static member waits for its session timeout, from the recovery, for a restart of its own
        assert coord.expire(recovered_at + SESSION - 1).fences == ()
        assert [f.member_id for f in coord.expire(recovered_at + SESSION).fences] == ["static-c"]

    def test_once_serving_a_member_that_reopens_its_stream_keeps_its_session(self) -> None:
        h = Harness(config=config())
        settled(h, "a", "b")
        coord = Coordinator.recover(h.log, h.now, config(), topics=TopicMetadata(h.topics))
        coord.serving(h.now)
        coord.connection_restored("g", "b", h.now + 200)
        coord.connection_restored("g", "a", h.now + 300)
        assert coord.expire(h.now + SESSION - 1).fences == ()
        assert {f.reason for f in coord.expire(h.now + SESSION).fences} == {FenceReason.SESSION_TIMEOUT}

    def test_once_serving_nobody_is_fenced_early_with_the_rule_off(self) -> None:
        h = Harness(config=config(grace=0))
        settled(h, "a", "b")
        coord = Coordinator.recover(h.log, h.now, config(grace=0), topics=TopicMetadata(h.topics))
        coord.serving(h.now)
        assert coord.next_deadline() == h.now + SESSION

    def test_the_rule(self) -> None:
        assert restart_deadline(1_000, 3_000, None, 50_000, 10_000) == 14_000
        assert restart_deadline(1_000, 3_000, "i", 50_000, 10_000) is None
        assert restart_deadline(0, 3_000, None, 50_000, 10_000) is None
        assert restart_deadline(1_000, 3_000, None, 12_000, 10_000) is None  # the session ends first
        assert grace_deadline(1_000, None, 50_000, 10_000) == 11_000
        assert grace_deadline(1_000, "i", 50_000, 10_000) is None
        assert grace_deadline(0, None, 50_000, 10_000) is None
        assert grace_deadline(1_000, None, 10_500, 10_000) is None
        assert grace_deadline(1_000, None, None, 10_000) is None
        assert member_grace(1_000, None) == 1_000 and member_grace(1_000, "i") == 0
        with pytest.raises(ValueError, match="failover_grace_ms"):
            CoordinatorConfig(failover_grace_ms=-1)


class TestStreamsGroups:
    def test_the_same_rule_for_streams_members(self) -> None:
        d = Deployment(config=StreamsConfig())
        d.sg.limits = config()
        d.join("a", "P1")
        d.join("b", "P2")
        d.join("s", "P3", instance_id="i-s")
        d.settle()
        assert d.members["b"].last is not None and d.members["b"].last.failover_grace_ms == GRACE
        assert d.members["s"].last is not None and d.members["s"].last.failover_grace_ms == 0
        d.sg.connection_lost("g", "b", d.now)
        d.sg.connection_lost("g", "s", d.now)
        d.now += GRACE
        out = d.expire()
        assert [(f.member_id, f.reason) for f in out.fences] == [("b", FenceReason.CONNECTION_LOST)]
        assert "s" in d.group().members

    def test_a_streams_heartbeat_or_reconnect_within_the_grace_keeps_the_member(self) -> None:
        d = Deployment()
        d.sg.limits = config()
        d.join("a", "P1")
        d.join("b", "P2")
        d.settle()
        d.sg.connection_lost("g", "a", d.now)
        d.sg.connection_lost("g", "b", d.now)
        d.now += GRACE // 2
        d.heartbeat("a")
        d.sg.connection_restored("g", "b", d.now)
        d.now += GRACE
        assert d.expire().fences == ()

    def test_after_a_restart_a_streams_member_that_does_not_show_up_is_fenced(self) -> None:
        d = Deployment()
        d.sg.limits = config()
        d.join("a", "P1")
        d.join("b", "P2")
        d.join("s", "P3", instance_id="i-s")
        d.settle()
        d.restart_coordinator()
        d.sg.limits = config()
        assert d.sg.serving(d.now).records == ()
        d.now += INTERVAL
        d.heartbeat("a")
        d.now += GRACE
        out = d.expire()
        assert [(f.member_id, f.reason) for f in out.fences] == [("b", FenceReason.CONNECTION_LOST)]
        assert {"a", "s"} <= set(d.group().members)


# ------------------------------------------------------------------------------ member side
class TestContact:
    def test_never_cut_off_before_its_first_answer_or_with_no_grace(self) -> None:
        c = Contact()
        assert not c.cut_off(100 * GRACE) and c.heartbeat_due_at() is None and c.cut_off_at() is None
        c.answered(0, GRACE, INTERVAL)
        c.stream_opened(0)
        c.stream_closed(10)
        assert c.cut_off(GRACE)
        c.answered(20, 0, INTERVAL)  # a static member, or the rule is off (rule 10)
        assert not c.cut_off(100 * GRACE) and c.heartbeat_due_at() is None and c.cut_off_at() is None

    def test_with_no_stream_cut_off_an_interval_plus_the_grace_after_the_last_answered_send(self) -> None:
        """Rule 12: a restarted coordinator could fence the member from then on."""
        c = Contact()
        c.answered(100, GRACE, INTERVAL)
        moment = 100 + INTERVAL + GRACE
        assert c.cut_off_at() == moment
        assert not c.cut_off(moment - 1) and c.cut_off(moment) and c.cut_off(moment + 10 * SESSION)
        assert c.heartbeat_due_at() == 100 + INTERVAL  # the answer gets the whole grace (rule 9)
        c.asked(100 + INTERVAL)
        assert c.heartbeat_due_at() is None  # once: retries follow the member's backoff
        c.answered(100 + INTERVAL, GRACE, INTERVAL)  # answered within the grace: never paused
        assert not c.cut_off(moment) and c.cut_off_at() == moment + INTERVAL
        assert c.heartbeat_due_at() == 100 + 2 * INTERVAL

    def test_a_slow_answer_costs_a_pause_until_it_arrives(self) -> None:
        c = Contact()
        c.answered(0, GRACE, INTERVAL)
        sent = INTERVAL  # the next heartbeat, on time; its answer takes longer than the grace
        assert not c.cut_off(sent + GRACE - 1) and c.cut_off(sent + GRACE)
        c.answered(sent, GRACE, INTERVAL)  # arrives at sent + GRACE + 5, say
        assert not c.cut_off(sent + GRACE + 5)

    def test_without_an_interval_the_member_is_cut_off_sooner_not_later(self) -> None:
        c = Contact()
        c.answered(100, GRACE)  # an answer that does not say its interval
        assert c.cut_off_at() == 100 + GRACE and c.heartbeat_due_at() == 100 + GRACE // 2

    def test_a_stream_open_since_before_the_moment_keeps_the_member_working(self) -> None:
        c = Contact()
        c.answered(0, GRACE, INTERVAL)
        c.stream_opened(GRACE - 1)  # registered by the coordinator: it restored us (rule 3)
        assert not c.cut_off(10 * SESSION) and c.cut_off_at() is None and c.heartbeat_due_at() is None
        c.stream_closed(10 * SESSION)  # from now on rule 7 applies, with its earlier moment
        assert c.cut_off(10 * SESSION)
        d = Contact()
        d.answered(0, GRACE, INTERVAL)
        d.stream_opened(INTERVAL + GRACE)  # opened once we may have been fenced: still cut off
        assert d.cut_off(INTERVAL + GRACE) and d.heartbeat_due_at() == INTERVAL + GRACE

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, INTERVAL), st.integers(0, GRACE - 1)), max_size=30))
    def test_a_member_that_heartbeats_on_time_and_is_answered_within_the_grace_is_never_cut_off(
            self, beats: list[tuple[int, int]]) -> None:
        """Under load: each heartbeat sent when it is due (at the latest, or earlier), each answer
        slower by anything short of the grace — never a pause."""
        c = Contact()
        c.answered(0, GRACE, INTERVAL)
        for early, answer_ms in beats:
            due = c.heartbeat_due_at()
            assert due is not None
            sent = due - early
            assert not c.cut_off(sent + answer_ms)
            c.asked(sent)
            c.answered(sent, GRACE, INTERVAL)

    def test_an_open_stream_keeps_the_member_working_between_heartbeats(self) -> None:
        c = Contact()
        c.stream_opened(0)
        c.answered(0, GRACE)
        assert not c.cut_off(INTERVAL * 3) and c.heartbeat_due_at() is None

    def test_cut_off_from_grace_after_the_last_answered_heartbeat_until_the_next_answer(self) -> None:
        c = Contact()
        c.stream_opened(0)
        c.answered(100, GRACE)
        c.stream_closed(300)
        assert not c.cut_off(100 + GRACE - 1) and c.cut_off(100 + GRACE)
        assert c.heartbeat_due_at() == 100 + GRACE // 2  # rule 9: heartbeat to stay in contact
        c.asked(100 + GRACE // 2)
        assert c.heartbeat_due_at() is None  # once: retries follow the member's backoff
        c.answered(1_500, GRACE)
        assert not c.cut_off(1_500 + GRACE - 1) and c.heartbeat_due_at() == 1_500 + GRACE // 2

    def test_a_stream_the_coordinator_ended_itself_is_no_broken_connection(self) -> None:
        c = Contact()
        c.stream_opened(0)
        c.answered(0, GRACE, INTERVAL)
        c.stream_closed(100, ended_by_coordinator=True)  # it shut down: it reports no loss
        # not cut off at the grace (rule 7), only when a restart could fence it (rule 12)
        assert not c.cut_off(INTERVAL + GRACE - 1) and c.heartbeat_due_at() == INTERVAL
        assert c.cut_off(INTERVAL + GRACE)
        c.answered(9 * GRACE, GRACE, INTERVAL)  # the restarted coordinator answered
        c.stream_opened(10 * GRACE)  # the new coordinator's stream breaks: the rule applies again
        c.stream_closed(10 * GRACE + 1)
        assert c.cut_off(10 * GRACE + 1)
        c.stream_opened(10 * GRACE + 2)  # reopened late: still cut off...
        c.stream_closed(10 * GRACE + 3, ended_by_coordinator=True)
        assert c.cut_off(10 * GRACE + 3)  # ...and a clean end does not lift it: we may be fenced

    def test_a_stream_reopened_in_time_ends_it_one_reopened_late_does_not(self) -> None:
        c = Contact()
        c.stream_opened(0)
        c.answered(0, GRACE, INTERVAL)
        c.stream_closed(100)
        c.stream_opened(GRACE - 1)  # the coordinator restored us before it could fence us
        assert not c.cut_off(10 * GRACE)
        c.stream_closed(10 * GRACE)
        c.stream_opened(10 * GRACE + 1)  # too late: we may be fenced already
        assert c.cut_off(10 * GRACE + 1)
        assert c.heartbeat_due_at() == 10 * GRACE + 1  # make sure of it at once
        c.answered(10 * GRACE + 2, GRACE)
        assert not c.cut_off(100 * GRACE)
        c.stream_opened(100 * GRACE)
        c.answered(100 * GRACE, GRACE, INTERVAL)
        assert not c.cut_off(100 * SESSION)  # a stream open in time: nothing to fear


# ------------------------------------------------------------------------------ invariants
@dataclass
class World:
    """One coordinator, a dynamic member "d" with its `Contact`, a static member "s", and "a" that
    always heartbeats; timers fire exactly at their deadlines, as the service's timer does. The
    coordinator may restart (from its records; rule 4 once it serves)."""

    h: Harness = field(default_factory=lambda: Harness(config=config()))
    state: dict[str, tuple[int, ShardSet]] = field(default_factory=dict)
    contact: Contact = field(default_factory=Contact)
    open: bool = False
    last_ok: dict[str, int] = field(default_factory=dict)
    #: (time, member, reason) of every fence.
    fences: list[tuple[int, str, FenceReason]] = field(default_factory=list)
    #: d was fenced for its connection and has not heard so yet: it must not be working.
    d_unaware: bool = False

    def __post_init__(self) -> None:
        self.state = settled(self.h, "a", "d", "static-s")
        self.last_ok = dict.fromkeys(self.state, self.h.now)
        self.contact.answered(self.h.now, GRACE, INTERVAL)
        self.stream(True)

    def advance_to(self, t: int) -> None:
        while (due := self.h.coord.next_deadline()) is not None and due <= t:
            self.h.now = max(self.h.now, due)
            out = self.h.keep(self.h.coord.expire(self.h.now))
            for f in out.fences:
                self.fences.append((self.h.now, f.member_id, f.reason))
                if f.member_id == "d" and f.reason is FenceReason.CONNECTION_LOST:
                    self.d_unaware = True
            self.check()
        self.h.now = t
        self.check()

    def check(self) -> None:
        assert not self.d_unaware or self.contact.cut_off(self.h.now), (self.h.now, self.fences)

    def heartbeat(self, member: str, processing_ms: int = 0, answer_ms: int = 0) -> None:
        sent = self.h.now
        self.advance_to(sent + processing_ms)
        epoch, owned = self.state[member]
        if member in self.h.group().members:
            r = self.h.hb(member, epoch, owned=owned)
        else:
            static = member.startswith("static")
            r = self.h.join(member, instance_id="i-" + member) if static else self.h.join(member)
        self.advance_to(self.h.now + answer_ms)
        if member == "d":
            self.d_unaware = False  # an answer: it carries on, or it learns it was fenced (Lost)
        if r.error is ErrorCode.NONE:
            self.state[member] = (r.member_epoch, r.assignment if r.assignment is not None else owned)
            self.last_ok[member] = sent
            if member == "d":
                self.contact.answered(sent, r.failover_grace_ms, r.heartbeat_interval_ms)

    def stream(self, up: bool) -> None:
        """Member d's stream opens or breaks; both sides see it at the same moment."""
        if up and not self.open:
            self.h.coord.connection_restored("g", "d", self.h.now)
            self.contact.stream_opened(self.h.now)
        elif not up and self.open:
            self.h.coord.connection_lost("g", "d", self.h.now)
            self.contact.stream_closed(self.h.now)
        self.open = up
        self.check()

    def ended_by_coordinator(self) -> None:
        """The coordinator ends d's stream itself (as at its shutdown): it reports no loss."""
        if self.open:
            self.contact.stream_closed(self.h.now, ended_by_coordinator=True)
            self.open = False
        self.check()

    def static_lost(self) -> None:
        self.h.coord.connection_lost("g", "static-s", self.h.now)

    def restart(self, clean: bool, down_ms: int, serving_ms: int) -> None:
        """The coordinator stops — cleanly (it ends d's stream itself, rule 11) or by crashing (d
        sees its stream break; nobody reports a loss) — is down ``down_ms`` (no timer fires), recovers
        from its records and serves ``serving_ms`` later (rule 4). "a" heartbeats as soon as it can."""
        if self.open:
            self.contact.stream_closed(self.h.now, ended_by_coordinator=clean)
            self.open = False
        self.check()
        self.h.now += down_ms
        self.check()
        topics = TopicMetadata(self.h.topics)
        self.h.coord = Coordinator.recover(self.h.log, self.h.now, config(), topics=topics)
        self.h.now += serving_ms
        self.check()
        self.h.keep(self.h.coord.serving(self.h.now))
        self.heartbeat("a")


ops = st.lists(st.one_of(
    st.tuples(st.just("wait"), st.integers(1, 3 * GRACE)),
    st.tuples(st.just("heartbeat"), st.sampled_from(["d", "static-s"]), st.integers(0, 300),
              st.integers(0, 300)),
    st.tuples(st.just("stream"), st.booleans()),
    st.tuples(st.just("ended_by_coordinator")),
    st.tuples(st.just("static_lost")),
    st.tuples(st.just("restart"), st.booleans(), st.integers(0, 2 * SESSION), st.integers(0, 300)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
@example([("stream", False), ("wait", GRACE), ("stream", True), ("ended_by_coordinator",)])
@example([("restart", True, 0, 0), ("wait", 3 * GRACE), ("wait", 3 * GRACE)])  # d never heartbeats
@example([("restart", False, INTERVAL, 0), ("heartbeat", "d", 0, 0), ("ended_by_coordinator",),
          ("restart", True, 0, 0), ("wait", 3 * GRACE), ("wait", 3 * GRACE)])
def test_a_member_fenced_for_its_broken_connection_had_stopped_working_and_static_ones_never_are(
        script: list[tuple[object, ...]]) -> None:
    """Safety of the two sides together: from the moment the coordinator fences d for its broken
    connection or after a restart (rules 1 and 4) until d hears of it, d's own rules (7 and 12)
    have it cut off (it works on nothing the coordinator gave away), whatever its stream and the
    coordinator did meanwhile. A static member is never fenced for its connection (only at its
    session timeout)."""
    w = World()
    for op in script:
        if op[0] == "wait":
            w.advance_to(w.h.now + int(op[1]))  # type: ignore[call-overload]
            w.heartbeat("a")
        elif op[0] == "heartbeat":
            w.heartbeat(str(op[1]), int(op[2]), int(op[3]))  # type: ignore[call-overload]
        elif op[0] == "stream":
            w.stream(bool(op[1]))
        elif op[0] == "ended_by_coordinator":
            w.ended_by_coordinator()
        elif op[0] == "restart":
            w.restart(bool(op[1]), int(op[2]), int(op[3]))  # type: ignore[call-overload]
        else:
            w.static_lost()
    for _, member, reason in w.fences:
        assert member != "a"
        if member == "static-s":
            assert reason is FenceReason.SESSION_TIMEOUT


@settings(max_examples=200, deadline=None)
@given(st.integers(0, GRACE // 2 - 1).flatmap(lambda processing: st.tuples(
    st.just(processing), st.lists(st.tuples(st.integers(processing + 1, GRACE - 1), st.booleans()),
                                  max_size=40))))
def test_a_member_that_keeps_heartbeating_is_never_expired_nor_cut_off(
        script: tuple[int, list[tuple[int, bool]]]) -> None:
    """Heartbeats sent less than a grace apart and each reaching the coordinator within the grace,
    whatever the stream does: the member is never fenced and never stops working — a broken stream
    alone costs nothing."""
    processing, steps = script
    w = World()
    for gap, up in steps:
        w.stream(up)
        w.advance_to(w.h.now + max(1, gap - processing))
        assert not w.contact.cut_off(w.h.now)
        w.heartbeat("d", processing)
        w.heartbeat("a")
        w.heartbeat("static-s")
    assert w.fences == []


def test_heartbeat_response_default_says_no_grace() -> None:
    assert HeartbeatResponse(ErrorCode.NONE).failover_grace_ms == 0
