"""Run the coordinator: recover from the data dir, serve gRPC (and /metrics), stop cleanly on SIGTERM.

    python -m regroup.coordinator.server --listen 127.0.0.1:9650 --data-dir ./data --log static:orders=6

Start-up: lock the data dir, read the snapshot and the records after it, rebuild the core with
`Coordinator.recover` (every member gets a fresh session and every revoking member a fresh revocation
timeout from now; topic metadata starts as the groups recorded it), ask the log backend for topic
metadata; with ``--migrate-group`` declare each migration from a live Kafka group and read that group
once (`regroup.coordinator.migration`: nothing in a migrating group is granted before its Kafka group
was read); then listen; with ``--http HOST:PORT`` also serve the dashboard (`regroup.coordinator.http`)
once gRPC listens. Every setting is a field of `ServerConfig`, built from the command line by
`ServerConfig.from_args`. Once listening it prints one
line ``regroup coordinator listening on HOST:PORT ...`` on stdout, ending with
``; dashboard on http://HOST:PORT/`` when the dashboard is on.

Shutdown (SIGTERM or SIGINT): the dashboard's event streams and Watch streams end, in-flight calls
get a grace period (1 s; open heartbeat streams are cut after it), queued records are written, the
data dir is unlocked.
Exit status 0; 1 when the service stopped itself because it could not guarantee durability (see
`service`); 2 for a bad configuration.

Logs go to stderr (`regroup.coordinator.logs`, ``--log-level debug|info|warning|error``): the start-up
(address, data dir, topic source without its options, whether TLS and tokens are on and the names and
scopes of the tokens — never a token), then what `service` reports. Access (``--token``,
``--tokens-file``) is `regroup.coordinator.auth` and `regroup.coordinator.tokens`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import grpc.aio

from regroup.coordinator.auth import TokenInterceptor, server_credentials
from regroup.coordinator.history import EpochHistory
from regroup.coordinator.http.app import Dashboard, DashboardServer, is_loopback, parse_http, url_of
from regroup.coordinator.http.feed import Feed
from regroup.coordinator.logs import LogLevel, configure, redact_spec
from regroup.coordinator.metrics import Metrics, serve_metrics
from regroup.coordinator.migration import Migration, MigrationPoller, holds_not_read, parse_migrations
from regroup.coordinator.service import CoordinatorService, ServiceOptions, monotonic_ms
from regroup.coordinator.sources import TopicRefresher, open_topic_source
from regroup.coordinator.store import DurableStore, StoreError
from regroup.coordinator.tokens import TokenSet, load_tokens
from regroup.coordinator.watch import Watchers
from regroup.log import open_kafka_groups
from regroup.log.errors import LogError
from regroup.log.kafka_groups import KafkaGroups
from regroup.protocol.config import DEFAULT_OFFSETS_RETENTION_MS, ConfigError, CoordinatorConfig
from regroup.protocol.coordinator import Coordinator
from regroup.protocol.describe import GroupDescription
from regroup.protocol.errors import ProtocolError
from regroup.protocol.retention import duration
from regroup.protocol.streams.coordinator import StreamsConfig

#: Connections with no call open this long are closed (`ServerConfig.idle_timeout_ms`).
DEFAULT_IDLE_TIMEOUT_MS = 300_000

log = logging.getLogger("regroup.coordinator")

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: gRPC's own default: requests accepted but not yet picked up by the event loop.
DEFAULT_MAX_PENDING = 1_000


@dataclass(frozen=True, slots=True)
class Listening:
    """What a started coordinator tells its caller."""

    address: str
    metrics_port: int | None
    recovered_records: int
    recovery_seconds: float


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything ``regroup coordinator`` can be told; the defaults are the command line's."""

    data_dir: str
    listen: str = "127.0.0.1:9650"
    #: Topic metadata source: static:NAME=N,..., file:PATH.json, or a log spec (None: recorded only).
    log_spec: str | None = None
    #: One API token with every scope (``--token``; exclusive with ``tokens_file``).
    token: str | None = None
    #: A TOML or JSON file of tokens with scopes (`regroup.coordinator.tokens`).
    tokens_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    metrics_port: int | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    #: A dynamic member whose connection broke is fenced this long after, unless it comes back
    #: (`regroup.protocol.failover`); 0: off, members wait for the session timeout.
    failover_grace_ms: int = 2_000
    #: An empty group's committed offsets expire this long after it became empty, and the group is
    #: deleted (`regroup.protocol.retention`; Kafka's offsets.retention.minutes, 7 days).
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS
    #: Groups of both kinds; a request that would create one more is refused.
    max_groups: int = CoordinatorConfig().max_groups
    snapshot_every: int = 50_000
    topic_refresh_s: float = 5.0
    history_limit: int = 100
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_pending_requests: int = DEFAULT_MAX_PENDING
    #: A connection with no call open this long is closed (a member keeps its Watch stream open, so
    #: only idle clients are; gRPC clients reconnect by themselves on their next call).
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    #: Requests this large (bytes) are read off the event loop, in the lane of large requests
    #: (`regroup.coordinator.large`); at most so many per client (connection) and in all wait there.
    large_request_bytes: int = CoordinatorConfig().large_request_bytes
    max_large_requests_per_client: int = CoordinatorConfig().max_large_requests_per_client
    max_large_requests_waiting: int = CoordinatorConfig().max_large_requests_waiting
    #: How long in-flight calls may finish at shutdown.
    grace_s: float = 1.0
    #: HOST:PORT of the dashboard and its JSON API (None: off).
    http: str | None = None
    #: Streams groups' settings (every streams group of this coordinator).
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    #: The Kafka cluster (``kafka://HOST:PORT``) of the groups migrated from (`migration`).
    migrate_from: str | None = None
    #: ``GROUP`` or ``GROUP=KAFKA_GROUP``: GROUP takes over from the live Kafka group.
    migrate_groups: tuple[str, ...] = ()
    #: How often the Kafka groups migrated from are read.
    migrate_poll_s: float = 1.0
    #: Groups whose migration an operator ends at start-up: what their Kafka group held is free.
    end_migrations: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServerConfig:
        """From `build_parser`'s arguments; the token falls back to $REGROUP_TOKEN (`token_option`)."""
        return cls(
            data_dir=args.data_dir, listen=args.listen, log_spec=args.log_spec,
            token=token_option(args.token, args.tokens_file), tokens_file=args.tokens_file,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key, metrics_port=args.metrics_port, session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms, failover_grace_ms=args.failover_grace_ms,
            offsets_retention_ms=args.offsets_retention_ms, max_groups=args.max_groups,
            snapshot_every=args.snapshot_every,
            topic_refresh_s=args.topic_refresh_s, history_limit=args.history_limit,
            max_message_bytes=args.max_message_bytes, max_pending_requests=args.max_pending_requests,
            idle_timeout_ms=args.idle_timeout_ms,
            large_request_bytes=args.large_request_bytes,
            max_large_requests_per_client=args.max_large_requests_per_client,
            max_large_requests_waiting=args.max_large_requests_waiting,
            http=args.http,
            streams=StreamsConfig(standby_replicas=args.standby_replicas,
                                  acceptable_recovery_lag=args.acceptable_recovery_lag,
                                  max_warmups=args.max_warmups),
            migrate_from=args.migrate_from, migrate_groups=tuple(args.migrate_group or ()),
            migrate_poll_s=args.migrate_poll_s, end_migrations=tuple(args.end_migration or ()))


def token_option(token: str | None, tokens_file: str | None) -> str | None:
    """``--token``, else $REGROUP_TOKEN unless a tokens file names every token (a client's
    $REGROUP_TOKEN in the environment must not become a token with every scope)."""
    if token or tokens_file:
        return token or None
    return os.environ.get("REGROUP_TOKEN") or None


def _tokens(cfg: ServerConfig) -> TokenSet | None:
    """The API tokens of ``--token`` or ``--tokens-file`` (None: none required); ValueError if both."""
    if cfg.token and cfg.tokens_file:
        raise ValueError("give --token or --tokens-file, not both (a tokens file can hold a token with "
                         "every scope: scopes = [\"member\", \"read\", \"admin\"], groups = [\"*\"])")
    if cfg.tokens_file:
        tokens = load_tokens(cfg.tokens_file)
        if tokens.plain and _readable_by_others(cfg.tokens_file):
            log.warning("the tokens file %s holds plain tokens (%s) and other users may read it: use "
                        "token_sha256, or chmod 600", cfg.tokens_file, ", ".join(tokens.plain))
        for grant in tokens.grants:
            log.info("API token %s", grant.describe())
        return tokens
    return TokenSet.single(cfg.token) if cfg.token else None


def _readable_by_others(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & 0o044)
    except OSError:
        return False


def flag_of(field: str) -> str:
    """The flag that sets a `CoordinatorConfig` field: every field `serve` sets has the flag of its name
    (``offsets_retention_ms``: ``--offsets-retention-ms``)."""
    return "--" + field.replace("_", "-")


def _host(listen: str) -> str:
    host = listen.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


async def serve(
    cfg: ServerConfig,
    *,
    stop: asyncio.Event | None = None,
    on_listening: Callable[[Listening], None] | None = None,
) -> int:
    """Serve until ``stop`` is set or SIGTERM/SIGINT arrives; returns the process exit status."""
    if (cfg.tls_cert is None) != (cfg.tls_key is None):
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    if cfg.idle_timeout_ms < 1_000:
        raise ValueError(f"--idle-timeout-ms must be at least 1000 (a second), got {cfg.idle_timeout_ms}")
    try:  # the core checks its settings; the message names the flag that set the one it refused
        config = CoordinatorConfig(session_timeout_ms=cfg.session_timeout_ms,
                                   heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                                   failover_grace_ms=cfg.failover_grace_ms,
                                   offsets_retention_ms=cfg.offsets_retention_ms, max_groups=cfg.max_groups,
                                   large_request_bytes=cfg.large_request_bytes,
                                   max_large_requests_per_client=cfg.max_large_requests_per_client,
                                   max_large_requests_waiting=cfg.max_large_requests_waiting)
    except ConfigError as e:
        raise ValueError(f"{flag_of(e.field)} {e.rule}") from None
    listen, data_dir = cfg.listen, cfg.data_dir
    tokens = _tokens(cfg)
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Only the main thread of a Unix process can take signals; a serve() embedded elsewhere (a test,
        # another program's thread) is stopped through ``stop`` instead.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)

    migrations = parse_migrations(cfg.migrate_groups)
    if migrations and not cfg.migrate_from:
        raise ValueError("--migrate-group needs --migrate-from kafka://HOST:PORT (the Kafka cluster)")
    if ended := sorted({m.group_id for m in migrations} & set(cfg.end_migrations)):
        raise ValueError(f"--end-migration and --migrate-group both name {', '.join(map(repr, ended))}")
    if cfg.migrate_poll_s <= 0:
        raise ValueError(f"--migrate-poll-s must be positive, got {cfg.migrate_poll_s}")
    kafka_groups = open_kafka_groups(cfg.migrate_from) if migrations and cfg.migrate_from else None
    http_at = parse_http(cfg.http) if cfg.http is not None else None
    log.info("starting: data dir %s, listen %s, topic metadata from %s, session timeout %d ms, "
             "heartbeat interval %d ms, failover grace %s, offsets retention %s, at most %d groups", data_dir,
             listen, redact_spec(cfg.log_spec), cfg.session_timeout_ms, cfg.heartbeat_interval_ms,
             f"{cfg.failover_grace_ms} ms" if cfg.failover_grace_ms > 0 else "off",
             duration(cfg.offsets_retention_ms), cfg.max_groups)
    source = open_topic_source(cfg.log_spec)
    poller: MigrationPoller | None = None
    poll_task: asyncio.Task[None] | None = None
    store = DurableStore(data_dir, snapshot_every=cfg.snapshot_every, history_limit=cfg.history_limit)
    t0 = time.perf_counter()
    loaded = store.open()
    try:
        coord = Coordinator.recover(loaded.records, monotonic_ms(), config, streams=cfg.streams)
        history = EpochHistory(cfg.history_limit)
        history.apply(loaded.history)
        recovery_s = time.perf_counter() - t0
        log.info("recovered %d records (%d from the snapshot) into %d groups in %.3f s",
                 len(loaded.records), loaded.snapshot_records, len(coord.groups), recovery_s)
        store.start(loop)

        metrics = Metrics()
        metrics.recovery_seconds.set(recovery_s)
        metrics.recovered_records.set(len(loaded.records))
        metrics.snapshot_records.set(loaded.snapshot_records)
        refresher = TopicRefresher(source, interval_s=cfg.topic_refresh_s) if source is not None else None
        host = _host(listen)
        service = CoordinatorService(coord, store, metrics=metrics, history=history, watchers=Watchers(),
                                     refresher=refresher, options=ServiceOptions(address=listen))
        if refresher is not None:
            refresher.apply = service.apply_topics
            await refresher.refresh()  # before serving, so that members join against real topics
        elif cfg.log_spec is None:
            log.warning("no --log given: topic metadata stays what the groups recorded (%d topics)",
                        len(coord.topics))
        poller = await _start_migrations(service, cfg, migrations, kafka_groups)

        server = grpc.aio.server(
            interceptors=[TokenInterceptor(tokens)] if tokens is not None else None,
            options=[
                ("grpc.max_receive_message_length", cfg.max_message_bytes),
                ("grpc.so_reuseport", 0),
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.keepalive_timeout_ms", 20_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
                ("grpc.http2.max_pings_without_data", 0),
                # Idle connections (no call open: no member's Watch stream) are closed with a GOAWAY.
                ("grpc.max_connection_idle_ms", cfg.idle_timeout_ms),
                # Load shedding: calls that arrive while this many already wait for the event loop are
                # cancelled at once (clients see CoordinatorUnavailable and retry) instead of queueing.
                ("grpc.server.max_pending_requests", cfg.max_pending_requests),
                ("grpc.server.max_pending_requests_hard_limit", 3 * cfg.max_pending_requests),
            ])
        server.add_generic_rpc_handlers((service.handler(),))
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            port = server.add_secure_port(listen, server_credentials(cfg.tls_cert, cfg.tls_key))
        else:
            if tokens is not None:
                log.warning("API tokens cross the network in clear text without TLS: "
                            "add --tls-cert/--tls-key")
            port = server.add_insecure_port(listen)
        if port == 0:
            raise OSError(f"cannot listen on {listen!r} (address in use or invalid)")
        address = f"{listen.rpartition(':')[0]}:{port}"
        service.options = ServiceOptions(address=address)
        await server.start()
        service.start()
        if poller is not None:
            poll_task = asyncio.create_task(poller.run(), name="regroup-migration")

        metrics_server = None
        bound_metrics: int | None = None
        if cfg.metrics_port is not None:
            try:
                metrics_server, _ = serve_metrics(metrics, host or "0.0.0.0", cfg.metrics_port)
            except OSError:
                await server.stop(0)
                await service.close()
                raise
            bound_metrics = int(metrics_server.server_port)
        dashboard = None
        if http_at is not None:
            dashboard = _dashboard(service, tokens, *http_at)
            try:
                http_port = await dashboard.start()
            except OSError:
                await server.stop(0)
                await service.close()
                raise
        info = Listening(address, bound_metrics, len(loaded.records), recovery_s)
        log.info("listening on %s (%s, %s)%s%s", address,
                 "TLS" if cfg.tls_cert is not None else "plaintext",
                 "no API token" if tokens is None else "API token required" if cfg.token
                 else f"API token required: {len(tokens.entries)} tokens from {cfg.tokens_file}",
                 f"; metrics on {host or '0.0.0.0'}:{bound_metrics}" if bound_metrics is not None else "",
                 f"; dashboard on {url_of(dashboard.host, http_port)}" if dashboard is not None else "")
        print(f"regroup coordinator listening on {address}"
              + (f" (metrics on {host or '0.0.0.0'}:{bound_metrics})" if bound_metrics is not None else "")
              + f"; data dir {data_dir}; recovered {info.recovered_records} records in {recovery_s:.3f} s"
              + (f"; dashboard on {url_of(dashboard.host, http_port)}" if dashboard is not None else ""),
              flush=True)
        if on_listening is not None:
            on_listening(info)

        waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(service.stopped.wait())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        log.info("shutting down%s", f" ({service.fatal_reason})" if service.fatal_reason else "")
        log.info("lane of large requests (over %d bytes): %d read, %d refused", config.large_request_bytes,
                 service.large.served, service.large.refused)
        await _cancel(poll_task)
        if dashboard is not None:
            await dashboard.stop()
        service.end_streams()
        await server.stop(cfg.grace_s)
        log.debug("gRPC server stopped")
        await service.close()
        await store.close()
        log.debug("store closed")
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        return 1 if service.fatal_reason else 0
    finally:
        await _cancel(poll_task)
        if poller is not None:
            poller.close()
        await store.close()  # (again, harmlessly) also when start-up failed half-way


async def _start_migrations(service: CoordinatorService, cfg: ServerConfig, migrations: tuple[Migration, ...],
                            kafka_groups: KafkaGroups | None) -> MigrationPoller | None:
    """Before serving: end the migrations an operator ended, declare the configured ones and read their
    Kafka groups once, and say which recorded holds nobody reads (`migration` rules 1 and 5)."""
    for gid in cfg.end_migrations:
        eff = service.end_external_hold(gid)
        if eff is not None and not eff.response.ok:
            raise ValueError(f"--end-migration {gid}: {eff.response.message}")
        log.info("group %r: migration ended by --end-migration%s", gid,
                 "" if eff is not None and eff.records else " (there was none)")
    poller = None
    if kafka_groups is not None:
        log.info("migrating from %s: %s (read every %s s)", redact_spec(cfg.migrate_from),
                 ", ".join(f"{m.group_id!r} from Kafka group {m.kafka_group!r}" for m in migrations),
                 cfg.migrate_poll_s)
        poller = MigrationPoller(kafka_groups, migrations, service, interval_s=cfg.migrate_poll_s)
        poller.declare()
        await poller.poll()
    for line in holds_not_read(service.coord, migrations):
        log.warning("%s", line)
    return poller


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _dashboard(service: CoordinatorService, tokens: TokenSet | None, host: str, port: int) -> DashboardServer:
    """The dashboard, fed by every step of the service from now on."""
    coord = service.coord

    def epochs_of(gid: str) -> tuple[int, int] | None:
        g = coord.groups.get(gid) or coord.streams.groups.get(gid)  # either kind: one namespace
        return (g.epoch, g.target_epoch) if g is not None else None

    feed = Feed(epochs_of)
    feed.seed(service.runtime.read(_descriptions).response)
    service.on_step = feed.on_step
    if tokens is None and not is_loopback(host):
        log.warning("the dashboard on %s is open to anyone who can reach it: add --token or --tokens-file",
                    host)
    return DashboardServer(Dashboard(service, feed, tokens=tokens), host, port)


def _descriptions(c: Coordinator) -> list[GroupDescription]:
    out = []
    for gid, _, _ in c.list_groups():
        with contextlib.suppress(ProtocolError):  # a kind of group describe does not cover
            out.append(c.describe_group(gid))
    return out


def run_coordinator(cfg: ServerConfig) -> int:
    """Blocking entry point for ``regroup coordinator``: returns the exit status (0, 1, or 2)."""
    try:
        return asyncio.run(serve(cfg))
    except (StoreError, LogError, ValueError, OSError) as e:
        text = str(e)
        spec = cfg.log_spec
        if spec and redact_spec(spec) != spec:  # the log spec's options may carry a password
            text = text.replace(spec, redact_spec(spec))
        log.error("%s", text)
        print(f"regroup coordinator: {text}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="regroup coordinator", description="Run the regroup group coordinator.")
    p.add_argument("--listen", default="127.0.0.1:9650", help="HOST:PORT to serve gRPC on (port 0: any)")
    p.add_argument("--data-dir", required=True, help="directory for the durable record store")
    p.add_argument("--log", dest="log_spec", default=None,
                   help="topic metadata source: static:NAME=N,..., file:PATH.json, or a log spec")
    p.add_argument("--token", default=None,
                   help="require this API token, with every scope (or set REGROUP_TOKEN)")
    p.add_argument("--tokens-file", default=None, metavar="PATH",
                   help="require one of the tokens of this TOML or JSON file, each with its scopes "
                        "(member for some groups, read, admin; docs/operations.md); not with --token")
    p.add_argument("--tls-cert", default=None, help="PEM certificate (chain) to serve TLS")
    p.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    p.add_argument("--session-timeout-ms", type=int, default=45_000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=5_000)
    p.add_argument("--failover-grace-ms", type=int, default=2_000,
                   help="fence a dynamic member this long after its connection broke unless it comes back "
                        "(default 2000; 0: off, wait for the session timeout)")
    p.add_argument("--offsets-retention-ms", type=int, default=DEFAULT_OFFSETS_RETENTION_MS,
                   help="an empty group's committed offsets expire this long after it became empty, and the "
                        "group is deleted (default 604800000: 7 days, as Kafka's offsets.retention.minutes)")
    p.add_argument("--max-groups", type=int, default=CoordinatorConfig().max_groups,
                   help="groups of both kinds; a request that would create one more is refused "
                        "(default 100000)")
    streams = p.add_argument_group("streams groups")
    streams.add_argument("--standby-replicas", type=int, default=0,
                         help="caught-up standby copies of every task, on other processes (default 0)")
    streams.add_argument("--acceptable-recovery-lag", type=int, default=10_000,
                         help="records a copy may be behind and still take a task over (default 10000)")
    streams.add_argument("--max-warmups", type=int, default=2,
                         help="warm-up copies restoring at once in a group (default 2)")
    migrate = p.add_argument_group("migrating live Kafka groups to regroup (docs/operations.md)")
    migrate.add_argument("--migrate-from", default=None, metavar="kafka://HOST:PORT",
                         help="the Kafka cluster of the groups given with --migrate-group")
    migrate.add_argument("--migrate-group", action="append", metavar="GROUP[=KAFKA_GROUP]",
                         help="GROUP is granted a partition only once the live Kafka group (default: the "
                              "same name) no longer owns it, at the offset Kafka committed; repeatable")
    migrate.add_argument("--migrate-poll-s", type=float, default=1.0,
                         help="how often the Kafka groups are read (default 1)")
    migrate.add_argument("--end-migration", action="append", metavar="GROUP",
                         help="drop GROUP's hold by a Kafka group it no longer migrates from; repeatable")
    p.add_argument("--snapshot-every", type=int, default=50_000,
                   help="compact when this many records were written since the last snapshot")
    p.add_argument("--topic-refresh-s", type=float, default=5.0, help="topic metadata refresh interval")
    p.add_argument("--history-limit", type=int, default=100, help="epoch changes kept per group")
    p.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                   help="largest request accepted (larger: RESOURCE_EXHAUSTED)")
    p.add_argument("--max-pending-requests", type=int, default=DEFAULT_MAX_PENDING,
                   help="requests waiting for the event loop beyond which new ones are shed")
    p.add_argument("--idle-timeout-ms", type=int, default=DEFAULT_IDLE_TIMEOUT_MS,
                   help="close a connection with no call open for this long (default 300000: 5 min; "
                        "clients reconnect on their next call)")
    p.add_argument("--large-request-bytes", type=int, default=CoordinatorConfig().large_request_bytes,
                   help="requests larger than this are read and checked off the event loop, one at a time "
                        "(default 65536)")
    p.add_argument("--max-large-requests-per-client", type=int,
                   default=CoordinatorConfig().max_large_requests_per_client,
                   help="large requests one connection may have waiting; one more: RESOURCE_EXHAUSTED "
                        "(default 1)")
    p.add_argument("--max-large-requests-waiting", type=int,
                   default=CoordinatorConfig().max_large_requests_waiting,
                   help="large requests waiting from all clients; one more: RESOURCE_EXHAUSTED (default 16)")
    p.add_argument("--http", default=None, metavar="HOST:PORT",
                   help="serve the dashboard and its JSON API here (port 0: any; off by default)")
    p.add_argument("--log-level", type=str.lower, choices=[lv.value for lv in LogLevel],
                   default=LogLevel.INFO.value, help="log to stderr from this level on (default info)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    sys.exit(run_coordinator(ServerConfig.from_args(args)))


if __name__ == "__main__":
    main()
