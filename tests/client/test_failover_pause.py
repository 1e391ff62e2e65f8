"""A consumer cut off from its coordinator stops handing out records once the failover grace has
passed (`regroup.protocol.failover` rule 7), and resumes when the coordinator answers again — for
real: a coordinator process killed with kill -9 and restarted on the same port and data. A clean
restart (the coordinator ends the streams itself, rule 11) pauses nobody if the coordinator is back
within a heartbeat interval plus the grace of the consumer's last answered heartbeat; a longer stop
pauses it from then on (rule 12: a restarted coordinator could fence it), until it is answered."""

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


def start(tmp_path: Path, interval_ms: int = 10_000) -> tuple[ServerProc, Consumer]:
    """A coordinator and a consumer that has read the 100 records there are."""
    log_dir = tmp_path / "log"
    log = open_log(str(log_dir))
    log.create_topic("t", 2)
    log.close()
    produce(log_dir, 50)
    # A long heartbeat interval: a pause comes from the grace, not from a missed heartbeat.
    s = start_server(tmp_path / "data", "--log", str(log_dir), "--failover-grace-ms", str(GRACE_MS),
                     "--heartbeat-interval-ms", str(interval_ms), "--session-timeout-ms", "60000")
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
    # Back well within the interval plus the grace after the consumer's last answered heartbeat.
    s, consumer = start(tmp_path, interval_ms=40_000)
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


def test_a_clean_stop_longer_than_an_interval_plus_the_grace_pauses_until_the_coordinator_is_back(
        tmp_path: Path) -> None:
    interval_ms = 2_000
    s, consumer = start(tmp_path, interval_ms=interval_ms)
    try:
        assert s.terminate() == 0  # a clean stop: no pause for the stream (rule 11)...
        stopped = time.monotonic()
        while not consumer.paused:  # ...but one once a restarted coordinator could fence it (rule 12)
            assert time.monotonic() - stopped < 30, "the consumer never paused"
            consumer.consume(100, timeout=0.05)
        produce(tmp_path / "log", 10)
        assert consumer.consume(100, timeout=0.3) == [] and consumer.paused  # nothing while cut off
        s = s.restart()
        got: list[object] = []
        deadline = time.monotonic() + 60
        while len(got) < 20:
            assert time.monotonic() < deadline, f"read {len(got)} of 20 records after the restart"
            got += consumer.consume(100, timeout=0.1)
        assert not consumer.paused
        assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    finally:
        consumer.close(timeout=10)
        assert s.terminate() == 0, s.log()
