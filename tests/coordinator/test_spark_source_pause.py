"""The PySpark source's member plans no batch while it is cut off from its coordinator (failover
rule 7), and plans again once the coordinator answers — for real: a coordinator process killed with
kill -9 and restarted on the same port and data. Spark is not needed to show it: `QueryMember.plan`
is exactly what the source's ``latestOffset`` calls at each batch boundary."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from regroup.log import open_log
from regroup.protocol.microbatch import BatchOffset
from regroup.spark.member import QueryMember
from regroup.spark.options import parse_options
from tests.client.test_failover_pause import GRACE_MS, produce
from tests.coordinator.server_proc import start_server


def until(cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_query_cut_off_from_the_coordinator_plans_no_batch_until_it_answers(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic("t", 2)
    log.close()
    produce(log_dir, 10)
    # A long heartbeat interval: the pause comes from the grace, not from a missed heartbeat.
    s = start_server(tmp_path / "data", "--log", str(log_dir), "--failover-grace-ms", str(GRACE_MS),
                     "--heartbeat-interval-ms", "10000", "--session-timeout-ms", "60000")
    member = QueryMember(parse_options({"group": "g", "topics": "t", "coordinator": s.address,
                                        "log": str(log_dir)}))
    try:
        first = member.plan(BatchOffset(), None)
        assert sum(first.ends.values()) == 20 and not member.paused  # both partitions, 10 records each
        until(lambda: member.membership.failover_grace_ms == GRACE_MS, "the grace learnt from answers")

        s.kill9()
        produce(log_dir, 5)
        finished = first
        until(lambda: member.plan(finished, None) == finished and member.paused, "the query to pause")
        assert member.plan(finished, None) == finished  # new records, but no batch while cut off

        s = s.restart()  # recovers the member: nothing moved, it may carry on
        planned: list[BatchOffset] = []

        def resumed() -> bool:
            end = member.plan(finished, None)
            planned.append(end)
            return end != finished

        until(resumed, "the query to plan again")
        assert not member.paused
        assert sum(planned[-1].ends.values()) == 30  # the records produced during the pause, none skipped
    finally:
        member.stop()
        assert s.terminate() == 0, s.log()
