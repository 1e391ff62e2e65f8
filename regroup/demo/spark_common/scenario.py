"""What both PySpark demos' scripts share: the run's state, waiting for a condition, the four events,
the static roll, and the end of the workload.

Rules of this module (each demo's `scenario` module adds its own):

1. Every wait is for a condition, with a bound that only says when to give up (`DemoRun.wait`); while
   waiting the demo keeps reading the members' progress, sampling the group and redrawing the live
   view, and stops at once if a process fails.
2. The events are the same four in both demos (`EVENT_LABELS`); when each happens and what the group
   must look like before it are the demo's.
3. The workload runs for the planned duration at least; then the producer stops and the demo waits
   until every partition is committed up to the log's end (`DemoRun.finish`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from regroup.demo.common import Workload
from regroup.demo.spark_common.processes import DemoProcesses, MemberProcess

#: The static member's instance id (the first member; its replacement in the static roll).
STATIC_INSTANCE = "static-1"
#: How long after an event ended its window still runs (catching late pauses).
WINDOW_MARGIN_S = 2.0
EVENT_LABELS = {"scale-out": "scale out +1", "scale-in": "scale in -1", "static-roll": "roll static member",
                "kill-9": "kill -9"}

P = TypeVar("P", bound=DemoProcesses[Any])


@dataclass
class RunConfig:
    """What every run is asked for: the members at the start, the topic's partitions, the workload's
    rate (events/s) and how long it runs at least (s). A demo's config adds its own."""

    members: int
    partitions: int
    rate: int
    duration: float


def moved_partitions(before: Mapping[int, str], after: Mapping[int, str]) -> list[int]:
    """The partitions (tasks) whose owner (the member holding the task active) changed."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def event_end(at: float, steady_at: float | None, resumed_at: float | None) -> float:
    """When an event that began ``at`` ended: once the group was steady again (each demo says what
    that is) and every partition was processed again, whichever came last; 30 s after it began if
    neither came. Its window runs `WINDOW_MARGIN_S` longer."""
    ends = [t for t in (steady_at, resumed_at) if t is not None]
    return max(ends) if ends else at + 30.0


class DemoRun(Generic[P]):
    """One run: its processes, the events so far, and what the run is doing (``phase``, the times).
    A demo's subclass adds the group as it samples it (`sample`)."""

    def __init__(self, root: Path, log_spec: str, topic: str, partitions: int, processes: P) -> None:
        self.root, self.log_spec, self.topic, self.partitions = root, log_spec, topic, partitions
        self.processes = processes
        self.phase = "starting"
        self.started = time.time()
        #: When the workload started (the run's time 0 in the results).
        self.t0 = time.time()
        self.timings: dict[str, float] = {}
        #: Called after every refresh (the live view sets it while it is on screen).
        self.redraw: Callable[[], None] = lambda: None

    @property
    def workload(self) -> Workload | None:
        return self.processes.workload

    def sample(self) -> None:
        """Sample the group as the coordinator describes it."""

    def refresh(self) -> None:
        """Read the members' progress, sample the group, redraw the live view."""
        self.processes.poll()
        self.sample()
        self.redraw()

    def wait(self, pred: Callable[[], bool], timeout: float, tick: float = 0.25) -> bool:
        """Refresh until ``pred`` holds (True) or ``timeout`` has passed (False); raise at once if a
        process failed (rule 1)."""
        deadline = time.time() + timeout
        while True:
            self.refresh()
            if pred():
                return True
            if time.time() >= deadline:
                return False
            self.processes.check_alive()
            time.sleep(tick)

    def finish(self, duration: float, drained: Callable[[], bool], draining: str) -> bool:
        """Let the workload run until ``duration``, stop the producer and wait until ``drained``
        (``draining``: what the phase says meanwhile); returns whether it drained (rule 3)."""
        self.phase = "steady"
        self.wait(lambda: time.time() - self.t0 >= duration, duration)
        self.processes.stop_producer()
        self.timings["workload_s"] = round(time.time() - self.t0, 1)
        self.phase = f"draining: {draining}"
        t = time.time()
        done = self.wait(drained, 120, tick=0.5)
        self.timings["drain_s"] = round(time.time() - t, 1)
        return done

    def close(self) -> None:
        """Stop every process the run started (idempotent)."""
        self.processes.shutdown()

    def stop_members(self) -> None:
        """Stop every process the run started, timed (``shutdown_s``)."""
        t = time.time()
        self.processes.shutdown()
        self.timings["shutdown_s"] = round(time.time() - t, 1)


def static_roll(demo: DemoRun[Any], old: MemberProcess, new: MemberProcess, timeout: float,
                out_of_group: Callable[[], bool] | None = None) -> Callable[[], None]:
    """The static roll: stop the static member, release its replacement (started ahead with the same
    instance id) once the old one has said ``stopped`` or exited — or, sooner, once ``out_of_group``
    says it is out of the group — and reap the old process meanwhile. ``timeout``: how long the
    replacement waits at most."""

    def out() -> bool:
        return ((out_of_group is not None and out_of_group()) or old.state == "stopped"
                or old.popen.poll() is not None)

    def act() -> None:
        demo.processes.stop(old)
        demo.wait(out, timeout, tick=0.05)
        demo.processes.release(new)
        demo.processes.reap_later(old)

    return act
