"""Process control for the PySpark demo: the coordinator, the Spark member processes and the producer.

The rules are `regroup.demo.spark_common.processes`'s; what is this demo's own: each member is one
streaming query on the ``regroup`` source with a checkpoint of its own, small micro-batches on a
processingTime trigger, and a rebalance timeout that tells the coordinator's describe which member id
is which member (`rebalance_tag`); a member's progress lines say which batches it completed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from regroup.demo.spark_common.processes import DemoProcesses, MemberProcess

HEARTBEAT_INTERVAL_MS = 1_000
#: Records per micro-batch at most: small batches keep revocations (done at batch boundaries) quick.
MAX_RECORDS_PER_TRIGGER = 4_000
#: The members' processingTime trigger (s): a micro-batch costs ~0.5 s of CPU even when small, and
#: N+2 Spark processes share two cores.
TRIGGER_S = 2.0


def rebalance_tag(name: str) -> int:
    """A member's rebalance timeout: 60 s plus its number in ms — the same for all practical purposes,
    and distinct, so that the coordinator's describe tells which member id is which member."""
    return 60_000 + int(name.removeprefix("m"))


@dataclass(frozen=True, slots=True)
class BatchDone:
    """A completed micro-batch of a member (a line of its progress file)."""

    t: float
    batch: int
    rows: int
    partitions: tuple[int, ...]


@dataclass
class Proc(MemberProcess):
    """One Spark member process: a streaming query on the ``regroup`` source. A static member's restart
    is a new Proc with the same name."""

    FAILED: ClassVar[str] = "query-failed"

    #: The coordinator's member id of its query's source, once the describe shows it (`rebalance_tag`).
    member_id: str | None = None
    batches: list[BatchDone] = field(default_factory=list)

    def apply_own(self, rec: dict[str, Any]) -> None:
        if rec["kind"] == "batch":
            self.batches.append(BatchDone(rec["t"], rec["batch"], rec["rows"], tuple(rec["partitions"])))
            if self.state == "joining":
                self.state = "running"


class Processes(DemoProcesses[Proc]):
    """The demo's processes: one coordinator (and a client of it), the Spark members, the producer."""

    MEMBER_MODULE = "regroup.demo.spark_member"
    REAP_AFTER_STOP_S = 60.0
    REAP_AT_SHUTDOWN_S = 45.0

    def __init__(self, root: Path, log_spec: str, topic: str) -> None:
        super().__init__(root, log_spec, topic, Proc)

    def start_coordinator(self, partitions: int, session_timeout_ms: int) -> None:
        """Create the topic, start the coordinator on the log and connect a client to it."""
        self.create_topic(partitions)
        self.connect_coordinator(session_timeout_ms, HEARTBEAT_INTERVAL_MS)

    def member_args(self, name: str) -> list[str]:
        """Its query's checkpoint (its own: a static member's restart resumes it), small batches and
        the rebalance timeout that names it (`rebalance_tag`)."""
        return [str(self.root / "checkpoints" / name), "--max-records", str(MAX_RECORDS_PER_TRIGGER),
                "--trigger-s", str(TRIGGER_S), "--rebalance-timeout-ms", str(rebalance_tag(name))]
