"""The Kafka log: any Kafka-compatible cluster, through confluent-kafka, with regroup owning the group.

regroup's coordinator decides who reads which partition and stores the committed offsets, so this
backend deliberately uses none of Kafka's consumer-group machinery: the consumer reads with
``assign()`` and explicit offsets, never subscribes, never commits (``enable.auto.commit`` is off and
its random ``group.id`` is never used for anything), and topic administration goes through the
AdminClient.

Choices that matter on a real cluster:

* Producing uses ``acks=all`` with the idempotent producer, so a batch lands in order and exactly once
  per partition even when the client retries; ``produce`` returns once every record is acknowledged.
* A read stops at the end of the partition as reported by the fetch responses themselves
  (``enable.partition.eof``): that is the end the consumer can actually read, including under
  ``read_committed``. A read that resumes where the previous one reached the end first asks the broker
  for the end offset (ListOffsets) so that an idle partition answers ``[]`` at once instead of waiting.
* ``end_offsets`` is ListOffsets(latest) under ``read_committed``: the last stable offset, i.e. what a
  consumer can read up to (equal to the high watermark when no transaction is open).
* ``auto.offset.reset=error``: reading an offset the broker does not have raises
  :class:`OffsetOutOfRangeError` rather than silently jumping.
* Topic names starting with ``__`` are Kafka's internal topics and are not listed.
* A null header value (allowed by Kafka) is read as ``b""``.
* Timestamps must be >= 0 (Kafka's rule); librdkafka replaces a timestamp of 0 with the current time.

Extra librdkafka settings (security, timeouts) go in ``config`` and apply to every client.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewPartitions, NewTopic

from regroup.log.arrow import records_to_arrow
from regroup.log.base import WHOLE_KEY_SPACE, ConsumedRecord, KeyRead, LogRecord, PartitionedLog, keep_keys
from regroup.log.errors import (
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    LogError,
    LogTimeoutError,
    OffsetOutOfRangeError,
    ProduceError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedOperationError,
)
from regroup.log.validation import (
    check_partition_count,
    check_partition_index,
    check_read_args,
    check_topic_name,
    first_invalid_record,
)

__all__ = ["KafkaLog"]

ConfigValue = str | int | float | bool

#: Messages taken from the client per ``consume`` call; bounds one call's latency, not a read's size.
_CONSUME_CHUNK = 10_000
#: How long one blocking ``consume`` waits before the read loop checks its deadline again.
_WAIT_SLICE_S = 0.2

_OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
_UNKNOWN = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
_UNSUPPORTED = {KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION}


#: How many times a read answered OFFSET_OUT_OF_RANGE below the partition's end is tried again.
_SPURIOUS_OUT_OF_RANGE_RETRIES = 3


def _error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


class _Deliveries:
    """Delivery reports of one ``produce`` call: how many landed, the first offset, the first error."""

    __slots__ = ("delivered", "error", "first_offset")

    def __init__(self) -> None:
        self.delivered = 0
        self.first_offset: int | None = None
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
            return
        self.delivered += 1
        off = msg.offset()
        if off is not None and (self.first_offset is None or off < self.first_offset):
            self.first_offset = off


class KafkaLog(PartitionedLog):
    """A :class:`~regroup.log.base.PartitionedLog` on a Kafka-compatible cluster.

    ``bootstrap`` is ``host:port[,host:port...]``. ``timeout_s`` bounds every blocking operation
    (metadata, admin requests, acknowledgements, a read waiting for its first fetch).
    ``replication_factor`` for new topics defaults to the broker's ``default.replication.factor``.

    Clients are created on first use; pickling gives an unconnected copy (for Spark tasks). One read
    at a time per instance (reads share one consumer); producing is thread-safe.
    """

    def __init__(
        self,
        bootstrap: str,
        config: Mapping[str, ConfigValue] | None = None,
        *,
        timeout_s: float = 30.0,
        replication_factor: int = -1,
    ) -> None:
        if not bootstrap or not isinstance(bootstrap, str):
            raise ValueError("bootstrap must be 'host:port[,host:port...]'")
        self._bootstrap = bootstrap
        self._config: dict[str, ConfigValue] = dict(config or {})
        self._timeout_s = timeout_s
        self._replication_factor = replication_factor
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._counts: dict[str, int] = {}
        # The consumer's single assignment and where its stream stands: ``_next`` is the stream's
        # position (after the last record, or the end it reported); a read from anywhere in
        # ``_resume_from .. _next`` continues the stream, because no record lies in between (the gap
        # is a transaction marker or compacted away).
        self._assigned: tuple[str, int] | None = None
        self._resume_from = 0
        self._next = 0
        self._at_end = False
        self._closed = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._bootstrap, self._config, self._timeout_s, self._replication_factor))

    def __repr__(self) -> str:
        return f"KafkaLog({self._bootstrap!r})"

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- clients

    def _base_config(self) -> dict[str, ConfigValue]:
        return {"bootstrap.servers": self._bootstrap, **self._config}

    def _admin_client(self) -> AdminClient:
        self._check_open()
        with self._lock:
            if self._admin is None:
                # Metadata requests must not create the topic they ask about (brokers with
                # auto.create.topics.enable would, and the admin client asks for it by default).
                self._admin = AdminClient({"allow.auto.create.topics": False, **self._base_config()})
            return self._admin

    def _producer_client(self) -> Producer:
        self._check_open()
        with self._lock:
            if self._producer is None:
                self._producer = Producer(
                    {
                        "acks": "all",
                        "enable.idempotence": True,
                        "linger.ms": 5,
                        # Producing to a topic that does not exist must fail, not create it.
                        "allow.auto.create.topics": False,
                        **self._base_config(),
                    }
                )
            return self._producer

    def _consumer_client(self) -> Consumer:
        self._check_open()
        with self._lock:
            if self._consumer is None:
                self._consumer = Consumer(
                    {
                        # Required by the client, never used: regroup owns membership and offsets.
                        "group.id": f"regroup-log-{uuid.uuid4().hex}",
                        "enable.auto.commit": False,
                        "enable.auto.offset.store": False,
                        "enable.partition.eof": True,
                        "auto.offset.reset": "error",
                        "allow.auto.create.topics": False,
                        # Bounds how long a read at the very end of an idle partition waits for the
                        # broker's empty fetch answer (Kafka's default, 500 ms, is slow for polling).
                        "fetch.wait.max.ms": 100,
                        **self._base_config(),
                    }
                )
            return self._consumer

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"{self!r} is closed")

    # ---------------------------------------------------------------------------------- metadata

    def _metadata_count(self, topic: str) -> int | None:
        """Partition count of ``topic`` from the cluster's metadata, or None if it does not exist."""
        try:
            md = self._admin_client().list_topics(topic=topic, timeout=self._timeout_s)
        except KafkaException as e:
            raise self._wrap(e, f"fetching metadata of {topic!r}") from e
        t = md.topics.get(topic)
        if t is None:
            return None
        if t.error is not None:
            if t.error.code() in _UNKNOWN:
                return None
            raise LogError(f"metadata of topic {topic!r}: {t.error.str()}")
        return len(t.partitions)

    def _check_partition(self, topic: str, partition: int) -> None:
        check_topic_name(topic)
        check_partition_index(partition)
        if partition < self._counts.get(topic, 0):
            return
        count = self._metadata_count(topic)
        if count is None:
            raise UnknownTopicError(topic, f"the Kafka cluster at {self._bootstrap}")
        self._counts[topic] = count
        if partition >= count:
            raise UnknownPartitionError(topic, partition, count)

    def _wait_for_count(self, topic: str, partitions: int) -> None:
        """Wait until metadata shows ``topic`` with ``partitions`` partitions (creation propagates)."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            count = self._metadata_count(topic)
            if count is not None and count >= partitions:
                self._counts[topic] = count
                return
            if time.monotonic() > deadline:
                raise LogTimeoutError(
                    f"topic {topic!r} was accepted with {partitions} partitions, but metadata still shows "
                    f"{count} after {self._timeout_s} s"
                )
            time.sleep(0.05)

    def _wrap(self, exc: BaseException, doing: str) -> LogError:
        err = _error_of(exc)
        if err is None:
            return LogError(f"{doing}: {exc}")
        code = err.code()
        text = f"{doing}: {err.str()} ({err.name()})"
        if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT):
            return LogTimeoutError(f"{text}; is the cluster at {self._bootstrap} reachable?")
        if code in _UNSUPPORTED:
            return UnsupportedOperationError(f"{text}: the broker does not support this request")
        return LogError(text)

    def topic_partitions(self) -> dict[str, int]:
        """``{topic: partition count}`` for every non-internal topic of the cluster."""
        try:
            md = self._admin_client().list_topics(timeout=self._timeout_s)
        except KafkaException as e:
            raise self._wrap(e, "listing topics") from e
        out = {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if not name.startswith("__") and t.error is None
        }
        self._counts.update(out)
        return dict(sorted(out.items()))

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic``; returns once the cluster's metadata shows it."""
        check_topic_name(topic)
        check_partition_count(partitions)
        futures = self._admin_client().create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=self._replication_factor)],
            request_timeout=self._timeout_s,
        )
        try:
            futures[topic].result(timeout=self._timeout_s)
        except KafkaException as e:
            err = _error_of(e)
            code = err.code() if err is not None else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicExistsError(topic, self._metadata_count(topic)) from e
            if code == KafkaError.TOPIC_EXCEPTION:
                raise InvalidTopicError(f"the broker refused topic name {topic!r}: {err}") from e
            if code in (KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_REPLICATION_FACTOR):
                raise InvalidPartitionsError(f"creating {topic!r}: {err}") from e
            raise self._wrap(e, f"creating topic {topic!r}") from e
        except TimeoutError as e:
            raise LogTimeoutError(f"creating topic {topic!r}: no answer in {self._timeout_s} s") from e
        self._wait_for_count(topic, partitions)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (a no-op if it has that many; shrinking is refused)."""
        check_topic_name(topic)
        check_partition_count(total, "new partition total")
        current = self._metadata_count(topic)
        if current is None:
            raise UnknownTopicError(topic, f"the Kafka cluster at {self._bootstrap}")
        if total < current:
            raise InvalidPartitionsError(
                f"topic {topic!r} has {current} partitions; partitions can only be added "
                f"(asked for a total of {total})"
            )
        if total == current:
            return
        futures = self._admin_client().create_partitions(
            [NewPartitions(topic, total)], request_timeout=self._timeout_s
        )
        try:
            futures[topic].result(timeout=self._timeout_s)
        except KafkaException as e:
            err = _error_of(e)
            if err is not None and err.code() in _UNSUPPORTED:
                raise UnsupportedOperationError(
                    f"adding partitions to {topic!r}: the broker at {self._bootstrap} does not support "
                    f"CreatePartitions (KIP-195): {err.str()}"
                ) from e
            if err is not None and err.code() == KafkaError.INVALID_PARTITIONS:
                raise InvalidPartitionsError(f"adding partitions to {topic!r}: {err.str()}") from e
            raise self._wrap(e, f"adding partitions to {topic!r}") from e
        except TimeoutError as e:
            raise LogTimeoutError(f"adding partitions to {topic!r}: no answer in {self._timeout_s} s") from e
        self._wait_for_count(topic, total)

    # ------------------------------------------------------------------------------------ writing

    def produce(self, topic: str, partition: int, records: Sequence[LogRecord]) -> int:
        """Append ``records`` in order; returns the first one's offset once all are acknowledged.

        On failure raises :class:`ProduceError` whose ``produced`` says how many were acknowledged
        (Kafka does not make a multi-batch produce atomic). With no records, returns the end offset.
        """
        self._check_partition(topic, partition)
        if not records:
            return self._end_offsets(topic, [partition])[partition]
        # Check everything first: a bad record found half-way would leave the first half produced.
        # Kafka's timestamps are non-negative, and librdkafka reads 0 as "now".
        invalid = first_invalid_record(records, min_timestamp=0)
        if invalid is not None:
            raise invalid
        producer = self._producer_client()
        reports = _Deliveries()
        for i, r in enumerate(records):
            while True:
                try:
                    producer.produce(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=partition,
                        on_delivery=reports,
                        timestamp=r.timestamp_ms,
                        headers=list(r.headers) if r.headers else None,
                    )
                    break
                except BufferError:  # the client's queue is full: let deliveries drain it
                    producer.poll(0.05)
                except (TypeError, ValueError) as e:
                    raise InvalidRecordError(f"record {i} cannot be produced: {e}") from e
                except KafkaException as e:
                    err = _error_of(e)
                    if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                        raise RecordTooLargeError(f"record {i}: {err.str()}") from e
                    raise self._wrap(e, f"producing to {topic}/{partition}") from e
        remaining = producer.flush(self._timeout_s)
        if reports.error is not None:
            raise ProduceError(
                f"producing to {topic}/{partition}: {reports.error.str()} ({reports.error.name()}); "
                f"{reports.delivered} of {len(records)} records were acknowledged",
                produced=reports.delivered,
            )
        if remaining or reports.first_offset is None or reports.delivered != len(records):
            raise LogTimeoutError(
                f"producing to {topic}/{partition}: {len(records) - reports.delivered} of {len(records)} "
                f"records not acknowledged within {self._timeout_s} s"
            )
        return reports.first_offset

    # ------------------------------------------------------------------------------------ reading

    def _end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(topic, p): latest for p in partitions}
        try:
            futures = self._admin_client().list_offsets(
                request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self._timeout_s
            )
            return {tp.partition: int(f.result(timeout=self._timeout_s).offset) for tp, f in futures.items()}
        except KafkaException as e:
            raise self._wrap(e, f"listing end offsets of {topic!r}") from e
        except TimeoutError as e:
            raise LogTimeoutError(
                f"listing end offsets of {topic!r}: no answer in {self._timeout_s} s"
            ) from e

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition: end offset}``: the last stable offset, up to which consumers can read."""
        check_topic_name(topic)
        count = self._metadata_count(topic)
        if count is None:
            raise UnknownTopicError(topic, f"the Kafka cluster at {self._bootstrap}")
        self._counts[topic] = count
        return dict(sorted(self._end_offsets(topic, range(count)).items()))

    def read(self, topic: str, partition: int, start: int, max_records: int) -> list[ConsumedRecord]:
        """Records from offset ``start`` on, at most ``max_records``; ``[]`` at the end of the partition.

        Offsets may have gaps on Kafka (transaction markers, compaction), so the records returned are
        those with offsets ``>= start``, in order, not necessarily ``start, start+1, ...``.
        """
        check_read_args(start, max_records)
        self._check_partition(topic, partition)
        if start < 0:
            raise OffsetOutOfRangeError(topic, partition, start, "offsets are never negative")
        if max_records == 0:
            return []
        with self._read_lock:
            for attempt in range(_SPURIOUS_OUT_OF_RANGE_RETRIES + 1):
                try:
                    return self._read_locked(topic, partition, start, max_records)
                except OffsetOutOfRangeError:
                    # Seen under heavy load on a real broker: a fresh client's first fetch of a
                    # just-written partition answered OFFSET_OUT_OF_RANGE for an offset below the end
                    # the broker reports. Only when the broker's own end says the offset is there is
                    # it read again (the stream was reset by _take); otherwise the error stands.
                    if attempt == _SPURIOUS_OUT_OF_RANGE_RETRIES or \
                            not start < self._end_offsets(topic, [partition])[partition]:
                        raise
                    time.sleep(0.05 * (attempt + 1))
            raise AssertionError("unreachable")  # pragma: no cover

    def _read_locked(self, topic: str, partition: int, start: int, max_records: int) -> list[ConsumedRecord]:
        consumer = self._consumer_client()
        tp = (topic, partition)
        out: list[ConsumedRecord] = []
        if self._assigned != tp or not self._resume_from <= start <= self._next:
            # A new position: (re)assign, which also drops whatever was prefetched for the old one.
            consumer.assign([TopicPartition(topic, partition, start)])
            self._assigned, self._resume_from, self._next, self._at_end = tp, start, start, False
        elif self._at_end:
            # The last read reached the end, and the client reports the end only once per offset:
            # waiting for another end-of-partition event could take forever on an idle partition.
            # Take what has arrived since; if nothing has, ask the broker whether anything is there.
            self._at_end = False
            self._take(consumer.consume(min(max_records, _CONSUME_CHUNK), 0), topic, partition, out)
            if not out and not self._at_end:
                if self._end_offsets(topic, [partition])[partition] <= self._next:
                    self._at_end = True
                    return out
        deadline = time.monotonic() + self._timeout_s
        while len(out) < max_records and not self._at_end:
            batch = consumer.consume(min(max_records - len(out), _CONSUME_CHUNK), 0)
            if not batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    if out:
                        break
                    raise LogTimeoutError(
                        f"reading {topic}/{partition} from offset {start}: no fetch answer from "
                        f"{self._bootstrap} in {self._timeout_s} s"
                    )
                batch = consumer.consume(1, min(_WAIT_SLICE_S, left))
            self._take(batch, topic, partition, out)
        return out

    def _take(self, batch: list[Message], topic: str, partition: int, out: list[ConsumedRecord]) -> None:
        """Convert a batch from the client, tracking the stream's position and end-of-partition."""
        for m in batch:
            err = m.error()
            if err is not None:
                code = err.code()
                if code == KafkaError._PARTITION_EOF:
                    if m.topic() == topic and m.partition() == partition:
                        self._at_end = True
                        self._next = max(self._next, m.offset() or 0)
                    continue
                self._assigned = None  # the stream is in an unknown state: re-assign next time
                if code in _OUT_OF_RANGE:
                    raise OffsetOutOfRangeError(topic, partition, self._next, err.str())
                if code in _UNKNOWN:
                    self._counts.pop(topic, None)
                    raise UnknownTopicError(topic, f"the Kafka cluster at {self._bootstrap} ({err.str()})")
                raise LogError(f"reading {topic}/{partition}: {err.str()} ({err.name()})")
            off = m.offset()
            if off is None or off < self._next or m.topic() != topic or m.partition() != partition:
                continue  # not ours, or already returned
            _, ts = m.timestamp()
            headers = m.headers()
            out.append(
                ConsumedRecord(
                    topic,
                    partition,
                    off,
                    _as_bytes(m.key()),
                    _as_bytes(m.value()),
                    ts,
                    _headers(headers),
                )
            )
            self._next = self._resume_from = off + 1

    def read_arrow(self, topic: str, partition: int, start: int, max_records: int) -> pa.RecordBatch:
        """:meth:`read` as one Arrow batch (row-wise conversion: Kafka has no columnar storage to reuse)."""
        return records_to_arrow(self.read(topic, partition, start, max_records))

    def read_keys(self, topic: str, partition: int, lo: int, hi: int, start: int,
                  max_records: int) -> KeyRead:
        """:meth:`read` filtered to the keys ``[lo, hi)``: key ranges on Kafka are client-side filtering
        (a Kafka partition cannot be split on the producer side)."""
        return keep_keys(self.read(topic, partition, start, max_records), lo, hi, start)

    def key_pieces(self, topic: str, partition: int) -> tuple[tuple[int, int], ...]:
        return WHOLE_KEY_SPACE

    # ------------------------------------------------------------------------------------ closing

    def release_partition(self, topic: str, partition: int) -> None:
        """Nothing to release: any number of Kafka producers may write a partition."""

    def close(self) -> None:
        """Wait for outstanding deliveries, close the consumer. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producer, consumer = self._producer, self._consumer
            self._producer = self._consumer = self._admin = None
        if producer is not None:
            producer.flush(self._timeout_s)
        if consumer is not None:
            consumer.close()


def _headers(
    headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
) -> tuple[tuple[str, bytes], ...]:
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, dict) else headers
    return tuple((k, _as_bytes(v) or b"") for k, v in pairs)


def _as_bytes(v: str | bytes | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def _rebuild(
    bootstrap: str, config: Mapping[str, ConfigValue], timeout_s: float, replication_factor: int
) -> KafkaLog:
    return KafkaLog(bootstrap, config, timeout_s=timeout_s, replication_factor=replication_factor)
