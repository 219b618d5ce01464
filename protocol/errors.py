"""Errors of the Kafka wire protocol layer, and Kafka's error-code table.

Exception tree (everything raised by ``flux.protocol`` derives from ``ProtocolError``)::

    ProtocolError
    ├── InvalidFrameError        a frame or message body that cannot be decoded
    │   └── FrameTooLargeError   a size prefix above the configured bound
    ├── UnsupportedVersionError  an API key or version this codec does not implement
    └── CorruptRecordError       a record batch that fails length, magic or CRC checks,
                                 or whose records cannot be decoded or decompressed

``ErrorCode`` is Kafka's numeric error-code table (the ``error_code`` fields of responses):
every code Kafka's ``org.apache.kafka.common.protocol.Errors`` defines, under the same names.
``ErrorCode.X.retriable`` says whether Kafka's client treats the error as retriable (its
exception class derives from ``RetriableException``), and ``ErrorCode.X.message`` is a short
description. ``ErrorCode.from_code(n)`` maps an unknown number to ``UNKNOWN_SERVER_ERROR``, as
Kafka's ``Errors.forCode`` does.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "CorruptRecordError",
    "ErrorCode",
    "FrameTooLargeError",
    "InvalidFrameError",
    "ProtocolError",
    "UnsupportedVersionError",
]


class ProtocolError(Exception):
    """Base of every error raised by ``flux.protocol``."""


class InvalidFrameError(ProtocolError):
    """A frame, header or message body that cannot be decoded."""


class FrameTooLargeError(InvalidFrameError):
    """A size prefix larger than the bound the reader was given."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class UnsupportedVersionError(ProtocolError):
    """An API key or version the codec does not implement.

    ``correlation_id`` is set when the request header could be read, so a server can still
    answer the client (Kafka answers an unsupported ApiVersions request with error 35).
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int | None = None) -> None:
        super().__init__(f"unsupported API key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class CorruptRecordError(ProtocolError):
    """A record batch that fails its length, magic or CRC checks, or cannot be decoded."""


class ErrorCode(IntEnum):
    """Kafka's error codes: the numbers are part of the wire protocol and never change."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        """Whether a client may retry the request that failed with this code as it stands."""
        return self in _RETRIABLE

    @property
    def message(self) -> str:
        """A one-line description of the error, suitable for an ``error_message`` field."""
        return _MESSAGES[self]

    @classmethod
    def from_code(cls, code: int) -> ErrorCode:
        """The member for ``code``; a code this table does not know is ``UNKNOWN_SERVER_ERROR``."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


# Codes whose Kafka exception class derives from RetriableException (including the
# InvalidMetadataException family, after which a client refreshes metadata and retries).
_RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
        ErrorCode.SHARE_SESSION_LIMIT_REACHED,
    }
)

_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: (
        "The server experienced an unexpected error when processing the request."
    ),
    ErrorCode.NONE: "No error.",
    ErrorCode.OFFSET_OUT_OF_RANGE: (
        "The requested offset is outside the range of offsets the server holds."
    ),
    ErrorCode.CORRUPT_MESSAGE: (
        "The message failed its CRC check, exceeds the valid size, or is otherwise corrupt."
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.INVALID_FETCH_SIZE: "The requested fetch size is invalid.",
    ErrorCode.LEADER_NOT_AVAILABLE: (
        "The partition has no leader right now (a leader election is in progress)."
    ),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (
        "This broker is not the leader (or not a replica) of the partition."
    ),
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.BROKER_NOT_AVAILABLE: "The broker is not available.",
    ErrorCode.REPLICA_NOT_AVAILABLE: (
        "The replica is not available for the requested topic-partition."
    ),
    ErrorCode.MESSAGE_TOO_LARGE: "The request included a message larger than the server accepts.",
    ErrorCode.STALE_CONTROLLER_EPOCH: "The controller moved to another broker.",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "The metadata of the offset commit is too large.",
    ErrorCode.NETWORK_EXCEPTION: "The server disconnected before a response was received.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (
        "The coordinator is still loading and cannot serve requests yet."
    ),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.NOT_COORDINATOR: "This broker is not the coordinator.",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "The request attempted to operate on an invalid topic.",
    ErrorCode.RECORD_LIST_TOO_LARGE: "The record batch is larger than the configured segment size.",
    ErrorCode.NOT_ENOUGH_REPLICAS: "Rejected: fewer in-sync replicas than required.",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "Written to the log, but to fewer in-sync replicas than required."
    ),
    ErrorCode.INVALID_REQUIRED_ACKS: (
        "The produce request specified an invalid value for required acks."
    ),
    ErrorCode.ILLEGAL_GENERATION: "The group generation id is not valid.",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (
        "The member's protocols are incompatible with those of the group."
    ),
    ErrorCode.INVALID_GROUP_ID: "The group id is invalid.",
    ErrorCode.UNKNOWN_MEMBER_ID: "The coordinator does not know this member.",
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        "The session timeout is outside the range the broker allows."
    ),
    ErrorCode.REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rejoin is needed.",
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: "The committed offset data size is not valid.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.INVALID_TIMESTAMP: "The timestamp of the message is out of the acceptable range.",
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: (
        "The broker does not support the requested SASL mechanism."
    ),
    ErrorCode.ILLEGAL_SASL_STATE: "The request is not valid in the current SASL state.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of the API is not supported.",
    ErrorCode.TOPIC_ALREADY_EXISTS: "A topic with this name already exists.",
    ErrorCode.INVALID_PARTITIONS: "The number of partitions is invalid.",
    ErrorCode.INVALID_REPLICATION_FACTOR: "The replication factor is invalid.",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "The replica assignment is invalid.",
    ErrorCode.INVALID_CONFIG: "The configuration is invalid.",
    ErrorCode.NOT_CONTROLLER: "This is not the active controller.",
    ErrorCode.INVALID_REQUEST: "The request is malformed or was sent to an incompatible broker.",
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: (
        "The message format version does not support the request."
    ),
    ErrorCode.POLICY_VIOLATION: "The request parameters do not satisfy the configured policy.",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "The broker received an out-of-order sequence number.",
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: "The broker received a duplicate sequence number.",
    ErrorCode.INVALID_PRODUCER_EPOCH: "The producer attempted to produce with an old epoch.",
    ErrorCode.INVALID_TXN_STATE: (
        "The producer attempted a transactional operation in an invalid state."
    ),
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: (
        "The producer id is not currently assigned to its transactional id."
    ),
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: (
        "The transaction timeout is larger than the broker allows."
    ),
    ErrorCode.CONCURRENT_TRANSACTIONS: "Another operation on the same transaction is in progress.",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: (
        "The transaction coordinator is no longer the current one for this producer."
    ),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional id authorization failed.",
    ErrorCode.SECURITY_DISABLED: "Security features are disabled.",
    ErrorCode.OPERATION_NOT_ATTEMPTED: "The broker did not attempt this operation.",
    ErrorCode.KAFKA_STORAGE_ERROR: "Disk error when trying to access the log on disk.",
    ErrorCode.LOG_DIR_NOT_FOUND: "The log directory is not found in the broker config.",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "SASL authentication failed.",
    ErrorCode.UNKNOWN_PRODUCER_ID: "The broker has no metadata for this producer id.",
    ErrorCode.REASSIGNMENT_IN_PROGRESS: "A partition reassignment is in progress.",
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: "The delegation token feature is not enabled.",
    ErrorCode.DELEGATION_TOKEN_NOT_FOUND: "The delegation token is not found on the server.",
    ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: (
        "The principal is not a valid owner or renewer of the token."
    ),
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (
        "Delegation token requests are not allowed on this channel."
    ),
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "Delegation token authorization failed.",
    ErrorCode.DELEGATION_TOKEN_EXPIRED: "The delegation token has expired.",
    ErrorCode.INVALID_PRINCIPAL_TYPE: "The principal type is not supported.",
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: "The fetch session id was not found.",
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: "The fetch session epoch is invalid.",
    ErrorCode.LISTENER_NOT_FOUND: (
        "The leader has no listener matching the one the request arrived on."
    ),
    ErrorCode.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
    ErrorCode.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the broker's.",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "The leader epoch in the request is newer than the broker's.",
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (
        "The client does not support the compression type of the partition."
    ),
    ErrorCode.STALE_BROKER_EPOCH: "The broker epoch has changed.",
    ErrorCode.OFFSET_NOT_AVAILABLE: (
        "The leader's high watermark has not caught up after a recent election."
    ),
    ErrorCode.MEMBER_ID_REQUIRED: "The member needs a member id before it can join the group.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader is not available.",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "The group has reached its maximum size.",
    ErrorCode.FENCED_INSTANCE_ID: "Another member with the same group.instance.id fenced this one.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: (
        "No eligible leaders are available for the partition."
    ),
    ErrorCode.ELECTION_NOT_NEEDED: "A leader election is not needed for the partition.",
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: "No partition reassignment is in progress.",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: (
        "Cannot delete offsets of a topic the group is subscribed to."
    ),
    ErrorCode.INVALID_RECORD: "The record failed validation on the broker.",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "There are unstable offsets that need to be cleared.",
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: "The throttling quota has been exceeded.",
    ErrorCode.PRODUCER_FENCED: "A newer producer with the same transactional id fenced this one.",
    ErrorCode.RESOURCE_NOT_FOUND: "The request referred to a resource that does not exist.",
    ErrorCode.DUPLICATE_RESOURCE: "The request referred to the same resource twice.",
    ErrorCode.UNACCEPTABLE_CREDENTIAL: (
        "The requested credential does not meet the acceptability criteria."
    ),
    ErrorCode.INCONSISTENT_VOTER_SET: "The sender or recipient is not one of the expected voters.",
    ErrorCode.INVALID_UPDATE_VERSION: "The given update version is invalid.",
    ErrorCode.FEATURE_UPDATE_FAILED: "Finalized features could not be updated.",
    ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE: (
        "The request principal could not be deserialized during forwarding."
    ),
    ErrorCode.SNAPSHOT_NOT_FOUND: "The requested snapshot was not found.",
    ErrorCode.POSITION_OUT_OF_RANGE: "The requested position is outside the snapshot.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic id.",
    ErrorCode.DUPLICATE_BROKER_REGISTRATION: "This broker id is already in use.",
    ErrorCode.BROKER_ID_NOT_REGISTERED: "The broker id is not registered.",
    ErrorCode.INCONSISTENT_TOPIC_ID: (
        "The log's topic id does not match the topic id in the request."
    ),
    ErrorCode.INCONSISTENT_CLUSTER_ID: "The cluster id in the request does not match the server's.",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "The transactional id could not be found.",
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR: "The fetch session used topic ids inconsistently.",
    ErrorCode.INELIGIBLE_REPLICA: "The new ISR contains at least one ineligible replica.",
    ErrorCode.NEW_LEADER_ELECTED: "The partition state was updated but the leader has changed.",
    ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE: "The requested offset has moved to tiered storage.",
    ErrorCode.FENCED_MEMBER_EPOCH: "The member epoch is fenced; the member must rejoin.",
    ErrorCode.UNRELEASED_INSTANCE_ID: (
        "The instance id is still used by another member of the group."
    ),
    ErrorCode.UNSUPPORTED_ASSIGNOR: (
        "The assignor or its version range is not supported by the group."
    ),
    ErrorCode.STALE_MEMBER_EPOCH: "The member epoch is stale.",
    ErrorCode.MISMATCHED_ENDPOINT_TYPE: "The request was sent to an endpoint of the wrong type.",
    ErrorCode.UNSUPPORTED_ENDPOINT_TYPE: "This endpoint type is not supported yet.",
    ErrorCode.UNKNOWN_CONTROLLER_ID: "This controller id is not known.",
    ErrorCode.UNKNOWN_SUBSCRIPTION_ID: "The telemetry subscription id is invalid or outdated.",
    ErrorCode.TELEMETRY_TOO_LARGE: "The telemetry push is larger than the broker accepts.",
    ErrorCode.INVALID_REGISTRATION: "The controller considers the broker registration invalid.",
    ErrorCode.TRANSACTION_ABORTABLE: (
        "The transaction failed; the client can abort it and continue."
    ),
    ErrorCode.INVALID_RECORD_STATE: (
        "The record state is invalid; the acknowledgement could not be completed."
    ),
    ErrorCode.SHARE_SESSION_NOT_FOUND: "The share session was not found.",
    ErrorCode.INVALID_SHARE_SESSION_EPOCH: "The share session epoch is invalid.",
    ErrorCode.FENCED_STATE_EPOCH: "The share-group state epoch did not match.",
    ErrorCode.INVALID_VOTER_KEY: "The voter key does not match the receiving replica's key.",
    ErrorCode.DUPLICATE_VOTER: "The voter is already part of the set of voters.",
    ErrorCode.VOTER_NOT_FOUND: "The voter is not part of the set of voters.",
    ErrorCode.INVALID_REGULAR_EXPRESSION: "The regular expression is not valid.",
    ErrorCode.REBOOTSTRAP_REQUIRED: "Client metadata is stale; the client should rebootstrap.",
    ErrorCode.STREAMS_INVALID_TOPOLOGY: "The supplied topology is invalid.",
    ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH: "The supplied topology epoch is invalid.",
    ErrorCode.STREAMS_TOPOLOGY_FENCED: "The supplied topology epoch is outdated.",
    ErrorCode.SHARE_SESSION_LIMIT_REACHED: "The limit of share sessions has been reached.",
}

assert set(_MESSAGES) == set(ErrorCode), "every error code needs a message"
