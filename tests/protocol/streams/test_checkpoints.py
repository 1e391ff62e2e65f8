"""Task checkpoints: the commit metadata naming the checkpoint of record, where a task starts, when
a copy has caught up, when the sink is on, and the batch's idempotency key."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.shard import Shard
from regroup.protocol.streams.checkpoints import (
    CHECKPOINT_METADATA_PREFIX,
    CheckpointRecord,
    LocalCopy,
    StartFrom,
    StartPlan,
    batch_key,
    caught_up,
    checkpoint_directory,
    directory_owner,
    format_record,
    latest_record,
    overruns,
    parse_record,
    plan_start,
    reached,
    sink_on,
    state_file_version,
    warmup_limit,
)

# Derandomized like the rest of tests/protocol: the same examples on every run and machine.
PROPS = settings(max_examples=200, deadline=None, derandomize=True, database=None)

A0, A1, B0 = Shard("orders", 0), Shard("orders", 1), Shard("clicks", 0)
ME, OTHER = "1f0c", "9b2e"


def mine(generation: int = 1, task: str = "count_0") -> str:
    return checkpoint_directory(task, ME, generation)


def theirs(generation: int = 1, task: str = "count_0") -> str:
    return checkpoint_directory(task, OTHER, generation)


# ---------------------------------------------------------------- CheckpointRecord


@pytest.mark.parametrize("directory", ["tasks/count_0/1f0c.1", "x", "a/b/c", "a/./b", "tasks/..x/p.1",
                                       "tasks/x../p.1"])
def test_a_record_accepts_a_relative_path_in_the_state_root(directory: str) -> None:
    assert CheckpointRecord(directory, 0).directory == directory


@pytest.mark.parametrize("directory", ["", "/abs/path", "/", "..", "../x", "a/../b", "a/..",
                                       "tasks/../../etc"])
def test_a_record_refuses_empty_absolute_and_escaping_paths(directory: str) -> None:
    with pytest.raises(ValueError, match="path in the state root"):
        CheckpointRecord(directory, 3)


@pytest.mark.parametrize("batch", [-1, -100, True, False, 1.0, 2.5, "3", None])
def test_a_record_refuses_anything_but_a_batch_id_of_at_least_zero(batch: object) -> None:
    with pytest.raises(ValueError, match="batch id >= 0"):
        CheckpointRecord("tasks/t/p.1", batch)  # type: ignore[arg-type]


def test_a_record_accepts_batch_zero_and_huge_batch_ids() -> None:
    assert CheckpointRecord("d", 0).batch == 0
    assert CheckpointRecord("d", 2**63).batch == 2**63


# ---------------------------------------------------------------- metadata


def test_the_metadata_is_the_versioned_prefix_then_compact_sorted_json() -> None:
    text = format_record(CheckpointRecord("tasks/count_0/1f0c.2", 17))
    assert text == CHECKPOINT_METADATA_PREFIX + '{"batch":17,"dir":"tasks/count_0/1f0c.2"}'
    assert CHECKPOINT_METADATA_PREFIX == "regroup-spark-checkpoint:1:"


def test_the_metadata_round_trips() -> None:
    record = CheckpointRecord("tasks/count_0/1f0c.2", 17)
    assert parse_record(format_record(record)) == record


@pytest.mark.parametrize("metadata", [
    "", "anything", 'regroup-spark-checkpoint:2:{"dir":"d","batch":1}', " regroup-spark-checkpoint:1:{}",
    "REGROUP-SPARK-CHECKPOINT:1:{}", "regroup-spark-checkpoint:1"])
def test_metadata_without_the_prefix_names_no_record(metadata: str) -> None:
    assert parse_record(metadata) is None


@pytest.mark.parametrize(("payload", "problem"), [
    ("", "Expecting value"),                                   # nothing after the prefix
    ("{not json", "Expecting property name"),
    ('{"dir":"d","batch":1} trailing', "Extra data"),
    ('{"batch":1}', "'dir'"),                                  # missing key
    ('{"dir":"d"}', "'batch'"),
    ("[1, 2]", "list indices"),                                # not an object
    ('"a string"', "string indices"),
    ("42", "not subscriptable"),
    ("null", "not subscriptable"),
    ('{"dir":"d","batch":-1}', "batch id >= 0"),               # the record refuses it
    ('{"dir":"d","batch":true}', "batch id >= 0"),
    ('{"dir":"d","batch":1.0}', "batch id >= 0"),
    ('{"dir":"d","batch":"1"}', "batch id >= 0"),
    ('{"dir":"d","batch":NaN}', "batch id >= 0"),
    ('{"dir":"","batch":1}', "path in the state root"),
    ('{"dir":"/etc","batch":1}', "path in the state root"),
    ('{"dir":"a/../../b","batch":1}', "path in the state root"),
])
def test_malformed_metadata_with_the_prefix_raises_naming_the_problem(payload: str, problem: str) -> None:
    metadata = CHECKPOINT_METADATA_PREFIX + payload
    with pytest.raises(ValueError, match="malformed checkpoint record") as info:
        parse_record(metadata)
    message = str(info.value)
    assert problem in message
    assert repr(metadata) in message  # names the metadata it could not read


@pytest.mark.parametrize("payload", ['{"dir":null,"batch":1}', '{"dir":7,"batch":1}',
                                     '{"dir":["tasks"],"batch":1}', '{"dir":{"a":1},"batch":1}'])
def test_metadata_whose_dir_is_not_a_string_is_malformed(payload: str) -> None:
    with pytest.raises(ValueError, match="malformed checkpoint record"):
        parse_record(CHECKPOINT_METADATA_PREFIX + payload)


def test_extra_keys_in_the_metadata_are_ignored() -> None:
    got = parse_record(CHECKPOINT_METADATA_PREFIX + '{"dir":"d","batch":4,"future":"field"}')
    assert got == CheckpointRecord("d", 4)


# ---------------------------------------------------------------- latest_record


def test_latest_record_of_no_metadata_or_of_no_records_is_none() -> None:
    assert latest_record([]) is None
    assert latest_record(["", "someone else's metadata", "regroup-spark-checkpoint:0:x"]) is None


def test_latest_record_picks_the_highest_batch() -> None:
    records = [CheckpointRecord(theirs(1), 7), CheckpointRecord(theirs(1), 9), CheckpointRecord(theirs(1), 8)]
    metadata = [format_record(r) for r in records]
    assert latest_record(metadata) == CheckpointRecord(theirs(1), 9)
    assert latest_record(list(reversed(metadata))) == CheckpointRecord(theirs(1), 9)


def test_latest_record_ignores_commits_without_a_record() -> None:
    """A commit that reached only some partitions: the others still hold an older or no record."""
    metadata = ["", format_record(CheckpointRecord(theirs(2), 3)), "reset by an operator",
                format_record(CheckpointRecord(theirs(1), 1))]
    assert latest_record(metadata) == CheckpointRecord(theirs(2), 3)


def test_latest_record_breaks_a_tie_by_directory_whatever_the_order() -> None:
    a, b = CheckpointRecord("tasks/t/a.1", 5), CheckpointRecord("tasks/t/b.1", 5)
    assert latest_record([format_record(a), format_record(b)]) == b
    assert latest_record([format_record(b), format_record(a)]) == b


def test_latest_record_refuses_a_malformed_record_among_good_ones() -> None:
    metadata = [format_record(CheckpointRecord("d", 1)), CHECKPOINT_METADATA_PREFIX + "{oops"]
    with pytest.raises(ValueError, match="malformed checkpoint record"):
        latest_record(metadata)


# ---------------------------------------------------------------- plan_start


def test_a_running_local_copy_not_ahead_of_the_commit_is_promoted_in_place() -> None:
    committed = {A0: 100, A1: 50}
    local = LocalCopy(mine(3), {A0: 90, A1: 50}, running=True)
    plan = plan_start(committed=committed, record=CheckpointRecord(theirs(1), 12), process_id=ME, local=local)
    assert plan == StartPlan(StartFrom.PROMOTE, mine(3))
    assert plan.batch is None and plan.begin is None


def test_a_running_copy_exactly_at_the_commit_is_promoted() -> None:
    committed = {A0: 100}
    plan = plan_start(committed=committed, record=CheckpointRecord(theirs(1), 12), process_id=ME,
                      local=LocalCopy(mine(2), {A0: 100}, running=True))
    assert plan == StartPlan(StartFrom.PROMOTE, mine(2))


def test_a_running_copy_before_its_first_batch_is_promoted() -> None:
    plan = plan_start(committed={A0: 100}, record=None, process_id=ME,
                      local=LocalCopy(mine(2), {}, running=True))
    assert plan == StartPlan(StartFrom.PROMOTE, mine(2))


def test_a_running_copy_is_promoted_even_when_the_record_is_ours() -> None:
    """Promotion comes first: the running copy already holds the state; nothing is restarted."""
    plan = plan_start(committed={A0: 10}, record=CheckpointRecord(mine(1), 4), process_id=ME,
                      local=LocalCopy(mine(2), {A0: 10}, running=True))
    assert plan == StartPlan(StartFrom.PROMOTE, mine(2))


@pytest.mark.parametrize("ends", [{A0: 101}, {A0: 100, A1: 51}, {A0: 0, B0: 1}])
def test_a_running_copy_ahead_of_the_commit_is_not_promoted(ends: dict[Shard, int]) -> None:
    """Ahead on any shard (a shard with nothing committed counts as committed at 0): its state holds
    records nobody accepted, so the batch of record is copied instead."""
    committed = {A0: 100, A1: 50}
    record = CheckpointRecord(theirs(1), 12)
    plan = plan_start(committed=committed, record=record, process_id=ME,
                      local=LocalCopy(mine(3), ends, running=True))
    assert plan == StartPlan(StartFrom.COPY, theirs(1), 12)


@pytest.mark.parametrize("ends", [{A0: 101}, {A0: 100, A1: 51}])
def test_a_running_copy_ahead_of_the_commit_stays_in_place_as_a_copy(ends: dict[Shard, int]) -> None:
    """A warm-up runs the batch its active is running (rule 4), so it is often past the commit; kept
    as a standby (or warm-up), it waits there for the commit — nothing it holds produced output."""
    record = CheckpointRecord(theirs(1), 12)
    plan = plan_start(committed={A0: 100, A1: 50}, record=record, process_id=ME,
                      local=LocalCopy(mine(3), ends, running=True), active=False)
    assert plan == StartPlan(StartFrom.PROMOTE, mine(3))


def test_a_running_copy_ahead_of_the_commit_with_our_record_resumes_the_record() -> None:
    record = CheckpointRecord(mine(1), 12)
    plan = plan_start(committed={A0: 100}, record=record, process_id=ME,
                      local=LocalCopy(mine(3), {A0: 101}, running=True))
    assert plan == StartPlan(StartFrom.RESUME, mine(1))


def test_a_running_copy_ahead_with_no_record_starts_fresh_at_the_commit() -> None:
    plan = plan_start(committed={A0: 100}, record=None, process_id=ME,
                      local=LocalCopy(mine(3), {A0: 101}, running=True))
    assert plan == StartPlan(StartFrom.FRESH, begin={A0: 100})


def test_a_parked_local_copy_is_never_promoted() -> None:
    parked = LocalCopy(mine(3), {A0: 100}, running=False)
    assert plan_start(committed={A0: 100}, record=CheckpointRecord(theirs(1), 7), process_id=ME,
                      local=parked) == StartPlan(StartFrom.COPY, theirs(1), 7)
    assert plan_start(committed={A0: 100}, record=CheckpointRecord(mine(1), 7), process_id=ME,
                      local=parked) == StartPlan(StartFrom.RESUME, mine(1))
    assert plan_start(committed={A0: 100}, record=None, process_id=ME,
                      local=parked) == StartPlan(StartFrom.FRESH, begin={A0: 100})


def test_the_checkpoint_of_record_of_this_process_is_resumed_in_place() -> None:
    """A static restart: nothing copied, nothing restored."""
    record = CheckpointRecord(mine(4), 31)
    plan = plan_start(committed={A0: 100}, record=record, process_id=ME, local=None)
    assert plan == StartPlan(StartFrom.RESUME, mine(4))
    assert plan.batch is None and plan.begin is None


def test_another_process_record_is_copied_at_the_batch_of_record() -> None:
    record = CheckpointRecord(theirs(2), 31)
    plan = plan_start(committed={A0: 100}, record=record, process_id=ME, local=None)
    assert plan == StartPlan(StartFrom.COPY, theirs(2), 31)
    assert plan.begin is None


def test_a_record_whose_owner_only_shares_a_prefix_with_us_is_copied() -> None:
    record = CheckpointRecord(checkpoint_directory("count_0", ME + "ff", 1), 2)
    assert plan_start(committed={}, record=record, process_id=ME, local=None).how is StartFrom.COPY
    record = CheckpointRecord(checkpoint_directory("count_0", ME[:-1], 1), 2)
    assert plan_start(committed={}, record=record, process_id=ME, local=None).how is StartFrom.COPY


def test_an_empty_process_id_forces_a_copy_of_our_own_record() -> None:
    """The pipeline passes process_id="" to copy its own record (when the directory holds batches
    nobody accepted); that works only because no directory of record belongs to ""."""
    record = CheckpointRecord(mine(1), 5)
    assert plan_start(committed={A0: 1}, record=record, process_id="", local=None) == \
        StartPlan(StartFrom.COPY, mine(1), 5)


def test_no_record_starts_fresh_at_the_committed_offsets() -> None:
    committed = {A0: 100, B0: 7}
    plan = plan_start(committed=committed, record=None, process_id=ME, local=None)
    assert plan == StartPlan(StartFrom.FRESH, begin={A0: 100, B0: 7})
    assert plan.directory is None and plan.batch is None
    assert plan.begin is not committed  # a copy: the caller may change its committed offsets


def test_nothing_committed_and_no_record_starts_fresh_at_the_log_start() -> None:
    assert plan_start(committed={}, record=None, process_id=ME, local=None) == \
        StartPlan(StartFrom.FRESH, begin={})


def test_start_from_values_name_how_a_task_started() -> None:
    assert [h.value for h in StartFrom] == ["promoted", "resumed", "copied", "fresh"]


# ---------------------------------------------------------------- caught_up, sink_on, batch_key


def test_caught_up_when_exactly_at_the_committed_offsets() -> None:
    assert caught_up({A0: 100, A1: 50}, {A0: 100, A1: 50})
    assert caught_up({A0: 100, A1: 50, B0: 9}, {A0: 100, A1: 50})  # other shards do not matter
    assert not caught_up({A0: 99, A1: 50}, {A0: 100, A1: 50})      # behind
    assert not caught_up({A0: 101, A1: 50}, {A0: 100, A1: 50})     # ahead is not "caught up"
    assert not caught_up({A0: 100}, {A0: 100, A1: 50})             # not started on A1


def test_caught_up_with_nothing_committed_and_at_a_commit_of_zero() -> None:
    assert caught_up({}, {})
    assert caught_up({A0: 5}, {})
    assert caught_up({}, {A0: 0})


def test_a_copy_never_produces_output() -> None:
    assert not sink_on({A0: 10**9}, None)
    assert not sink_on({}, None)


def test_the_sink_is_on_for_batches_starting_at_or_after_the_commit() -> None:
    sink_from = {A0: 100, A1: 50}
    assert sink_on({A0: 100, A1: 50}, sink_from)
    assert sink_on({A0: 120, A1: 60}, sink_from)
    assert not sink_on({A0: 99, A1: 60}, sink_from)   # one shard still before the commit
    assert not sink_on({A0: 120}, sink_from)          # A1 starts at 0
    assert sink_on({}, {})
    assert sink_on({A0: 0}, {A0: 0})
    assert sink_on({}, {A0: 0})


def test_batch_key_names_the_task_and_the_offset_range_of_each_shard_in_order() -> None:
    assert batch_key("count_3", {Shard("orders", 3): 120}, {Shard("orders", 3): 180}) == \
        "count_3:orders/3@120-180"
    start = {Shard("b", 10): 1, Shard("a", 2): 5}
    end = {Shard("b", 10): 4, Shard("a", 2): 5, Shard("b", 9): 3}
    assert batch_key("join_0", start, end) == "join_0:a/2@5-5,b/9@0-3,b/10@1-4"
    assert batch_key("t", {}, {}) == "t:"


def test_batch_key_treats_a_missing_shard_as_offset_zero() -> None:
    """Both read nothing of A0, so one key for both is right."""
    assert batch_key("t", {A0: 0}, {}) == batch_key("t", {}, {A0: 0}) == "t:orders/0@0-0"


# ---------------------------------------------------------------- directories, state files


def test_checkpoint_directories_are_per_task_process_and_generation() -> None:
    assert checkpoint_directory("count_3", "1f0c", 2) == "tasks/count_3/1f0c.2"
    assert directory_owner("tasks/count_3/1f0c.2") == "1f0c"


@pytest.mark.parametrize(("directory", "owner"), [
    ("tasks/count_3/1f0c.2", "1f0c"),
    ("tasks/a.b_0/1f0c.2", "1f0c"),         # a dot in the task does not matter
    ("tasks/count_3/1f0c.2.copying", "1f0c"),
    ("1f0c.2", "1f0c"),
    ("tasks/count_3/1f0c", "1f0c"),
])
def test_directory_owner_is_the_last_component_before_its_first_dot(directory: str, owner: str) -> None:
    assert directory_owner(directory) == owner


@pytest.mark.parametrize(("name", "version"), [
    ("1.changelog", 1), ("12.changelog", 12), (".12.changelog.crc", 12), ("12.changelog.crc", 12),
    ("10.zip", 10), (".10.zip.crc", 10), ("7.delta", 7), (".7.delta.crc", 7), ("20.snapshot", 20),
    (".20.snapshot.crc", 20), ("0.delta", 0), ("007.zip", 7), ("123456789012.changelog", 123456789012),
])
def test_state_file_version_of_per_version_files(name: str, version: int) -> None:
    assert state_file_version(name) == version


@pytest.mark.parametrize("name", [
    "schema", ".schema.crc", "metadata", ".metadata.crc", "000008-5c1d7a3e.sst", "0", "12",
    "12.sst", "12.changelog.tmp", ".12.changelog.6f1e.tmp", "..12.changelog.6f1e.tmp.crc", "x12.zip",
    "12.zip.bak", "12..zip", "-1.delta", "1.2.delta", "12.ZIP", "", ".12.crc", "..12.zip.crc",
    "12.zip.crc.crc",
])
def test_state_file_version_of_other_files_is_none(name: str) -> None:
    assert state_file_version(name) is None


# ---------------------------------------------------------------- properties

KAFKA_TOPICS = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=6)
SMALL_SHARDS = st.builds(lambda t, p: Shard(t, p), st.sampled_from(["a", "a-1", "a.b", "b", "a_1"]),
                         st.integers(0, 2))
ANY_SHARDS = st.one_of(SMALL_SHARDS, st.builds(lambda t, p: Shard(t, p), KAFKA_TOPICS, st.integers(0, 10**6)))
SMALL_OFFSETS = st.dictionaries(SMALL_SHARDS, st.integers(0, 3), max_size=5)
OFFSETS = st.dictionaries(ANY_SHARDS, st.integers(0, 10**12), max_size=6)


def _range_of(start: dict[Shard, int], end: dict[Shard, int]) -> dict[Shard, tuple[int, int]]:
    """What a batch reads: each shard's range, a shard absent on one side being at offset 0."""
    return {s: (start.get(s, 0), end.get(s, 0)) for s in set(start) | set(end)}


@PROPS
@given(task=st.sampled_from(["count_0", "join_12"]), first=st.tuples(SMALL_OFFSETS, SMALL_OFFSETS),
       second=st.tuples(SMALL_OFFSETS, SMALL_OFFSETS))
def test_batch_key_is_injective_over_offset_ranges_for_one_task(
        task: str, first: tuple[dict[Shard, int], dict[Shard, int]],
        second: tuple[dict[Shard, int], dict[Shard, int]]) -> None:
    same_key = batch_key(task, *first) == batch_key(task, *second)
    assert same_key == (_range_of(*first) == _range_of(*second))


@PROPS
@given(task=st.sampled_from(["count_0", "join_12"]), data=st.data())
def test_batch_key_is_injective_over_start_and_end_on_one_set_of_shards(task: str,
                                                                        data: st.DataObject) -> None:
    shards = data.draw(st.sets(ANY_SHARDS, max_size=5))
    offsets = st.fixed_dictionaries({s: st.integers(0, 5) for s in shards})
    start1, end1, start2, end2 = (data.draw(offsets) for _ in range(4))
    if data.draw(st.booleans()):  # often the same start: then only the ends tell them apart
        start2 = dict(start1)
    if batch_key(task, start1, end1) == batch_key(task, start2, end2):
        assert (start1, end1) == (start2, end2)


@PROPS
@given(start=OFFSETS, sink_from=st.one_of(st.none(), OFFSETS), data=st.data())
def test_sink_on_is_monotone_in_the_start(start: dict[Shard, int], sink_from: dict[Shard, int] | None,
                                          data: st.DataObject) -> None:
    # A start at or after ``start`` on every shard: each offset moved forward, maybe more shards.
    later = {s: o + data.draw(st.integers(0, 10**6)) for s, o in start.items()}
    later.update({s: o for s, o in data.draw(OFFSETS).items() if s not in later})
    if sink_on(start, sink_from):
        assert sink_on(later, sink_from)
    if sink_from is not None:
        assert sink_on(sink_from, sink_from)


@PROPS
@given(committed=OFFSETS, data=st.data())
def test_caught_up_iff_the_ends_equal_the_commit_on_its_shards(committed: dict[Shard, int],
                                                                data: st.DataObject) -> None:
    ends = data.draw(st.one_of(
        OFFSETS,                                                               # anything
        st.just(dict(committed)),                                              # exactly there
        OFFSETS.map(lambda extra: {**extra, **committed}),                     # + other shards
        st.sampled_from(sorted(committed) or [A0]).flatmap(                    # off on one shard
            lambda s: st.integers(0, 10**12).filter(lambda o: o != committed.get(s, 0)).map(
                lambda o: {**committed, s: o})),
    ))
    on_committed_shards = {s: ends.get(s, 0) for s in committed}
    assert caught_up(ends, committed) == (on_committed_shards == committed)


@PROPS
@given(committed=OFFSETS, ends=OFFSETS, running=st.booleans(), record=st.one_of(
    st.none(), st.builds(CheckpointRecord, st.sampled_from([mine(1), theirs(1), theirs(2)]),
                         st.integers(0, 100))))
def test_plan_start_follows_rule_3_in_order(committed: dict[Shard, int], ends: dict[Shard, int],
                                            running: bool, record: CheckpointRecord | None) -> None:
    plan = plan_start(committed=committed, record=record, process_id=ME,
                      local=LocalCopy(mine(9), ends, running))
    not_ahead = all(o <= committed.get(s, 0) for s, o in ends.items())
    if running and not_ahead:
        assert plan == StartPlan(StartFrom.PROMOTE, mine(9))
    elif record is not None and record.directory.startswith(f"tasks/count_0/{ME}."):
        assert plan == StartPlan(StartFrom.RESUME, record.directory)
    elif record is not None:
        assert plan == StartPlan(StartFrom.COPY, record.directory, record.batch)
    else:
        assert plan == StartPlan(StartFrom.FRESH, begin=committed)


SAFE_SEGMENTS = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12).filter(
    lambda s: s != "..")


@PROPS
@given(segments=st.lists(SAFE_SEGMENTS, min_size=1, max_size=5),
       batch=st.one_of(st.integers(0, 1000), st.integers(0, 2**64)))
def test_the_metadata_round_trips_any_safe_directory_and_batch(segments: list[str], batch: int) -> None:
    record = CheckpointRecord("/".join(segments), batch)
    text = format_record(record)
    assert text.startswith(CHECKPOINT_METADATA_PREFIX)
    assert parse_record(text) == record
    assert latest_record([text]) == record


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
JSON = st.recursive(JSON_SCALARS,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["dir", "batch", "x"]), inner, max_size=3), max_leaves=8)


@PROPS
@given(payload=st.one_of(st.text(max_size=40), JSON.map(json.dumps),
                         st.fixed_dictionaries({"dir": JSON, "batch": JSON}).map(json.dumps)))
def test_metadata_with_the_prefix_is_a_record_or_a_value_error(payload: str) -> None:
    try:
        got = parse_record(CHECKPOINT_METADATA_PREFIX + payload)
    except ValueError as e:
        assert "malformed checkpoint record" in str(e)
    else:
        assert isinstance(got, CheckpointRecord)


@PROPS
@given(metadata=st.text(max_size=40).filter(lambda t: not t.startswith(CHECKPOINT_METADATA_PREFIX)))
def test_metadata_without_the_prefix_is_never_a_record(metadata: str) -> None:
    assert parse_record(metadata) is None


@PROPS
@given(task=st.from_regex(r"[a-z][a-z0-9.-]{0,8}_[0-9]{1,3}", fullmatch=True),
       process_id=st.text("0123456789abcdef", min_size=1, max_size=32), generation=st.integers(0, 10**6))
def test_a_checkpoint_directory_belongs_to_the_process_that_made_it(task: str, process_id: str,
                                                                    generation: int) -> None:
    directory = checkpoint_directory(task, process_id, generation)
    assert directory_owner(directory) == process_id
    assert directory_owner(directory + ".copying") == process_id
    assert CheckpointRecord(directory, 0).directory == directory  # a valid directory of record


def test_a_copys_position_is_known_once_its_query_ran_a_batch_or_has_nothing_to_read() -> None:
    from regroup.protocol.streams.checkpoints import position_known

    s = Shard("t", 0)
    assert not position_known(0, {s: 1114}, {s: 1489})  # copied, state not restored yet
    assert position_known(1, {s: 1300}, {s: 1489})
    assert position_known(0, {s: 1489}, {s: 1489})  # nothing to read: no record waits on the restore
    assert not position_known(0, {s: 5}, None)


# ---------------------------------------------------------------- warmup_limit (rule 4)


def test_a_warm_up_reads_up_to_the_actives_planned_batch() -> None:
    assert warmup_limit({A0: 100, A1: 50}, {A0: 130, A1: 50}) == {A0: 130, A1: 50}


def test_a_warm_up_keeps_to_the_commit_when_nothing_is_planned_or_the_plan_is_stale() -> None:
    assert warmup_limit({A0: 100}, None) == {A0: 100}
    assert warmup_limit({A0: 100}, {}) == {A0: 100}
    assert warmup_limit({A0: 100, A1: 50}, {A0: 130, A1: 40}) == {A0: 100, A1: 50}  # behind on A1
    assert warmup_limit({A0: 100, A1: 50}, {A0: 130}) == {A0: 100, A1: 50}  # misses A1's keys


def test_a_warm_up_follows_a_plan_with_nothing_committed_yet() -> None:
    assert warmup_limit({}, {A0: 7}) == {A0: 7}


def test_a_planned_lane_limits_a_warm_up_key_by_key() -> None:
    """Rule 6: the active reads a split partition as lanes; a committed fragment over both."""
    lo, hi = Shard("orders", 0, 0, 2**31), Shard("orders", 0, 2**31, 2**32)
    committed = {Shard("orders", 0): 100}
    assert warmup_limit(committed, {lo: 120, hi: 100}) == {lo: 120, hi: 100}
    assert warmup_limit(committed, {lo: 120}) == committed  # half the keys unplanned


@given(st.dictionaries(st.sampled_from([A0, A1, B0]), st.integers(0, 10**6)),
       st.dictionaries(st.sampled_from([A0, A1, B0]), st.integers(0, 10**6)))
@settings(max_examples=300)
def test_a_warm_up_limit_is_never_below_the_commit(committed: dict[Shard, int],
                                                   planned: dict[Shard, int]) -> None:
    """Whatever the plan says, a warm-up may always read up to the commit (never less: it could
    never catch up), and it is one of the two maps."""
    limit = warmup_limit(committed, planned)
    assert limit in (committed, planned)
    assert reached(limit, committed)


# ---------------------------------------------------------------- overruns (rule 5)


def test_a_promoted_copys_batch_across_the_commit_with_its_sink_off_overruns() -> None:
    """The copy's batch was planned up to a dead active's plan (200) past the commit (100)."""
    assert overruns({A0: 60}, {A0: 110}, {A0: 100})
    assert overruns({A0: 60, A1: 50}, {A0: 100, A1: 51}, {A0: 100, A1: 50})  # past on one shard


def test_a_batch_up_to_the_commit_or_from_it_does_not_overrun() -> None:
    assert not overruns({A0: 60}, {A0: 100}, {A0: 100})   # the catch-up batch: ends at the commit
    assert not overruns({A0: 60}, {A0: 80}, {A0: 100})    # still behind
    assert not overruns({A0: 100}, {A0: 150}, {A0: 100})  # its sink is on: output, then commit
    assert not overruns({A0: 60}, {A0: 999}, None)        # a copy's batch commits nothing


def test_a_lane_past_the_commit_overruns_key_by_key() -> None:
    lo, hi = Shard("orders", 0, 0, 2**31), Shard("orders", 0, 2**31, 2**32)
    committed = {Shard("orders", 0): 100}
    assert overruns({lo: 90, hi: 100}, {lo: 100, hi: 101}, committed)
    assert not overruns({lo: 90, hi: 100}, {lo: 100, hi: 100}, committed)
