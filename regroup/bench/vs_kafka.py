"""`regroup bench vs-kafka`: regroup beside Apache Kafka's own group coordinator, on one machine, in one run.

One Apache Kafka broker (:func:`regroup.testing.kafka_broker.start_kafka`) serves every system's data:
each system's members read the same topic shapes from it and do the same work
(:mod:`regroup.bench.vs_kafka_worker`). The systems:

* ``regroup``: regroup consumers on the Kafka log, their group run by a regroup coordinator process
  (``--log kafka://BROKER``);
* ``kafka-consumer``: confluent-kafka consumers, ``group.protocol=consumer`` (KIP-848; the broker's
  group coordinator and its default ``uniform`` assignor);
* ``kafka-classic``: confluent-kafka consumers, ``group.protocol=classic`` with
  ``partition.assignment.strategy=cooperative-sticky``.

Rules of this module:

1. Every member is its own process (one member per process for every system: each Kafka client and
   each regroup consumer has its own threads, sockets and Python interpreter, as in production), but
   in ``scale-out-100``: 100 processes do not fit on two cores, so there the 100 members are threads,
   ``big_per_process`` per process, for every system alike (the joining member is a process).
2. The same timing settings for all: session timeout, heartbeat interval (the broker's
   ``group.consumer.*`` settings for the new protocol, the client's for the classic one, the
   coordinator's for regroup), and topic-metadata refresh (librdkafka's
   ``topic.metadata.refresh.interval.ms``, regroup's ``--topic-refresh-s``).
3. Each (scenario, system, run) has its own topic and group on the shared broker, and regroup its own
   coordinator process. The systems run one after another, never at the same time.
4. *Owned* means: the members' own rebalance callbacks, replayed from their event lines, give every
   partition of the topic to exactly one live member. *Stable* additionally needs the group's
   coordinator to say so (regroup's DescribeGroup; Kafka's DescribeConsumerGroups: state STABLE) with
   the expected member count. Every wait is for a condition with a timeout; a timed-out figure is
   reported as ``null`` with a ``timed_out`` note, never as a number.

Scenarios: ``grow`` (10 members, the topic grows 10 → 910 partitions), ``kill`` (kill -9 of one of
10 members under load; regroup with and without its failover grace), ``scale-out`` (10 → 11 members,
40 partitions, under load), ``scale-out-100`` (100 → 101 members, 1,000 partitions), ``rolling`` (a
rolling restart of 10 static members under load). Each scenario's function says what it measures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from regroup.bench.procs import start_coordinator
from regroup.rpc.client import CoordinatorClient

SYSTEMS = ("regroup", "kafka-consumer", "kafka-classic")
SCENARIOS = ("grow", "kill", "scale-out", "scale-out-100", "rolling")
_LABEL = {"regroup": "regroup", "kafka-consumer": "Kafka new protocol",
          "kafka-classic": "Kafka classic (coop-sticky)"}


@dataclass(frozen=True, slots=True)
class Settings:
    members: int = 10
    #: grow: partitions before, and added.
    grow_from: int = 10
    grow_by: int = 900
    #: kill and scale-out: partitions, and records per second over all of them.
    partitions: int = 40
    rate: int = 4_000
    session_ms: int = 10_000
    heartbeat_ms: int = 2_000
    refresh_ms: int = 1_000
    #: regroup's failover grace (0: off); the kill scenario runs regroup with each.
    graces_ms: tuple[int, ...] = (2_000, 0)
    #: Under load before the change.
    steady_s: float = 3.0
    grow_timeout_s: float = 240.0
    #: scale-out-100: members before (in processes of ``big_per_process`` member threads), partitions.
    big_members: int = 100
    big_partitions: int = 1_000
    big_per_process: int = 10


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, round(q * (len(xs) - 1)))], 1)


# --------------------------------------------------------------------------- members and their events


class MemberCrashed(RuntimeError):
    """A member's thread ended on an exception while the run needed it."""


@dataclass
class _Member:
    index: int
    out: Path
    proc: subprocess.Popen[bytes]
    dead: bool = False
    pos: int = 0
    owned: set[int] = field(default_factory=set)
    events: list[tuple[float, str, str]] = field(default_factory=list)

    def tail(self) -> None:
        """Read the lines written since the last call; keep the callbacks' view of ownership."""
        if not self.out.exists():
            return
        with self.out.open() as f:
            f.seek(self.pos)
            data = f.read()
        end = data.rfind("\n") + 1
        self.pos += len(data[:end].encode())
        for line in data[:end].splitlines():
            t, kind, rest = [*line.split(" ", 2), ""][:3]
            self.events.append((float(t), kind, rest))
            if kind in ("assign", "revoke", "lost") and rest:
                parts = set(map(int, rest.split(",")))
                if kind == "assign":
                    self.owned |= parts
                else:
                    self.owned -= parts


class _Run:
    """One system's members (processes), its coordinator (regroup), topic and group."""

    def __init__(self, system: str, bootstrap: str, tmp: Path, name: str, settings: Settings,
                 grace_ms: int | None = None) -> None:
        self.system, self.bootstrap, self.tmp, self.name, self.s = system, bootstrap, tmp, name, settings
        self.topic = self.group = name
        self.members: list[_Member] = []
        self.coordinator: subprocess.Popen[str] | None = None
        self.address = "-"
        self._client: CoordinatorClient | None = None
        self._admin: Any = None
        if system == "regroup":
            args = ["--log", f"kafka://{bootstrap}", "--session-timeout-ms", str(settings.session_ms),
                    "--heartbeat-interval-ms", str(settings.heartbeat_ms),
                    "--topic-refresh-s", str(settings.refresh_ms / 1000)]
            if grace_ms is not None:
                args += ["--failover-grace-ms", str(grace_ms)]
            self.coordinator, self.address = start_coordinator(tmp / f"{name}-coord", *args)
            self._client = CoordinatorClient(self.address)
        else:
            from confluent_kafka.admin import AdminClient
            self._admin = AdminClient({"bootstrap.servers": bootstrap})

    def start(self, count: int = 1, static: str | None = None) -> list[_Member]:
        """``count`` more members in one new process (``static``: its group.instance.id)."""
        i = len(self.members)
        cmd = [sys.executable, "-m", "regroup.bench.vs_kafka_worker", self.system, self.bootstrap,
               self.address, self.topic, self.group, str(self.tmp / self.name), str(i), str(count),
               "--session-ms", str(self.s.session_ms), "--heartbeat-ms", str(self.s.heartbeat_ms),
               "--refresh-ms", str(self.s.refresh_ms)]
        if static:
            cmd += ["--static", static]
        proc = subprocess.Popen(cmd, stderr=open(self.tmp / f"{self.name}-{i}.err", "ab"))  # noqa: SIM115
        new = [_Member(j, self.tmp / f"{self.name}-{j}.out", proc) for j in range(i, i + count)]
        self.members += new
        return new

    def stop(self, member: _Member, sig: signal.Signals) -> None:
        """Signal a member's process and wait for it to exit; its members are gone."""
        member.proc.send_signal(sig)
        member.proc.wait(timeout=30)
        for m in self.members:
            if m.proc is member.proc:
                m.dead = True

    def live(self) -> list[_Member]:
        return [m for m in self.members if not m.dead]

    def tail(self) -> None:
        for m in self.members:
            m.tail()

    def check_alive(self) -> None:
        """Raise `MemberCrashed` when a live member's thread ended on an exception (its ``error``
        line): the group cannot settle without it, so waiting out a timeout would only hide why."""
        for m in self.live():
            for t, kind, rest in m.events:
                if kind == "error":
                    raise MemberCrashed(f"{self.system}: member {m.index} ended at {t:.3f}: {rest}; see "
                                        f"{m.out} and {self.tmp / self.name}-*.err")

    def commits_refused(self) -> int:
        """How many periodic commits the coordinator refused (regroup members' ``commit-failed``)."""
        return self._events("commit-failed")

    def read_timeouts(self) -> int:
        """How many of regroup members' ``consume`` calls ended on a timed-out log read."""
        return self._events("read-timeout")

    def _events(self, kind: str) -> int:
        self.tail()
        return sum(1 for m in self.members for _, k, _ in m.events if k == kind)

    def owned(self, partitions: int) -> bool:
        """Every partition owned by exactly one live member, by the members' own callbacks."""
        self.tail()
        self.check_alive()
        live = self.live()
        return sum(len(m.owned) for m in live) == partitions and \
            set().union(*(m.owned for m in live)) == set(range(partitions))

    def stable(self, partitions: int) -> bool:
        """The coordinator says stable with the live members and (regroup) every partition assigned."""
        n = len(self.live())
        try:
            if self._client is not None:
                d = self._client.describe_group(self.group).description
                return d.state.value == "stable" and len(d.members) == n and \
                    sum(len(m.assigned) for m in d.members) == partitions
            from confluent_kafka import ConsumerGroupState
            g = self._admin.describe_consumer_groups([self.group])[self.group].result(timeout=5)
            return bool(g.state == ConsumerGroupState.STABLE and len(g.members) == n)
        except Exception:  # the group does not exist yet, or a transient error: not stable
            return False

    def epoch_bump_after(self, t0: float) -> float | None:
        """regroup: when the coordinator first bumped the group epoch at or after ``t0`` (its history)."""
        if self._client is None:
            return None
        bumps = [h.at_unix_ms / 1000 for h in self._client.describe_group(self.group).history
                 if h.kind == "group" and h.at_unix_ms / 1000 >= t0]
        return min(bumps, default=None)

    def close(self) -> None:
        for proc in {id(m.proc): m.proc for m in self.live()}.values():
            proc.send_signal(signal.SIGTERM)
        for m in self.members:
            try:
                m.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
        self._admin = None
        if self._client is not None:
            self._client.close()
        if self.coordinator is not None:
            self.coordinator.send_signal(signal.SIGTERM)
            try:
                self.coordinator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.coordinator.kill()


def _wait(cond: Callable[[], bool], timeout: float, poll: float = 0.05) -> float | None:
    """The wall-clock time at which ``cond()`` first held, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.time()
        time.sleep(poll)
    return None


def _since(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 3)


# --------------------------------------------------------------------------- the broker's topics, load


class _Kafka:
    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient
        self.bootstrap = bootstrap
        self.admin: Any = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})

    def create(self, topic: str, partitions: int) -> None:
        from confluent_kafka.cimpl import NewTopic
        self.admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)
        self._wait_count(topic, partitions)

    def grow(self, topic: str, total: int) -> None:
        from confluent_kafka.cimpl import NewPartitions
        self.admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=60)

    def warm_up(self, timeout: float = 180) -> float:
        """Have the broker create its group-offsets topic (``__consumer_offsets``, 50 partitions) and
        wait until its group coordinator answers; returns the seconds it took.

        A fresh broker creates that topic on the first FindCoordinator, from any client with a
        group.id — the first system's members, which then compete with 50 partitions being created
        and loaded (25-44 s on the 2-core machine). regroup's Kafka-log consumers carry a group.id too
        (librdkafka needs one, regroup never uses it), and regroup ran first: its first reads waited
        for fetch answers through that window, some past the log's 30 s timeout. Done once, before
        any system, so that no system pays for it (rule 3)."""
        from confluent_kafka import KafkaError, KafkaException
        t0 = time.monotonic()

        def ready() -> bool:
            try:
                self.admin.describe_consumer_groups(["regroup-bench-warm-up"])[
                    "regroup-bench-warm-up"].result(timeout=10)
                return True
            except KafkaException as e:  # a group that does not exist: the coordinator answered
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                return err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND
            except Exception:  # not ready yet (coordinator loading, a timeout)
                return False

        if _wait(ready, timeout, 0.5) is None:
            raise TimeoutError(f"the broker's group coordinator did not answer within {timeout} s")
        return round(time.monotonic() - t0, 1)

    def _wait_count(self, topic: str, partitions: int) -> None:
        def seen() -> bool:
            t = self.admin.list_topics(topic, timeout=5).topics.get(topic)
            return t is not None and t.error is None and len(t.partitions) == partitions
        if _wait(seen, 60, 0.1) is None:
            raise TimeoutError(f"topic {topic} does not have {partitions} partitions after 60 s")

    @contextlib.contextmanager
    def load(self, topic: str, partitions: int, rate: int) -> Iterator[None]:
        """A producer thread writing ``rate`` records/s of 100 bytes spread over every partition."""
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "acks": 1})
        stop = threading.Event()

        def run() -> None:
            tick, cursor = 0.05, 0
            per_tick = max(1, round(rate * tick))
            while not stop.is_set():
                t0 = time.time()
                for _ in range(per_tick):
                    producer.produce(topic, b"x" * 100, partition=cursor % partitions)
                    cursor += 1
                producer.poll(0)
                stop.wait(max(0.0, tick - (time.time() - t0)))
            producer.flush(10)

        thread = threading.Thread(target=run, name="vs-kafka-producer", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


# --------------------------------------------------------------------------- scenarios


def _settle(run: _Run, members: int, partitions: int, timeout: float = 120, per_process: int = 1,
            static: str | None = None) -> None:
    for i in range(0, members, per_process):
        run.start(min(per_process, members - i), static=f"{static}-{i}" if static else None)
    if _wait(lambda: run.owned(partitions) and run.stable(partitions), timeout, 0.1) is None:
        raise TimeoutError(f"{run.system}: {members} members did not own {partitions} partitions and "
                           f"settle within {timeout} s")


def _flowing(run: _Run, partitions: int, timeout: float = 60) -> None:
    """Wait until the load reaches the members: a record of every partition was handed out."""
    def seen() -> bool:
        run.tail()
        return {int(rest) for m in run.live() for _, kind, rest in m.events if kind == "first"} >= \
            set(range(partitions))
    if _wait(seen, timeout, 0.1) is None:
        raise TimeoutError(f"{run.system}: records of some partitions not handed out within {timeout} s")


def scenario_grow(kafka: _Kafka, run: _Run, s: Settings) -> dict[str, Any]:
    """The topic grows by ``grow_by`` partitions under ``members`` members: until every partition is
    owned (callbacks) and the group is stable."""
    total = s.grow_from + s.grow_by
    kafka.create(run.topic, s.grow_from)
    _settle(run, s.members, s.grow_from)
    t0 = time.time()
    kafka.grow(run.topic, total)
    t_created = time.time()
    t_owned = _wait(lambda: run.owned(total), s.grow_timeout_s, 0.1)
    t_stable = None
    if t_owned is not None:
        t_stable = _wait(lambda: run.owned(total) and run.stable(total), s.grow_timeout_s, 0.1)
    run.tail()
    saw = run.epoch_bump_after(t0)
    first_new = [t for m in run.members for t, kind, rest in m.events
                 if kind == "assign" and t >= t0 and rest and max(map(int, rest.split(","))) >= s.grow_from]
    return {"members": s.members, "partitions_before": s.grow_from, "partitions_added": s.grow_by,
            "seconds_first_new_partition_assigned": _since(min(first_new, default=None), t0),
            "seconds_all_owned": _since(t_owned, t0), "seconds_stable": _since(t_stable, t0),
            "seconds_coordinator_saw_partitions": _since(saw, t0),
            "seconds_create_partitions_call": _since(t_created, t0), "timed_out": t_stable is None}


def scenario_kill(kafka: _Kafka, run: _Run, s: Settings) -> dict[str, Any]:
    """kill -9 of the member owning the most partitions, under load: for each of its partitions, the
    time from the kill until another member hands out its first record."""
    kafka.create(run.topic, s.partitions)
    _settle(run, s.members, s.partitions)
    with kafka.load(run.topic, s.partitions, s.rate):
        _flowing(run, s.partitions)
        time.sleep(s.steady_s)
        run.tail()
        victim = max(run.members, key=lambda m: (len(m.owned), -m.index))
        lost = set(victim.owned)
        t_kill = time.time()
        run.stop(victim, signal.SIGKILL)
        firsts: dict[int, float] = {}

        def all_back() -> bool:
            run.tail()
            for m in run.live():
                for t, kind, rest in m.events:
                    if kind == "first" and t >= t_kill and int(rest) in lost:
                        firsts.setdefault(int(rest), t)
            return set(firsts) >= lost

        t_back = _wait(all_back, s.session_ms / 1000 + 60, 0.1)
        t_stable = _wait(lambda: run.owned(s.partitions) and run.stable(s.partitions), 60, 0.1)
    ms = [(t - t_kill) * 1000 for t in firsts.values()]
    return {"members": s.members, "partitions": s.partitions, "session_timeout_ms": s.session_ms,
            "partitions_of_killed_member": len(lost), "failover_ms_p50": _pct(ms, 0.5),
            "failover_ms_max": round(max(ms), 1) if t_back is not None and ms else None,
            "seconds_stable": _since(t_stable, t_kill), "timed_out": t_back is None}


def scenario_scale_out(kafka: _Kafka, run: _Run, s: Settings) -> dict[str, Any]:
    """One member more under load: the hand-off gap of each moved partition, from its revocation by the
    old owner to its assignment to (and first record at) the new owner; the throughput of the members
    that no callback touched, before vs during."""
    return _scale_out(kafka, run, s, s.members, s.partitions, 1)


def scenario_scale_out_100(kafka: _Kafka, run: _Run, s: Settings) -> dict[str, Any]:
    """The same with ``big_members`` members (``big_per_process`` threads per process) and
    ``big_partitions`` partitions; the new member is a process of its own."""
    return _scale_out(kafka, run, s, s.big_members, s.big_partitions, s.big_per_process)


def _scale_out(kafka: _Kafka, run: _Run, s: Settings, members: int, partitions: int,
               per_process: int) -> dict[str, Any]:
    kafka.create(run.topic, partitions)
    _settle(run, members, partitions, timeout=300, per_process=per_process)
    with kafka.load(run.topic, partitions, s.rate):
        _flowing(run, partitions)
        time.sleep(s.steady_s)
        t_start = time.time()
        [new] = run.start()
        # the new member owning something too: the classic protocol's cooperative rebalance is stable
        # between its two rounds, with the revoked partitions not yet given to the new member
        t_stable = _wait(lambda: run.owned(partitions) and bool(new.owned) and run.stable(partitions),
                         120, 0.05)
        time.sleep(2)
        run.tail()
    end = (t_stable or time.time()) + 0.5
    revoked: dict[int, float] = {}
    assigned: dict[int, float] = {}
    first: dict[int, float] = {}
    involved: set[int] = set()
    for m in run.members:
        for t, kind, rest in m.events:
            if t_start <= t <= end and kind in ("revoke", "assign") and rest:
                involved.add(m.index)
                for p in map(int, rest.split(",")):
                    (revoked if kind == "revoke" else assigned)[p] = t
            elif kind == "first" and t >= t_start:
                first.setdefault(int(rest), t)
    gaps = [(assigned[p] - revoked[p]) * 1000 for p in revoked if p in assigned]
    gaps_first = [(first[p] - revoked[p]) * 1000 for p in revoked if p in first]
    window = max(end - 0.5 - t_start, 0.5)

    def rate(m: _Member, lo: float, hi: float) -> float:
        return sum(int(rest) for t, kind, rest in m.events if kind == "count" and lo <= t < hi) / (hi - lo)

    uninvolved = [m for m in run.members[:members] if m.index not in involved]
    before = sum(rate(m, t_start - s.steady_s / 2, t_start) for m in uninvolved)
    during = sum(rate(m, t_start, t_start + window) for m in uninvolved)
    return {"members_before": members, "partitions": partitions, "produce_rate_per_s": s.rate,
            "seconds_start_to_stable": _since(t_stable, t_start), "moved_partitions": len(gaps),
            "handoff_gap_ms_p50": _pct(gaps, 0.5), "handoff_gap_ms_p99": _pct(gaps, 0.99),
            "revoke_to_first_record_ms_p50": _pct(gaps_first, 0.5),
            "revoke_to_first_record_ms_p99": _pct(gaps_first, 0.99),
            "uninvolved_members": len(uninvolved), "uninvolved_records_per_s_before": round(before),
            "uninvolved_records_per_s_during": round(during),
            "uninvolved_throughput_pct": round(100 * during / before, 1) if before else None,
            "commits_refused": run.commits_refused(), "read_timeouts": run.read_timeouts(),
            "timed_out": t_stable is None}


def scenario_rolling(kafka: _Kafka, run: _Run, s: Settings) -> dict[str, Any]:
    """A rolling restart of static members under load: each in turn is stopped (SIGTERM, a clean close)
    and started again with its group.instance.id; the next one goes once the group owns every
    partition and is stable again. Partitions moved: assigned to any member but the restarted one
    during a restart. Pause: for each partition of the restarted member, from the stop until anyone
    hands out a record of it again."""
    kafka.create(run.topic, s.partitions)
    _settle(run, s.members, s.partitions, static="static")
    moved = 0
    pauses: list[float] = []
    starts: list[float] = []
    timed_out = False
    with kafka.load(run.topic, s.partitions, s.rate):
        _flowing(run, s.partitions)
        time.sleep(s.steady_s)
        t_begin = time.time()
        for i in range(s.members):
            old = run.members[i]
            run.tail()
            mine = set(old.owned)
            t_stop = time.time()
            run.stop(old, signal.SIGTERM)
            [new] = run.start(static=f"static-{i}")
            t_ok = _wait(lambda: run.owned(s.partitions) and run.stable(s.partitions), 60, 0.05)
            if t_ok is None:
                timed_out = True
                break
            firsts: dict[int, float] = {}

            def back(mine: set[int] = mine, t_stop: float = t_stop, firsts: dict[int, float] = firsts,
                     ) -> bool:
                run.tail()
                for m in run.live():
                    for t, kind, rest in m.events:
                        if kind == "first" and t >= t_stop and int(rest) in mine:
                            firsts.setdefault(int(rest), t)
                return set(firsts) >= mine

            if _wait(back, 30, 0.05) is None:
                timed_out = True
            pauses += [(t - t_stop) * 1000 for t in firsts.values()]
            started = [t for t, kind, _ in new.events if kind == "member"]
            starts += [(started[0] - t_stop) * 1000] if started else []
            for m in run.members:
                if m is old or m is new:
                    continue
                moved += sum(len(rest.split(",")) for t, kind, rest in m.events
                             if kind == "assign" and rest and t >= t_stop)
    return {"members": s.members, "partitions": s.partitions, "restarts": s.members,
            "partitions_moved": moved, "pause_ms_p50": _pct(pauses, 0.5),
            "pause_ms_max": round(max(pauses), 1) if pauses else None,
            "stop_to_new_consumer_ms_p50": _pct(starts, 0.5),
            "seconds_whole_restart": round(time.time() - t_begin, 1), "timed_out": timed_out}


_SCENARIO_FN = {"grow": scenario_grow, "kill": scenario_kill, "scale-out": scenario_scale_out,
                "scale-out-100": scenario_scale_out_100, "rolling": scenario_rolling}


# --------------------------------------------------------------------------- the bench


def broker_config(s: Settings) -> dict[str, str]:
    """The new protocol's session timeout and heartbeat interval are the broker's (rule 2)."""
    return {"group.consumer.session.timeout.ms": str(s.session_ms),
            "group.consumer.min.session.timeout.ms": str(min(s.session_ms, 45_000)),
            "group.consumer.heartbeat.interval.ms": str(s.heartbeat_ms),
            "group.consumer.min.heartbeat.interval.ms": str(min(s.heartbeat_ms, 5_000)),
            "group.min.session.timeout.ms": str(min(s.session_ms, 6_000))}


def versions() -> dict[str, str]:
    import confluent_kafka

    from regroup.testing.kafka_broker import KAFKA_VERSION
    return {"apache_kafka": KAFKA_VERSION, "confluent_kafka": str(confluent_kafka.__version__),
            "librdkafka": confluent_kafka.libversion()[0], "python": sys.version.split()[0]}


def _variants(scenario: str, systems: tuple[str, ...], s: Settings) -> list[tuple[str, str, int | None]]:
    """(label, system, regroup's failover grace) of each system run in ``scenario``."""
    out: list[tuple[str, str, int | None]] = []
    for system in systems:
        if system == "regroup" and scenario == "kill":
            out += [(f"regroup (grace {g} ms)" if g else "regroup (grace off)", system, g)
                    for g in s.graces_ms]
        else:
            out.append((_LABEL[system], system, None))
    return out


def run_vs_kafka(scenarios: tuple[str, ...], systems: tuple[str, ...] = SYSTEMS, runs: int = 1,
                 settings: Settings | None = None, log: Callable[[str], None] | None = None,
                 ) -> dict[str, Any]:
    """Run every scenario for every system ``runs`` times on one broker; the figures by scenario, then
    by system label, a list with one entry per run."""
    from regroup.testing.kafka_broker import start_kafka
    s = settings or Settings()
    say = log or (lambda _msg: None)
    tmp = Path(tempfile.mkdtemp(prefix="regroup-vs-kafka-"))
    results: dict[str, Any] = {"versions": versions(), "settings": asdict(s),
                               "load_average": os.getloadavg()[0], "cores": os.cpu_count()}
    try:
        say("starting the Kafka broker")
        with start_kafka(config=broker_config(s), parent_dir=tmp, fast_start=False) as broker:
            kafka = _Kafka(broker.bootstrap)
            say("creating the broker's group-offsets topic")
            results["seconds_broker_warm_up"] = kafka.warm_up()
            for scenario in scenarios:
                figures: dict[str, list[dict[str, Any]]] = {}
                for r in range(runs):
                    for n, (label, system, grace) in enumerate(_variants(scenario, systems, s)):
                        name = f"{scenario}-{r}-{n}-{system}"
                        say(f"{scenario}: {label}, run {r + 1}/{runs}")
                        run = _Run(system, broker.bootstrap, tmp, name, s, grace)
                        try:
                            figures.setdefault(label, []).append(_SCENARIO_FN[scenario](kafka, run, s))
                        except (TimeoutError, MemberCrashed) as e:
                            figures.setdefault(label, []).append({"timed_out": True, "error": str(e)})
                        finally:
                            run.close()
                results[scenario] = figures
            kafka.admin = None  # librdkafka's handle goes before the broker does: no reconnect noise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_average_end"] = os.getloadavg()[0]
    return results


_SCALE_OUT_ROWS = [
    ("moved partitions", "moved_partitions"),
    ("hand-off gap p50 (ms)", "handoff_gap_ms_p50"),
    ("hand-off gap p99 (ms)", "handoff_gap_ms_p99"),
    ("revoke → first record p99 (ms)", "revoke_to_first_record_ms_p99"),
    ("uninvolved throughput during (% of before)", "uninvolved_throughput_pct"),
    ("new process start → stable (s)", "seconds_start_to_stable")]
_ROWS: dict[str, list[tuple[str, str]]] = {
    "grow": [("create_partitions call returned (s)", "seconds_create_partitions_call"),
             ("regroup coordinator saw them (s)", "seconds_coordinator_saw_partitions"),
             ("first new partition assigned (s)", "seconds_first_new_partition_assigned"),
             ("all partitions owned (s)", "seconds_all_owned"), ("group stable (s)", "seconds_stable")],
    "kill": [("failover p50 (ms)", "failover_ms_p50"), ("failover max (ms)", "failover_ms_max"),
             ("group stable after kill (s)", "seconds_stable")],
    "scale-out": _SCALE_OUT_ROWS,
    "scale-out-100": _SCALE_OUT_ROWS,
    "rolling": [("partitions moved", "partitions_moved"), ("pause p50 (ms)", "pause_ms_p50"),
                ("of which process restart p50 (ms)", "stop_to_new_consumer_ms_p50"),
                ("pause max (ms)", "pause_ms_max"), ("whole restart (s)", "seconds_whole_restart")],
}


def _cell(runs: list[dict[str, Any]], key: str) -> str:
    vals = [r.get(key) for r in runs]
    nums = [v for v in vals if isinstance(v, int | float)]
    if not nums:
        return "timed out" if any(r.get("timed_out") for r in runs) else "-"
    lo, hi = min(nums), max(nums)
    text = f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"
    return text + (" (+timeouts)" if len(nums) < len(vals) else "")


def print_table(results: dict[str, Any]) -> None:
    c = Console()
    v = results["versions"]
    c.print(f"Apache Kafka {v['apache_kafka']}, confluent-kafka {v['confluent_kafka']} (librdkafka "
            f"{v['librdkafka']}), Python {v['python']}; {results['cores']} cores, load average "
            f"{results['load_average']:.1f} → {results['load_average_end']:.1f}")
    for scenario in SCENARIOS:
        if scenario not in results:
            continue
        figures = results[scenario]
        t = Table(title=scenario)
        t.add_column("figure")
        for label in figures:
            t.add_column(label, justify="right")
        for name, key in _ROWS[scenario]:
            t.add_row(name, *(_cell(runs, key) for runs in figures.values()))
        c.print(t)


def run_vs_kafka_bench(scenarios: tuple[str, ...], runs: int, json_output: bool,
                       settings: Settings | None = None) -> dict[str, Any]:
    err = Console(stderr=True)
    results = run_vs_kafka(scenarios, runs=runs, settings=settings,
                           log=lambda msg: err.print(f"[dim]{msg}[/dim]"))
    if json_output:
        print(json.dumps(results))
    else:
        print_table(results)
    return results
