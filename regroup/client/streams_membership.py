"""A streams member's session with the coordinator: `Session` with the streams heartbeat and reports.

Shared by the two streams runtimes, `regroup.streams.app` (plain Python) and `regroup.spark.tasks`
(one Spark query per task). The owner's processing loop takes the actions (`StopTasks`, `StartTasks`,
`LostTasks`, `Fatal`) between batches, and reports back with `tasks_stopped` / `tasks_started`
and, now and then, `report_offsets` — how far every local copy of a task has got. Nothing here
decides anything: `regroup.protocol.streams.member` does.
"""

from __future__ import annotations

from regroup.client.session import Session, now_ms
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.member import StreamsMemberStateMachine
from regroup.protocol.streams.messages import StreamsHeartbeatRequest, StreamsHeartbeatResponse, TaskOffsets

__all__ = ["StreamsMembership"]


class StreamsMembership(Session[StreamsMemberStateMachine]):
    """One streams member's session: join at construction, `leave()` to go."""

    def _exchange(self, req: StreamsHeartbeatRequest) -> StreamsHeartbeatResponse:
        return self.client.streams_heartbeat(req)

    @property
    def owned(self) -> MemberTasks:
        with self._lock:
            return self._machine.owned

    @property
    def status_message(self) -> str | None:
        """Why the group assigns nothing (the topics named), or None."""
        with self._lock:
            return self._machine.status_message

    def tasks_stopped(self, tasks: MemberTasks) -> None:
        with self._lock:
            self._enqueue(self._machine.tasks_stopped(tasks, now_ms()))
        self._wake.set()

    def tasks_started(self, tasks: MemberTasks) -> None:
        with self._lock:
            self._enqueue(self._machine.tasks_started(tasks, now_ms()))
        self._wake.set()

    def report_offsets(self, offsets: TaskOffsets, *, urgent: bool = False) -> None:
        with self._lock:
            self._machine.report_offsets(offsets, now_ms(), urgent=urgent)
        if urgent:
            self._wake.set()
