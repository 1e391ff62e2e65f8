"""What the chaos soak found about a damaged store file (`regroup chaos soak`, fault ``store-corrupt``).

The soak damages ``coordinator.db`` while the coordinator is stopped and expects a refusal at start
with a clear message (``regroup coordinator: ...`` on stderr, exit status 2), never a coordinator that
starts on wrong state. Each test here was a finding of the soak, kept as a strict xfail until it was
fixed: SQLite's own errors at open are turned into that refusal, `codec.decode` refuses what is not
text, and every stored row carries a checksum (`regroup.coordinator.store`). The store's own tests
(tests/coordinator/test_store_integrity.py) check each kind of damage one by one.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from regroup.protocol.messages import HeartbeatRequest, OffsetCommitRequest
from regroup.protocol.shard import EMPTY, Shard
from regroup.rpc.client import CoordinatorClient
from tests.coordinator.server_proc import start_server

OFFSET = 123_456_789  # a committed offset whose digits are easy to find in the file
ARGS = ("--log", "static:orders=3")


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir with one group, one member and a committed offset on each of 3 partitions, cleanly
    stopped (everything in coordinator.db)."""
    data = tmp_path_factory.mktemp("store") / "data"
    s = start_server(data, *ARGS)
    c = CoordinatorClient(s.address, timeout_s=10)
    try:
        r = c.heartbeat(HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=30_000,
                                         subscribed_topics=("orders",), owned=EMPTY))
        assert r.assignment is not None and len(r.assignment) == 3, r
        offsets = dict.fromkeys(r.assignment, OFFSET)
        ack = c.commit_offsets(OffsetCommitRequest("g", "m", r.member_epoch, offsets))
        assert ack.ok, ack
    finally:
        c.close()
        assert s.terminate() == 0, s.log()
    return data


def _copy(good: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(good, data)
    return data


def _start(data: Path) -> tuple[int | None, str]:
    """Start the coordinator on ``data``: its exit status and stderr (None: still running after 30 s,
    killed)."""
    proc = subprocess.Popen([sys.executable, "-m", "regroup.coordinator.server", "--listen", "127.0.0.1:0",
                             "--data-dir", str(data), *ARGS], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err


def _garbage_header(db: Path) -> None:
    data = bytearray(db.read_bytes())
    data[:100] = bytes(range(100))
    db.write_bytes(bytes(data))


def _truncated(db: Path) -> None:
    data = db.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    db.write_bytes(data[: (len(data) // page // 2) * page])


def _null_row(db: Path) -> None:
    """A record row that reads as NULL: what a torn page of the records table gave in the soak (seed 1:
    "page 14 of 17: bytes 3584..4096 zeroed" — TypeError: 'NoneType' object is not subscriptable)."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA writable_schema=ON")
    con.execute("UPDATE sqlite_master SET sql=replace(sql, 'data TEXT NOT NULL', 'data TEXT') "
                "WHERE name='records'")
    con.commit()
    con.close()
    con = sqlite3.connect(db)
    con.execute("INSERT INTO records (seq, data) VALUES ((SELECT MAX(seq) + 1 FROM records), NULL)")
    con.commit()
    con.close()


@pytest.mark.parametrize(("damage", "said"), [
    (_garbage_header, "SQLite cannot read it (file is not a database)"),
    (_truncated, "SQLite cannot read it (database disk image is malformed)"),
    (_null_row, "reads as NULL, not as the text of a record"),
], ids=["garbage-header", "truncated", "null-row"])
def test_a_damaged_store_file_is_refused_with_a_clear_message(good_store: Path, tmp_path: Path,
                                                              damage: object, said: str) -> None:
    data = _copy(good_store, tmp_path)
    damage(data / "coordinator.db")  # type: ignore[operator]
    status, err = _start(data)
    assert status is not None, "the coordinator started on a damaged store"
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err, err[-2000:]
    assert status == 2 and last.startswith("regroup coordinator:"), err[-2000:]
    assert "coordinator.db is damaged" in last and said in last, last
    assert "restore the data dir from a backup" in last, last  # what the operator can do


def test_a_changed_byte_in_a_stored_record_is_detected(good_store: Path, tmp_path: Path) -> None:
    data = _copy(good_store, tmp_path)
    db = data / "coordinator.db"
    raw = db.read_bytes()
    assert str(OFFSET).encode() in raw
    db.write_bytes(raw.replace(str(OFFSET).encode(), str(OFFSET - 9).encode()))  # ...789 -> ...780
    status, err = _start(data)
    assert status is not None, "the coordinator started on a changed record"
    last = err.strip().splitlines()[-1]
    assert status == 2 and last.startswith("regroup coordinator:") and "Traceback" not in err, err[-2000:]
    # the first changed row is named, with the changed text and both checksums
    assert re.search(r"coordinator\.db is damaged: record \d+ .*123456780.* fails its checksum: stored "
                     r"[0-9a-f]{8}, computed [0-9a-f]{8}", last), last


def test_the_good_store_starts_and_serves_its_offsets(good_store: Path, tmp_path: Path) -> None:
    """The other tests' control: the undamaged copy starts (the checks do not refuse a good file)."""
    s = start_server(_copy(good_store, tmp_path), *ARGS)
    c = CoordinatorClient(s.address, timeout_s=10)
    try:
        offsets = c.describe_group("g").description.offsets
        assert {p: offsets[Shard("orders", p)].offset for p in range(3)} == dict.fromkeys(range(3), OFFSET)
    finally:
        c.close()
        assert s.terminate() == 0, s.log()
