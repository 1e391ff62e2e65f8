"""Regression test for a bug in the embedded log's producer during a merge (`EmbeddedLog._produce_routed`,
regroup/log/embedded/log.py), found by tests/spark/test_source_split.py: while a change of several
pieces is announced, a producer call whose records go to only some of those pieces lets go of them
and waits for the new layout — still holding the writer of another announced piece it wrote before.
The change must take that piece too, so it waits for its deadline and is withdrawn (`LogTimeoutError`),
and the producer is held as long. `pieces` rule 3 says a producer of an announced piece lets it go at
its next produce call: it lets go of every announced piece it holds before waiting."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.keyrange import KEY_SPACE, key_hash

KEYS = [f"key-{i}".encode() for i in range(64)]
LOW = next(k for k in KEYS if key_hash(k, 0) < KEY_SPACE // 2)
HIGH = next(k for k in KEYS if key_hash(k, 0) >= KEY_SPACE // 2)


def test_a_merge_completes_while_a_producer_writes_only_one_of_the_merged_pieces(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log", fsync="never") as producer, \
            EmbeddedLog(tmp_path / "log", fsync="never") as admin:
        producer.create_topic("t", 1)
        admin.split_partition("t", 0, 2)
        producer.produce("t", 0, [LogRecord(LOW, b"a", 0), LogRecord(HIGH, b"b", 0)])  # holds both pieces
        stop = threading.Event()
        errors: list[BaseException] = []

        def keep_writing_the_low_keys() -> None:
            try:
                while not stop.is_set():
                    producer.produce("t", 0, [LogRecord(LOW, b"x", 0)])
                    time.sleep(0.005)
            except BaseException as e:  # e.g. PartitionLockedError racing a withdrawn change
                errors.append(e)

        writer = threading.Thread(target=keep_writing_the_low_keys)
        writer.start()
        try:
            admin.merge_partition("t", 0, timeout_s=1.5)
        finally:
            stop.set()
            writer.join(timeout=30)
        assert admin.layout("t", 0).whole and not errors
