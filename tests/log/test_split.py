"""Producer-side split and merge of an embedded partition: the layout's rules, the procedure with
producers writing, and readers that see every key's records once and in order across both."""

from __future__ import annotations

import json
import multiprocessing as mp
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.log.embedded.layout import KEY_SPACE, Layout, LayoutError, Piece, SpansOpenPieces
from regroup.log.errors import CorruptLogError, InvalidRecordError, LogTimeoutError
from regroup.protocol.keyrange import key_hash

KEYS = [f"key-{i}".encode() for i in range(40)]


def rec(key: bytes | None, value: str) -> LogRecord:
    return LogRecord(key, value.encode(), 0)


def drain(log: EmbeddedLog, lo: int, hi: int, start: int = 0,
          step: int = 7) -> tuple[list[tuple[bytes, str]], int]:
    """Every record of keys [lo, hi) from ``start``, read in steps, and where reading ended."""
    out: list[tuple[bytes, str]] = []
    pos = start
    while True:
        got = log.read_keys("t", 0, lo, hi, pos, step)
        for r in got.records:
            assert r.key is not None and lo <= key_hash(r.key, r.offset) < hi
            out.append((r.key, r.value.decode() if r.value else ""))
        if not got.records and got.next_offset == pos:
            return out, pos
        assert got.next_offset >= pos
        pos = got.next_offset


# ------------------------------------------------------------------------------------ layout rules


def test_split_and_merge_shapes() -> None:
    layout = Layout().split(0, 3, 500)
    third = KEY_SPACE // 3
    assert [(p.lo, p.hi, p.start) for p in layout.open_pieces()] == [
        (0, third, 500), (third, 2 * KEY_SPACE // 3, 500), (2 * KEY_SPACE // 3, KEY_SPACE, 500)]
    assert layout.piece(0).end == 500 and not layout.whole and layout.generation == 1
    merged = layout.merge({1: 700, 2: 650})
    top = merged.open_pieces()[0]
    assert (top.lo, top.hi, top.start) == (0, 2 * KEY_SPACE // 3, 700)  # the highest end: keys only grow
    assert merged.merge({top.id: 900, 3: 800}).whole
    assert Layout.from_json(json.loads(json.dumps(merged.to_json()))) == merged


@pytest.mark.parametrize(("change", "message"), [
    (lambda lay: lay.split(0, 2, 10), "sealed"),
    (lambda lay: lay.split(1, 1, 10), "2..256"),
    (lambda lay: lay.merge({1: 20}), "at least two"),
    (lambda lay: lay.merge({1: 20, 0: 20}), "sealed"),
    (lambda lay: lay.split(1, 2, 5), "below piece 1's start"),
    (lambda lay: lay.split(7, 2, 20), "no piece 7"),
])
def test_changes_the_layout_refuses(change, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LayoutError, match=message):
        change(Layout().split(0, 2, 10))


def test_only_adjacent_pieces_merge() -> None:
    layout = Layout().split(0, 3, 10)
    with pytest.raises(LayoutError, match="not adjacent"):
        layout.merge({1: 10, 3: 10})


@pytest.mark.parametrize("raw", [
    {"generation": 0, "pieces": [[0, 0, KEY_SPACE // 2, 0, None]]},  # open pieces leave a gap
    {"generation": 0, "pieces": [[0, 0, KEY_SPACE, 0, None], [0, 0, KEY_SPACE, 0, 5]]},  # duplicate id
    {"generation": 0, "pieces": [[0, 0, KEY_SPACE, 9, 3], [1, 0, KEY_SPACE, 3, None]]},  # end below start
    {"generation": "1", "pieces": [[0, 0, KEY_SPACE, 0, None]]},
    {"pieces": [[0, 0, KEY_SPACE, 0]]},
])
def test_a_bad_layout_file_is_refused(raw: object) -> None:
    with pytest.raises(LayoutError):
        Layout.from_json(raw)


def test_a_range_across_open_pieces_is_refused_with_the_pieces_named() -> None:
    layout = Layout().split(0, 2, 10)
    with pytest.raises(SpansOpenPieces, match="2 open pieces"):
        layout.reading(0, KEY_SPACE, 0)
    reading = layout.reading(0, KEY_SPACE // 2, 3)
    assert [p.id for p in reading.sealed] == [0] and reading.open is not None and reading.open.id == 1
    assert layout.reading(0, KEY_SPACE // 2, 10).sealed == ()  # the parent holds nothing at or above 10


# ------------------------------------------------------------------------- the model, against the log

OPS = st.lists(st.one_of(
    st.tuples(st.just("produce"), st.lists(st.integers(0, len(KEYS) - 1), min_size=1, max_size=30)),
    st.tuples(st.just("split"), st.integers(0, 7), st.integers(2, 4)),
    st.tuples(st.just("merge"), st.integers(0, 7)),
    st.tuples(st.just("read"), st.integers(0, 7), st.integers(1, 20)),
), min_size=1, max_size=25)


@settings(max_examples=120)
@given(ops=OPS)
def test_readers_see_every_key_once_and_in_order_across_splits_and_merges(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    """A model of a consumer: lanes of keys with a position each, cut at open-piece boundaries when a
    split reaches them (each part from the lane's position), read in random steps between random
    produces, splits and merges. At the end every key's records were read exactly once, in order."""
    with tempfile.TemporaryDirectory() as d, EmbeddedLog(d, fsync="never") as log:
        log.create_topic("t", 1)
        produced: dict[bytes, list[str]] = {}
        read: dict[bytes, list[str]] = {}
        lanes: list[tuple[int, int, int]] = [(0, KEY_SPACE, 0)]
        n = 0

        def cut_lanes() -> None:
            nonlocal lanes
            pieces = log.key_pieces("t", 0)
            out = []
            for lo, hi, pos in lanes:
                out += [(max(lo, a), min(hi, b), pos) for a, b in pieces if a < hi and lo < b]
            lanes = out

        def step(i: int, size: int) -> None:
            lo, hi, pos = lanes[i]
            got = log.read_keys("t", 0, lo, hi, pos, size)
            for r in got.records:
                assert r.key is not None and lo <= key_hash(r.key, r.offset) < hi
                read.setdefault(r.key, []).append(r.value.decode() if r.value else "")
            lanes[i] = (lo, hi, got.next_offset)

        for op in ops:
            if op[0] == "produce":
                batch = [rec(KEYS[k], f"v{n + j}") for j, k in enumerate(op[1])]
                n += len(batch)
                log.produce("t", 0, batch)
                for r in batch:
                    produced.setdefault(r.key or b"", []).append(r.value.decode() if r.value else "")
            elif op[0] == "split":
                opened = log.layout("t", 0).open_pieces()
                log.split_partition("t", 0, op[2], piece=opened[op[1] % len(opened)].id)
            elif op[0] == "merge":
                opened = log.layout("t", 0).open_pieces()
                if len(opened) > 1:
                    i = op[1] % (len(opened) - 1)
                    log.merge_partition("t", 0, [opened[i].id, opened[i + 1].id])
            else:
                cut_lanes()
                step(op[1] % len(lanes), op[2])
        cut_lanes()
        for i in range(len(lanes)):
            while True:
                before = lanes[i][2]
                step(i, 13)
                if lanes[i][2] == before:
                    break
        assert read == produced


# ------------------------------------------------------------------------------ the log's procedure


@pytest.fixture
def log(tmp_path: Path) -> EmbeddedLog:
    lg = EmbeddedLog(tmp_path / "log", fsync="never")
    lg.create_topic("t", 1)
    return lg


def test_offsets_of_children_start_at_the_parent_end_and_survive_reopening(
        log: EmbeddedLog, tmp_path: Path) -> None:
    log.produce("t", 0, [rec(KEYS[i % 10], str(i)) for i in range(100)])
    layout = log.split_partition("t", 0, 2)
    assert [p.start for p in layout.open_pieces()] == [100, 100]
    log.produce("t", 0, [rec(KEYS[i % 10], str(i)) for i in range(100, 160)])
    ends = log.piece_ends("t", 0)
    assert sum(ends.values()) - 200 == 60 and min(ends.values()) >= 100
    log.close()
    with EmbeddedLog(tmp_path / "log", fsync="never") as again:
        again.produce("t", 0, [rec(KEYS[0], "after")])
        lo, hi = next((lo, hi) for lo, hi in again.key_pieces("t", 0) if lo <= key_hash(KEYS[0], 0) < hi)
        got, _ = drain(again, lo, hi)
        assert got[-1] == (KEYS[0], "after")
        assert again.record_counts("t") == {0: 161}


def test_keyless_records_wait_for_the_partition_to_be_whole(log: EmbeddedLog) -> None:
    log.produce("t", 0, [rec(None, "a"), rec(KEYS[1], "b")])
    log.split_partition("t", 0, 2)
    with pytest.raises(InvalidRecordError, match="keyless record"):
        log.produce("t", 0, [rec(KEYS[1], "c"), rec(None, "d")])
    log.merge_partition("t", 0)
    log.produce("t", 0, [rec(None, "e")])
    values, pos = [], 0
    while batch := log.read("t", 0, pos, 100):
        values += [r.value for r in batch]
        pos = batch[-1].offset + 1
    assert values == [b"a", b"b", b"e"]


def test_a_whole_partition_read_of_a_split_partition_names_the_way_out(log: EmbeddedLog) -> None:
    log.split_partition("t", 0, 2)
    with pytest.raises(SpansOpenPieces, match="one range per open piece"):
        log.read("t", 0, 0, 10)


def test_an_idle_producer_holding_the_piece_makes_the_split_time_out_and_change_nothing(
        tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log", fsync="never") as producer, \
            EmbeddedLog(tmp_path / "log", fsync="never") as admin:
        producer.create_topic("t", 1)
        producer.produce("t", 0, [rec(KEYS[0], "x")])  # takes the writer lock, then goes idle
        with pytest.raises(LogTimeoutError, match="lets go of a piece at its next produce call"):
            admin.split_partition("t", 0, 2, timeout_s=0.3)
        assert admin.layout("t", 0).pending is None and admin.layout("t", 0).whole
        producer.produce("t", 0, [rec(KEYS[0], "y")])  # the producer carries on
        assert [r.value for r in admin.read("t", 0, 0, 10)] == [b"x", b"y"]


def test_an_announcement_whose_maker_died_is_void_after_its_deadline(log: EmbeddedLog) -> None:
    log.produce("t", 0, [rec(KEYS[0], "a")])
    stale = Layout().announce([0], deadline_ms=1, token="dead")
    (log.directory / "topics" / "t" / "0" / "layout.json").write_text(json.dumps(stale.to_json()))
    log.produce("t", 0, [rec(KEYS[0], "b")])
    assert [r.value for r in log.read("t", 0, 0, 10)] == [b"a", b"b"]


def test_a_corrupt_layout_file_is_an_error_not_a_guess(log: EmbeddedLog) -> None:
    (log.directory / "topics" / "t" / "0").mkdir(parents=True, exist_ok=True)
    (log.directory / "topics" / "t" / "0" / "layout.json").write_text("{not json")
    with pytest.raises(CorruptLogError, match=r"layout\.json is unreadable"):
        log.produce("t", 0, [rec(KEYS[0], "a")])


def _produce_forever(directory: str, stop: threading.Event | None, count: int, chunk: int) -> None:
    with EmbeddedLog(directory, fsync="never") as lg:
        i = 0
        while i < count and not (stop is not None and stop.is_set()):
            lg.produce("t", 0, [rec(KEYS[(i + j) % len(KEYS)], str(i + j)) for j in range(chunk)])
            i += chunk


def _check_all(log: EmbeddedLog, total: int) -> None:
    got: list[tuple[bytes, str]] = []
    for lo, hi in log.key_pieces("t", 0):
        part, _ = drain(log, lo, hi, step=500)
        got += part
    assert len(got) == total, f"{len(got)} records read, {total} produced"
    by_key: dict[bytes, list[int]] = {}
    for k, v in got:
        by_key.setdefault(k, []).append(int(v))
    for k, vs in by_key.items():
        assert vs == sorted(vs) and len(set(vs)) == len(vs), f"key {k!r} out of order or repeated"
    assert sorted(v for vs in by_key.values() for v in vs) == list(range(total))


def test_split_and_merge_while_a_thread_produces(log: EmbeddedLog) -> None:
    directory = str(log.directory)
    t = threading.Thread(target=_produce_forever, args=(directory, None, 20_000, 20))
    t.start()
    try:
        _wait_for_records(log, 1000)
        log.split_partition("t", 0, 2, timeout_s=20)
        _wait_for_records(log, 5000)
        log.split_partition("t", 0, 2, piece=log.layout("t", 0).open_pieces()[0].id, timeout_s=20)
        _wait_for_records(log, 10_000)
        log.merge_partition("t", 0, timeout_s=20)
    finally:
        t.join()
    _check_all(log, 20_000)


def test_split_and_merge_while_another_process_produces(log: EmbeddedLog) -> None:
    proc = mp.get_context("spawn").Process(target=_produce_forever,
                                           args=(str(log.directory), None, 30_000, 50))
    proc.start()
    try:
        _wait_for_records(log, 2000)
        log.split_partition("t", 0, 3, timeout_s=30)
        _wait_for_records(log, 12_000)
        log.merge_partition("t", 0, timeout_s=30)
    finally:
        proc.join(60)
    assert proc.exitcode == 0
    _check_all(log, 30_000)


def _wait_for_records(log: EmbeddedLog, n: int) -> None:
    import time

    while log.record_counts("t")[0] < n:
        time.sleep(0.005)


def test_pieces_are_stored_each_in_its_own_files(log: EmbeddedLog) -> None:
    log.split_partition("t", 0, 2)
    log.produce("t", 0, [rec(k, "x") for k in KEYS])
    pdir = log.directory / "topics" / "t" / "0"
    layout = log.layout("t", 0)
    for p in layout.open_pieces():
        assert (pdir / "pieces" / str(p.id) / "log").stat().st_size > 0
    assert isinstance(layout.piece(0), Piece) and (pdir / "log").stat().st_size == 0
