"""The member driver's decisions (regroup/protocol/driver.py): the rules every shell shares."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.driver import (
    Backlog,
    OffsetReset,
    advanced,
    commit_before_release,
    from_last_lost,
    held_when_lost,
    resumes,
    start_positions,
    topics_to_look_up,
)
from regroup.protocol.errors import ErrorCode
from regroup.protocol.keyrange import Resume
from regroup.protocol.member import Action, Assign, Fatal, Lost, Revoke
from regroup.protocol.shard import KEY_SPACE, Shard

A, B, C = Shard("t", 0), Shard("t", 1), Shard("u", 0)


def test_from_last_lost_supersedes_what_came_before() -> None:
    a = Assign(frozenset({Shard("t", 0)}))
    r = Revoke(frozenset({Shard("t", 1)}))
    lost = Lost(frozenset(), "fenced")
    assert from_last_lost([a, r]) is None
    assert from_last_lost([a, lost, r, lost, a]) == [lost, a]


def test_a_revoke_commits_only_its_shards_that_moved_past_the_committed_offset() -> None:
    positions = {A: 10, B: 5, C: 7}
    assert commit_before_release(positions, {A: 10, B: 3}, {A, B}) == {B: 5}
    assert commit_before_release(positions, {}, {A, C}) == {A: 10, C: 7}  # nothing known: commit all
    assert commit_before_release(positions, {}, {Shard("v", 0)}) == {}
    assert advanced({A: 0, B: 4}, {B: 4}) == {A: 0}


def test_a_new_shard_starts_at_its_committed_offset_else_per_the_reset_policy() -> None:
    committed = {A: 42}
    assert start_positions({B, A, C}, committed, OffsetReset.EARLIEST, {}) == {A: 42, B: 0, C: 0}
    assert list(start_positions({B, A, C}, committed, OffsetReset.EARLIEST, {})) == [A, B, C]
    assert start_positions({A, B, C}, committed, OffsetReset.LATEST, {A: 99, B: 17}) == {A: 42, B: 17, C: 0}


H = KEY_SPACE // 2
#: Where a partition split in two on the producer side ends, per open piece: the upper one higher.
PIECE_ENDS = {Shard("t", 0, 0, H): 5, Shard("t", 0, H, KEY_SPACE): 50}


def test_latest_on_a_split_partition_begins_each_piece_at_its_own_end() -> None:
    q = KEY_SPACE // 4
    inside, across = Shard("t", 0, H, H + q), Shard("t", 0, q, H + q)
    assert resumes({A, inside, across}, {}, OffsetReset.LATEST, PIECE_ENDS) == {
        A: Resume(5, ((H, KEY_SPACE, 50),)),  # the lower piece from its end, the upper skipped to its own
        across: Resume(5, ((H, H + q, 50),)),
        inside: Resume(50),  # its keys lie in one piece: that piece's end, nothing to skip
    }
    assert start_positions({A}, {}, OffsetReset.LATEST, PIECE_ENDS) == {A: 5}


def test_latest_on_a_split_partition_begins_only_the_keys_no_fragment_covers_at_their_piece_end() -> None:
    done = Shard("t", 0, 0, KEY_SPACE // 4)
    assert resumes({A}, {done: 3}, OffsetReset.LATEST, PIECE_ENDS) == {
        A: Resume(3, ((KEY_SPACE // 4, H, 5), (H, KEY_SPACE, 50)))}
    assert resumes({A}, {done: 80}, OffsetReset.LATEST, PIECE_ENDS) == {
        A: Resume(5, ((0, KEY_SPACE // 4, 80), (H, KEY_SPACE, 50)))}


def test_earliest_and_unsplit_partitions_ignore_pieces() -> None:
    assert resumes({A}, {}, OffsetReset.EARLIEST, PIECE_ENDS) == {A: Resume(0)}
    assert resumes({A}, {A: 7}, OffsetReset.LATEST, PIECE_ENDS) == {A: Resume(7)}
    half = Shard("t", 0, 0, H)
    assert resumes({A}, {half: 9}, OffsetReset.LATEST, {A: 20}) == {A: Resume(9, ((H, KEY_SPACE, 20),))}
    assert resumes({B}, {}, OffsetReset.LATEST, PIECE_ENDS) == {B: Resume(0)}  # not looked up: from 0


def test_the_log_is_asked_where_it_ends_only_when_latest_needs_it() -> None:
    assert topics_to_look_up({A, B, C}, {}, OffsetReset.EARLIEST) == []
    assert topics_to_look_up({A, B, C}, {A: 1, B: 1}, OffsetReset.LATEST) == ["u"]
    assert topics_to_look_up({A, B, C}, {}, OffsetReset.LATEST) == ["t", "u"]
    assert topics_to_look_up({A}, {A: 3}, OffsetReset.LATEST) == []


def test_lost_drops_what_is_owned_and_what_the_lost_names() -> None:
    assert held_when_lost(Lost(frozenset({C}), "fenced"), {A, B}) == {A, B, C}


def test_a_deferred_assign_waits_with_everything_behind_it_for_the_next_boundary() -> None:
    a = Assign(frozenset({A}))
    r = Revoke(frozenset({B}))
    backlog = Backlog()
    backlog.add([a, r])
    assert backlog.next() == a
    assert backlog.defer(a) is True
    assert len(backlog) == 2
    backlog.add([Fatal(ErrorCode.INVALID_REQUEST, "x")])  # the next boundary's actions go behind
    assert [backlog.next(), backlog.next(), backlog.next(), backlog.next()] == [
        a, r, Fatal(ErrorCode.INVALID_REQUEST, "x"), None]


def test_a_later_lost_supersedes_a_deferred_assign() -> None:
    a, a2 = Assign(frozenset({A})), Assign(frozenset({C}))
    r = Revoke(frozenset({B}))
    lost = Lost(frozenset({A}), "fenced")
    backlog = Backlog()
    backlog.add([a, r, lost, a2])
    assert backlog.next() == a
    assert backlog.defer(a) is False
    assert [backlog.next(), backlog.next(), backlog.next()] == [lost, a2, None]


@st.composite
def action_lists(draw: st.DrawFn) -> list[Action]:
    shard = st.sampled_from([A, B, C])
    one = st.one_of(
        st.builds(lambda s: Assign(frozenset({s})), shard),
        st.builds(lambda s: Revoke(frozenset({s})), shard),
        st.builds(lambda s: Lost(frozenset({s}), "fenced"), shard),
    )
    return draw(st.lists(one, max_size=12))


def _former_loop(batches: list[list[Action]], fails: set[int]) -> list[Action]:
    """The loop the consumer and the Spark source each carried before the driver existed."""
    deferred: list[Action] = []
    done: list[Action] = []
    step = 0
    for actions in batches:
        queue, deferred = [*deferred, *actions], []
        while queue:
            action = queue.pop(0)
            step += 1
            if isinstance(action, Assign) and step in fails:
                later = from_last_lost(queue)
                if later is not None:
                    queue = later
                    continue
                deferred = [action, *queue]
                break
            done.append(action)
    return done


@settings(max_examples=300, deadline=None)
@given(st.lists(action_lists(), min_size=1, max_size=4), st.sets(st.integers(0, 40)))
def test_the_backlog_carries_out_what_the_former_loops_did(
    batches: list[list[Action]], failing_steps: set[int],
) -> None:
    """The shells' loop over a `Backlog` does exactly what their hand-written loops did: the same
    actions in the same order, an Assign whose offsets are unknown (at the steps in ``failing_steps``)
    retried at the next boundary or superseded by a later Lost. Also: every action carried out was
    emitted, in order, and every Lost emitted is either carried out or still waiting behind a
    deferred Assign, or superseded by a later Lost."""
    backlog = Backlog()
    done: list[Action] = []
    step = 0
    for actions in [*batches, []]:
        backlog.add(actions)
        while (action := backlog.next()) is not None:
            step += 1
            if isinstance(action, Assign) and step in failing_steps:
                if backlog.defer(action):
                    break
                continue
            done.append(action)
    assert done == _former_loop([*batches, []], failing_steps)
    emitted = [x for b in batches for x in b]
    it = iter(emitted)
    assert all(any(x is y for y in it) for x in done), "out of order, or never emitted"
    waiting = emitted[len(emitted) - len(backlog):]
    last_lost = max((i for i, x in enumerate(emitted) if isinstance(x, Lost)), default=None)
    if last_lost is not None and not any(isinstance(x, Lost) for x in waiting):
        assert any(x is emitted[last_lost] for x in done), "the last Lost was never carried out"
