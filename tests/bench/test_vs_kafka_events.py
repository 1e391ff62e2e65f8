"""`regroup bench vs-kafka`'s reading of its members' event lines: a member whose thread ended on an
exception stops the run with why (instead of a 300 s wait for a group that cannot settle without it),
and refused periodic commits and timed-out reads are counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from regroup.bench.vs_kafka import MemberCrashed, _Member, _Run


def _run(tmp_path: Path, lines: list[str]) -> _Run:
    out = tmp_path / "r-0.out"
    out.write_text("".join(f"{line}\n" for line in lines))
    run = object.__new__(_Run)  # no coordinator, no broker: only the event lines matter here
    run.system, run.tmp, run.name = "regroup", tmp_path, "r"
    proc: Any = None
    run.members = [_Member(0, out, proc)]
    return run


def test_a_member_that_ended_on_an_exception_stops_the_run(tmp_path: Path) -> None:
    run = _run(tmp_path, ["1.0 member m", "1.5 assign 0,1",
                          "2.0 error LogTimeoutError: reading t/3 from offset 0: no fetch answer in 30.0 s"])
    with pytest.raises(MemberCrashed, match="LogTimeoutError"):
        run.owned(2)


def test_refused_commits_are_counted_and_do_not_stop_the_run(tmp_path: Path) -> None:
    run = _run(tmp_path, ["1.0 member m", "1.5 assign 0,1", "2.0 commit-failed STALE_MEMBER_EPOCH: x",
                          "3.0 commit-failed NOT_OWNED: y", "3.05 read-timeout t/1: z", "3.1 count 5"])
    assert run.owned(2)
    assert run.commits_refused() == 2 and run.read_timeouts() == 1
