"""The embedded log: round trips, topics and partitions, durability and recovery, concurrency."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import struct
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.log.embedded.frames import MAX_FRAME_RECORDS
from regroup.log.embedded.writer import INDEX_INTERVAL_BYTES
from regroup.log.errors import (
    CorruptLogError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    LogError,
    OffsetOutOfRangeError,
    PartitionLockedError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from tests.log import workers


def rec(i: int, size: int = 10) -> LogRecord:
    return LogRecord(b"k%d" % i, b"v%d-" % i + b"x" * size, 1_000 + i)


def summary(records: list) -> list[tuple]:  # type: ignore[type-arg]
    return [(r.key, r.value, r.timestamp_ms, tuple(r.headers)) for r in records]


@pytest.fixture
def log(tmp_path: Path):  # type: ignore[no-untyped-def]
    with EmbeddedLog(tmp_path / "log") as lg:
        yield lg


def partition_dir(log: EmbeddedLog, topic: str, p: int = 0) -> Path:
    return log.directory / "topics" / topic / str(p)


# ------------------------------------------------------------------------------------------ basics


def test_round_trip_keeps_every_field(log: EmbeddedLog) -> None:
    log.create_topic("orders", 1)
    records = [
        LogRecord(b"k", b"v", 1),
        LogRecord(None, b"no key", 2),
        LogRecord(b"no value", None, 3),
        LogRecord(None, None, -1),
        LogRecord(b"", b"", 2**62),
        LogRecord(b"h", b"with headers", 5, (("a", b"1"), ("a", b"2"), ("ünï", b""), ("", b"\x00"))),
        LogRecord(bytes(range(256)), bytes(range(256)) * 40, 6),
    ]
    assert log.produce("orders", 0, records) == 0
    got = log.read("orders", 0, 0, 100)
    assert [r.offset for r in got] == list(range(len(records)))
    assert {(r.topic, r.partition) for r in got} == {("orders", 0)}
    assert summary(got) == summary(records)


def test_offsets_continue_across_batches_and_reads_slice_anywhere(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    assert log.produce("t", 0, [rec(i) for i in range(10)]) == 0
    assert log.produce("t", 0, [rec(i) for i in range(10, 25)]) == 10
    assert log.produce("t", 0, []) == 25  # nothing written; where the next record would go
    assert log.end_offsets("t") == {0: 25}
    for start in range(25):
        for max_records in (1, 3, 10, 100):
            got = log.read("t", 0, start, max_records)
            want = list(range(start, min(25, start + max_records)))
            assert [r.offset for r in got] == want
            assert [r.key for r in got] == [b"k%d" % i for i in want]
    assert log.read("t", 0, 25, 10) == []
    assert log.read("t", 0, 3, 0) == []


def test_out_of_range_and_bad_read_arguments(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    log.produce("t", 0, [rec(0)])
    with pytest.raises(OffsetOutOfRangeError, match="offset 2 is out of range for t/0"):
        log.read("t", 0, 2, 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_arrow("t", 0, -1, 1)
    with pytest.raises(ValueError, match="max_records"):
        log.read("t", 0, 0, -1)


def test_many_partitions_are_independent(log: EmbeddedLog) -> None:
    log.create_topic("wide", 64)
    for p in range(64):
        log.produce("wide", p, [rec(p * 1000 + i) for i in range(p % 5)])
    assert log.end_offsets("wide") == {p: p % 5 for p in range(64)}
    for p in range(64):
        assert [r.key for r in log.read("wide", p, 0, 10)] == [b"k%d" % (p * 1000 + i) for i in range(p % 5)]
    assert log.topic_partitions() == {"wide": 64}


def test_topics_listing_and_creation_errors(log: EmbeddedLog) -> None:
    assert log.topic_partitions() == {}
    log.create_topic("a.b_c-D9", 3)
    log.create_topic("z", 1)
    log.create_topic(".hidden", 2)  # legal in Kafka, so legal here
    (log.directory / "topics" / "README.txt").write_text("not a topic")
    assert log.topic_partitions() == {".hidden": 2, "a.b_c-D9": 3, "z": 1}
    with pytest.raises(TopicExistsError, match="'z' already exists with 1 partitions"):
        log.create_topic("z", 5)
    for bad in ("", ".", "..", "a/b", "sp ace", "ü", "x" * 250, "../escape"):
        with pytest.raises(InvalidTopicError):
            log.create_topic(bad, 1)
    log.create_topic("x" * 249, 1)  # the longest legal name
    for bad_count in (0, -1, 1.5, True, 10**9):
        with pytest.raises(InvalidPartitionsError):
            log.create_topic("fine", bad_count)  # type: ignore[arg-type]


def test_unknown_topics_and_partitions_are_clear_errors(log: EmbeddedLog) -> None:
    log.create_topic("t", 2)
    with pytest.raises(UnknownTopicError, match="unknown topic 'nope'"):
        log.read("nope", 0, 0, 1)
    with pytest.raises(UnknownTopicError):
        log.produce("nope", 0, [rec(0)])
    with pytest.raises(UnknownTopicError):
        log.end_offsets("nope")
    with pytest.raises(UnknownTopicError):
        log.add_partitions("nope", 3)
    with pytest.raises(UnknownPartitionError, match=r"has no partition 2 \(it has 2: 0..1\)"):
        log.read("t", 2, 0, 1)
    with pytest.raises(UnknownPartitionError):
        log.produce("t", 5, [rec(0)])
    with pytest.raises(InvalidPartitionsError):
        log.read("t", -1, 0, 1)


def test_add_partitions_only_grows_and_is_seen_by_other_instances(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as admin, EmbeddedLog(tmp_path) as other:
        admin.create_topic("t", 2)
        other.produce("t", 1, [rec(0)])  # caches "t has 2 partitions"
        admin.add_partitions("t", 5)
        admin.add_partitions("t", 5)  # same total: nothing to do
        with pytest.raises(InvalidPartitionsError, match="only be added"):
            admin.add_partitions("t", 4)
        assert other.topic_partitions() == {"t": 5}
        assert other.end_offsets("t") == {0: 0, 1: 1, 2: 0, 3: 0, 4: 0}
        assert other.read("t", 4, 0, 10) == []
        assert other.produce("t", 4, [rec(1)]) == 0
        assert [r.key for r in admin.read("t", 4, 0, 10)] == [b"k1"]


def test_large_batches_are_split_into_frames_and_random_reads_work(log: EmbeddedLog) -> None:
    log.create_topic("big", 1)
    rng = random.Random(7)
    sizes = [rng.choice((0, 10, 300, 5000)) for _ in range(3 * MAX_FRAME_RECORDS + 123)]
    records = [rec(i, s) for i, s in enumerate(sizes)]
    assert log.produce("big", 0, records) == 0
    files = partition_dir(log, "big")
    assert (files / "index").stat().st_size > 0  # several index entries for > 64 KiB of frames
    assert (files / "log").stat().st_size > 4 * INDEX_INTERVAL_BYTES
    n = len(records)
    for _ in range(60):
        start = rng.randrange(n)
        k = rng.choice((1, 7, 1000, 5000))
        got = log.read("big", 0, start, k)
        assert summary(got) == summary(records[start : start + k])
        assert log.read_arrow("big", 0, start, k).num_rows == len(got)


def test_small_sequential_reads_through_big_frames(log: EmbeddedLog) -> None:
    """Reads smaller than a frame resume inside it (from the reader's cached frame)."""
    log.create_topic("t", 1)
    records = [rec(i, i % 50) for i in range(MAX_FRAME_RECORDS + 900)]
    log.produce("t", 0, records)
    pos, turn = 0, 0
    while pos < len(records):
        turn += 1
        if turn % 3:
            got = log.read("t", 0, pos, 7)
            assert summary(got) == summary(records[pos : pos + 7])
            pos += len(got)
        else:
            rows = log.read_arrow("t", 0, pos, 11).to_pylist()
            assert [r["key"] for r in rows] == [r.key for r in records[pos : pos + 11]]
            pos += len(rows)
    assert [r.offset for r in log.read("t", 0, 3, 2)] == [3, 4]  # and jumping back still works


def test_max_bytes_bounds_a_read_but_always_returns_progress(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    for i in range(10):
        log.produce("t", 0, [rec(i, 1000)])  # ten frames of ~1 KiB
    assert len(log.read("t", 0, 0, 100, max_bytes=1)) == 1
    assert len(log.read("t", 0, 0, 100, max_bytes=2500)) == 3
    assert log.read_arrow("t", 0, 4, 100, max_bytes=1).num_rows == 1


def test_bad_records_are_refused_with_the_reason(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    cases = [
        (LogRecord("str key", b"v", 1), "key must be bytes or None, not str"),  # type: ignore[arg-type]
        (LogRecord(b"k", 5, 1), "value must be bytes or None, not int"),  # type: ignore[arg-type]
        (LogRecord(b"k", b"v", "soon"), "timestamp_ms must be an int64"),  # type: ignore[arg-type]
        (LogRecord(b"k", b"v", 2**63), "timestamp_ms must be an int64"),
        (LogRecord(b"k", b"v", 1, (("h", "text"),)), "is not a (str, bytes) pair"),  # type: ignore[arg-type]
        (LogRecord(b"k", b"v", 1, ((b"h", b"v"),)), "is not a (str, bytes) pair"),  # type: ignore[arg-type]
        ("not a record", "not a LogRecord"),
    ]
    for bad, message in cases:
        with pytest.raises(InvalidRecordError, match=message.replace("(", r"\(").replace(")", r"\)")):
            log.produce("t", 0, [rec(0), bad])  # type: ignore[list-item]
    assert log.end_offsets("t") == {0: 0}  # nothing of a refused batch was written


def test_record_size_limit(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path, max_record_bytes=1000) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [LogRecord(b"k" * 500, b"v" * 500, 1)])
        with pytest.raises(RecordTooLargeError, match="record 1 is 1001 bytes"):
            lg.produce("t", 0, [rec(0), LogRecord(b"k" * 500, b"v" * 501, 1)])


def test_reopen_keeps_everything_and_continues_offsets(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 2)
        lg.produce("t", 0, [rec(i) for i in range(5)])
    with EmbeddedLog(tmp_path) as lg:
        assert lg.topic_partitions() == {"t": 2}
        assert lg.produce("t", 0, [rec(5)]) == 5
        assert [r.key for r in lg.read("t", 0, 0, 10)] == [b"k%d" % i for i in range(6)]


def test_pickled_log_reopens_without_locks(log: EmbeddedLog) -> None:
    log.create_topic("t", 1)
    log.produce("t", 0, [rec(0)])
    copy = pickle.loads(pickle.dumps(log))
    try:
        assert isinstance(copy, EmbeddedLog) and copy.directory == log.directory
        assert [r.key for r in copy.read("t", 0, 0, 1)] == [b"k0"]
        with pytest.raises(PartitionLockedError):  # the original still writes partition 0
            copy.produce("t", 0, [rec(1)])
    finally:
        copy.close()


def test_closed_log_refuses_work_and_directory_of_another_format(tmp_path: Path) -> None:
    lg = EmbeddedLog(tmp_path / "a")
    lg.close()
    lg.close()
    with pytest.raises(LogError, match="closed"):
        lg.topic_partitions()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "regroup-log.json").write_text('{"format": "something-else"}')
    with pytest.raises(LogError, match="not an embedded regroup log"):
        EmbeddedLog(tmp_path / "b")
    with pytest.raises(ValueError, match="fsync"):
        EmbeddedLog(tmp_path / "c", fsync="sometimes")  # type: ignore[arg-type]


# ----------------------------------------------------------------------- single writer, recovery


def test_second_writer_in_the_same_process_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    first = EmbeddedLog(tmp_path)
    first.create_topic("t", 2)
    first.produce("t", 0, [rec(0)])
    with EmbeddedLog(tmp_path) as second:
        held = rf"t/0 .* is already being written \(writer: pid {os.getpid()} on"
        with pytest.raises(PartitionLockedError, match=held):
            second.produce("t", 0, [rec(1)])
        second.produce("t", 1, [rec(1)])  # other partitions are free
        assert second.read("t", 0, 0, 5)[0].key == b"k0"  # and reading never locks
        first.close()
        assert second.produce("t", 0, [rec(2)]) == 1


def test_writer_lock_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        locked, release = ctx.Event(), ctx.Event()
        holder = ctx.Process(target=workers.hold_writer_lock, args=(str(tmp_path), "t", locked, release))
        holder.start()
        try:
            assert locked.wait(30), "the writer process did not start"
            with pytest.raises(PartitionLockedError, match=f"writer: pid {holder.pid} on"):
                lg.produce("t", 0, [rec(1)])
        finally:
            release.set()
            holder.join(30)
        assert holder.exitcode == 0
        assert lg.produce("t", 0, [rec(1)]) == 1  # released when that process closed the log


def _publish_then_unpublish(lg: EmbeddedLog, topic: str, records: list[LogRecord]) -> tuple[bytes, int]:
    """Append ``records`` but put the old end back: the state a crash leaves between the two steps.

    Returns the bytes the produce appended and the log file's size before them.
    """
    files = partition_dir(lg, topic)
    end_before = (files / "end").read_bytes()
    size_before = (files / "log").stat().st_size
    lg.produce(topic, 0, records)
    appended = (files / "log").read_bytes()[size_before:]
    (files / "end").write_bytes(end_before)
    return appended, size_before


def test_torn_tail_is_cut_on_recovery_and_readers_never_see_it(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [rec(i) for i in range(3)])
        appended, size_before = _publish_then_unpublish(lg, "t", [rec(i) for i in range(3, 6)])
    files = tmp_path / "topics" / "t" / "0"
    # A torn write: only part of the last batch reached the file.
    with open(files / "log", "r+b") as f:
        f.truncate(size_before + len(appended) // 2)
    with EmbeddedLog(tmp_path) as reader:
        assert reader.end_offsets("t") == {0: 3}
        assert [r.offset for r in reader.read("t", 0, 0, 10)] == [0, 1, 2]
    with EmbeddedLog(tmp_path) as writer:
        assert writer.produce("t", 0, [rec(100)]) == 3  # recovery cut the torn bytes
        assert (files / "log").stat().st_size > size_before
        assert [r.key for r in writer.read("t", 0, 0, 10)] == [b"k0", b"k1", b"k2", b"k100"]


def test_complete_but_unpublished_batch_is_kept_by_recovery(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [rec(0)])
        _publish_then_unpublish(lg, "t", [rec(1), rec(2)])
    with EmbeddedLog(tmp_path) as lg:
        assert lg.end_offsets("t") == {0: 1}  # readers trust only the published end...
        assert lg.produce("t", 0, [rec(3)]) == 3  # ...and a new writer finds the whole batch intact
        assert [r.key for r in lg.read("t", 0, 0, 10)] == [b"k0", b"k1", b"k2", b"k3"]


def test_a_produce_call_is_atomic_across_a_crash(tmp_path: Path) -> None:
    """A call split into several frames that crashes half-way leaves none of its records."""
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [rec(0)])
        big = [rec(i, 100) for i in range(1, 3 * MAX_FRAME_RECORDS)]
        appended, size_before = _publish_then_unpublish(lg, "t", big)
    files = tmp_path / "topics" / "t" / "0"
    with open(files / "log", "r+b") as f:
        f.truncate(size_before + len(appended) * 2 // 3)  # first frames whole, the last one torn
    with EmbeddedLog(tmp_path) as lg:
        assert lg.produce("t", 0, [rec(99)]) == 1
        assert [r.key for r in lg.read("t", 0, 0, 10)] == [b"k0", b"k99"]


def test_garbage_after_the_end_is_cut(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [rec(0)])
    files = tmp_path / "topics" / "t" / "0"
    with open(files / "log", "ab") as f:
        f.write(os.urandom(5000))
    with open(files / "index", "ab") as f:  # a torn index tail too, with a negative "position"
        f.write(struct.pack("<qq", 0, -5) + os.urandom(21))
    with EmbeddedLog(tmp_path) as lg:
        assert lg.produce("t", 0, [rec(1)]) == 1
        assert [r.key for r in lg.read("t", 0, 0, 10)] == [b"k0", b"k1"]
        assert (files / "index").stat().st_size % 16 == 0


def test_a_wrong_index_is_only_a_hint(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        records = [rec(i, 2000) for i in range(300)]
        for i in range(0, 300, 10):
            lg.produce("t", 0, records[i : i + 10])
        index = partition_dir(lg, "t") / "index"
        assert index.stat().st_size >= 3 * 16
        # Plausible-looking entries that point at the wrong bytes or the wrong frames.
        wrong = [struct.pack("<qq", 40 * k, 70_000 * k + 13 * (k % 2)) for k in range(1, 8)]
        index.write_bytes(b"".join(wrong))
    with EmbeddedLog(tmp_path) as lg:
        for start in (0, 45, 123, 299):
            assert summary(lg.read("t", 0, start, 20)) == summary(records[start : start + 20])


def test_corruption_inside_the_published_range_is_detected(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [rec(0, 100)])
        size_first = (partition_dir(lg, "t") / "log").stat().st_size
        lg.produce("t", 0, [rec(1, 100), rec(2, 100)])
    path = tmp_path / "topics" / "t" / "0" / "log"
    data = bytearray(path.read_bytes())
    data[size_first + 150] ^= 0x01  # one bit in the second frame's values
    path.write_bytes(bytes(data))
    with EmbeddedLog(tmp_path) as lg:
        assert [r.offset for r in lg.read("t", 0, 0, 1)] == [0]  # the first frame is intact
        with pytest.raises(CorruptLogError, match="checksum mismatch at byte"):
            lg.read("t", 0, 0, 10)
        with pytest.raises(CorruptLogError, match="checksum mismatch"):
            lg.read_arrow("t", 0, 1, 10)


def test_a_truncated_file_under_the_published_end_is_corruption(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("t", 1)
        lg.produce("t", 0, [rec(i) for i in range(10)])
    path = tmp_path / "topics" / "t" / "0" / "log"
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 10)
    with EmbeddedLog(tmp_path) as lg, pytest.raises(CorruptLogError, match="committed end"):
        lg.read("t", 0, 0, 10)


# ----------------------------------------------------------------------------------- concurrency


def test_threads_share_one_instance(log: EmbeddedLog) -> None:
    """Producers on several partitions and readers of them, all threads of one process."""
    log.create_topic("t", 4)

    def produce(p: int) -> None:
        for i in range(50):
            log.produce("t", p, [rec(p * 10_000 + i * 10 + j) for j in range(10)])

    def read_all(p: int) -> int:
        pos = 0
        while pos < 500:
            got = log.read("t", p, pos, 37)
            assert [r.offset for r in got] == list(range(pos, pos + len(got)))
            pos += len(got)
        return pos

    with ThreadPoolExecutor(8) as pool:
        readers = [pool.submit(read_all, p) for p in range(4)]
        for f in [pool.submit(produce, p) for p in range(4)]:
            f.result(timeout=60)
        assert [f.result(timeout=60) for f in readers] == [500] * 4


def test_more_partitions_than_cached_readers(log: EmbeddedLog) -> None:
    log.create_topic("wide", 300)
    for p in range(300):
        log.produce("wide", p, [rec(p)])
    for _ in range(2):
        for p in range(300):
            assert log.read("wide", p, 0, 5)[0].key == b"k%d" % p
    assert set(log.end_offsets("wide").values()) == {1}


def test_a_reader_process_follows_a_writer_process(tmp_path: Path) -> None:
    """Real processes: the reader verifies every record while the writer appends.

    The reader fails on any torn or partial record (content mismatch or CorruptLogError), and must
    reach the writer's last offset; seeing several distinct end offsets shows they really overlapped.
    """
    total = 30_000
    with EmbeddedLog(tmp_path) as lg:
        lg.create_topic("live", 1)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        reader = pool.submit(workers.reader_main, str(tmp_path), "live", total, 40.0)
        writer = pool.submit(workers.writer_main, str(tmp_path), "live", total, 42)
        writer.result(timeout=60)
        verified, ends_seen, error = reader.result(timeout=60)
    assert error == ""
    assert verified == total
    assert ends_seen >= 2, "the reader never saw the log grow: the processes did not overlap"
