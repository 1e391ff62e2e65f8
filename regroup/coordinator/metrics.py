"""Prometheus metrics of the coordinator (docs/operations.md lists them).

Everything is registered in the service's own registry (not the global one), so tests can run several
coordinators in one process. Per-group gauges are refreshed from the core's state every few seconds
on the event loop (`observe_groups`); counters move as things happen.
"""

from __future__ import annotations

import contextlib
from collections import Counter as Tally
from collections.abc import Iterable
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from regroup.protocol.coordinator import Coordinator
from regroup.protocol.outcome import AnyRecord
from regroup.protocol.records import GroupEpochRecord, MemberStatus, TargetEpochRecord
from regroup.protocol.state import GroupState
from regroup.protocol.streams.records import StreamsEpochRecord

_LATENCY = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_STEP = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.heartbeats = Counter("regroup_heartbeats", "Heartbeats answered, by error code", ["error"],
                                  registry=r)
        self.heartbeat_latency = Histogram(
            "regroup_heartbeat_latency_seconds",
            "Time from receiving a heartbeat to sending its answer, including the wait for durability",
            buckets=_LATENCY, registry=r)
        self.requests = Counter("regroup_requests", "Requests other than heartbeats, by method and error",
                                ["method", "error"], registry=r)
        self.group_epoch = Gauge("regroup_group_epoch", "Group epoch", ["group"], registry=r)
        self.target_epoch = Gauge("regroup_target_epoch", "Epoch of the group's target assignment", ["group"],
                                  registry=r)
        self.rebalances = Counter("regroup_rebalances", "Group epoch bumps (each starts a rebalance)",
                                  ["group"], registry=r)
        self.groups = Gauge("regroup_groups", "Groups by state", ["state"], registry=r)
        self.members = Gauge("regroup_members", "Members by group and reconciliation status",
                             ["group", "status"], registry=r)
        self.fenced = Counter("regroup_fenced_members",
                              "Members removed because their session or revocation timeout expired",
                              ["group"], registry=r)
        self.assignment_seconds = Histogram(
            "regroup_assignment_seconds",
            "Duration of coordinator steps that computed a new target assignment (assignor included)",
            buckets=_STEP, registry=r)
        self.records_written = Counter("regroup_records_written", "Records made durable", registry=r)
        self.store_transactions = Counter("regroup_store_transactions",
                                          "Store transactions (group commits)", registry=r)
        self.store_commit_seconds = Histogram("regroup_store_commit_seconds",
                                              "Duration of one store transaction, fsync included",
                                              buckets=_LATENCY, registry=r)
        self.store_batch_appends = Histogram(
            "regroup_store_batch_appends",
            "Appends (coordinator steps) per transaction: the group-commit factor",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024), registry=r)
        self.snapshots = Counter("regroup_snapshots", "Snapshot compactions written", registry=r)
        self.snapshot_records = Gauge("regroup_snapshot_records", "Records in the last snapshot", registry=r)
        self.records_since_snapshot = Gauge("regroup_records_since_snapshot",
                                            "Records appended since the last snapshot", registry=r)
        self.recovery_seconds = Gauge("regroup_recovery_seconds", "Time the last start spent recovering",
                                      registry=r)
        self.recovered_records = Gauge("regroup_recovered_records", "Records replayed at the last start",
                                       registry=r)
        self.watch_streams = Gauge("regroup_watch_streams", "Open Watch streams", registry=r)
        self.heartbeat_streams = Gauge("regroup_heartbeat_streams", "Open HeartbeatStream streams",
                                       registry=r)
        self.nudges = Counter("regroup_nudges", "Nudges pushed on Watch streams", registry=r)
        self.topic_refreshes = Counter("regroup_topic_refreshes", "Topic metadata refreshes by result",
                                       ["result"], registry=r)
        self.topics = Gauge("regroup_topics", "Topics known to the coordinator", registry=r)
        self.large_requests = Counter(
            "regroup_large_requests",
            "Requests over large_request_bytes, by what the lane of large requests did: read (parsed and "
            "checked there) or refused (a client or everyone at its limit: RESOURCE_EXHAUSTED)",
            ["result"], registry=r)
        for result in ("read", "refused"):  # both shown from the start, at 0
            self.large_requests.labels(result)
        self._group_labels: set[str] = set()
        self._member_labels: set[tuple[str, str]] = set()

    # ---------------------------------------------------------------- events
    def observe_records(self, records: Iterable[AnyRecord]) -> None:
        for r in records:
            if isinstance(r, GroupEpochRecord | StreamsEpochRecord):
                if r.epoch is None:
                    self._forget_group(r.group_id)
                else:
                    self.group_epoch.labels(r.group_id).set(r.epoch)
                    self._group_labels.add(r.group_id)
                    if r.epoch > 0:
                        self.rebalances.labels(r.group_id).inc()
            elif isinstance(r, TargetEpochRecord):
                self.target_epoch.labels(r.group_id).set(r.target_epoch)

    def on_commit(self, appends: int, records: int, seconds: float) -> None:
        """Called by the store's writer thread after each transaction."""
        self.store_transactions.inc()
        self.records_written.inc(records)
        self.store_commit_seconds.observe(seconds)
        self.store_batch_appends.observe(appends)

    def on_compact(self, records: int, _seconds: float) -> None:
        self.snapshots.inc()
        self.snapshot_records.set(records)

    # ---------------------------------------------------------------- periodic
    def observe_groups(self, coord: Coordinator) -> None:
        """Group states and member statuses from the core's state (call on the event loop)."""
        states = Tally(g.state for g in coord.groups.values())
        for s in GroupState:
            self.groups.labels(s.value).set(states.get(s, 0))
        seen: set[tuple[str, str]] = set()
        for gid, g in coord.groups.items():
            self.group_epoch.labels(gid).set(g.epoch)
            self.target_epoch.labels(gid).set(g.target_epoch)
            self._group_labels.add(gid)
            counts = Tally(c.status for c in g.current.values())
            for status in MemberStatus:
                self.members.labels(gid, status.value).set(counts.get(status, 0))
                seen.add((gid, status.value))
        for gid in self._group_labels - set(coord.groups):
            self._forget_group(gid)
        for labels in self._member_labels - seen:
            self.members.remove(*labels)
        self._member_labels = seen

    def _forget_group(self, gid: str) -> None:
        for gauge in (self.group_epoch, self.target_epoch):
            with contextlib.suppress(KeyError):
                gauge.remove(gid)
        self._group_labels.discard(gid)


def serve_metrics(metrics: Metrics, host: str, port: int) -> tuple[WSGIServer, Thread]:
    """Start the /metrics HTTP endpoint on a thread (port 0 picks a free port: see server_port)."""
    return start_http_server(port, addr=host, registry=metrics.registry)
