"""The options of ``spark.readStream.format("regroup")``, parsed and checked once, with clear errors.

Spark hands a data source its options as strings in a case-insensitive map; everything a user can get
wrong is caught here, before the query joins a group, with a message that names the option.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


class SourceOptionError(ValueError):
    """An option of the regroup source is missing or wrong."""


#: Every option the source understands (lower case; Spark option names are case-insensitive).
KNOWN = {
    "group": "the consumer group the query joins (required)",
    "topics": "comma-separated topics to read",
    "pattern": "RE2 regular expression of topics to read (instead of topics)",
    "coordinator": "HOST:PORT of the regroup coordinator (default: $REGROUP_COORDINATOR)",
    "log": "embedded-log directory or kafka://HOST:PORT (required)",
    "instanceid": "static member id: a restart with the same id gets its partitions back",
    "maxrecordspertrigger": "at most this many records per micro-batch",
    "token": "the coordinator's API token",
    "tlsca": "PEM file of the CA that signed the coordinator's certificate",
    "startingoffsets": "earliest | latest: where a partition with no committed offset begins",
    "rebalancetimeoutms": "how long a revocation may wait for the running micro-batch (ms)",
    "assignor": "server-side assignor of the group (uniform, range or a registered one)",
    "maxrecordspersplit": "cut a partition's range into Spark tasks of at most this many records",
    "startuptimeoutms": "how long the first batch waits for the member's first assignment (ms)",
}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    group: str
    coordinator: str
    log: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    instance_id: str | None = None
    max_records_per_trigger: int | None = None
    token: str | None = None
    tls_ca: str | None = None
    starting_offsets: str = "earliest"
    rebalance_timeout_ms: int = 60_000
    assignor: str | None = None
    max_records_per_split: int = 1_000_000
    startup_timeout_ms: int = 10_000


def _int(opts: Mapping[str, str], key: str, minimum: int) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SourceOptionError(f"option {key!r} must be >= {minimum}, got {value}")
    return value


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Check Spark's option map and turn it into :class:`SourceOptions`."""
    opts = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
    opts.pop("path", None)  # Spark may pass load()'s argument; the source has no path
    unknown = sorted(set(opts) - set(KNOWN))
    if unknown:
        raise SourceOptionError(f"unknown option(s) {unknown} for the regroup source; known: {sorted(KNOWN)}")
    group = opts.get("group", "").strip()
    if not group:
        raise SourceOptionError("option 'group' is required: the consumer group this query joins")
    coordinator = opts.get("coordinator", "").strip() or os.environ.get("REGROUP_COORDINATOR", "").strip()
    if not coordinator:
        raise SourceOptionError("option 'coordinator' (HOST:PORT) is required, or set $REGROUP_COORDINATOR")
    log = opts.get("log", "").strip()
    if not log:
        raise SourceOptionError("option 'log' is required: an embedded-log directory or kafka://HOST:PORT")
    topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
    pattern = opts.get("pattern") or None
    if bool(topics) == bool(pattern):
        raise SourceOptionError("give exactly one of the options 'topics' (comma-separated) or 'pattern'")
    starting = opts.get("startingoffsets", "earliest").strip().lower()
    if starting not in ("earliest", "latest"):
        raise SourceOptionError(f"option 'startingOffsets' must be earliest or latest, got {starting!r}")
    return SourceOptions(
        group=group,
        coordinator=coordinator,
        log=log,
        topics=topics,
        pattern=pattern,
        instance_id=opts.get("instanceid") or None,
        max_records_per_trigger=_int(opts, "maxrecordspertrigger", 1),
        token=opts.get("token") or None,
        tls_ca=opts.get("tlsca") or None,
        starting_offsets=starting,
        rebalance_timeout_ms=_default(_int(opts, "rebalancetimeoutms", 1000), 60_000),
        assignor=opts.get("assignor") or None,
        max_records_per_split=_default(_int(opts, "maxrecordspersplit", 1), 1_000_000),
        startup_timeout_ms=_default(_int(opts, "startuptimeoutms", 0), 10_000),
    )
