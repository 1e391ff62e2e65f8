"""The operator commands of `regroup`: groups, offsets, topics, produce, and the coordinator itself.

Thin: each command parses options, calls the coordinator (through `CoordinatorClient`) or the log,
and prints a table — or one JSON object with ``--json``.

``groups import`` and ``groups export`` copy committed offsets between a Kafka consumer group and a
regroup group (through the AdminClient on Kafka's side, the coordinator's ResetOffsets on regroup's);
the migration of a live Kafka group is the coordinator's (``--migrate-group``).

The ``groups`` commands cover both kinds of group: ``list`` shows each group's kind, ``describe``
shows a consumer group or a streams group (printed by `regroup.admin_streams`), ``delete`` deletes
either.

Terminal output never interprets what clients chose: group, member, instance and client ids, hosts,
topics, subtopologies, reasons and the coordinator's messages are printed as literal `rich.text.Text`
(no markup, no emoji codes), their control characters escaped (``\x1b``), so ``[/bold]`` prints as
``[/bold]`` and a name cannot pose as another or drive the terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from regroup.coordinator.logs import LogLevel, escape_controls
from regroup.protocol.keyrange import MAX_PARALLELISM, low_watermarks, ranges
from regroup.protocol.shard import KEY_SPACE, Shard, format_shards

if TYPE_CHECKING:
    from regroup.log.embedded import EmbeddedLog
    from regroup.log.embedded.layout import Layout

COORDINATOR_HELP = "Coordinator address HOST:PORT (default: $REGROUP_COORDINATOR)."
JSON_HELP = "Print one JSON object instead of tables."
TLS_CA_HELP = ("Talk TLS to the coordinator, trusting the CA in this PEM file (default: $REGROUP_TLS_CA; "
               "neither: plain text).")

groups_app = typer.Typer(help="Inspect and delete groups, consumer and streams groups.",
                         no_args_is_help=True)
offsets_app = typer.Typer(help="Reset or delete a group's committed offsets (group must be empty).",
                          no_args_is_help=True)
topics_app = typer.Typer(help="Create and list topics of the log.", no_args_is_help=True)


def _client(coordinator: str | None, token: str | None, tls_ca: str | None = None) -> Any:
    from regroup.rpc.client import CoordinatorClient

    address = coordinator or os.environ.get("REGROUP_COORDINATOR")
    if not address:
        raise typer.BadParameter("give --coordinator HOST:PORT or set REGROUP_COORDINATOR",
                                 param_hint="--coordinator")
    ca = tls_ca or os.environ.get("REGROUP_TLS_CA") or None
    if ca is not None and not os.path.isfile(ca):
        raise typer.BadParameter(f"{ca!r}: no such file (the PEM file of the CA that signed the "
                                 "coordinator's certificate)", param_hint="--tls-ca")
    return CoordinatorClient(address, token=token or os.environ.get("REGROUP_TOKEN"), tls_ca=ca)


def _lit(value: object) -> Text:
    """Literal terminal text: rich markup and emoji codes are not interpreted, control characters
    are shown escaped."""
    return Text(escape_controls(str(value)))


def _row(table: Table, *cells: object) -> None:
    """A table row of literal cells (every cell may hold a name a client chose)."""
    table.add_row(*(_lit(c) for c in cells))


def _console() -> Console:
    """stdout; a pipe gets the whole table (wide), a terminal its own width."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def _fail(message: str) -> NoReturn:
    Console(stderr=True).print(Text.assemble(("error:", "red"), " ", _lit(message)))
    raise typer.Exit(1)


@contextlib.contextmanager
def _connected(coordinator: str | None, token: str | None, tls_ca: str | None = None) -> Iterator[Any]:
    """A client; a call that fails (coordinator unreachable, token refused, request refused) ends
    the command with its message instead of a traceback."""
    from regroup.rpc.errors import CoordinatorError

    try:
        with _client(coordinator, token, tls_ca) as client:
            yield client
    except CoordinatorError as e:
        _fail(str(e))


#: What follows ``TOPIC:`` — a partition, then optionally one of its key ranges: range R of K
#: (``3.1of4``, as streams tasks are named) or ``[lo,hi)`` in hex (``3[40000000,80000000)``, as
#: `Shard.__str__` prints a range, so what ``groups describe`` shows can be pasted back).
_PARTITION = re.compile(r"(\d+)(?:\.(\d+)of(\d+)|\[([0-9a-fA-F]+),([0-9a-fA-F]+)\))?")
_SHARD_FORMS = "TOPIC:PARTITION, or one key range of it: TOPIC:PARTITION.RofK or TOPIC:PARTITION[lo,hi)"


def _parse_shard(text: str) -> Shard:
    topic, sep, part = text.rpartition(":")
    m = _PARTITION.fullmatch(part) if sep and topic else None
    if m is None:
        raise typer.BadParameter(f"{text!r}: expected {_SHARD_FORMS}, e.g. orders:3, orders:3.1of4")
    partition, r, k, lo, hi = m.groups()
    if k is not None:
        if not 0 <= int(r) < int(k) <= MAX_PARALLELISM:
            raise typer.BadParameter(f"{text!r}: key range {r} of {k} needs 0 <= R < K <= {MAX_PARALLELISM}")
        return Shard(topic, int(partition), *ranges(int(k))[int(r)])
    if lo is not None:
        if not 0 <= int(lo, 16) < int(hi, 16) <= KEY_SPACE:
            raise typer.BadParameter(f"{text!r}: key range [{lo},{hi}) must have lo < hi <= {KEY_SPACE:x}")
        return Shard(topic, int(partition), int(lo, 16), int(hi, 16))
    return Shard(topic, int(partition))


def _ack_or_fail(ack: Any) -> None:
    if not ack.ok:
        _fail(f"{ack.error.value}: {ack.message}")


# ----------------------------------------------------------------------------------- groups
@groups_app.command("list")
def groups_list(
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every group: its kind (consumer or streams), state and member count."""
    with _connected(coordinator, token, tls_ca) as client:
        rows = client.list_groups()
    if json_output:
        print(json.dumps({"groups": [{"group": r.group_id, "kind": r.kind, "state": r.state.value,
                                      "members": r.members} for r in rows]}))
        return
    table = Table("group", "kind", "state", "members")
    for r in rows:
        _row(table, r.group_id, r.kind, r.state.value, r.members)
    _console().print(table)


@groups_app.command("describe")
def groups_describe(
    group: str = typer.Argument(..., help="The group id."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """State, epochs, members with assigned and pending partitions, offsets with lag, epoch history.

    A streams group: readiness, topology, members with their tasks by role, each task copy's lag
    and each warm-up's progress.
    """
    from regroup.protocol.errors import ErrorCode
    from regroup.rpc.errors import RequestRejected

    with _connected(coordinator, token, tls_ca) as client:
        # Consumer groups first: the common case costs one call. The coordinator refuses a consumer
        # describe of a streams group with INVALID_REQUEST naming the kind; only then ask again.
        try:
            details = client.describe_group(group)
        except RequestRejected as e:
            if e.code is not ErrorCode.INVALID_REQUEST or "is a streams group" not in e.message:
                _fail(f"{e.code.value}: {e.message}")
            try:
                streams = client.describe_streams_group(group)
            except RequestRejected as again:
                _fail(f"{again.code.value}: {again.message}")
            from regroup.admin_streams import print_streams_group

            print_streams_group(streams, json_output)
            return
    d = details.description
    if json_output:
        from regroup.rpc.views import group_details_json

        print(json.dumps(group_details_json(details)))
        return
    c = _console()
    c.print(Text.assemble((escape_controls(d.group_id), "bold"), "  state ", (d.state.value, "bold"),
                          f"  group epoch {d.epoch}  target epoch {d.target_epoch}  assignor ",
                          _lit(d.assignor or "-")))
    members = Table("member", "instance", "client", "epoch", "state", "assigned", "revoking", "awaiting",
                    title="members")
    for m in d.members:
        cl = details.clients.get(m.member_id)
        _row(members, m.member_id, m.instance_id or "-", f"{cl.client_id}@{cl.client_host}" if cl else "-",
             m.epoch, m.status.value, format_shards(m.assigned), format_shards(m.pending_revocation),
             format_shards(m.awaiting))
    c.print(members)
    offsets = Table("partition", "committed", "log end", "lag", "owner", title="offsets")
    for o in details.offsets:
        _row(offsets, o.shard, _dash(o.committed), _dash(o.log_end_offset), _dash(o.lag), o.owner or "-")
    c.print(offsets)
    history = Table("when", "epoch", "kind", "cause", title="recent epochs")
    for h in details.history[-20:]:
        _row(history, time.strftime("%H:%M:%S", time.localtime(h.at_unix_ms / 1000)), h.epoch, h.kind,
             h.cause)
    c.print(history)


@groups_app.command("parallelism")
def groups_parallelism(
    group: str = typer.Argument(..., help="The consumer group id (it need not exist yet)."),
    topic: str = typer.Argument(..., help="The topic whose partitions are cut into key ranges."),
    ranges: int = typer.Argument(..., min=1, help="Key ranges per partition (1: whole partitions)."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
) -> None:
    """Spread each partition of TOPIC over up to RANGES members: each gets a key range of it and
    commits its own progress; a live group rebalances, losing and repeating nothing."""
    with _connected(coordinator, token, tls_ca) as client:
        _ack_or_fail(client.set_parallelism(group, topic, ranges))
    Console().print(_lit(f"group {group}: {topic} in {ranges} key range(s) per partition"))


@groups_app.command("delete")
def groups_delete(
    group: str = typer.Argument(..., help="The group id (must have no members)."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
) -> None:
    """Delete an empty group and its committed offsets."""
    with _connected(coordinator, token, tls_ca) as client:
        _ack_or_fail(client.delete_group(group))
    Console().print(_lit(f"deleted group {group}"))


# ----------------------------------------------------------------------------------- Kafka groups
KAFKA_HELP = "The Kafka cluster: kafka://HOST:PORT[,HOST:PORT...][?librdkafka options]."


def _kafka_groups(spec: str) -> Any:
    from regroup.log import open_kafka_groups
    from regroup.log.errors import LogError

    try:
        return open_kafka_groups(spec)
    except LogError as e:
        raise typer.BadParameter(str(e)) from e


def _members_of(client: Any, group: str) -> int:
    return next((r.members for r in client.list_groups() if r.group_id == group), 0)


def _committed(client: Any, group: str) -> dict[Shard, int]:
    """The regroup group's committed offsets, key-range fragments included (none: the group is new)."""
    from regroup.protocol.errors import ErrorCode
    from regroup.protocol.messages import OffsetFetchRequest

    got = client.fetch_offsets(OffsetFetchRequest(group))
    if got.error is not ErrorCode.NONE:
        _fail(f"{got.error.value}: {got.message}")
    return {s: c.offset for s, c in got.offsets.items()}


@groups_app.command("import")
def groups_import(
    group: str = typer.Argument(..., help="The regroup group (no members; created if missing)."),
    source: str = typer.Option(..., "--from", help=KAFKA_HELP),
    kafka_group: str | None = typer.Option(None, "--kafka-group", help="The Kafka group (default: GROUP)."),
    force: bool = typer.Option(False, "--force", help="Replace offsets the regroup group already "
                               "committed for those partitions."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Make a Kafka group's committed offsets the regroup group's, durably, through the coordinator.

    Refused when the regroup group has members (always), and when it already committed an offset for
    one of those partitions (unless --force). For a live Kafka group, see the coordinator's
    --migrate-group instead: a copy taken while it runs is out of date at once.
    """
    from regroup.log.errors import LogError

    name = kafka_group or group
    try:
        with _kafka_groups(source) as kafka:
            found = kafka.read(name)
    except LogError as e:
        _fail(str(e))
    if not found.offsets:
        _fail(f"Kafka group {name!r} has no committed offsets ({found.state}): nothing to import")
    notes = []
    if found.members:
        notes.append(f"Kafka group {name!r} has {found.members} member(s) and keeps committing: this is a "
                     "snapshot (a migration with no stop: the coordinator's --migrate-group)")
    with _connected(coordinator, token, tls_ca) as client:
        members = _members_of(client, group)
        if members:
            _fail(f"refused: regroup group {group!r} has {members} member(s); offsets are imported only into "
                  "a group without members (they would race its consumers): stop them first")
        before = _committed(client, group)
        replaced = {s: o for s, o in before.items() if Shard(s.topic, s.partition) in found.offsets}
        if replaced and not force:
            listed = ", ".join(f"{s}={o}" for s, o in sorted(replaced.items())[:5])
            _fail(f"refused: regroup group {group!r} already committed offsets for {len(replaced)} of those "
                  f"partition(s) ({listed}{', ...' if len(replaced) > 5 else ''}); --force replaces them")
        fragments = [s for s in replaced if not s.whole]
        if fragments:  # a whole partition's offset replaces its key-range fragments
            _ack_or_fail(client.delete_offsets(group, fragments))
        _ack_or_fail(client.reset_offsets(group, found.offsets, metadata=f"imported from kafka:{name}"))
    rows = [{"topic": s.topic, "partition": s.partition, "offset": o,
             "replaced": min((v for f, v in replaced.items() if f.partition_key == s.partition_key),
                             default=None)}
            for s, o in sorted(found.offsets.items())]
    if json_output:
        print(json.dumps({"group": group, "kafka_group": name, "kafka_state": found.state,
                          "imported": rows, "notes": notes}))
        return
    c = _console()
    table = Table("partition", "offset", "replaced", title=f"imported from Kafka group {name}")
    for r in rows:
        _row(table, f"{r['topic']}:{r['partition']}", r["offset"], _dash(r["replaced"]))
    c.print(table)
    c.print(_lit(f"group {group}: {len(rows)} committed offset(s) imported from Kafka group {name}"))
    for n in notes:
        c.print(_lit(f"note: {n}"))


@groups_app.command("export")
def groups_export(
    group: str = typer.Argument(..., help="The regroup group whose committed offsets are written."),
    to: str = typer.Option(..., "--to", help=KAFKA_HELP),
    kafka_group: str | None = typer.Option(None, "--kafka-group", help="The Kafka group (default: GROUP); "
                                           "Kafka requires it to have no members."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Write the regroup group's committed offsets into a Kafka group, for going back to Kafka.

    Kafka keeps one offset per partition: a partition the regroup group keeps in key ranges
    (parallelism > 1) is exported at the lowest offset of its ranges, so the records some ranges had
    passed are read again (at least once, never lost).
    """
    from regroup.log.errors import LogError

    name = kafka_group or group
    with _connected(coordinator, token, tls_ca) as client:
        committed = _committed(client, group)
        members = _members_of(client, group)
    if not committed:
        _fail(f"regroup group {group!r} has no committed offsets: nothing to export")
    lowest = low_watermarks(committed.items())  # Kafka keeps one offset per partition
    ranges: dict[Shard, int] = {}
    for s in committed:
        if not s.whole:
            whole = Shard(s.topic, s.partition)
            ranges[whole] = ranges.get(whole, 0) + 1
    notes = []
    if ranges:
        notes.append(f"{len(ranges)} partition(s) are kept in key ranges, which Kafka cannot express: each "
                     "is exported at the lowest offset of its ranges (records some ranges had passed are "
                     "read again)")
    if members:
        notes.append(f"regroup group {group!r} has {members} member(s) and keeps committing: this is a "
                     "snapshot")
    try:
        with _kafka_groups(to) as kafka:
            kafka.commit_offsets(name, lowest, metadata=f"exported from regroup group {group}")
    except LogError as e:
        _fail(str(e))
    rows = [{"topic": s.topic, "partition": s.partition, "offset": o, "key_ranges": ranges.get(s, 0)}
            for s, o in sorted(lowest.items())]
    if json_output:
        print(json.dumps({"group": group, "kafka_group": name, "exported": rows, "notes": notes}))
        return
    c = _console()
    table = Table("partition", "offset", "from", title=f"exported to Kafka group {name}")
    for r in rows:
        _row(table, f"{r['topic']}:{r['partition']}", r["offset"],
             f"lowest of {r['key_ranges']} key ranges" if r["key_ranges"] else "whole partition")
    c.print(table)
    c.print(_lit(f"group {group}: {len(rows)} committed offset(s) written to Kafka group {name}"))
    for n in notes:
        c.print(_lit(f"note: {n}"))


def _dash(v: object) -> str:
    return "-" if v is None else str(v)


# ----------------------------------------------------------------------------------- offsets
@offsets_app.command("reset")
def offsets_reset(
    group: str = typer.Argument(..., help="The group id (must have no members)."),
    to: list[str] = typer.Option(..., "--to", help="TOPIC:PARTITION=OFFSET, repeatable; a partition "
                                 "may be one key range of it: TOPIC:PARTITION.RofK or "
                                 "TOPIC:PARTITION[lo,hi) (hex, as `groups describe` prints it)."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
) -> None:
    """Set committed offsets (may move them backwards) of an empty group."""
    offsets: dict[Shard, int] = {}
    for item in to:
        where, sep, offset = item.partition("=")
        if not sep or not offset.isdigit():
            raise typer.BadParameter(f"{item!r}: expected TOPIC:PARTITION=OFFSET (the partition may name "
                                     "a key range: orders:3.1of4=OFFSET)", param_hint="--to")
        offsets[_parse_shard(where)] = int(offset)
    with _connected(coordinator, token, tls_ca) as client:
        _ack_or_fail(client.reset_offsets(group, offsets))
    Console().print(_lit(f"reset {len(offsets)} offset(s) of {group}"))


@offsets_app.command("delete")
def offsets_delete(
    group: str = typer.Argument(..., help="The group id (must have no members)."),
    partition: list[str] = typer.Option(None, "--partition", help="TOPIC:PARTITION, repeatable; "
                                        "all of the group's offsets when omitted. A partition may "
                                        "be one key range of it: TOPIC:PARTITION.RofK or "
                                        "TOPIC:PARTITION[lo,hi)."),
    coordinator: str | None = typer.Option(None, "--coordinator", "-c", help=COORDINATOR_HELP),
    token: str | None = typer.Option(None, help="API token (default: $REGROUP_TOKEN)."),
    tls_ca: str | None = typer.Option(None, "--tls-ca", metavar="PEM", help=TLS_CA_HELP),
) -> None:
    """Delete committed offsets of an empty group."""
    shards = [_parse_shard(p) for p in partition] if partition else None
    with _connected(coordinator, token, tls_ca) as client:
        _ack_or_fail(client.delete_offsets(group, shards))
    Console().print(_lit(f"deleted offsets of {group}"))


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
            Console().print(_lit(f"{topic} now has {partitions} partitions"))
        else:
            lg.create_topic(topic, partitions)
            Console().print(_lit(f"created {topic} with {partitions} partitions"))
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
        counts = getattr(lg, "record_counts", lg.end_offsets)  # the embedded log counts split pieces
        ends = {t: counts(t) for t in sorted(topics)}
    finally:
        lg.close()
    if json_output:
        print(json.dumps({"topics": [{"topic": t, "partitions": n, "records": sum(ends[t].values())}
                                     for t, n in sorted(topics.items())]}))
        return
    table = Table("topic", "partitions", "records")
    for t, n in sorted(topics.items()):
        _row(table, t, n, sum(ends[t].values()))
    _console().print(table)


def _embedded(log: str | None) -> EmbeddedLog:
    from regroup.log.embedded import EmbeddedLog

    lg = _log(log)
    if not isinstance(lg, EmbeddedLog):
        lg.close()
        _fail("splitting and merging partitions is for the embedded log only: a Kafka partition "
              "cannot be split on the producer side (key ranges on Kafka are client-side filtering)")
    return lg


def _print_layout(topic: str, partition: int, layout: Layout) -> None:
    table = Table("piece", "keys", "first offset", "end", "state",
                  title=_lit(f"{topic} partition {partition}"))
    for p in sorted(layout.pieces, key=lambda p: (p.open, p.lo, p.id)):
        _row(table, p.id, f"[{p.lo:#x}, {p.hi:#x})", p.start, "" if p.end is None else p.end,
             "open" if p.open else "sealed")
    _console().print(table)


def _change_layout(log: str | None, topic: str, partition: int,
                   change: Callable[[EmbeddedLog], Layout]) -> None:
    """Run a split or merge on the embedded log and print the partition's new pieces."""
    from regroup.log.errors import LogError

    lg = _embedded(log)
    try:
        layout = change(lg)
    except (LogError, ValueError) as e:
        _fail(str(e))
    finally:
        lg.close()
    _print_layout(topic, partition, layout)


@topics_app.command("split")
def topics_split(
    topic: str = typer.Argument(..., help="Topic name."),
    partition: int = typer.Option(..., "--partition", min=0, help="The partition to split."),
    into: int = typer.Option(..., "--into", min=2, help="How many pieces (equal slices of its keys)."),
    piece: int | None = typer.Option(None, "--piece", min=0,
                                     help="The open piece to split, if the partition is split already."),
    timeout: float = typer.Option(30.0, "--timeout", min=0.1,
                                  help="Seconds to wait for the piece's producer to let go of it."),
    log: str | None = typer.Option(None, "--log", help=LOG_HELP),
) -> None:
    """Split a partition's keys over several pieces that producers write in parallel (embedded log).

    Each piece takes an equal slice of the keys; its offsets start at the partition's end. Producers of
    the partition wait only while it is switched; consumers read every key in order across it.
    """
    _change_layout(log, topic, partition,
                   lambda lg: lg.split_partition(topic, partition, into, piece=piece, timeout_s=timeout))


@topics_app.command("merge")
def topics_merge(
    topic: str = typer.Argument(..., help="Topic name."),
    partition: int = typer.Option(..., "--partition", min=0, help="The partition to merge."),
    pieces: str | None = typer.Option(
        None, "--pieces", help="Comma-separated ids of adjacent open pieces (default: all of them, "
                               "the partition whole again)."),
    timeout: float = typer.Option(30.0, "--timeout", min=0.1,
                                  help="Seconds to wait for the pieces' producers to let go of them."),
    log: str | None = typer.Option(None, "--log", help=LOG_HELP),
) -> None:
    """Merge adjacent pieces of a split partition back into one (embedded log)."""
    ids = None
    if pieces is not None:
        try:
            ids = [int(x) for x in pieces.split(",") if x.strip()]
        except ValueError:
            _fail(f"--pieces must be comma-separated piece ids, got {pieces!r}")
    _change_layout(log, topic, partition,
                   lambda lg: lg.merge_partition(topic, partition, ids, timeout_s=timeout))


@topics_app.command("pieces")
def topics_pieces(
    topic: str = typer.Argument(..., help="Topic name."),
    partition: int = typer.Option(..., "--partition", min=0, help="The partition."),
    log: str | None = typer.Option(None, "--log", help=LOG_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The pieces of a partition (embedded log): its key slices, offsets, and which are open."""
    from regroup.log.errors import LogError

    lg = _embedded(log)
    try:
        layout = lg.layout(topic, partition)
        ends = lg.piece_ends(topic, partition)
    except (LogError, ValueError) as e:
        _fail(str(e))
    finally:
        lg.close()
    if json_output:
        print(json.dumps({"topic": topic, "partition": partition, "generation": layout.generation,
                          "pieces": [{"id": p.id, "lo": p.lo, "hi": p.hi, "start": p.start,
                                      "end": p.end if p.end is not None else ends[(p.lo, p.hi)],
                                      "open": p.open} for p in layout.pieces]}))
        return
    _print_layout(topic, partition, layout)


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
    Console(stderr=True).print(_lit(f"produced {n} records to {topic}"))


def coordinator(
    listen: str = typer.Option("127.0.0.1:9650", "--listen", help="HOST:PORT to serve gRPC on."),
    data_dir: str = typer.Option(..., "--data-dir", help="Directory of the durable record store."),
    log: str | None = typer.Option(None, "--log", help="Log for topic metadata: a directory or "
                                   "kafka://HOST:PORT (default: $REGROUP_LOG)."),
    token: str | None = typer.Option(None, help="Require this API token, with every scope (default: "
                                     "$REGROUP_TOKEN, unless --tokens-file is given)."),
    tokens_file: str | None = typer.Option(None, "--tokens-file", metavar="PATH",
                                           help="Require one of the tokens of this TOML or JSON file, each "
                                                "with its scopes (member for some groups, read, admin); "
                                                "not with --token. See docs/operations.md."),
    tls_cert: str | None = typer.Option(None, help="PEM certificate: serve TLS."),
    tls_key: str | None = typer.Option(None, help="PEM private key for --tls-cert."),
    metrics_port: int | None = typer.Option(None, help="Serve Prometheus metrics on this port."),
    session_timeout_ms: int = typer.Option(45_000, help="Members silent this long are fenced."),
    heartbeat_interval_ms: int = typer.Option(5_000, help="How often members heartbeat."),
    failover_grace_ms: int = typer.Option(2_000, min=0, help="Fence a dynamic member this long after its "
                                          "connection broke unless it comes back (0: off)."),
    offsets_retention_ms: int = typer.Option(
        7 * 24 * 60 * 60 * 1000, "--offsets-retention-ms",
        help="An empty group's committed offsets expire this long after it became empty, and the group is "
             "deleted (default: 7 days, as Kafka's offsets.retention.minutes)."),
    max_groups: int = typer.Option(100_000, "--max-groups", help="Groups of both kinds; a request that would "
                                   "create one more is refused."),
    http: str | None = typer.Option(None, "--http", metavar="HOST:PORT",
                                    help="Serve the dashboard and its JSON API here (port 0: any)."),
    standby_replicas: int = typer.Option(0, help="Streams groups: caught-up standby copies of every task, "
                                         "on other processes."),
    acceptable_recovery_lag: int = typer.Option(10_000, help="Streams groups: records a copy may be behind "
                                                "and still take a task over at once."),
    max_warmups: int = typer.Option(2, help="Streams groups: warm-up copies restoring at once in a group."),
    migrate_from: str | None = typer.Option(None, "--migrate-from", metavar="kafka://HOST:PORT",
                                            help="The Kafka cluster of the --migrate-group groups."),
    migrate_group: list[str] = typer.Option(
        [], "--migrate-group", metavar="GROUP[=KAFKA_GROUP]",
        help="GROUP is granted a partition only once the live Kafka group (default: the same name) no "
             "longer owns it, at the offset Kafka committed. Repeatable."),
    migrate_poll_s: float = typer.Option(1.0, "--migrate-poll-s", min=0.05,
                                         help="How often the Kafka groups are read."),
    end_migration: list[str] = typer.Option([], "--end-migration", metavar="GROUP",
                                            help="Drop GROUP's hold by a Kafka group it no longer "
                                                 "migrates from. Repeatable."),
    log_level: LogLevel = typer.Option(LogLevel.INFO, "--log-level", case_sensitive=False,
                                       help="Log to stderr from this level on."),
) -> None:
    """Run the group coordinator: gRPC API, durable store, timers, metrics, optional dashboard."""
    from regroup.coordinator.logs import configure
    from regroup.coordinator.server import ServerConfig, run_coordinator, token_option
    from regroup.protocol.errors import ProtocolError
    from regroup.protocol.streams.coordinator import StreamsConfig

    try:
        streams = StreamsConfig(standby_replicas, acceptable_recovery_lag, max_warmups)
    except ProtocolError as e:
        raise typer.BadParameter(e.message) from e
    configure(log_level.value)
    code = run_coordinator(ServerConfig(
        data_dir=data_dir, listen=listen, log_spec=log or os.environ.get("REGROUP_LOG"),
        token=token_option(token, tokens_file), tokens_file=tokens_file, tls_cert=tls_cert, tls_key=tls_key,
        metrics_port=metrics_port, session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms, failover_grace_ms=failover_grace_ms,
        offsets_retention_ms=offsets_retention_ms, max_groups=max_groups, http=http,
        streams=streams, migrate_from=migrate_from, migrate_groups=tuple(migrate_group),
        migrate_poll_s=migrate_poll_s, end_migrations=tuple(end_migration)))
    raise typer.Exit(code)
