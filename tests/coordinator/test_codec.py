"""The store's record encoding: exact and stable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.coordinator import codec
from regroup.protocol.records import (
    CurrentAssignment,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadata,
    MemberMetadataRecord,
    MemberStatus,
    OffsetRecord,
    Record,
    RegexRecord,
    SubscribedTopicsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from regroup.protocol.shard import Shard
from tests.coordinator.workload import RecordingGroup, run_workload

text = st.text(max_size=10)
opt = st.none() | text
shard_sets = st.frozensets(st.builds(Shard, st.sampled_from(["a", "b\u00e9", "c\"q"]), st.integers(0, 99)))
meta = st.builds(MemberMetadata, opt, opt, st.integers(1, 10**6), st.frozensets(text), opt, opt,
                 st.lists(text, max_size=2).map(tuple))
current = st.builds(CurrentAssignment, st.integers(-2, 99), st.integers(-2, 99),
                    st.sampled_from(list(MemberStatus)), shard_sets, shard_sets)
records: st.SearchStrategy[Record] = st.one_of(
    st.builds(GroupEpochRecord, text, st.none() | st.integers(0, 2**40)),
    st.builds(SubscribedTopicsRecord, text, st.dictionaries(text, st.integers(1, 999))),
    st.builds(RegexRecord, text, text, st.none() | st.frozensets(text)),
    st.builds(MemberMetadataRecord, text, text, st.none() | meta),
    st.builds(TargetEpochRecord, text, st.integers(0, 99), text),
    st.builds(TargetMemberRecord, text, text, st.none() | shard_sets),
    st.builds(CurrentAssignmentRecord, text, text, st.none() | current),
    st.builds(OffsetRecord, text, st.builds(Shard, text, st.integers(0, 99)),
              st.none() | st.integers(0, 2**62), text, st.integers(-1, 99)),
)


@given(records)
def test_round_trip_and_stable(record: Record) -> None:
    encoded = codec.encode(record)
    assert codec.decode(encoded) == record
    assert codec.encode(codec.decode(encoded)) == encoded


def test_real_workload_records_round_trip() -> None:
    seen: list[Record] = []
    g = RecordingGroup.create({})
    g.sink = seen.extend
    run_workload(g, seed=7, steps=60)
    assert len(seen) > 100
    assert [codec.decode(codec.encode(r)) for r in seen] == seen


def test_damaged_record_is_refused() -> None:
    with pytest.raises(codec.CodecError):
        codec.decode('["?", "g"]')
    with pytest.raises(codec.CodecError):
        codec.decode("not json")
