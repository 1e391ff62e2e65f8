"""`StreamsPipeline`: a Spark application as one member of a streams group, running one Structured
Streaming query per task it holds; the query's checkpoint is the task's state.

Rules of this module (the shell: the decisions are `regroup.protocol.streams.member`'s — what to
run in which role — and `regroup.protocol.streams.checkpoints`' — where a task starts, when its sink
is on, which checkpoint is of record):

1. One control thread carries out the member's actions, in order; the session's threads only
   heartbeat. Spark runs the queries; each query's ``foreachBatch`` (on Spark's callback thread)
   runs the user's sink and commits.
2. An active's batch, in this order: the batch runs (Spark updates the state store), the user's
   sink gets it if its sink is on, then the batch's end offsets are committed at the coordinator
   with metadata naming this checkpoint directory and the batch id, then Spark logs the batch as
   committed. A crash anywhere in between makes the next owner run that batch again, from the
   same offsets (the checkpoint's offset log), with the same idempotency key.
3. A copy (warm-up, standby) runs the same pipeline with its sink off and reads no further than the
   active has planned (`regroup.protocol.streams.checkpoints` rule 4): a standby up to the
   committed offsets, refreshed every ``refresh_ms``; a warm-up (and a parked one) up to the end of
   the batch the active has planned (the offset log of the checkpoint of record, read every turn of
   the loop on a local state root, every ``refresh_ms`` on another filesystem), so that it runs the
   active's batches beside it and is at the commit when the active hands the task over. Its
   progress is reported as the task's offsets — only once its query has run a batch (Spark
   restores the state then), or has nothing to read — urgently when a warm-up has caught up, so
   that the coordinator promotes it at once.
4. Stopping an active is clean: its reader is gated (it plans no further batch), the member waits
   until the reader has obeyed — then the last batch has finished and committed — and reports the
   task stopped; only then does it stop the query (a second or more, which the next owner need
   not wait for: a query whose reader obeyed and which is fenced runs no batch and commits
   nothing). A query whose reader did not obey in time (a batch longer than the rebalance
   timeout) is stopped before the report, and so are all of them when the member leaves (a static
   member's next incarnation resumes the same directories). Actives stopped together are gated
   together. A copy told to stop is parked
   (kept running, its limit frozen) for ``park_ms``, because a promotion is a stop of the copy
   followed by a start of the active; a parked copy that is not taken back is stopped and stays on
   disk, reported as dormant.
5. Losing the membership switches every sink off at once and stops the queries without committing.
6. Actives come first. A query's start takes a second or more, and the control thread is the one
   that stops actives other members wait for: so a start's actives are started at once, its
   copies are queued and started one per turn of the loop, after any waiting action. A queued copy
   is acknowledged as started (a copy's start is no promise to the group; its progress is reported
   only once it runs) and leaves the queue when it is stopped or lost.
7. A copy whose query fails, or whose start Spark refuses, is started again after a back-off
   (doubling, up to ``_COPY_RETRY_MAX_S``) while the coordinator still wants it: a warm-up dropped
   for good would never catch up, and the group would never settle.
8. Cut off from the coordinator (`regroup.protocol.failover` rules 7 and 12: it may have given the
   tasks away), every active's reader is gated — it plans no further batch, as when the active is
   stopped, but the query keeps running — until the coordinator answers again; a batch already
   running finishes, and its commit is fenced by epoch if the member was fenced meanwhile. Copies
   follow on: their sinks are off, and they read no further than rule 3 allows.
9. A key-range task (a subtopology with ``parallelism`` K, `regroup.protocol.streams.topology` rule 4)
   is a query over its range of each source partition (`TaskId.shard`): its reader reads the
   partition and keeps the records of its keys (`regroup.spark.read.read_range`, the consumer-group
   source's filter), its offsets and commits are its range's, its checkpoint directory is named
   ``tasks/sub_3.1of4/...`` (a whole-partition task's stays ``tasks/sub_3/...``).
10. A source partition split on the producer side (`regroup.log.embedded.layout`) is read as *lanes*,
   one per open piece the task's keys lie in (`regroup.spark.tasks.source`): the query's offsets,
   its commits (fragments of the task's part, `regroup.protocol.streams.offsets` rule 2) and its
   copies' limits are per lane, compared key by key with the committed fragments
   (`regroup.protocol.streams.checkpoints` rule 6). A task starting from committed lanes starts its
   query at each of them; the task's reported position is its lowest lane, per source partition.
"""

from __future__ import annotations

import collections
import json
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup.client.errors import CommitFailedError, OffsetFetchError
from regroup.client.streams_membership import StreamsMembership
from regroup.protocol.keyrange import clipped
from regroup.protocol.member import Fatal
from regroup.protocol.shard import Shard, within
from regroup.protocol.streams.assignment import MemberTasks
from regroup.protocol.streams.checkpoints import (
    CheckpointRecord,
    LocalCopy,
    StartFrom,
    StartPlan,
    batch_key,
    caught_up,
    checkpoint_directory,
    directory_owner,
    format_record,
    latest_record,
    overruns,
    plan_start,
    position_known,
    reached,
    sink_on,
    warmup_limit,
)
from regroup.protocol.streams.member import LostTasks, StartTasks, StopTasks, StreamsMemberStateMachine
from regroup.protocol.streams.topology import TaskId, Topology, parse_task_id
from regroup.rpc.client import CoordinatorClient
from regroup.spark.tasks.checkpoint import (
    batch_ends,
    copy_batch,
    last_committed_batch,
    lineage_begin,
)
from regroup.spark.tasks.control import Control, read_ack, write_control
from regroup.spark.tasks.incarnation import process_id, remove_stale_runs
from regroup.spark.tasks.plans import ActivePlans
from regroup.spark.tasks.source import task_offset
from regroup.spark.tasks.statepath import LocalPath, StatePath, local_run_directory, open_state_root

__all__ = ["BuildFn", "SinkFn", "StreamsPipeline", "StreamsPipelineError", "TaskBatch"]

log = logging.getLogger("regroup.spark.tasks")

ACTIVE, STANDBY, WARMUP, PARKED = "active", "standby", "warm-up", "parked"

#: How many times a failed active query is started again before the pipeline gives up.
_ACTIVE_RESTARTS = 3
#: Rule 7: the longest back-off before a failed copy's query is started again.
_COPY_RETRY_MAX_S = 30.0


class StreamsPipelineError(RuntimeError):
    """The pipeline cannot go on (the coordinator refused the member, or a task's query failed)."""


class TaskFencedError(RuntimeError):
    """Raised inside a batch of a task this member no longer holds: Spark fails that query."""


class OverranCommitError(RuntimeError):
    """Raised inside a promoted copy's batch that crossed the commit with its sink off (checkpoints
    rule 5): Spark fails the query, and the member starts the task again from the batch of record."""


@dataclass(frozen=True)
class TaskBatch:
    """What the sink gets with each batch of an active task."""

    task: TaskId
    batch_id: int  # Spark's, of this copy's checkpoint: may repeat across a move (use `key`)
    epoch: int
    start: Mapping[Shard, int]
    end: Mapping[Shard, int]

    @property
    def key(self) -> str:
        """The batch's idempotency key: the task and the offsets it covers (never repeats for
        different records). Key idempotent output by it."""
        return batch_key(str(self.task), self.start, self.end)


#: The user's pipeline: a streaming DataFrame of one task's records -> the result DataFrame.
BuildFn = Callable[[Any, TaskId], Any]
#: The user's sink: one batch of one active task's result (like foreachBatch, with the batch's key).
SinkFn = Callable[[Any, TaskBatch], None]


@dataclass
class _TaskQuery:
    task: TaskId
    role: str
    directory: str            # relative to the state root
    control: Path
    generation: int
    begin: dict[Shard, int]   # where the checkpoint's first batch began (its lineage's, for a copy)
    ends: dict[Shard, int]    # end of the last batch completed
    limit: dict[Shard, int] | None = None
    sink_from: dict[Shard, int] | None = None
    fenced: bool = False
    handle: Any = None
    parked_at: float = 0.0
    parked_from: str = ""
    overran: bool = False
    caught_up_reported: bool = False
    error: BaseException | None = None
    batches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def running(self) -> bool:
        return self.handle is not None and self.handle.isActive


class StreamsPipeline:
    """One member of streams group ``group`` (see the module docstring); create it with
    `regroup.spark.streams`, then `start()`, and `stop()` to leave."""

    def __init__(
        self, spark: Any, *, group: str, topology: Topology | Mapping[str, Sequence[str]],
        build: BuildFn, sink: SinkFn, coordinator: str, log: str, state: str | Path,
        instance_id: str | None = None, output_mode: str = "update", trigger_ms: int = 500,
        token: str | None = None, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
        rebalance_timeout_ms: int = 60_000, max_records_per_trigger: int | None = None,
        refresh_ms: int = 500, park_ms: int = 30_000, parallelism: Mapping[str, int] | None = None,
    ) -> None:
        if not callable(build) or not callable(sink):
            raise TypeError("build (df, task) -> DataFrame and sink (df, TaskBatch) -> None "
                            "must be functions")
        if output_mode not in ("append", "update", "complete"):
            raise ValueError(f"output_mode must be append, update or complete, got {output_mode!r}")
        self.spark, self.group, self.build, self.sink = spark, group, build, sink
        if isinstance(topology, Topology) and parallelism is not None:
            raise ValueError("give parallelism in the Topology itself (Subtopology.parallelism), "
                             "not beside it")
        self.topology = topology if isinstance(topology, Topology) else Topology.of(topology, parallelism)
        self.log_spec, self.output_mode, self.trigger_ms = log, output_mode, trigger_ms
        self.max_records_per_trigger = max_records_per_trigger
        self.refresh_ms, self.park_ms = refresh_ms, park_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        # A local directory or any Hadoop filesystem's URI (statepath); checked here, so that a
        # bad or unreachable root fails streams(...) with its name.
        self.root: StatePath = open_state_root(spark, state) / group
        self.root.mkdir()
        self._plans = ActivePlans(self.root)  # rule 3: what the warm-ups' actives planned
        self.process_id = process_id(self.root, instance_id)
        self.member_id = str(uuid.uuid4())
        # The control files of this incarnation's readers, on this machine. Per incarnation: a
        # static member's replacement may start while the old one is still stopping its queries,
        # whose readers read their own files.
        self.run_dir = local_run_directory(spark, self.root) / self.process_id / self.member_id
        remove_stale_runs(self.run_dir.parent)
        self.run_dir.mkdir(parents=True)
        self._machine = StreamsMemberStateMachine(
            group, self.member_id, self.process_id, self.topology, instance_id=instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms)
        self._client = CoordinatorClient(coordinator, token=token)
        self.membership: StreamsMembership | None = None
        self._queries: dict[TaskId, _TaskQuery] = {}
        self._dormant: dict[TaskId, dict[Shard, int]] = {}
        self._committed: dict[TaskId, tuple[dict[Shard, int], CheckpointRecord | None]] = {}
        self._refreshed_at = 0.0
        self._backlog: list[object] = []
        self._generation = int(time.time() * 1000)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        #: How tasks started here: promoted (a copy took over in place), resumed (own checkpoint of
        #: record), copied (the batch of record copied), fresh (no checkpoint) — per role.
        self.starts: collections.Counter[str] = collections.Counter()
        self._failures: collections.Counter[TaskId] = collections.Counter()
        self._copy_failures: collections.Counter[TaskId] = collections.Counter()
        #: Rule 6/7: copies to start, with the role and the earliest time (monotonic) to start them.
        self._queued: dict[TaskId, tuple[str, float]] = {}
        #: Rule 8: cut off from the coordinator, the actives' readers are gated.
        self._paused = False
        self._scan_dormant()
        from regroup.spark.startup import register_source
        from regroup.spark.tasks.source import TaskDataSource

        # With the fast start of the reader processes. Here rather than in start(): it costs a
        # few hundred ms, which should not delay the join.
        register_source(self.spark, TaskDataSource)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> StreamsPipeline:
        self._machine.report_offsets(self._task_offsets(), _now_ms())
        self.membership = StreamsMembership(self._client, self._machine)
        self._thread = threading.Thread(target=self._run, name=f"regroup-streams-{self.group}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Leave the group cleanly (each active finishes its batch and commits), stop every query."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def await_termination(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        if self.error is not None:
            raise StreamsPipelineError(str(self.error)) from self.error
        return not self._thread.is_alive()

    @property
    def tasks(self) -> dict[TaskId, str]:
        """The tasks this member runs now and their roles (parked copies included)."""
        with self._lock:
            return {t: q.role for t, q in self._queries.items()}

    @property
    def owned(self) -> MemberTasks:
        return self._machine.owned

    def task_ends(self, task: TaskId) -> dict[Shard, int] | None:
        with self._lock:
            q = self._queries.get(task)
            return None if q is None else dict(q.ends)

    # ---------------------------------------------------------------- the control thread
    def _run(self) -> None:
        assert self.membership is not None
        try:
            while not self._stop.is_set():
                self._handle(self.membership.take_actions())
                self._pause_if_cut_off()
                self._start_queued()
                self._watch()
                self._refresh()
                self._report()
                self.membership.wait(self.membership.has_actions, 0.1)
            self.membership.leave(self.rebalance_timeout_ms / 1000, self._handle, permanent=False)
        except BaseException as e:  # surfaced by await_termination
            log.exception("streams pipeline %s stopped on an error", self.group)
            self.error = e
        finally:
            self._queued.clear()
            self._halt_all(list(self._queries))
            self.membership.close()
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _handle(self, actions: list[object]) -> None:
        assert self.membership is not None
        self._backlog.extend(actions)
        while self._backlog:
            a = self._backlog[0]
            if isinstance(a, StopTasks):
                halt = self._stop_tasks(a.tasks)
                if self._stop.is_set():  # leaving (rule 4): a static member's next incarnation
                    self._halt_all(halt)  # may resume these very directories
                    halt = []
                self.membership.tasks_stopped(a.tasks)
                self._halt_all(halt)  # rule 4: after the report, so that the next owner need not wait
            elif isinstance(a, StartTasks):
                try:
                    self._start_tasks(a.tasks)
                except OffsetFetchError as e:
                    log.info("cannot start %s yet (retrying): %s", a.tasks, e)
                    return
                self.membership.tasks_started(a.tasks)
            elif isinstance(a, LostTasks):
                log.warning("lost tasks (%s): stopping them without committing", a.reason)
                lost = sorted(a.tasks.active | a.tasks.standby | a.tasks.warmup)
                for t in lost:
                    self._queued.pop(t, None)
                self._halt_all(lost)
            elif isinstance(a, Fatal):
                raise StreamsPipelineError(
                    f"the coordinator refused this member: {a.error.value}: {a.message}")
            self._backlog.pop(0)

    # ---------------------------------------------------------------- starting
    def _start_tasks(self, tasks: MemberTasks) -> None:
        """Rule 6: the actives now, the copies queued."""
        actives = sorted(tasks.active)
        if actives:
            self._fetch_committed(actives)
        for task in actives:
            self._queued.pop(task, None)
            self._start(task, ACTIVE)
        for task, role in [(t, STANDBY) for t in sorted(tasks.standby)] + \
                          [(t, WARMUP) for t in sorted(tasks.warmup)]:
            self._queued[task] = (role, 0.0)

    def _start_queued(self) -> None:
        """Start one queued copy that is due, unless an action is waiting (rules 6 and 7)."""
        assert self.membership is not None
        now = time.monotonic()
        due = sorted(t for t, (_, at) in self._queued.items() if at <= now)
        if not due or self._backlog or self.membership.has_actions():
            return
        task = due[0]
        role, _ = self._queued[task]
        owned = self._machine.owned
        if task not in (owned.standby if role == STANDBY else owned.warmup):
            self._queued.pop(task)  # the coordinator took it back in between
            return
        try:
            self._fetch_committed([task])
        except OffsetFetchError as e:
            log.info("cannot start the %s of %s yet (retrying): %s", role, task, e)
            self._queued[task] = (role, now + 1.0)
            return
        self._queued.pop(task)
        try:
            self._start(task, role)
        except StreamsPipelineError:
            raise
        except Exception as e:  # Spark refused to start the query (seen: a ConcurrentModificationException)
            self._halt(task)
            self._retry_copy(task, role, e)

    def _retry_copy(self, task: TaskId, role: str, err: BaseException | None) -> None:
        """Rule 7: a copy whose query failed, or could not start, is started again after a back-off."""
        self._copy_failures[task] += 1
        wait = min(_COPY_RETRY_MAX_S, 2.0 ** self._copy_failures[task])
        log.warning("task %s: the %s query failed (%s); starting it again in %.0f s", task, role, err, wait)
        self._queued[task] = (role, time.monotonic() + wait)

    def _start(self, task: TaskId, role: str) -> None:
        committed, record = self._committed[task]
        with self._lock:
            q = self._queries.get(task)
        local = None if q is None else LocalCopy(q.directory, dict(q.ends), q.running and not q.fenced)
        plan = plan_start(committed=committed, record=record, process_id=self.process_id, local=local,
                          active=role == ACTIVE)
        if plan.how is StartFrom.RESUME and plan.directory is not None and record is not None:
            done = last_committed_batch(self.root / plan.directory)
            if done is not None and done > record.batch:  # batches nobody accepted: copy the record
                plan = StartPlan(StartFrom.COPY, record.directory, record.batch)
        if plan.how is StartFrom.PROMOTE:
            assert q is not None
            log.info("task %s: %s copy here becomes %s (at %s, committed %s)", task, q.role, role,
                     _fmt(q.ends), _fmt(committed))
            self.starts[f"promoted {role}"] += 1
            with q.lock:
                q.role = role
                if role == ACTIVE:
                    # At the commit it reads on at once; behind it (a standby), it first catches up
                    # to it with its sink off (`_watch` lifts the limit then).
                    q.limit = None if caught_up(q.ends, committed) else dict(committed)
                else:
                    q.limit = self._copy_limit(role, committed, record, task)
                q.sink_from = dict(committed) if role == ACTIVE else None
                q.caught_up_reported = False
            self._write_control(q)
            return
        if q is not None:
            self._halt(task)
        sources = {task.shard(topic) for topic in self._sources(task)}
        if plan.how is StartFrom.RESUME:
            assert plan.directory is not None and record is not None
            directory, batch = plan.directory, record.batch
        elif plan.how is StartFrom.COPY:
            assert plan.directory is not None and plan.batch is not None
            directory, batch = self._new_directory(task), plan.batch
            started = time.monotonic()
            copy_batch(self.root / plan.directory, self.root / directory, plan.batch)
            log.info("task %s: copied batch %d of %s for the %s in %.2f s", task, plan.batch,
                     plan.directory, role, time.monotonic() - started)
        else:
            directory, batch = self._new_directory(task), None
        if batch is not None:
            at = batch_ends(self.root / directory, batch)
            if at is None:  # starting empty here would silently lose the task's state
                raise StreamsPipelineError(
                    f"task {task}: its checkpoint {self.root / directory} has no batch {batch} "
                    "(was the state root moved or cleaned?)")
            # Spark runs an unfinished batch 0 again from the source's initial offset: give the
            # query the lineage's, not the copied batch's end.
            begin = lineage_begin(self.root / directory, batch) or at
        else:
            at = _lanes_at(sources, plan.begin or {})
            begin = at
        self.starts[f"{plan.how.value} {role}"] += 1
        self._prune(task, keep={directory, record.directory if record else ""})
        q = _TaskQuery(task, role, directory, self.run_dir / f"{task}.json", self._next_generation(),
                       begin=begin, ends=dict(at), limit=self._copy_limit(role, committed, record, task),
                       sink_from=dict(committed) if role == ACTIVE else None)
        if role == ACTIVE and not reached(at, committed):
            q.limit = dict(committed)  # behind the commit (a crash's unfinished batch): catch up first
        with self._lock:
            self._queries[task] = q
            self._dormant.pop(task, None)
        self._launch(q)

    def _launch(self, q: _TaskQuery) -> None:
        self._write_control(q)
        opts = {"log": self.log_spec, "control": str(q.control),
                "begin": json.dumps(task_offset(q.begin, q.begin))}
        if self.max_records_per_trigger:
            opts["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        df = self.spark.readStream.format("regroup-task").options(**opts).load()
        result = self.build(df, q.task)
        q.handle = (result.writeStream.foreachBatch(self._on_batch_of(q)).outputMode(self.output_mode)
                    .option("checkpointLocation", (self.root / q.directory).uri)
                    .queryName(f"{self.group}.{q.task}.{q.directory.rsplit('/', 1)[-1]}")
                    .trigger(processingTime=f"{self.trigger_ms} milliseconds").start())
        log.info("task %s: %s query started on %s at %s", q.task, q.role, q.directory, _fmt(q.ends))

    # ---------------------------------------------------------------- a batch (Spark's thread)
    def _on_batch_of(self, q: _TaskQuery) -> Callable[[Any, int], None]:
        def on_batch(df: Any, batch_id: int) -> None:
            checkpoint = self.root / q.directory
            end = batch_ends(checkpoint, batch_id)
            start = (batch_ends(checkpoint, batch_id - 1) if batch_id > 0 else None) or q.begin
            if end is None:
                raise StreamsPipelineError(
                    f"task {q.task}: batch {batch_id} is not in {checkpoint}'s offset log")
            with q.lock:
                if q.fenced:
                    raise TaskFencedError(f"task {q.task} is no longer held by this member")
                active = q.role == ACTIVE
                if active and overruns(start, end, q.sink_from):
                    q.overran = True
                    raise OverranCommitError(
                        f"task {q.task}: batch {batch_id} ({_fmt(start)} to {_fmt(end)}) crossed the commit "
                        f"it took over from ({_fmt(q.sink_from or {})}) with its sink off; starting the task "
                        "again from the batch of record")
                output = active and sink_on(start, q.sink_from)
                commit = active and q.sink_from is not None and reached(end, q.sink_from)
            if output:
                cached = df.persist()
                try:
                    cached.count()  # run the batch (and its state update) once, whatever the sink does
                    self.sink(cached, TaskBatch(q.task, batch_id, self._machine.epoch, start, end))
                finally:
                    cached.unpersist()
            else:
                df.write.format("noop").mode("overwrite").save()
            if commit:
                assert self.membership is not None
                try:
                    self.membership.commit(end, format_record(CheckpointRecord(q.directory, batch_id)))
                except CommitFailedError as e:
                    log.warning("task %s: commit of batch %d refused, stopping its query: %s", q.task,
                                batch_id, e)
                    with q.lock:
                        q.fenced = True
                    raise TaskFencedError(f"task {q.task}: commit of batch {batch_id} refused: {e}") from e
            with q.lock:
                q.ends = dict(end)
                q.batches += 1
        return on_batch

    # ---------------------------------------------------------------- stopping
    def _stop_tasks(self, tasks: MemberTasks) -> list[TaskId]:
        """Rule 4: the actives gated until their last batch committed, the copies parked; returns
        the queries to stop (once the coordinator has been told)."""
        for t in tasks.active | tasks.standby | tasks.warmup:
            self._queued.pop(t, None)
        halt = self._release_actives(sorted(tasks.active))
        for t in sorted(tasks.standby | tasks.warmup):
            q = self._queries.get(t)
            if q is not None and q.running:
                with q.lock:
                    q.role, q.parked_at, q.parked_from = PARKED, time.monotonic(), q.role
            elif q is not None:
                halt.append(t)
        return halt

    def _release_actives(self, tasks: Sequence[TaskId]) -> list[TaskId]:
        """Rule 4: gate them all, wait for every reader to obey (its last batch has finished and
        committed), fence them; returns them, to be stopped."""
        gated = [q for q in (self._queries.get(t) for t in tasks) if q is not None]
        for q in gated:
            if q.running:
                q.generation = self._next_generation()
                write_control(q.control, Control(q.generation, q.limit, gate=True))
        deadline = time.monotonic() + self.rebalance_timeout_ms / 1000
        while time.monotonic() < deadline and any(
                q.running and read_ack(q.control) < q.generation for q in gated):
            time.sleep(0.02)
        late = [q.task for q in gated if q.running and read_ack(q.control) < q.generation]
        for q in gated:
            with q.lock:
                q.fenced = True  # nothing after this point may commit
        if late:  # a batch may still run: stop it before anyone else may start on these offsets
            log.warning("tasks %s: the reader did not obey the gate within the rebalance timeout; "
                        "stopping the queries before releasing them", late)
            self._halt_all(late)
        return [q.task for q in gated if q.task not in late]

    def _halt_all(self, tasks: Sequence[TaskId]) -> None:
        """`_halt` several queries at once: stopping a query waits for Spark to end its threads,
        about a second each, which adds up on a member's leave."""
        if len(tasks) <= 1:
            for t in tasks:
                self._halt(t)
            return
        threads = [threading.Thread(target=self._halt, args=(t,), name=f"regroup-halt-{t}") for t in tasks]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    def _halt(self, task: TaskId) -> None:
        """Stop the task's query at once (no gate) and keep its directory as a dormant copy."""
        with self._lock:
            q = self._queries.pop(task, None)
        if q is None:
            return
        with q.lock:
            q.fenced = True
        if q.handle is not None:
            try:
                q.handle.stop()
            except Exception as e:  # the query had failed already: nothing left to stop
                log.info("task %s: stopping its query: %s", task, e)
        with self._lock:
            if q.ends:
                self._dormant[task] = dict(q.ends)
        log.info("task %s: %s query stopped at %s", task, q.role, _fmt(q.ends))

    # ---------------------------------------------------------------- keeping up
    def _watch(self) -> None:
        """Failed queries, parked copies nobody took back, promotions that caught up."""
        for t, q in list(self._queries.items()):
            if q.handle is not None and not q.handle.isActive and not q.fenced:
                err = q.handle.exception()
                if q.role == ACTIVE and q.overran:  # checkpoints rule 5: not a failure of the query
                    log.warning("task %s: the promoted copy had read past the commit (its active died "
                                "after planning a batch); starting it from the batch of record", t)
                    self._halt(t)
                    self._fetch_committed([t])
                    self._start(t, ACTIVE)
                    continue
                if q.role == ACTIVE:
                    # Spark fails a query on transient trouble too (a Python worker that could not
                    # connect back on a loaded machine): start it again from the checkpoint of
                    # record, a few times, before giving up.
                    self._failures[t] += 1
                    if self._failures[t] > _ACTIVE_RESTARTS:
                        raise StreamsPipelineError(f"the query of active task {t} failed "
                                                   f"{self._failures[t]} times; last: {err}")
                    log.warning("task %s: the active query failed (%s); starting it again", t, err)
                    self._halt(t)
                    self._fetch_committed([t])
                    self._start(t, ACTIVE)
                    continue
                self._halt(t)
                if q.role in (STANDBY, WARMUP):
                    self._retry_copy(t, q.role, err)
                else:
                    log.warning("task %s: the parked copy's query failed (%s); dropping it", t, err)
            elif q.role == PARKED and time.monotonic() - q.parked_at > self.park_ms / 1000:
                self._halt(t)
            elif q.role == ACTIVE and q.limit is not None and q.sink_from is not None \
                    and reached(q.ends, q.sink_from):
                q.limit = None  # a promoted copy reached the commit: read to the log's end
                self._write_control(q)

    def _refresh(self) -> None:
        """Rule 3: standbys follow the committed offsets, warm-ups (parked ones too) the active's
        planned batch."""
        copies = [t for t, q in self._queries.items() if q.role in (STANDBY, WARMUP) or
                  (q.role == PARKED and q.parked_from == WARMUP)]
        self._plans.keep(copies)
        if not copies:
            return
        now = time.monotonic()
        due = now - self._refreshed_at >= self.refresh_ms / 1000
        if due:
            self._refreshed_at = now
            try:
                self._fetch_committed([t for t in copies if self._queries[t].role != PARKED])
            except OffsetFetchError as e:
                log.info("cannot refresh the committed offsets of the copies yet: %s", e)
        # Another filesystem than the local one is read at the committed offsets' pace: each read
        # is a call through the JVM, and this thread also stops the actives others wait for.
        plans = due or isinstance(self.root, LocalPath)
        for t in copies:
            q = self._queries.get(t)
            if q is None or t not in self._committed:
                continue
            role = WARMUP if q.role == PARKED else q.role
            if role == WARMUP and not plans:
                continue
            committed, record = self._committed[t]
            limit = self._copy_limit(role, committed, record, task=t)
            if limit != q.limit:
                q.limit = limit
                self._write_control(q)

    def _copy_limit(self, role: str, committed: dict[Shard, int], record: CheckpointRecord | None,
                    task: TaskId | None = None) -> dict[Shard, int] | None:
        """Rule 3: how far a query of ``role`` may read (None: an active, to the log's end). A new
        warm-up starts with the active's plan too: at the bare commit, while its active is busy, it
        would count as having nothing to read, be reported caught up and promoted before it ran a
        batch — before Spark restored its state (`position_known`)."""
        if role == ACTIVE:
            return None
        if role == WARMUP:
            return warmup_limit(committed, self._plans.planned(record, task))
        return dict(committed)

    def _report(self) -> None:
        assert self.membership is not None
        urgent = False
        for q in self._queries.values():
            if q.role == WARMUP and not q.caught_up_reported and q.limit is not None \
                    and caught_up(q.ends, q.limit):
                q.caught_up_reported = urgent = True
                log.info("task %s: warm-up caught up at %s", q.task, _fmt(q.ends))
        self.membership.report_offsets(self._task_offsets(), urgent=urgent)

    def _task_offsets(self) -> dict[TaskId, dict[Shard, int]]:
        with self._lock:
            out = {t: _per_source(t, o) for t, o in self._dormant.items()}
            out.update({t: _per_source(t, q.ends) for t, q in self._queries.items() if _has_state(q)})
            return out

    # ---------------------------------------------------------------- helpers
    def _fetch_committed(self, tasks: list[TaskId]) -> None:
        assert self.membership is not None
        shards = {t.shard(topic): t for t in tasks for topic in self._sources(t)}
        committed = self.membership.fetch_committed_with_metadata(shards)
        for t in tasks:  # the task's part of each source partition, or its lanes (rule 10)
            own = [sh for sh, task in shards.items() if task == t]
            mine = {s: c for s, c in committed.items() if any(within(s, o) for o in own)}
            self._committed[t] = ({s: o for s, (o, _) in mine.items()},
                                  latest_record([m for _, m in mine.values()]))

    def _write_control(self, q: _TaskQuery) -> None:
        write_control(q.control, Control(q.generation, q.limit, gate=self._paused and q.role == ACTIVE))

    def _pause_if_cut_off(self) -> None:
        """Rule 8: gate the actives' readers while the member is cut off, open them again after."""
        assert self.membership is not None
        paused = self.membership.cut_off()
        if paused == self._paused:
            return
        self._paused = paused
        if paused:
            log.warning("cut off from the coordinator: no answer for longer than the failover grace allows; "
                        "it may have given the tasks away: the active tasks plan no batch until it answers")
        else:
            log.info("the coordinator answers again: the active tasks go on")
        for q in list(self._queries.values()):
            if q.role == ACTIVE:
                self._write_control(q)

    def _sources(self, task: TaskId) -> list[str]:
        for sub in self.topology.subtopologies:
            if sub.subtopology_id == task.subtopology:
                return sorted(sub.source_topics)
        raise StreamsPipelineError(f"the coordinator assigned task {task}, but the topology has no "
                                   f"subtopology {task.subtopology!r}")

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    def _new_directory(self, task: TaskId) -> str:
        return checkpoint_directory(str(task), self.process_id, self._next_generation())

    def _prune(self, task: TaskId, keep: set[str]) -> None:
        """Remove this process's older copies of ``task`` (not the one of record, not the new one)."""
        try:
            copies = (self.root / "tasks" / str(task)).iterdir()
        except FileNotFoundError:
            return
        for d in copies:
            rel = f"tasks/{task}/{d.name}"
            if directory_owner(rel) == self.process_id and rel not in keep:
                d.remove()

    def _scan_dormant(self) -> None:
        """Copies this process left on disk in earlier runs (a static member's restart)."""
        try:
            task_dirs = (self.root / "tasks").iterdir()
        except FileNotFoundError:
            return
        for task_dir in sorted(task_dirs, key=lambda d: d.name):
            task = parse_task_id(task_dir.name)
            if task is None:
                continue
            for d in sorted(task_dir.iterdir(), key=lambda d: d.name):
                if directory_owner(d.name) != self.process_id or d.name.endswith(".copying"):
                    continue
                done = last_committed_batch(d)
                ends = batch_ends(d, done) if done is not None else None
                if ends:
                    self._dormant[task] = ends


def _lanes_at(sources: set[Shard], committed: Mapping[Shard, int]) -> dict[Shard, int]:
    """Where a fresh query begins: each source part at its committed offset, or at its committed
    lanes (rule 10), and from the log's start where nothing is committed (`keyrange.clipped`)."""
    out: dict[Shard, int] = {}
    for src in sorted(sources):
        inside = {f: o for f, o in committed.items() if within(f, src)}
        out.update({Shard(src.topic, src.partition, lo, hi): o for lo, hi, o in clipped(inside, src, 0)})
    return out


def _per_source(task: TaskId, offsets: Mapping[Shard, int]) -> dict[Shard, int]:
    """A task's position as the coordinator measures it (rule 10): per source part, its lowest lane."""
    out: dict[Shard, int] = {}
    for s, o in offsets.items():
        own = task.shard(s.topic)
        key = own if within(s, own) else s
        out[key] = min(o, out.get(key, o))
    return out


def _has_state(q: _TaskQuery) -> bool:
    """Rule 3's report (`position_known`): an active's position always is."""
    return q.role not in (WARMUP, STANDBY) or position_known(q.batches, q.ends, q.limit)


def _fmt(offsets: Mapping[Shard, int]) -> str:
    return ",".join(f"{s.topic}/{s.partition}@{o}" for s, o in sorted(offsets.items())) or "-"


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
