"""regroup.log (shell): partitioned logs — the embedded log (default) and Kafka — behind one interface.

``open_log(spec)`` is the one way the CLI, the coordinator, the consumer and the PySpark source turn a
user's ``--log`` string into a :class:`~regroup.log.base.PartitionedLog`:

* ``/path/to/dir`` or ``embedded:///path/to/dir`` (``embedded://relative/dir`` is relative): the
  embedded log; ``?fsync=never`` turns off per-batch fsync;
* ``kafka://host:port[,host:port...]``: a Kafka-compatible cluster; query parameters are passed to
  librdkafka (``kafka://broker:9093?security.protocol=SSL``), except ``timeout_s`` and
  ``replication_factor``, which are KafkaLog's own.

``open_kafka_groups(spec)`` opens the consumer groups of the Kafka cluster a ``kafka://`` spec names
(`regroup.log.kafka_groups`: moving a group from Kafka to regroup).

The backends are imported lazily so that using the embedded log never loads librdkafka.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from regroup.log.base import WHOLE_KEY_SPACE, ConsumedRecord, LogRecord, PartitionedLog, TopicSource
from regroup.log.errors import LogError

if TYPE_CHECKING:
    from regroup.log.embedded import EmbeddedLog
    from regroup.log.kafka import KafkaLog
    from regroup.log.kafka_groups import KafkaGroups

__all__ = ["ConsumedRecord", "LogRecord", "PartitionedLog", "TopicSource", "open_kafka_groups", "open_log",
           "piece_ends_of"]


def _split_query(rest: str, spec: str) -> tuple[str, dict[str, str]]:
    body, sep, query = rest.partition("?")
    params: dict[str, str] = {}
    if sep:
        try:
            params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=True))
        except ValueError as e:
            raise LogError(f"log spec {spec!r}: malformed query string {query!r}") from e
    return body, params


def _open_embedded(path: str, params: dict[str, str], spec: str) -> EmbeddedLog:
    from regroup.log.embedded import EmbeddedLog

    if not path:
        raise LogError(f"log spec {spec!r} names no directory")
    fsync = params.pop("fsync", "batch")
    if params:
        raise LogError(f"log spec {spec!r}: unknown embedded-log options {sorted(params)} (known: fsync)")
    if fsync not in ("batch", "never"):
        raise LogError(f"log spec {spec!r}: fsync must be 'batch' or 'never', not {fsync!r}")
    return EmbeddedLog(path, fsync="batch" if fsync == "batch" else "never")


def _open_kafka(hosts: str, params: dict[str, str], spec: str) -> KafkaLog:
    from regroup.log.kafka import KafkaLog

    hosts = _kafka_hosts(hosts, spec)
    try:
        timeout_s = float(params.pop("timeout_s", "30"))
        replication_factor = int(params.pop("replication_factor", "-1"))
    except ValueError as e:
        raise LogError(f"log spec {spec!r}: {e}") from e
    return KafkaLog(hosts, params, timeout_s=timeout_s, replication_factor=replication_factor)


def _kafka_hosts(hosts: str, spec: str) -> str:
    hosts = hosts.rstrip("/")
    if not hosts or any(not h or ":" not in h for h in hosts.split(",")):
        raise LogError(f"log spec {spec!r}: expected kafka://host:port[,host:port...]")
    return hosts


def open_kafka_groups(spec: str) -> KafkaGroups:
    """The consumer groups of the Kafka cluster ``kafka://host:port[,...][?options]`` names (options:
    librdkafka's, and ``timeout_s``); raises :class:`LogError` for any other spec."""
    from regroup.log.kafka_groups import KafkaGroups

    scheme, sep, rest = spec.strip().partition("://") if isinstance(spec, str) else ("", "", "")
    if scheme != "kafka" or not sep:
        raise LogError(f"{spec!r} is not a Kafka cluster: expected kafka://host:port[,host:port...]")
    hosts, params = _split_query(rest, spec)
    try:
        timeout_s = float(params.pop("timeout_s", "10"))
    except ValueError as e:
        raise LogError(f"log spec {spec!r}: {e}") from e
    return KafkaGroups(_kafka_hosts(hosts, spec), params, timeout_s=timeout_s)


def open_log(spec: str) -> PartitionedLog:
    """Open the log named by ``spec`` (see the module docstring); raises :class:`LogError` if malformed."""
    if not isinstance(spec, str) or not spec.strip():
        raise LogError("a log spec is a directory, embedded:///dir or kafka://host:port[,host:port]")
    spec = spec.strip()
    scheme, sep, rest = spec.partition("://")
    if not sep:
        return _open_embedded(spec, {}, spec)  # a plain path (no query string: '?' may be in a name)
    if scheme == "embedded":
        path, params = _split_query(rest, spec)
        return _open_embedded(path, params, spec)
    if scheme == "kafka":
        hosts, params = _split_query(rest, spec)
        return _open_kafka(hosts, params, spec)
    raise LogError(f"log spec {spec!r}: unknown scheme {scheme!r} (use embedded:// or kafka://)")


def piece_ends_of(log: Any,
                  parts: Iterable[tuple[str, int]]) -> dict[tuple[str, int], dict[tuple[int, int], int]]:
    """`PartitionedLog.piece_ends` of several partitions ``(topic, partition)``: the embedded log's
    per partition (each may be split on the producer side); a log that cannot split asks its end
    offsets once per topic, not once per partition."""
    from regroup.log.embedded import EmbeddedLog

    wanted = sorted(set(parts))
    if isinstance(log, EmbeddedLog):
        return {pk: log.piece_ends(*pk) for pk in wanted}
    out: dict[tuple[str, int], dict[tuple[int, int], int]] = {}
    for topic in sorted({t for t, _ in wanted}):
        ends = log.end_offsets(topic)
        out.update(((t, p), {WHOLE_KEY_SPACE[0]: ends.get(p, 0)}) for t, p in wanted if t == topic)
    return out
