"""The source's options: defaults, and a clear error for everything a user can get wrong."""

from __future__ import annotations

import pytest

from regroup.spark.options import SourceOptionError, parse_options

BASE = {"group": "g", "topics": "a, b", "coordinator": "h:1", "log": "/tmp/log"}


def test_defaults_and_case_insensitive_names() -> None:
    o = parse_options({**BASE, "instanceId": "i-1", "MAXRECORDSPERTRIGGER": "500"})
    assert o.topics == ("a", "b") and o.pattern is None and o.instance_id == "i-1"
    assert o.max_records_per_trigger == 500 and o.starting_offsets == "earliest"
    assert o.rebalance_timeout_ms == 60_000 and o.max_records_per_split == 1_000_000


def test_coordinator_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGROUP_COORDINATOR", "env:2")
    assert parse_options({k: v for k, v in BASE.items() if k != "coordinator"}).coordinator == "env:2"


@pytest.mark.parametrize(("change", "message"), [
    ({"group": ""}, "'group' is required"),
    ({"log": " "}, "'log' is required"),
    ({"coordinator": ""}, "'coordinator'"),
    ({"topics": ""}, "exactly one of"),
    ({"pattern": "a.*"}, "exactly one of"),
    ({"maxRecordsPerTrigger": "many"}, "must be an integer"),
    ({"maxRecordsPerTrigger": "0"}, "must be >= 1"),
    ({"startingOffsets": "middle"}, "earliest or latest"),
    ({"rebalanceTimeoutMs": "5"}, ">= 1000"),
    ({"subscribe": "a"}, "unknown option"),
])
def test_bad_options_are_named(change: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REGROUP_COORDINATOR", raising=False)
    with pytest.raises(SourceOptionError, match=message):
        parse_options({**BASE, **change})
