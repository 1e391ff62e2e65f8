from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_NONE: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_REQUEST: _ClassVar[ErrorCode]
    ERROR_CODE_UNSUPPORTED_ASSIGNOR: _ClassVar[ErrorCode]
    ERROR_CODE_GROUP_ID_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorCode]
    ERROR_CODE_UNKNOWN_MEMBER_ID: _ClassVar[ErrorCode]
    ERROR_CODE_FENCED_MEMBER_EPOCH: _ClassVar[ErrorCode]
    ERROR_CODE_STALE_MEMBER_EPOCH: _ClassVar[ErrorCode]
    ERROR_CODE_UNRELEASED_INSTANCE_ID: _ClassVar[ErrorCode]
    ERROR_CODE_FENCED_INSTANCE_ID: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_REGULAR_EXPRESSION: _ClassVar[ErrorCode]
    ERROR_CODE_NOT_OWNED: _ClassVar[ErrorCode]
    ERROR_CODE_NON_EMPTY_GROUP: _ClassVar[ErrorCode]
    ERROR_CODE_OFFSET_OUT_OF_ORDER: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_ASSIGNMENT: _ClassVar[ErrorCode]
    ERROR_CODE_NOT_ASSIGNMENT_DELEGATE: _ClassVar[ErrorCode]

class NudgeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NUDGE_KIND_UNSPECIFIED: _ClassVar[NudgeKind]
    NUDGE_KIND_SUBSCRIBED: _ClassVar[NudgeKind]
    NUDGE_KIND_HEARTBEAT_NOW: _ClassVar[NudgeKind]

class GroupState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATE_UNSPECIFIED: _ClassVar[GroupState]
    GROUP_STATE_EMPTY: _ClassVar[GroupState]
    GROUP_STATE_ASSIGNING: _ClassVar[GroupState]
    GROUP_STATE_RECONCILING: _ClassVar[GroupState]
    GROUP_STATE_STABLE: _ClassVar[GroupState]

class MemberStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATUS_UNSPECIFIED: _ClassVar[MemberStatus]
    MEMBER_STATUS_STABLE: _ClassVar[MemberStatus]
    MEMBER_STATUS_UNREVOKED: _ClassVar[MemberStatus]
    MEMBER_STATUS_UNRELEASED: _ClassVar[MemberStatus]
    MEMBER_STATUS_UNKNOWN: _ClassVar[MemberStatus]

class StreamsGroupState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAMS_GROUP_STATE_UNSPECIFIED: _ClassVar[StreamsGroupState]
    STREAMS_GROUP_STATE_EMPTY: _ClassVar[StreamsGroupState]
    STREAMS_GROUP_STATE_NOT_READY: _ClassVar[StreamsGroupState]
    STREAMS_GROUP_STATE_ASSIGNING: _ClassVar[StreamsGroupState]
    STREAMS_GROUP_STATE_RECONCILING: _ClassVar[StreamsGroupState]
    STREAMS_GROUP_STATE_STABLE: _ClassVar[StreamsGroupState]
ERROR_CODE_NONE: ErrorCode
ERROR_CODE_INVALID_REQUEST: ErrorCode
ERROR_CODE_UNSUPPORTED_ASSIGNOR: ErrorCode
ERROR_CODE_GROUP_ID_NOT_FOUND: ErrorCode
ERROR_CODE_GROUP_MAX_SIZE_REACHED: ErrorCode
ERROR_CODE_UNKNOWN_MEMBER_ID: ErrorCode
ERROR_CODE_FENCED_MEMBER_EPOCH: ErrorCode
ERROR_CODE_STALE_MEMBER_EPOCH: ErrorCode
ERROR_CODE_UNRELEASED_INSTANCE_ID: ErrorCode
ERROR_CODE_FENCED_INSTANCE_ID: ErrorCode
ERROR_CODE_INVALID_REGULAR_EXPRESSION: ErrorCode
ERROR_CODE_NOT_OWNED: ErrorCode
ERROR_CODE_NON_EMPTY_GROUP: ErrorCode
ERROR_CODE_OFFSET_OUT_OF_ORDER: ErrorCode
ERROR_CODE_INVALID_ASSIGNMENT: ErrorCode
ERROR_CODE_NOT_ASSIGNMENT_DELEGATE: ErrorCode
NUDGE_KIND_UNSPECIFIED: NudgeKind
NUDGE_KIND_SUBSCRIBED: NudgeKind
NUDGE_KIND_HEARTBEAT_NOW: NudgeKind
GROUP_STATE_UNSPECIFIED: GroupState
GROUP_STATE_EMPTY: GroupState
GROUP_STATE_ASSIGNING: GroupState
GROUP_STATE_RECONCILING: GroupState
GROUP_STATE_STABLE: GroupState
MEMBER_STATUS_UNSPECIFIED: MemberStatus
MEMBER_STATUS_STABLE: MemberStatus
MEMBER_STATUS_UNREVOKED: MemberStatus
MEMBER_STATUS_UNRELEASED: MemberStatus
MEMBER_STATUS_UNKNOWN: MemberStatus
STREAMS_GROUP_STATE_UNSPECIFIED: StreamsGroupState
STREAMS_GROUP_STATE_EMPTY: StreamsGroupState
STREAMS_GROUP_STATE_NOT_READY: StreamsGroupState
STREAMS_GROUP_STATE_ASSIGNING: StreamsGroupState
STREAMS_GROUP_STATE_RECONCILING: StreamsGroupState
STREAMS_GROUP_STATE_STABLE: StreamsGroupState

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions", "ranges")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    ranges: _containers.RepeatedCompositeFieldContainer[KeyRange]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., ranges: _Optional[_Iterable[_Union[KeyRange, _Mapping]]] = ...) -> None: ...

class KeyRange(_message.Message):
    __slots__ = ("partition", "lo", "hi")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LO_FIELD_NUMBER: _ClassVar[int]
    HI_FIELD_NUMBER: _ClassVar[int]
    partition: int
    lo: int
    hi: int
    def __init__(self, partition: _Optional[int] = ..., lo: _Optional[int] = ..., hi: _Optional[int] = ...) -> None: ...

class ShardSet(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("partition", "offset", "key_lo", "key_hi")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEY_LO_FIELD_NUMBER: _ClassVar[int]
    KEY_HI_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    key_lo: int
    key_hi: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., key_lo: _Optional[int] = ..., key_hi: _Optional[int] = ...) -> None: ...

class TopicOffsets(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("error", "message")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "instance_id", "rack_id", "rebalance_timeout_ms", "subscribed_topics", "subscribed_regex", "assignor", "client_assignors", "owned")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_REGEX_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ASSIGNORS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    rack_id: str
    rebalance_timeout_ms: int
    subscribed_topics: StringList
    subscribed_regex: str
    assignor: str
    client_assignors: StringList
    owned: ShardSet
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., rack_id: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., subscribed_topics: _Optional[_Union[StringList, _Mapping]] = ..., subscribed_regex: _Optional[str] = ..., assignor: _Optional[str] = ..., client_assignors: _Optional[_Union[StringList, _Mapping]] = ..., owned: _Optional[_Union[ShardSet, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error", "message", "member_id", "member_epoch", "heartbeat_interval_ms", "assignment", "should_compute_assignment", "session_timeout_ms", "failover_grace_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SHOULD_COMPUTE_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_GRACE_MS_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: ShardSet
    should_compute_assignment: bool
    session_timeout_ms: int
    failover_grace_ms: int
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., assignment: _Optional[_Union[ShardSet, _Mapping]] = ..., should_compute_assignment: _Optional[bool] = ..., session_timeout_ms: _Optional[int] = ..., failover_grace_ms: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("group_id", "member_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class Nudge(_message.Message):
    __slots__ = ("kind", "group_id", "member_id", "group_epoch", "error", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: NudgeKind
    group_id: str
    member_id: str
    group_epoch: int
    error: ErrorCode
    message: str
    def __init__(self, kind: _Optional[_Union[NudgeKind, str]] = ..., group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., group_epoch: _Optional[int] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "topics", "metadata")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicOffsets]
    metadata: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicOffsets, _Mapping]]] = ..., metadata: _Optional[str] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "shards")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    shards: ShardSet
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., shards: _Optional[_Union[ShardSet, _Mapping]] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("partition", "offset", "metadata", "commit_epoch", "key_lo", "key_hi")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    KEY_LO_FIELD_NUMBER: _ClassVar[int]
    KEY_HI_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    metadata: str
    commit_epoch: int
    key_lo: int
    key_hi: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_epoch: _Optional[int] = ..., key_lo: _Optional[int] = ..., key_hi: _Optional[int] = ...) -> None: ...

class TopicCommitted(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error", "message", "topics")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicCommitted]
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicCommitted, _Mapping]]] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "topics", "metadata")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicOffsets]
    metadata: str
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicOffsets, _Mapping]]] = ..., metadata: _Optional[str] = ...) -> None: ...

class DeleteOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "shards")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    shards: ShardSet
    def __init__(self, group_id: _Optional[str] = ..., shards: _Optional[_Union[ShardSet, _Mapping]] = ...) -> None: ...

class AssignmentSpecRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ...) -> None: ...

class MemberSpec(_message.Message):
    __slots__ = ("member_id", "topics", "current", "instance_id", "rack")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    current: ShardSet
    instance_id: str
    rack: str
    def __init__(self, member_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., current: _Optional[_Union[ShardSet, _Mapping]] = ..., instance_id: _Optional[str] = ..., rack: _Optional[str] = ...) -> None: ...

class AssignmentSpecResponse(_message.Message):
    __slots__ = ("error", "message", "group_epoch", "assignor", "members", "topics")
    class TopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    group_epoch: int
    assignor: str
    members: _containers.RepeatedCompositeFieldContainer[MemberSpec]
    topics: _containers.ScalarMap[str, int]
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., group_epoch: _Optional[int] = ..., assignor: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberSpec, _Mapping]]] = ..., topics: _Optional[_Mapping[str, int]] = ...) -> None: ...

class MemberAssignment(_message.Message):
    __slots__ = ("member_id", "shards")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    shards: ShardSet
    def __init__(self, member_id: _Optional[str] = ..., shards: _Optional[_Union[ShardSet, _Mapping]] = ...) -> None: ...

class InstallAssignmentRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "group_epoch", "assignment")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    group_epoch: int
    assignment: _containers.RepeatedCompositeFieldContainer[MemberAssignment]
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., group_epoch: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[MemberAssignment, _Mapping]]] = ...) -> None: ...

class SetParallelismRequest(_message.Message):
    __slots__ = ("group_id", "topic", "parallelism")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topic: str
    parallelism: int
    def __init__(self, group_id: _Optional[str] = ..., topic: _Optional[str] = ..., parallelism: _Optional[int] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class MemberDescription(_message.Message):
    __slots__ = ("member_id", "instance_id", "rack_id", "epoch", "previous_epoch", "status", "assigned", "pending_revocation", "awaiting", "target", "subscribed_topics", "subscribed_regex", "resolved_topics", "assignor", "rebalance_timeout_ms", "client_id", "client_host", "last_heartbeat_age_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    PENDING_REVOCATION_FIELD_NUMBER: _ClassVar[int]
    AWAITING_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_REGEX_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    rack_id: str
    epoch: int
    previous_epoch: int
    status: MemberStatus
    assigned: ShardSet
    pending_revocation: ShardSet
    awaiting: ShardSet
    target: ShardSet
    subscribed_topics: _containers.RepeatedScalarFieldContainer[str]
    subscribed_regex: str
    resolved_topics: _containers.RepeatedScalarFieldContainer[str]
    assignor: str
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    last_heartbeat_age_ms: int
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., rack_id: _Optional[str] = ..., epoch: _Optional[int] = ..., previous_epoch: _Optional[int] = ..., status: _Optional[_Union[MemberStatus, str]] = ..., assigned: _Optional[_Union[ShardSet, _Mapping]] = ..., pending_revocation: _Optional[_Union[ShardSet, _Mapping]] = ..., awaiting: _Optional[_Union[ShardSet, _Mapping]] = ..., target: _Optional[_Union[ShardSet, _Mapping]] = ..., subscribed_topics: _Optional[_Iterable[str]] = ..., subscribed_regex: _Optional[str] = ..., resolved_topics: _Optional[_Iterable[str]] = ..., assignor: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., last_heartbeat_age_ms: _Optional[int] = ...) -> None: ...

class OffsetStatus(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "metadata", "commit_epoch", "log_end_offset", "lag", "owner", "key_lo", "key_hi")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    KEY_LO_FIELD_NUMBER: _ClassVar[int]
    KEY_HI_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    metadata: str
    commit_epoch: int
    log_end_offset: int
    lag: int
    owner: str
    key_lo: int
    key_hi: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., lag: _Optional[int] = ..., owner: _Optional[str] = ..., key_lo: _Optional[int] = ..., key_hi: _Optional[int] = ...) -> None: ...

class EpochChange(_message.Message):
    __slots__ = ("at_unix_ms", "kind", "epoch", "cause")
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    at_unix_ms: int
    kind: str
    epoch: int
    cause: str
    def __init__(self, at_unix_ms: _Optional[int] = ..., kind: _Optional[str] = ..., epoch: _Optional[int] = ..., cause: _Optional[str] = ...) -> None: ...

class GroupDescription(_message.Message):
    __slots__ = ("group_id", "state", "epoch", "target_epoch", "assignor", "subscribed_topics", "members", "offsets", "history", "coordinator", "parallelism")
    class SubscribedTopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ParallelismEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: GroupState
    epoch: int
    target_epoch: int
    assignor: str
    subscribed_topics: _containers.ScalarMap[str, int]
    members: _containers.RepeatedCompositeFieldContainer[MemberDescription]
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetStatus]
    history: _containers.RepeatedCompositeFieldContainer[EpochChange]
    coordinator: str
    parallelism: _containers.ScalarMap[str, int]
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ..., epoch: _Optional[int] = ..., target_epoch: _Optional[int] = ..., assignor: _Optional[str] = ..., subscribed_topics: _Optional[_Mapping[str, int]] = ..., members: _Optional[_Iterable[_Union[MemberDescription, _Mapping]]] = ..., offsets: _Optional[_Iterable[_Union[OffsetStatus, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[EpochChange, _Mapping]]] = ..., coordinator: _Optional[str] = ..., parallelism: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("error", "message", "group")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    group: GroupDescription
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., group: _Optional[_Union[GroupDescription, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupListing(_message.Message):
    __slots__ = ("group_id", "state", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: GroupState
    members: int
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ..., members: _Optional[int] = ...) -> None: ...

class StreamsGroupListing(_message.Message):
    __slots__ = ("group_id", "state", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: StreamsGroupState
    members: int
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[_Union[StreamsGroupState, str]] = ..., members: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "streams_groups")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupListing]
    streams_groups: _containers.RepeatedCompositeFieldContainer[StreamsGroupListing]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupListing, _Mapping]]] = ..., streams_groups: _Optional[_Iterable[_Union[StreamsGroupListing, _Mapping]]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class TopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicsResponse(_message.Message):
    __slots__ = ("topics", "age_ms", "error")
    class TopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.ScalarMap[str, int]
    age_ms: int
    error: str
    def __init__(self, topics: _Optional[_Mapping[str, int]] = ..., age_ms: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class SubtopologyTasks(_message.Message):
    __slots__ = ("subtopology", "partitions", "parallelism", "parts")
    SUBTOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    subtopology: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    parallelism: int
    parts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, subtopology: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., parallelism: _Optional[int] = ..., parts: _Optional[_Iterable[int]] = ...) -> None: ...

class MemberTasks(_message.Message):
    __slots__ = ("active", "standby", "warmup")
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    STANDBY_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    active: _containers.RepeatedCompositeFieldContainer[SubtopologyTasks]
    standby: _containers.RepeatedCompositeFieldContainer[SubtopologyTasks]
    warmup: _containers.RepeatedCompositeFieldContainer[SubtopologyTasks]
    def __init__(self, active: _Optional[_Iterable[_Union[SubtopologyTasks, _Mapping]]] = ..., standby: _Optional[_Iterable[_Union[SubtopologyTasks, _Mapping]]] = ..., warmup: _Optional[_Iterable[_Union[SubtopologyTasks, _Mapping]]] = ...) -> None: ...

class Subtopology(_message.Message):
    __slots__ = ("subtopology_id", "source_topics", "parallelism")
    SUBTOPOLOGY_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPICS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    subtopology_id: str
    source_topics: _containers.RepeatedScalarFieldContainer[str]
    parallelism: int
    def __init__(self, subtopology_id: _Optional[str] = ..., source_topics: _Optional[_Iterable[str]] = ..., parallelism: _Optional[int] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("subtopologies",)
    SUBTOPOLOGIES_FIELD_NUMBER: _ClassVar[int]
    subtopologies: _containers.RepeatedCompositeFieldContainer[Subtopology]
    def __init__(self, subtopologies: _Optional[_Iterable[_Union[Subtopology, _Mapping]]] = ...) -> None: ...

class TaskPosition(_message.Message):
    __slots__ = ("subtopology", "partition", "topics", "part", "parallelism")
    SUBTOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    subtopology: str
    partition: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicOffsets]
    part: int
    parallelism: int
    def __init__(self, subtopology: _Optional[str] = ..., partition: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicOffsets, _Mapping]]] = ..., part: _Optional[int] = ..., parallelism: _Optional[int] = ...) -> None: ...

class TaskOffsets(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskPosition]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskPosition, _Mapping]]] = ...) -> None: ...

class StreamsGroupStatus(_message.Message):
    __slots__ = ("ready", "reasons")
    READY_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ready: _Optional[bool] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamsHeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "instance_id", "process_id", "rebalance_timeout_ms", "topology", "owned", "task_offsets")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    TASK_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    process_id: str
    rebalance_timeout_ms: int
    topology: Topology
    owned: MemberTasks
    task_offsets: TaskOffsets
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., process_id: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., topology: _Optional[_Union[Topology, _Mapping]] = ..., owned: _Optional[_Union[MemberTasks, _Mapping]] = ..., task_offsets: _Optional[_Union[TaskOffsets, _Mapping]] = ...) -> None: ...

class StreamsHeartbeatResponse(_message.Message):
    __slots__ = ("error", "message", "member_id", "member_epoch", "heartbeat_interval_ms", "assignment", "status", "session_timeout_ms", "failover_grace_ms")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_GRACE_MS_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: MemberTasks
    status: StreamsGroupStatus
    session_timeout_ms: int
    failover_grace_ms: int
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., assignment: _Optional[_Union[MemberTasks, _Mapping]] = ..., status: _Optional[_Union[StreamsGroupStatus, _Mapping]] = ..., session_timeout_ms: _Optional[int] = ..., failover_grace_ms: _Optional[int] = ...) -> None: ...

class TaskLag(_message.Message):
    __slots__ = ("subtopology", "partition", "lag", "part", "parallelism")
    SUBTOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    subtopology: str
    partition: int
    lag: int
    part: int
    parallelism: int
    def __init__(self, subtopology: _Optional[str] = ..., partition: _Optional[int] = ..., lag: _Optional[int] = ..., part: _Optional[int] = ..., parallelism: _Optional[int] = ...) -> None: ...

class WarmupProgress(_message.Message):
    __slots__ = ("subtopology", "partition", "lag", "acceptable_lag", "part", "parallelism")
    SUBTOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    ACCEPTABLE_LAG_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    subtopology: str
    partition: int
    lag: int
    acceptable_lag: int
    part: int
    parallelism: int
    def __init__(self, subtopology: _Optional[str] = ..., partition: _Optional[int] = ..., lag: _Optional[int] = ..., acceptable_lag: _Optional[int] = ..., part: _Optional[int] = ..., parallelism: _Optional[int] = ...) -> None: ...

class StreamsMemberDescription(_message.Message):
    __slots__ = ("member_id", "instance_id", "process_id", "epoch", "previous_epoch", "status", "assigned", "pending_revocation", "target", "lags", "warmups")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    PENDING_REVOCATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    LAGS_FIELD_NUMBER: _ClassVar[int]
    WARMUPS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    process_id: str
    epoch: int
    previous_epoch: int
    status: MemberStatus
    assigned: MemberTasks
    pending_revocation: MemberTasks
    target: MemberTasks
    lags: _containers.RepeatedCompositeFieldContainer[TaskLag]
    warmups: _containers.RepeatedCompositeFieldContainer[WarmupProgress]
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., process_id: _Optional[str] = ..., epoch: _Optional[int] = ..., previous_epoch: _Optional[int] = ..., status: _Optional[_Union[MemberStatus, str]] = ..., assigned: _Optional[_Union[MemberTasks, _Mapping]] = ..., pending_revocation: _Optional[_Union[MemberTasks, _Mapping]] = ..., target: _Optional[_Union[MemberTasks, _Mapping]] = ..., lags: _Optional[_Iterable[_Union[TaskLag, _Mapping]]] = ..., warmups: _Optional[_Iterable[_Union[WarmupProgress, _Mapping]]] = ...) -> None: ...

class StreamsGroupDescription(_message.Message):
    __slots__ = ("group_id", "state", "status", "epoch", "target_epoch", "topology", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: StreamsGroupState
    status: StreamsGroupStatus
    epoch: int
    target_epoch: int
    topology: Topology
    members: _containers.RepeatedCompositeFieldContainer[StreamsMemberDescription]
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[_Union[StreamsGroupState, str]] = ..., status: _Optional[_Union[StreamsGroupStatus, _Mapping]] = ..., epoch: _Optional[int] = ..., target_epoch: _Optional[int] = ..., topology: _Optional[_Union[Topology, _Mapping]] = ..., members: _Optional[_Iterable[_Union[StreamsMemberDescription, _Mapping]]] = ...) -> None: ...

class DescribeStreamsGroupResponse(_message.Message):
    __slots__ = ("error", "message", "group")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    group: StreamsGroupDescription
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., group: _Optional[_Union[StreamsGroupDescription, _Mapping]] = ...) -> None: ...
