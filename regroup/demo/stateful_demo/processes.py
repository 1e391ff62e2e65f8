"""Process control for the stateful demo: the coordinator, the Spark member processes and the producer.

The rules are `regroup.demo.spark_common.processes`'s; what is this demo's own: the coordinator runs
a streams group (standbys, warm-ups, the acceptable recovery lag: `Settings`), the topic is created
once the first members have joined (`Processes.create_topic`), every member is one member of the
streams group in task mode with its tasks' checkpoints under one state root, the producer's records
are timestamped in order (`TimedWorkload`), and a member's progress lines say which process id it
joined as, which tasks it runs in which role, each batch whose output it wrote, and its pipeline's
warnings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup.demo.common import Workload
from regroup.demo.spark_common.processes import DemoProcesses, MemberProcess
from regroup.log.base import LogRecord


@dataclass(frozen=True)
class Settings:
    """The coordinator's and the members' settings (the protocol's knobs the demo turns)."""

    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 500
    standby_replicas: int = 1
    max_warmups: int = 2
    #: Records a copy may be behind the committed offsets and still take a task over: about one
    #: batch of a task at the demo's rate, so that a warm-up that follows the active counts as
    #: caught up although the active commits again while the report travels.
    acceptable_recovery_lag: int = 500
    #: The task queries' processingTime trigger: a micro-batch of a stateful query costs ~0.4 s of
    #: CPU however small, and 12 queries (6 actives, 6 standbys) share two cores with their JVMs.
    trigger_ms: int = 2_000


class TimedWorkload(Workload):
    """`Workload` whose records' timestamps (their produce time: the pipeline's event time, and the
    start of each record's wait for its output) never go back, even if the wall clock does: within
    a partition records are in event-time order, so none is ever late for the watermark."""

    def __init__(self, log_spec: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(log_spec, topic, partitions, rate)
        self._clock = 0

    def _record(self, seq: int, customer: int) -> tuple[int, LogRecord]:
        p, rec = super()._record(seq, customer)
        self._clock = max(self._clock, rec.timestamp_ms)
        return p, LogRecord(rec.key, rec.value, self._clock)


#: The pipeline's warning when a copy's query fails (`regroup.spark.tasks.pipeline`, ``_watch``).
_COPY_FAILED = re.compile(r"^task (\S+): the (?:standby|warm-up) query failed")


@dataclass(frozen=True, slots=True)
class BatchOut:
    """A batch of an active task whose output the sink wrote (a ``batch`` line of a member)."""

    t: float
    task: str
    key: str
    batch: int
    start: int
    end: int
    rows: int

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass
class Member(MemberProcess):
    """One Spark member process: a member of the streams group in task mode. A static member's restart
    is a new Member with the same name."""

    #: The process id it joined as (the coordinator's describe names members by it).
    process_id: str | None = None
    batches: list[BatchOut] = field(default_factory=list)
    #: The tasks the member runs and their roles, as it last said (``parked`` copies included).
    tasks: dict[str, str] = field(default_factory=dict)
    #: How its tasks started, counted (``promoted active``, ``resumed active``, ``copied warm-up``...).
    starts: dict[str, int] = field(default_factory=dict)
    #: (time, tasks, starts) each time the member reported a change.
    history: list[tuple[float, dict[str, str], dict[str, int]]] = field(default_factory=list)
    #: (time, message) of each warning the member's pipeline logged (a copy's query failed...).
    warnings: list[tuple[float, str]] = field(default_factory=list)

    def roles(self, role: str) -> set[str]:
        return {t for t, r in self.tasks.items() if r == role}

    def dropped_copies(self) -> set[str]:
        """Copies whose query failed (the pipeline logged it) and that the member does not run now:
        it drops such a copy and does not start it again while it keeps the assignment."""
        failed = {m.group(1) for _, msg in self.warnings if (m := _COPY_FAILED.match(msg))}
        return failed - set(self.tasks)

    def starts_at(self, t: float) -> dict[str, int]:
        """The ``starts`` counter as it was at time ``t``."""
        out: dict[str, int] = {}
        for at, _, starts in self.history:
            if at > t:
                break
            out = starts
        return out

    def apply_own(self, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        if kind == "joined":
            self.process_id = rec["process_id"]
            if self.state == "joining":
                self.state = "running"
        elif kind == "batch":
            start, end = sum(rec["start"].values()), sum(rec["end"].values())  # one partition a task
            self.batches.append(BatchOut(rec["t"], rec["task"], rec["key"], rec["batch"], start, end,
                                         rec["rows"]))
        elif kind == "tasks":
            self.tasks, self.starts = dict(rec["tasks"]), dict(rec["starts"])
            self.history.append((rec["t"], self.tasks, self.starts))
        elif kind == "warning":
            self.warnings.append((rec["t"], rec["message"]))


class Processes(DemoProcesses[Member]):
    """The demo's processes: one coordinator (and a client of it), the Spark members, the producer."""

    MEMBER_MODULE = "regroup.demo.stateful_member"
    #: A leaving member stops every query it runs, actives and copies: seconds each on a busy machine.
    REAP_AFTER_STOP_S = 90.0
    REAP_AT_SHUTDOWN_S = 60.0
    WORKLOAD = TimedWorkload

    def __init__(self, root: Path, log_spec: str, topic: str, settings: Settings) -> None:
        super().__init__(root, log_spec, topic, Member)
        self.settings = settings
        self.state_root = root / "state"

    def start_coordinator(self) -> None:
        """Start the coordinator (standbys and warm-ups on) and connect to it. The topic is created
        later (`create_topic`)."""
        s = self.settings
        self.connect_coordinator(
            s.session_timeout_ms, s.heartbeat_interval_ms,
            "--standby-replicas", str(s.standby_replicas), "--max-warmups", str(s.max_warmups),
            "--acceptable-recovery-lag", str(s.acceptable_recovery_lag), "--topic-refresh-s", "1")

    def member_args(self, name: str) -> list[str]:
        """The state root every member shares (a task's checkpoint moves with the task) and the
        group's timings."""
        s = self.settings
        return [str(self.state_root), "--trigger-ms", str(s.trigger_ms),
                "--session-timeout-ms", str(s.session_timeout_ms),
                "--heartbeat-interval-ms", str(s.heartbeat_interval_ms)]
