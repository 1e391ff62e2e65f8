"""`pieces` rule 3 for a producer whose call writes to none of the announced pieces: it still lets go
of the announced pieces it holds (so the change can take them) and writes on without waiting."""

from __future__ import annotations

import threading
from pathlib import Path

from regroup.log.base import LogRecord
from regroup.log.embedded import EmbeddedLog
from regroup.protocol.keyrange import KEY_SPACE, key_hash

KEYS = [f"key-{i}".encode() for i in range(256)]


def _key_in(lo: int, hi: int) -> bytes:
    return next(k for k in KEYS if lo <= key_hash(k, 0) < hi)


def test_a_merge_completes_while_a_producer_writes_only_a_piece_outside_it(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path / "log", fsync="never") as producer, \
            EmbeddedLog(tmp_path / "log", fsync="never") as admin:
        producer.create_topic("t", 1)
        admin.split_partition("t", 0, 2)
        high = max(admin.layout("t", 0).open_pieces(), key=lambda p: p.lo)
        admin.split_partition("t", 0, 2, piece=high.id)
        opened = admin.layout("t", 0).open_pieces()  # keys [0, 1/2), [1/2, 3/4), [3/4, 1)
        assert len(opened) == 3 and opened[2].hi == KEY_SPACE
        keys = [_key_in(p.lo, p.hi) for p in opened]
        producer.produce("t", 0, [LogRecord(k, b"a", 0) for k in keys])  # holds all three pieces
        merged = [opened[0].id, opened[1].id]
        stop = threading.Event()
        errors: list[BaseException] = []
        produced = threading.Event()

        def keep_writing_the_last_piece() -> None:
            try:
                while not stop.is_set():
                    producer.produce("t", 0, [LogRecord(keys[2], b"x", 0)])
                    produced.set()
            except BaseException as e:
                errors.append(e)

        writer = threading.Thread(target=keep_writing_the_last_piece)
        writer.start()
        try:
            assert produced.wait(timeout=10)
            new = admin.merge_partition("t", 0, merged, timeout_s=5)
        finally:
            stop.set()
            writer.join(timeout=30)
        assert not errors
        assert [(p.lo, p.hi) for p in new.open_pieces()] == [(0, opened[1].hi), (opened[2].lo, KEY_SPACE)]
        # The producer of the untouched piece was never held, and its records are all there.
        assert admin.piece_ends("t", 0)[(opened[2].lo, KEY_SPACE)] > opened[2].start + 1
