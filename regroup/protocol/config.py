"""Coordinator settings that the protocol core enforces. All times are milliseconds.

A setting out of range is a `ConfigError` naming its field, so that a shell that sets the field from a
flag of its own (the coordinator's command line) can say it with the flag's name, without checking
the value itself a second time.
"""

from __future__ import annotations

from dataclasses import dataclass

from regroup.protocol.failover import check_grace

#: Kafka's default ``offsets.retention.minutes``: 7 days.
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
#: The longest interval between two retention checks (`retention_check_ms`).
MAX_RETENTION_CHECK_MS = 60_000


class ConfigError(ValueError):
    """A setting the core refuses: ``field`` names it, ``rule`` says what it must be (and what it was);
    the message is the two together."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field} {rule}")
        self.field = field
        self.rule = rule


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    #: A member that does not heartbeat for this long is fenced (Kafka's default: 45 s).
    session_timeout_ms: int = 45_000
    #: How often members heartbeat; returned in every response (Kafka's default: 5 s).
    heartbeat_interval_ms: int = 5_000
    #: Members per group; a join beyond it gets GROUP_MAX_SIZE_REACHED.
    max_group_size: int = 100_000
    #: Upper bound on a member's revocation (rebalance) timeout; larger requests are clamped.
    max_rebalance_timeout_ms: int = 30 * 60_000
    #: Limits on what a request may carry (a bad client cannot make the coordinator hoard memory).
    max_id_length: int = 255
    max_topic_name_length: int = 249
    max_subscribed_topics: int = 10_000
    max_regex_length: int = 1_000
    max_offset_metadata_length: int = 4_096
    #: Shards a consumer's owned list may hold, counted as listed (and tasks a streams member owns, in
    #: all roles together); also bounds the shards of an offset request.
    max_owned_shards: int = 1_000_000
    #: A dynamic member whose connection broke is fenced this long after, unless it heartbeats or
    #: reconnects first (`regroup.protocol.failover`); 0 turns it off.
    failover_grace_ms: int = 2_000
    #: An empty group's committed offsets expire this long after it became empty, and the group is
    #: deleted (`regroup.protocol.retention`; Kafka's ``offsets.retention.minutes``).
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS
    #: Groups of both kinds on this coordinator: a request that would create one more is refused
    #: (GROUP_MAX_SIZE_REACHED).
    max_groups: int = 100_000
    #: Offsets one operator's reset may set (a larger reset is split into several requests).
    max_reset_offsets: int = 10_000
    #: A request this large (encoded bytes) is read and checked off the event loop that answers
    #: heartbeats, one at a time, in the lane of large requests (a heartbeat owning 10,000 partitions
    #: is about 30 KB; the largest legal one, `max_owned_shards` of them, about 3 MB and seconds to read).
    large_request_bytes: int = 64 * 1024
    #: Large requests one client (connection) may have waiting or being read; one more is refused.
    max_large_requests_per_client: int = 1
    #: Large requests waiting or being read from all clients together; one more is refused.
    max_large_requests_waiting: int = 16

    def __post_init__(self) -> None:
        if self.heartbeat_interval_ms <= 0:
            raise ConfigError("heartbeat_interval_ms", f"must be positive, got {self.heartbeat_interval_ms}")
        if self.session_timeout_ms <= self.heartbeat_interval_ms:
            raise ConfigError("session_timeout_ms", f"must be larger than the heartbeat interval "
                              f"({self.heartbeat_interval_ms} ms), or every member would be fenced; got "
                              f"{self.session_timeout_ms}")
        if self.max_group_size < 1:
            raise ConfigError("max_group_size", f"must be at least 1, got {self.max_group_size}")
        if self.max_rebalance_timeout_ms <= 0:
            raise ConfigError("max_rebalance_timeout_ms",
                              f"must be positive, got {self.max_rebalance_timeout_ms}")
        try:
            check_grace(self.failover_grace_ms)
        except ValueError:  # `check_grace`'s own words name no flag: say it as every setting here does
            raise ConfigError("failover_grace_ms", f"must be a non-negative integer of milliseconds (how "
                              f"long a dynamic member whose connection broke keeps its partitions; 0: off), "
                              f"got {self.failover_grace_ms!r}") from None
        if isinstance(self.offsets_retention_ms, bool) or not isinstance(self.offsets_retention_ms, int) \
                or self.offsets_retention_ms <= 0:
            raise ConfigError("offsets_retention_ms", f"must be a positive number of milliseconds (how long "
                              f"an empty group's offsets are kept; Kafka's default is 7 days, "
                              f"{DEFAULT_OFFSETS_RETENTION_MS}), got {self.offsets_retention_ms!r}")
        if self.max_groups < 1:
            raise ConfigError("max_groups", f"must be at least 1, got {self.max_groups}")
        if self.max_reset_offsets < 1:
            raise ConfigError("max_reset_offsets", f"must be at least 1, got {self.max_reset_offsets}")
        if self.large_request_bytes < 1:
            raise ConfigError("large_request_bytes", f"must be at least 1 (bytes above which large requests "
                              f"take their own lane), got {self.large_request_bytes}")
        if self.max_large_requests_per_client < 1:
            raise ConfigError("max_large_requests_per_client", f"must be at least 1 (large requests one "
                              f"client may have waiting), got {self.max_large_requests_per_client}")
        if self.max_large_requests_waiting < self.max_large_requests_per_client:
            raise ConfigError("max_large_requests_waiting", f"must be at least the large requests one client "
                              f"may have waiting ({self.max_large_requests_per_client}), got "
                              f"{self.max_large_requests_waiting}")

    @property
    def retention_check_ms(self) -> int:
        """How often retention is checked: a tenth of the retention, between 100 ms and a minute (an
        empty group's clock starts at most this late, `regroup.protocol.retention` rule 2)."""
        return min(MAX_RETENTION_CHECK_MS, max(100, self.offsets_retention_ms // 10))
