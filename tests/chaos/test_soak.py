"""`regroup chaos soak`: its schedule, its accounting and its proxy, and a short soak of real processes."""

from __future__ import annotations

import itertools
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from regroup.chaos.soak_procs import Incarnation
from regroup.chaos.soak_proxy import Proxy
from regroup.chaos.soak_schedule import CORRUPT_MODES, KINDS, corrupt, parse_kinds, schedule
from regroup.chaos.soak_verify import Ledger, Window, account

# ============================================================================ the schedule


def test_the_schedule_is_a_function_of_the_seed_and_starts_with_one_fault_of_each_kind() -> None:
    first = list(itertools.islice(schedule(11, KINDS, 4, 6_000), 40))
    assert first == list(itertools.islice(schedule(11, KINDS, 4, 6_000), 40))
    assert first != list(itertools.islice(schedule(12, KINDS, 4, 6_000), 40))
    assert sorted(f.kind for f in first[: len(KINDS)]) == sorted(KINDS)
    assert {f.kind for f in first} == set(KINDS)
    assert all(f.target is not None and 0 <= f.target < 4 for f in first if f.kind.startswith("member"))
    only = list(itertools.islice(schedule(3, ("member-kill", "disk-full"), 2, 6_000), 10))
    assert {f.kind for f in only} == {"member-kill", "disk-full"}


def test_fault_kinds_are_parsed_and_checked() -> None:
    assert parse_kinds(None) == KINDS == parse_kinds("all")
    assert parse_kinds("disk-full, member-kill,disk-full") == ("disk-full", "member-kill")
    with pytest.raises(ValueError, match="choose among"):
        parse_kinds("member-kill,meteor")


def test_every_corruption_damages_the_file_and_says_how(tmp_path: Path) -> None:
    db = tmp_path / "coordinator.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, data TEXT NOT NULL)")
    con.executemany("INSERT INTO records VALUES (?, ?)", [(i, f'["O","g",{i}]' * 20) for i in range(500)])
    con.commit()
    con.close()
    good = db.read_bytes()
    for i, mode in enumerate(CORRUPT_MODES):
        db.write_bytes(good)
        what = corrupt(db, mode, seed=i)
        assert db.read_bytes() != good, mode
        assert what, mode
    with pytest.raises(ValueError, match="unknown corruption mode"):
        corrupt(db, "fire", 0)


# ============================================================================ the accounting


def _life(tmp_path: Path, id: int, name: str, lines: list[str], events: list[str]) -> Incarnation:
    out = tmp_path / f"{name}.{id}.out"
    out.write_text("".join(line + "\n" for line in lines))
    Path(f"{out}.events").write_text("".join(e + "\n" for e in events))
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    inc = Incarnation(id, name, 1, False, None, out, tmp_path / f"{name}.{id}.log", proc)
    inc.end = "stopped"
    return inc


def test_duplicates_are_explained_by_an_unclean_end_before_the_commit_and_losses_are_named(
        tmp_path: Path) -> None:
    # a: processes seq 0-9 (partition 0), commits up to 5, is killed at t=20 (fault #1).
    a = _life(tmp_path, 1, "c0", ["b 10.0", *(f"{s} 0 {s}" for s in range(10))], ["11.0 commit 0=5"])
    a.unclean.append((20.0, "killed"))
    # b: takes partition 0 over at the committed offset: 5-9 again, commits everything.
    b = _life(tmp_path, 2, "c1", ["b 25.0", *(f"{s} 0 {s}" for s in range(5, 10))], ["26.0 commit 0=10"])
    # c: reads seq 3 again although a committed past it and ended cleanly: unexplained.
    c = _life(tmp_path, 3, "c2", ["b 30.0", "3 0 3", "b 31.0", "10 0 10", "oops"], [])
    ledger = Ledger(partitions=1)
    lives = {inc.id: inc for inc in (a, b, c)}
    for inc in lives.values():
        ledger.tail(inc)
    assert ledger.frontier == [11]
    in_log = {s: (0, s) for s in range(12)}
    records = account(ledger, lives, 12, in_log, [Window(1, "member-kill", 19.0, 30.0, killed=(1,))])
    assert (records.produced, records.deliveries, records.distinct) == (12, 17, 11)
    assert (records.lost, records.lost_seqs) == (1, [11])
    assert (records.duplicates, records.explained, records.unexplained) == (6, 5, 1)
    assert records.by_cause == {"member-kill": 5}
    assert [u["seq"] for u in records.unexplained_seqs] == [3]
    assert not records.misread


def test_a_lost_membership_explains_a_duplicate_by_the_fault_in_whose_window_it_came(tmp_path: Path) -> None:
    a = _life(tmp_path, 1, "c0", ["b 10.0", "0 0 0"], ["12.0 lost 0"])
    b = _life(tmp_path, 2, "c1", ["b 13.0", "0 0 0"], ["13.5 commit 0=1"])
    c = _life(tmp_path, 3, "c2", ["b 50.0", "1 0 5"], ["60.0 lost 0"])
    d = _life(tmp_path, 4, "c3", ["b 61.0", "1 0 5"], [])
    ledger = Ledger(partitions=1)
    lives = {inc.id: inc for inc in (a, b, c, d)}
    for inc in lives.values():
        ledger.tail(inc)
    records = account(ledger, lives, 2, {0: (0, 0), 1: (0, 1)}, [Window(1, "connection-cut", 11.0, 14.0)])
    assert records.by_cause == {"connection-cut": 1, "no fault: lost": 1}
    assert records.unexplained == 0
    assert records.misread == ["seq 1: processed as 0/5, in the log at (0, 1)"]


# ============================================================================ the proxy


def _echo_server() -> tuple[socket.socket, str]:
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(1024), b"")],
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, f"127.0.0.1:{srv.getsockname()[1]}"


def _wait_for(cond: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout  # a bound for a hang, not the expected wait
    while not cond():
        assert time.monotonic() < deadline, "the proxy's relayed connections did not settle"
        time.sleep(0.01)


def _roundtrip(address: str) -> bytes:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"ping")
        return s.recv(4)


def test_the_proxy_relays_cuts_every_connection_refuses_and_restores() -> None:
    srv, upstream = _echo_server()
    proxy = Proxy(upstream)
    try:
        address = proxy.start()
        assert _roundtrip(address) == b"ping"
        host, _, port = address.rpartition(":")
        held = socket.create_connection((host, int(port)), timeout=5)
        held.sendall(b"held")
        assert held.recv(4) == b"held"
        # The first round trip's connection ends on the loop's own time (its client closed it; the
        # relay drains both directions first): wait for it to go, so only the held one is cut.
        _wait_for(lambda: proxy.open_ends == 2)
        assert proxy.cut() == 2  # the held connection: both ends
        with pytest.raises(OSError):
            held.sendall(b"more")
            if not held.recv(4):
                raise ConnectionResetError("closed")
        with pytest.raises(ConnectionRefusedError):
            _roundtrip(address)
        proxy.restore()
        assert proxy.address == address
        assert _roundtrip(address) == b"ping"
        held.close()
    finally:
        proxy.close()
        srv.close()


# ============================================================================ a short soak

SEED = 20261126


@pytest.mark.slow
def test_a_short_soak_loses_nothing_and_explains_every_duplicate(tmp_path: Path) -> None:
    """`regroup chaos soak` for about a minute: one fault of each kind at least (the schedule's first
    seven), three consumer members, no Spark member (too slow to start for CI)."""
    done = subprocess.run([sys.executable, "-m", "regroup.cli", "chaos", "soak", "--minutes", "1", "--seed",
                           str(SEED), "--members", "3", "--dir", str(tmp_path / "soak"), "--keep", "--json"],
                          capture_output=True, text=True, timeout=900)
    print(done.stderr)  # the soak's progress, for a failure's report
    report = json.loads(done.stdout)
    r = report["records"]
    assert r["produced"] > 1_000 and r["in_log"] == r["produced"]
    assert r["lost"] == 0, r["lost_seqs"]
    assert r["unexplained"] == 0, r["unexplained_seqs"]
    assert not r["misread"], r["misread"]
    assert r["explained"] == r["duplicates"] == sum(r["by_cause"].values())
    assert {k for k, v in report["by_kind"].items() if v["count"]} == set(KINDS)
    assert all(f["recovered"] for f in report["faults"]), report["faults"]
    assert report["by_kind"]["disk-full"]["outcomes"].get("writes refused"), report["by_kind"]["disk-full"]
    unknown = [f for f in report["findings"] if not f["known"]]
    assert not unknown, unknown
    assert report["ok"] and done.returncode == 0
