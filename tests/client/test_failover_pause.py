"""A consumer cut off from its coordinator stops handing out records once the failover grace has
passed (`regroup.protocol.failover` rule 7), and resumes when the coordinator answers again — for
real: a coordinator process killed with kill -9 and restarted on the same port and data. A clean
restart (the coordinator ends the streams itself, rule 11) pauses nobody."""

from __future__ import annotations

import time
from pathlib import Path

from regroup import Consumer, TopicPartition
from regroup.log import open_log
from regroup.log.base import LogRecord
from tests.coordinator.server_proc import ServerProc, start_server

GRACE_MS = 1_000


def produce(log_dir: Path, n: int) -> None:
    log = open_log(str(log_dir))
    try:
        for p in (0, 1):
            log.produce("t", p, [LogRecord(b"k", b"v", 0)] * n)
    finally:
        log.close()


def start(tmp_path: Path) -> tuple[ServerProc, Consumer]:
    """A coordinator and a consumer that has read the 100 records there are."""
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic("t", 2)
    log.close()
    produce(log_dir, 50)
    # A long heartbeat interval: a pause comes from the grace, not from a missed heartbeat.
    s = start_server(tmp_path / "data", "--log", str(log_dir), "--failover-grace-ms", str(GRACE_MS),
                     "--heartbeat-interval-ms", "10000", "--session-timeout-ms", "60000")
    consumer = Consumer("g", coordinator=s.address, log=str(log_dir), topics=["t"])
    deadline = time.monotonic() + 60
    read = 0
    while read < 100:
        assert time.monotonic() < deadline, f"read {read} of 100 records"
        read += len(consumer.consume(100, timeout=0.1))
    assert consumer._membership.failover_grace_ms == GRACE_MS  # learnt from the answers
    assert not consumer.paused
    return s, consumer


def test_a_consumer_cut_off_from_the_coordinator_pauses_until_it_answers_again(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    s, consumer = start(tmp_path)
    try:

        s.kill9()
        killed = time.monotonic()
        while not consumer.paused:
            assert time.monotonic() - killed < 30, "the consumer never paused"
            consumer.consume(100, timeout=0.05)
        produce(log_dir, 20)
        assert consumer.consume(100, timeout=0.3) == [] and consumer.paused  # nothing while cut off

        s = s.restart()  # recovers the member: nothing moved, it may carry on
        resumed: list[object] = []
        deadline = time.monotonic() + 60
        while not resumed:
            assert time.monotonic() < deadline, "the consumer never resumed"
            resumed += consumer.consume(100, timeout=0.1)
        assert not consumer.paused
        while len(resumed) < 40:  # what was produced during the pause, none of it skipped
            assert time.monotonic() < deadline, f"read {len(resumed)} of 40 records after the pause"
            resumed += consumer.consume(100, timeout=0.1)
        assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    finally:
        consumer.close(timeout=10)
        assert s.terminate() == 0, s.log()


def test_a_clean_coordinator_restart_pauses_nobody(tmp_path: Path) -> None:
    s, consumer = start(tmp_path)
    try:
        assert s.terminate() == 0  # SIGTERM: it ends every Watch stream itself, then stops
        stopped = time.monotonic()
        # Down for several graces: a member whose stream had broken would pause within one.
        while time.monotonic() - stopped < 4 * GRACE_MS / 1000:
            consumer.consume(100, timeout=0.05)
            assert not consumer.paused, "a clean coordinator shutdown paused the consumer"
        s = s.restart()
        produce(tmp_path / "log", 10)
        got: list[object] = []
        deadline = time.monotonic() + 60
        while len(got) < 20:
            assert time.monotonic() < deadline, f"read {len(got)} of 20 records after the restart"
            got += consumer.consume(100, timeout=0.1)
            assert not consumer.paused
    finally:
        consumer.close(timeout=10)
        assert s.terminate() == 0, s.log()
