"""The chaos soak's faults, injected into a running `Rig`, and what came of each.

Rules of this module:

1. A fault has three moments: it starts, it is lifted (the killed process restarted, SIGCONT, the
   proxy listening again, space back on the disk, the good store file back), and the group has
   recovered: every record produced before the lift is processed and every member runs. The time to
   recover is from the lift to the recovery; a fault not recovered within the rig's timeout fails.
2. The coordinator's faults that stop it check, once it is back, that every commit a member had
   acknowledged before the stop is still there (`Rig.check_durable`).
3. A full disk is ``RLIMIT_FSIZE`` set on the running coordinator (`Coordinator.limit_files`): the
   coordinator must stop by itself (fail-stop, exit status 1) saying the record store failed, and
   recover from its data dir once restarted without the limit. No root, no tmpfs: a per-process limit
   fails the writes of the coordinator only, at a chosen size, and is lifted as easily.
4. A corrupted store file is made while the coordinator is stopped and while the proxy refuses every
   member, so that no member ever talks to a coordinator started on a damaged file. The coordinator
   must refuse to start with a clear message (status 2, one ``regroup coordinator: ...`` line); if it
   starts, its view of the group is compared with the one it has from the good files put back
   (undetected but intact, or silently wrong). Either way the good files are put back.
5. What a fault found that is a known bug (a strict-xfail test names it) is reported as known, apart.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from regroup.chaos.soak_procs import Started
from regroup.chaos.soak_rig import Rig
from regroup.chaos.soak_schedule import Fault, corrupt
from regroup.chaos.soak_verify import Window, first_refusal

# No known findings about a damaged store are left (rule 5): the ones tests/chaos/test_store_findings.py
# kept as strict xfails are fixed (every stored row has a checksum, a damaged file is refused clearly).


@dataclass
class Outcome:
    """What came of one fault."""

    fault: Fault
    description: str
    start: float
    lifted: float
    recovered_at: float | None
    outcome: str
    detail: str
    killed: tuple[int, ...] = ()

    @property
    def recover_s(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.lifted

    def window(self, timeout: float) -> Window:
        until = self.recovered_at if self.recovered_at is not None else self.lifted + timeout
        return Window(self.fault.index, self.fault.kind, self.start, until, self.killed)

    def as_dict(self, t0: float) -> dict[str, Any]:
        return {"index": self.fault.index, "kind": self.fault.kind, "fault": self.description,
                "at_s": round(self.start - t0, 1), "lasted_s": round(self.lifted - self.start, 2),
                "recovered": self.recovered_at is not None,
                "recover_s": None if self.recover_s is None else round(self.recover_s, 2),
                "outcome": self.outcome, "detail": self.detail}


def inject(rig: Rig, fault: Fault) -> Outcome:
    """Inject ``fault``, lift it, and wait for the group to recover (rule 1)."""
    start = time.time()
    done = _HANDLERS[fault.kind](rig, fault)
    lifted = time.time()
    ends = rig.ends()
    timeout = rig.settings.recover_timeout_s * (2 if rig.settings.spark_members else 1)
    recovered = rig.wait_until(lambda: rig.caught_up(ends), timeout)
    result = Outcome(fault, fault.describe(rig.names), start, lifted, time.time() if recovered else None,
                     done.outcome, done.detail, done.killed)
    if done.paused is not None:  # was it fenced while frozen (a zombie)?
        ends_seen = [c for t, c in rig.lives[done.paused].unclean if start <= t]
        result.detail += ("; fenced while frozen, a zombie on waking: " + ends_seen[0][:120]
                          if ends_seen else "; kept its membership")
    if fault.kind == "disk-full" and done.outcome == "writes refused":
        told = first_refusal(rig.ledger, start, saying="record store")
        result.detail += f"; a member was told: {told}" if told else "; no member commit was refused"
    if not recovered:
        result.outcome += ", NOT recovered"
        rig.finding("recovery", f"{result.description}: not recovered within {timeout:.0f} s")
    return result


@dataclass(frozen=True)
class Handled:
    """What a fault's handler reports: the outcome, in words, and the lives it killed or froze."""

    outcome: str
    detail: str
    killed: tuple[int, ...] = ()
    paused: int | None = None


def _member_kill(rig: Rig, f: Fault) -> Handled:
    assert f.target is not None
    name = rig.names[f.target]
    old = rig.current[name]
    old.kill9()
    rig.idle(f.duration_s)
    new = rig.spawn(name)
    kind = "static" if old.instance else "dynamic"
    return Handled("recovered", f"{kind} {old.label} killed; {new.label} started {f.duration_s:.1f} s later",
                   killed=(old.id,))


def _member_pause(rig: Rig, f: Fault) -> Handled:
    assert f.target is not None
    inc = rig.current[rig.names[f.target]]
    inc.signal(signal.SIGSTOP)
    rig.idle(f.duration_s)
    inc.signal(signal.SIGCONT)
    kind = "static" if inc.instance else "dynamic"
    return Handled("recovered", f"{kind} {inc.label} frozen {f.duration_s:.1f} s", paused=inc.id)


def _connection_cut(rig: Rig, f: Fault) -> Handled:
    assert rig.proxy is not None
    n = rig.proxy.cut()
    rig.idle(f.duration_s)
    rig.proxy.restore()
    return Handled("recovered", f"{n} connections cut, new ones refused for {f.duration_s:.1f} s")


def _coordinator_kill(rig: Rig, f: Fault) -> Handled:
    rig.coordinator_down = True
    stopped = time.time()
    rig.coordinator.kill9()
    rig.idle(f.duration_s)
    started = rig.start_coordinator()
    if not started.ok:
        rig.finding("coordinator", f"did not restart after kill -9: {_last(started)}")
        return Handled("did not restart", _last(started))
    rig.check_durable(stopped, f"fault #{f.index} (coordinator kill -9)")
    return Handled("recovered", f"restarted {f.duration_s:.1f} s after kill -9, listening "
                                f"{started.seconds:.1f} s later")


def _coordinator_pause(rig: Rig, f: Fault) -> Handled:
    rig.coordinator.signal(signal.SIGSTOP)
    rig.idle(f.duration_s)
    rig.coordinator.signal(signal.SIGCONT)
    return Handled("recovered", f"frozen {f.duration_s:.1f} s")


def _disk_full(rig: Rig, f: Fault) -> Handled:
    db = rig.coordinator.data_dir / "coordinator.db"
    limit = db.stat().st_size + f.free_bytes
    rig.coordinator_down = True
    rig.expected_alarms.add(rig.coordinator.starts)
    full_at = time.time()
    rig.coordinator.limit_files(limit)
    if not rig.wait_until(lambda: not rig.coordinator.alive, 30):
        rig.coordinator.limit_files(None)
        rig.coordinator_down = False
        return Handled("never full", f"no write went past {limit:,} bytes in 30 s; limit lifted")
    status = rig.coordinator.wait_exit(10)
    stopped = time.time()
    lines = list(rig.coordinator.lines)
    said = next((ln for ln in lines if "CRITICAL" in ln), lines[-1] if lines else "")
    said = said.split(" CRITICAL ", 1)[-1]
    traceback = any(ln.startswith("Traceback") for ln in lines)
    if status != 1 or "the record store failed" not in said or traceback:
        rig.finding("disk-full", f"the coordinator stopped with status {status}, saying: {said[:300]}")
    rig.idle(f.duration_s)
    started = rig.start_coordinator()
    if not started.ok:
        rig.finding("disk-full", f"did not restart once space was back: {_last(started)}")
        return Handled("did not restart", _last(started))
    rig.check_durable(full_at, f"fault #{f.index} (disk full)")
    return Handled("writes refused", f"files limited to {limit:,} bytes; stopped {stopped - full_at:.1f} s "
                                     f"later with status {status}: {said[:200]}")


def _store_corrupt(rig: Rig, f: Fault) -> Handled:
    assert rig.proxy is not None
    rig.proxy.cut()  # rule 4: no member talks to a coordinator on a damaged file
    rig.coordinator_down = True
    stopped = time.time()
    if f.stop == "sigterm":
        rig.coordinator.terminate()
    else:
        rig.coordinator.kill9()
    data = rig.coordinator.data_dir
    backup = rig.root / f"store-good-{f.index}"
    backup.mkdir()
    for name in ("coordinator.db", "coordinator.db-wal"):
        if (data / name).exists():
            shutil.copy2(data / name, backup / name)
    what = corrupt(data / "coordinator.db", f.mode, f.corrupt_seed)
    shutil.copy2(data / "coordinator.db", rig.root / f"store-damaged-{f.index}.db")
    tried = rig.coordinator.start()
    rig.expected_alarms.add(rig.coordinator.starts)
    seen = None
    if tried.ok:
        seen = rig.details()
        rig.coordinator.terminate()
    for name in ("coordinator.db", "coordinator.db-wal", "coordinator.db-shm"):
        (data / name).unlink(missing_ok=True)
    for kept in backup.iterdir():
        shutil.copy2(kept, data / kept.name)
    started = rig.start_coordinator()
    rig.proxy.restore()
    if not started.ok:
        rig.finding("store-corrupt", f"did not restart on the good store: {_last(started)}")
        return Handled("did not restart", _last(started))
    if tried.ok:
        truth = rig.details()
        same = seen is not None and truth is not None and (seen.description, seen.history) == (
            truth.description, truth.history)
        verdict = "undetected, state intact" if same else "UNDETECTED, state WRONG"
        if not same:
            rig.finding("store-corrupt", f"{what}: the coordinator started and described the group otherwise "
                                         f"than from the good file")
        message = "started on the damaged file"
    else:
        message = _last(tried)
        clear = (tried.status == 2 and message.startswith("regroup coordinator:")
                 and not any(ln.startswith("Traceback") for ln in tried.lines))
        verdict = "detected" if clear else "detected, unclear message"
        if not clear:
            rig.finding("store-corrupt", f"{what}: refused unclearly (status {tried.status}): "
                                         f"{message}")
    rig.check_durable(stopped, f"fault #{f.index} (damaged store, good file put back)")
    return Handled(verdict, f"{what}; {message[:200]}; good file put back")


def _last(started: Started) -> str:
    lines = [ln for ln in started.lines if ln.strip()]
    return lines[-1].strip()[:300] if lines else f"exit status {started.status}, nothing said"


_HANDLERS: dict[str, Callable[[Rig, Fault], Handled]] = {
    "member-kill": _member_kill, "member-pause": _member_pause, "connection-cut": _connection_cut,
    "coordinator-kill": _coordinator_kill, "coordinator-pause": _coordinator_pause, "disk-full": _disk_full,
    "store-corrupt": _store_corrupt,
}
