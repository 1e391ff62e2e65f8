"""One member process of `regroup bench stateful`: a `StreamsApp` running a per-key aggregate whose
state per task grows to the size the bench asks for.

    python -m regroup.bench.stateful_member COORDINATOR LOG STATE_DIR EVENTS --value-bytes N
        [--session-timeout-ms MS] [--heartbeat-interval-ms MS] [--batch-records N]

Rules of this module:

1. Input records are ``key -> (produced at: float64 seconds)``. The state of a key is its count, the
   produce time of its last record and filler up to ``--value-bytes`` bytes: N distinct keys make
   a task's state N x value bytes, which is how the bench sizes it.
2. A record produced at time 0 is pre-load: it builds state and emits nothing. Every other record
   emits one output to the task's partition of ``out``: ``key -> (produced at, processed at)``,
   both float64 wall-clock seconds (one machine: comparable across processes). The gaps between a
   task's processed-at times are what the bench measures.
3. EVENTS gets one line per hand-off, wall-clock seconds first:
   ``T take-over TASK,... seconds=S restored=TASK:N,...`` (N: changelog records read by the
   take-over, i.e. the restore a cold move pays) and ``T stop-active TASK,... seconds=S``.
   `StreamsApp` has no public hook for these, so this module wraps two of its private methods
   (`_take_over`, `_stop_tasks`) and only times them; it changes nothing they do.
4. It prints ``ready`` once constructed and exits 0 after SIGTERM (a clean leave); SIGKILL is the
   bench's crash.
"""

from __future__ import annotations

import argparse
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterable
from typing import TextIO

from regroup.log.base import ConsumedRecord
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.topology import TaskId
from regroup.streams.app import StreamsApp, TaskContext

GROUP = "stateful"
SUBTOPOLOGY = "agg"
SOURCE = "input"
OUTPUT = "out"
TOPOLOGY = {SUBTOPOLOGY: [SOURCE]}

_INPUT = struct.Struct("<d")
_STATE = struct.Struct("<qd")
_OUTPUT = struct.Struct("<dd")


def encode_input(produced_at: float) -> bytes:
    return _INPUT.pack(produced_at)


def decode_output(value: bytes) -> tuple[float, float]:
    """``(produced at, processed at)`` of one output record."""
    produced, processed = _OUTPUT.unpack(value)
    return produced, processed


class Aggregate:
    """Rule 1 and 2: the user's function."""

    def __init__(self, filler: bytes) -> None:
        self.filler = filler

    def __call__(self, record: ConsumedRecord, task: TaskContext) -> None:
        assert record.key is not None and record.value is not None
        (produced,) = _INPUT.unpack(record.value)
        old = task.store.get(record.key)
        count = 1 if old is None else _STATE.unpack_from(old)[0] + 1
        task.store.put(record.key, _STATE.pack(count, produced) + self.filler)
        if produced > 0:
            task.send(OUTPUT, record.key, _OUTPUT.pack(produced, time.time()))


def aggregate(value_bytes: int) -> Aggregate:
    if value_bytes < _STATE.size:
        raise ValueError(f"--value-bytes must be at least {_STATE.size} (count and timestamp), "
                         f"got {value_bytes}")
    return Aggregate(bytes((i * 131 + 7) % 251 for i in range(value_bytes - _STATE.size)))


def _names(tasks: Iterable[TaskId]) -> str:
    return ",".join(f"{t.subtopology}_{t.partition}" for t in sorted(tasks))


class TimedStreamsApp(StreamsApp):
    """Rule 3: `StreamsApp` with its hand-offs timed into the events file."""

    events: TextIO

    def _take_over(self, tasks: list[TaskId]) -> None:
        before = {t: self._store(t).changelog_position for t in tasks}
        start = time.time()
        super()._take_over(tasks)
        end = time.time()
        restored = ",".join(f"{_names([t])}:{self._stores[t].changelog_position - before[t]}" for t in tasks)
        self.events.write(f"{end:.4f} take-over {_names(tasks)} seconds={end - start:.4f} "
                          f"restored={restored}\n")

    def _stop_tasks(self, tasks: MemberTasks) -> None:
        start = time.time()
        super()._stop_tasks(tasks)
        if tasks.active:
            end = time.time()
            self.events.write(f"{start:.4f} stop-active {_names(tasks.active)} seconds={end - start:.4f}\n")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m regroup.bench.stateful_member")
    p.add_argument("coordinator")
    p.add_argument("log")
    p.add_argument("state_dir")
    p.add_argument("events")
    p.add_argument("--value-bytes", type=int, required=True)
    p.add_argument("--session-timeout-ms", type=int, default=3_000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    p.add_argument("--batch-records", type=int, default=1_000)
    args = p.parse_args()
    app = TimedStreamsApp(coordinator=args.coordinator, log=args.log, group=GROUP, topology=TOPOLOGY,
                          process=aggregate(args.value_bytes), state_dir=args.state_dir,
                          session_timeout_ms=args.session_timeout_ms,
                          heartbeat_interval_ms=args.heartbeat_interval_ms, batch_records=args.batch_records)
    app.events = open(args.events, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    app.run(stop)
    app.events.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
