"""The operator commands of `regroup`: groups, offsets, topics, produce, and the coordinator itself.

Thin: each command parses options, calls the coordinator (through `CoordinatorClient`) or the log,
and prints a table — or one JSON object with ``--json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from regroup.protocol.shard import Shard, format_shards

if TYPE_CHECKING:
    from regroup.protocol.streams.describe import StreamsGroupDescription
    from regroup.protocol.streams.topology import TaskId

COORDINATOR_HELP = "Coordinator address HOST:PORT (default: $REGROUP_COORDINATOR)."
JSON_HELP = "Print one JSON object instead of tables."

groups_app = typer.Typer(help="Inspect and delete consumer groups.", no_args_is_help=True)
offsets_app = typer.Typer(help="Reset or delete a group's committed offsets (group must be empty).",
                          no_args_is_help=True)
topics_app = typer.Typer(help="Create and list topics of the log.", no_args_is_help=True)


def _client(coordinator: str | None, token: str | None) -> Any:
    from regroup.rpc.client import CoordinatorClient

    address = coordinator or os.environ.get("REGROUP_COORDINATOR")
    if not address:
        raise typer.BadParameter("give --coordinator HOST:PORT or set REGROUP_COORDINATOR",
                                 param_hint="--coordinator")
    return CoordinatorClient(address, token=token or os.environ.get("REGROUP_TOKEN"))


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _parse_shard(text: str) -> Shard:
    topic, sep, part = text.rpartition(":")
    if not sep or not topic or not part.isdigit():
        raise typer.BadParameter(f"{text!r}: expected TOPIC:PARTITION, e.g. orders:3")
    return Shard(topic, int(part))


def _ack_or_fail(ack: Any) -> None:
    if not ack.ok:
        _fail(f"{ack.error.value}: {ack.message}")


# ----------------------------------------------------------------------------------- groups
@groups_app.command("list")
def groups_list(
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every group: state and member count."""
    with _client(coordinator, token) as client:
        rows = client.list_groups()
    if json_output:
        print(json.dumps({"groups": [{"group": g, "state": s.value, "members": n} for g, s, n in rows]}))
        return
    table = Table("group", "state", "members")
    for g, s, n in rows:
        table.add_row(g, s.value, str(n))
    Console().print(table)


@groups_app.command("describe")
def groups_describe(
    group: str = typer.Argument(..., help="The group id."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """State, epochs, members with assigned and pending partitions, offsets with lag, epoch history."""
    from regroup.rpc.errors import RequestRejected

    with _client(coordinator, token) as client:
        try:
            details = client.describe_group(group)
        except RequestRejected as e:
            if "is a streams group" not in e.message:
                _fail(f"{e.code.value}: {e.message}")
            try:
                streams = client.describe_streams_group(group)
            except RequestRejected as again:
                _fail(f"{again.code.value}: {again.message}")
            _print_streams_group(streams, json_output)
            return
    d = details.description
    if json_output:
        from regroup.rpc.views import group_details_json

        print(json.dumps(group_details_json(details)))
        return
    c = Console()
    c.print(f"[bold]{d.group_id}[/bold]  state [bold]{d.state.value}[/bold]  group epoch {d.epoch}  "
            f"target epoch {d.target_epoch}  assignor {d.assignor or '-'}")
    members = Table("member", "instance", "client", "epoch", "state", "assigned", "revoking", "awaiting",
                    title="members")
    for m in d.members:
        cl = details.clients.get(m.member_id)
        members.add_row(m.member_id, m.instance_id or "-",
                        f"{cl.client_id}@{cl.client_host}" if cl else "-", str(m.epoch), m.status.value,
                        format_shards(m.assigned), format_shards(m.pending_revocation),
                        format_shards(m.awaiting))
    c.print(members)
    offsets = Table("partition", "committed", "log end", "lag", "owner", title="offsets")
    for o in details.offsets:
        offsets.add_row(str(o.shard), _dash(o.committed), _dash(o.log_end_offset), _dash(o.lag),
                        o.owner or "-")
    c.print(offsets)
    history = Table("when", "epoch", "kind", "cause", title="recent epochs")
    for h in details.history[-20:]:
        history.add_row(time.strftime("%H:%M:%S", time.localtime(h.at_unix_ms / 1000)), str(h.epoch),
                        h.kind, h.cause)
    c.print(history)


def _print_streams_group(d: StreamsGroupDescription, json_output: bool) -> None:
    """A streams group: its topology, and every member's tasks by role with its copies' lags."""
    from regroup.rpc.views import streams_group_json

    if json_output:
        print(json.dumps(streams_group_json(d)))
        return
    c = Console() if sys.stdout.isatty() else Console(width=160)  # a pipe gets the whole table
    c.print(f"[bold]{d.group_id}[/bold]  streams group  state [bold]{d.state.value}[/bold]  "
            f"group epoch {d.epoch}  target epoch {d.target_epoch}")
    if not d.status.ready:
        c.print(f"[red]not ready[/red]: {d.status.message}")
    if d.topology is not None:
        c.print("topology: " + "; ".join(f"{s.subtopology_id} <- {', '.join(sorted(s.source_topics))}"
                                         for s in d.topology.subtopologies))
    members = Table("member", "instance", "process", "epoch", "state", "active", "standby", "warm-up",
                    "revoking", title="members")
    for m in d.members:
        revoking = m.pending_revocation
        members.add_row(m.member_id, m.instance_id or "-", m.process_id, str(m.epoch), m.status.value,
                        _tasks(m.assigned.active), _tasks(m.assigned.standby), _tasks(m.assigned.warmup),
                        _tasks(revoking.active | revoking.standby | revoking.warmup))
    c.print(members)
    copies = Table("process", "task", "lag (records)", "role", title="local copies (lag behind the commits)")
    for m in d.members:
        warm = {w.task: w for w in m.warmups}
        for task, lag in sorted(m.lags.items()):
            role = ("active" if task in m.assigned.active else "standby" if task in m.assigned.standby
                    else "warm-up" if task in m.assigned.warmup else "dormant")
            if task in warm:
                w = warm[task]
                role += " (caught up)" if w.caught_up else f" (promoted at <= {w.acceptable_lag})"
            copies.add_row(m.process_id, str(task), str(lag), role)
    c.print(copies)


def _tasks(tasks: Iterable[TaskId]) -> str:
    """``count[0,1,2] join[4]``: tasks grouped by subtopology, as partitions are by topic."""
    by_sub: dict[str, list[int]] = {}
    for t in sorted(tasks):
        by_sub.setdefault(t.subtopology, []).append(t.partition)
    return " ".join(f"{sub}[{','.join(map(str, ps))}]" for sub, ps in by_sub.items()) or "-"


@groups_app.command("delete")
def groups_delete(
    group: str = typer.Argument(..., help="The group id (must have no members)."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
) -> None:
    """Delete an empty group and its committed offsets."""
    with _client(coordinator, token) as client:
        _ack_or_fail(client.delete_group(group))
    Console().print(f"deleted group {group}")


def _dash(v: object) -> str:
    return "-" if v is None else str(v)


# ----------------------------------------------------------------------------------- offsets
@offsets_app.command("reset")
def offsets_reset(
    group: str = typer.Argument(..., help="The group id (must have no members)."),
    to: list[str] = typer.Option(..., "--to", help="TOPIC:PARTITION=OFFSET, repeatable."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
) -> None:
    """Set committed offsets (may move them backwards) of an empty group."""
    offsets: dict[Shard, int] = {}
    for item in to:
        where, sep, offset = item.partition("=")
        if not sep or not offset.isdigit():
            raise typer.BadParameter(f"{item!r}: expected TOPIC:PARTITION=OFFSET", param_hint="--to")
        offsets[_parse_shard(where)] = int(offset)
    with _client(coordinator, token) as client:
        _ack_or_fail(client.reset_offsets(group, offsets))
    Console().print(f"reset {len(offsets)} offset(s) of {group}")


@offsets_app.command("delete")
def offsets_delete(
    group: str = typer.Argument(..., help="The group id (must have no members)."),
    partition: list[str] = typer.Option(None, "--partition", help="TOPIC:PARTITION, repeatable; "
                                        "all of the group's offsets when omitted."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
) -> None:
    """Delete committed offsets of an empty group."""
    shards = [_parse_shard(p) for p in partition] if partition else None
    with _client(coordinator, token) as client:
        _ack_or_fail(client.delete_offsets(group, shards))
    Console().print(f"deleted offsets of {group}")


# ----------------------------------------------------------------------------------- topics
LOG_HELP = "The log: a directory (embedded) or kafka://HOST:PORT (default: $REGROUP_LOG)."


def _log(spec: str | None) -> Any:
    from regroup.log import open_log

    spec = spec or os.environ.get("REGROUP_LOG")
    if not spec:
        raise typer.BadParameter("give --log DIR|kafka://HOST:PORT or set REGROUP_LOG", param_hint="--log")
    return open_log(spec)


@topics_app.command("create")
def topics_create(
    topic: str = typer.Argument(..., help="Topic name."),
    partitions: int = typer.Option(..., "--partitions", "-p", min=1, help="Partition count."),
    log: str | None = typer.Option(None, "--log", help=LOG_HELP),
) -> None:
    """Create a topic, or grow an existing one to --partitions."""
    from regroup.log.errors import LogError

    lg = _log(log)
    try:
        if topic in lg.topic_partitions():
            lg.add_partitions(topic, partitions)
            Console().print(f"{topic} now has {partitions} partitions")
        else:
            lg.create_topic(topic, partitions)
            Console().print(f"created {topic} with {partitions} partitions")
    except (LogError, ValueError) as e:
        _fail(str(e))
    finally:
        lg.close()


@topics_app.command("list")
def topics_list(
    log: str | None = typer.Option(None, "--log", help=LOG_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Topics with partition counts and end offsets."""
    lg = _log(log)
    try:
        topics = dict(lg.topic_partitions())
        ends = {t: lg.end_offsets(t) for t in sorted(topics)}
    finally:
        lg.close()
    if json_output:
        print(json.dumps({"topics": [{"topic": t, "partitions": n, "records": sum(ends[t].values())}
                                     for t, n in sorted(topics.items())]}))
        return
    table = Table("topic", "partitions", "records")
    for t, n in sorted(topics.items()):
        table.add_row(t, str(n), str(sum(ends[t].values())))
    Console().print(table)


def produce(
    topic: str = typer.Argument(..., help="Topic to write to."),
    log: str | None = typer.Option(None, "--log", help=LOG_HELP),
    count: int = typer.Option(0, "--count", "-n", min=0,
                              help="Generate N records 'key-i'/'value-i' instead of reading stdin."),
    keys: int = typer.Option(100, "--keys", min=1, help="Distinct keys when generating."),
    separator: str = typer.Option("\t", "--separator", help="KEY<sep>VALUE on each stdin line."),
) -> None:
    """Produce records: lines of KEY<TAB>VALUE from stdin, or --count generated ones.

    The partition of a record is a stable hash of its key (CRC32), so one key stays in one partition.
    """
    import zlib

    from regroup.log.base import LogRecord

    lg = _log(log)
    try:
        partitions = lg.topic_partitions().get(topic)
        if partitions is None:
            _fail(f"topic {topic!r} does not exist; create it with `regroup topics create`")
        lines = (f"key-{i % keys}{separator}value-{i}" for i in range(count)) if count else (
            line.rstrip("\n") for line in sys.stdin)
        batches: dict[int, list[LogRecord]] = {}
        n = 0
        now = int(time.time() * 1000)
        for line in lines:
            key, sep, value = line.partition(separator)
            k = key.encode() if sep else None
            v = (value if sep else key).encode()
            p = zlib.crc32(k) % partitions if k is not None else n % partitions
            batches.setdefault(p, []).append(LogRecord(k, v, now))
            n += 1
            if n % 10_000 == 0:
                for part, recs in batches.items():
                    lg.produce(topic, part, recs)
                batches.clear()
        for part, recs in batches.items():
            lg.produce(topic, part, recs)
    finally:
        lg.close()
    Console(stderr=True).print(f"produced {n} records to {topic}")


def coordinator(
    listen: str = typer.Option("127.0.0.1:9650", "--listen", help="HOST:PORT to serve gRPC on."),
    data_dir: str = typer.Option(..., "--data-dir", help="Directory of the durable record store."),
    log: str | None = typer.Option(None, "--log", help="Log for topic metadata: a directory or "
                                   "kafka://HOST:PORT (default: $REGROUP_LOG)."),
    token: str | None = typer.Option(None, help="Require this API token (default: $REGROUP_TOKEN)."),
    tls_cert: str | None = typer.Option(None, help="PEM certificate: serve TLS."),
    tls_key: str | None = typer.Option(None, help="PEM private key for --tls-cert."),
    metrics_port: int | None = typer.Option(None, help="Serve Prometheus metrics on this port."),
    session_timeout_ms: int = typer.Option(45_000, help="Members silent this long are fenced."),
    heartbeat_interval_ms: int = typer.Option(5_000, help="How often members heartbeat."),
    http: str | None = typer.Option(None, "--http", metavar="HOST:PORT",
                                    help="Serve the dashboard and its JSON API here (port 0: any)."),
    standby_replicas: int = typer.Option(0, help="Streams groups: caught-up standby copies of every task, "
                                         "on other processes."),
    acceptable_recovery_lag: int = typer.Option(10_000, help="Streams groups: records a copy may be behind "
                                                "and still take a task over at once."),
    max_warmups: int = typer.Option(2, help="Streams groups: warm-up copies restoring at once in a group."),
) -> None:
    """Run the group coordinator: gRPC API, durable store, timers, metrics, optional dashboard."""
    from regroup.coordinator.server import ServerConfig, run_coordinator
    from regroup.protocol.errors import ProtocolError
    from regroup.protocol.streams.coordinator import StreamsConfig

    try:
        streams = StreamsConfig(standby_replicas, acceptable_recovery_lag, max_warmups)
    except ProtocolError as e:
        raise typer.BadParameter(e.message) from e
    code = run_coordinator(ServerConfig(
        data_dir=data_dir, listen=listen, log_spec=log or os.environ.get("REGROUP_LOG"),
        token=token or os.environ.get("REGROUP_TOKEN"), tls_cert=tls_cert, tls_key=tls_key,
        metrics_port=metrics_port, session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms, http=http, streams=streams))
    raise typer.Exit(code)
