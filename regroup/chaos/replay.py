"""Does a restart replay to the same state?

"The same state" is what the API describes — every group of both kinds (`describe_group`,
`describe_streams_group`) and every group's committed offsets — less what is soft by design (a
streams member's reported lags, kept in memory only; client ids and heartbeat ages are not part of
the core's description at all). Three views of it are compared:

1. **live**: the coordinator's own answers, taken while nothing is written: its
   ``regroup_records_written`` metric is the same before and after the whole description, so the
   description is the state after exactly that many records;
2. **replayed**: the data dir read back by the server's own code (`SqliteLog.load`, which decodes
   every stored record with `codec.decode`, then `Coordinator.recover` and the topic metadata the
   server starts with), up to that same record — after the coordinator was stopped with SIGTERM. The
   store is opened read-only, under a shared lock of the data dir: the replay writes no record and
   does not upgrade an older store format (the restart then does, as it would have); only SQLite's
   shared-memory index (``-shm``) may be rebuilt after a killed writer;
3. **restarted**: a new coordinator process on the same data dir, described the same way.

live = replayed (to the record) says the records are a faithful log of the state; replayed (all of
them) = restarted says the server replays them as the offline replay does. A record that does not
decode, a replay that raises, a restart that fails, or a difference is a finding. Timers may still
fire between the last description and the stop (a member's revocation timeout): the replay is then
taken up to the record the description saw, which is exactly what it showed; a restarted
coordinator that wrote records before it was described (a timer due at once after recovery) is
compared on its groups and offsets only, which no timer changes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from regroup.coordinator.store import DB_FILE, SqliteLog, StoreError
from regroup.protocol.config import CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.describe import GroupDescription
from regroup.protocol.messages import CommittedOffset, OffsetFetchRequest
from regroup.protocol.shard import Shard
from regroup.protocol.state import GroupState
from regroup.protocol.streams.coordinator import StreamsConfig
from regroup.protocol.streams.describe import StreamsGroupDescription
from regroup.protocol.topics import TopicMetadata
from regroup.rpc.client import CoordinatorClient

_WRITTEN = re.compile(r"^regroup_records_written_total (\S+)$", re.M)


class CoordinatorProcess(Protocol):
    """A coordinator process the fuzzer may stop and restart (tests' ``ServerProc`` is one too)."""

    proc: subprocess.Popen[str]
    address: str
    metrics_port: int | None
    data_dir: Path

    def terminate(self, timeout: float = 15) -> int: ...

    def restart(self) -> CoordinatorProcess: ...


@dataclass(frozen=True)
class State:
    consumer: Mapping[str, GroupDescription]
    streams: Mapping[str, StreamsGroupDescription]
    offsets: Mapping[str, Mapping[Shard, CommittedOffset]]

    @property
    def committed(self) -> int:
        return sum(len(o) for o in self.offsets.values())


def _hard(d: StreamsGroupDescription) -> StreamsGroupDescription:
    """Without what the members reported (lags: soft state, gone after a restart)."""
    members = tuple(dataclasses.replace(m, lags={}, warmups=tuple(dataclasses.replace(w, lag=None)
                                                                  for w in m.warmups))
                    for m in d.members)
    return dataclasses.replace(d, members=members)


def live_state(address: str, timeout_s: float = 30) -> State:
    """Every group as the coordinator at ``address`` describes it."""
    with CoordinatorClient(address, timeout_s=timeout_s, client_id="regroup-chaos") as c:
        listing = c.list_groups()
        consumer = {g.group_id: c.describe_group(g.group_id).description for g in listing
                    if isinstance(g.state, GroupState)}
        streams = {g.group_id: _hard(c.describe_streams_group(g.group_id)) for g in listing
                   if not isinstance(g.state, GroupState)}
        offsets = {g.group_id: dict(c.fetch_offsets(OffsetFetchRequest(g.group_id)).offsets) for g in listing}
    return State(consumer, streams, offsets)


def core_state(coord: Coordinator) -> State:
    """Every group as a coordinator core describes it (the same values `live_state` decodes)."""
    consumer = {gid: coord.describe_group(gid) for gid, _, _ in coord.list_groups()}
    streams = {gid: _hard(coord.describe_streams_group(gid)) for gid, _, _ in coord.list_streams_groups()}
    offsets = {gid: dict(coord.fetch_offsets(OffsetFetchRequest(gid)).offsets)
               for gid in [*consumer, *streams]}
    return State(consumer, streams, offsets)


def records_written(metrics_port: int, host: str = "127.0.0.1") -> int:
    """The coordinator's ``regroup_records_written`` since it started."""
    with urllib.request.urlopen(f"http://{host}:{metrics_port}/metrics", timeout=10) as r:
        m = _WRITTEN.search(r.read().decode())
    if m is None:
        raise RuntimeError("the coordinator's /metrics has no regroup_records_written_total")
    return int(float(m.group(1)))


def quiet_state(address: str, metrics_port: int, attempts: int = 50) -> tuple[State, int] | None:
    """The live state and the number of records it reflects; None if records kept being written
    during every one of ``attempts`` descriptions."""
    host = address.rpartition(":")[0]
    for _ in range(attempts):
        before = records_written(metrics_port, host)
        state = live_state(address)
        if records_written(metrics_port, host) == before:
            return state, before
    return None


def replayed_state(data_dir: Path, upto_seq: int | None, topics: Mapping[str, int],
                   config: CoordinatorConfig, streams: StreamsConfig) -> tuple[State, int]:
    """The data dir replayed by the server's code (up to ``upto_seq``), and how many records that was."""
    log = SqliteLog(os.path.join(data_dir, DB_FILE), read_only=True)  # writes no record
    try:
        loaded = log.load(upto_seq)
    finally:
        log.close()
    coord = Coordinator.recover(loaded.records, 0, config, streams=streams)
    coord.update_topics(TopicMetadata(dict(topics)), 0)  # as the server does before it serves
    return core_state(coord), len(loaded.records)


def differences(a: State, b: State, names: tuple[str, str], limit: int = 5) -> list[str]:
    """What differs between two states, group by group (at most ``limit`` lines)."""
    out = []
    for kind, left, right in (("consumer group", a.consumer, b.consumer),
                              ("streams group", a.streams, b.streams),
                              ("offsets of group", a.offsets, b.offsets)):
        for gid in sorted(left.keys() | right.keys()):
            x, y = left.get(gid), right.get(gid)
            if x != y:
                out.append(f"{kind} {gid!r}: {names[0]} {_cut(x)} / {names[1]} {_cut(y)}")
    return out[:limit] + ([f"... and {len(out) - limit} more"] if len(out) > limit else [])


def _cut(value: Any, n: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


@dataclass
class ReplayReport:
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    groups: int = 0
    offsets: int = 0
    records: int = 0
    #: The restarted coordinator (still running), if it started.
    restarted: CoordinatorProcess | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"findings": self.findings, "notes": self.notes, "groups": self.groups,
                "committed_offsets": self.offsets, "records_replayed": self.records}


def check_restart(server: CoordinatorProcess, topics: Mapping[str, int],
                  config: CoordinatorConfig | None = None, streams: StreamsConfig | None = None,
                  ) -> ReplayReport:
    """Describe ``server``, stop it (SIGTERM), replay its data dir, restart it and describe it again.
    The restarted process is left running in the report (the caller stops it)."""
    config = config or CoordinatorConfig()
    streams = streams or StreamsConfig()
    report = ReplayReport()
    if server.metrics_port is None:
        raise ValueError("check_restart needs a coordinator started with --metrics-port")
    try:
        quiet = quiet_state(server.address, server.metrics_port)
    except Exception as e:  # a group listed that cannot be described, say
        report.findings.append(f"describing every group failed: {type(e).__name__}: {e}")
        quiet = None
    status = server.terminate()
    if status != 0:
        report.findings.append(f"the coordinator exited with status {status} at SIGTERM")
    try:
        full, report.records = replayed_state(server.data_dir, None, topics, config, streams)
        if quiet is None:
            report.notes.append("records were written during every description: live state not compared")
        else:
            live, seq = quiet
            try:
                replayed, _ = replayed_state(server.data_dir, seq, topics, config, streams)
            except StoreError as e:  # compacted past that record meanwhile
                report.notes.append(f"live state not compared: {e}")
            else:
                report.findings.extend(f"replay differs from the live state: {d}"
                                       for d in differences(live, replayed, ("live", "replayed")))
    except Exception as e:  # a record that does not decode, a replay that raises
        report.findings.append(f"the data dir does not replay: {type(e).__name__}: {e}")
        return report
    report.groups, report.offsets = len(full.consumer) + len(full.streams), full.committed
    try:
        restarted = report.restarted = server.restart()
    except Exception as e:
        report.findings.append(f"the coordinator does not restart from its data dir: {e}")
        return report
    assert restarted.metrics_port is not None
    try:
        again = quiet_state(restarted.address, restarted.metrics_port)
    except Exception as e:
        report.findings.append(f"describing the restarted coordinator failed: {type(e).__name__}: {e}")
        return report
    if again is None:
        report.findings.append("the restarted coordinator kept writing records: no quiet description")
    elif again[1] == 0:
        report.findings.extend(f"the restarted coordinator differs from the replay: {d}"
                               for d in differences(full, again[0], ("replayed", "restarted")))
    else:  # timers due at once after recovery (fresh revocation timeouts) changed members
        report.notes.append(f"the restarted coordinator wrote {again[1]} records at once (timers): "
                            "compared its groups and offsets only")
        now = again[0]
        if (set(full.consumer), set(full.streams)) != (set(now.consumer), set(now.streams)):
            report.findings.append("the restarted coordinator has other groups than the replay")
        report.findings.extend(f"the restarted coordinator's offsets differ: {d}" for d in differences(
            State({}, {}, full.offsets), State({}, {}, now.offsets), ("replayed", "restarted")))
    return report
