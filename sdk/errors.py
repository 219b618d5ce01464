"""Errors raised by ``flux.sdk``.

Exception tree (everything the SDK raises on purpose derives from ``FluxError``)::

    FluxError
    ├── ConfigurationError               bad client arguments (bootstrap string, acks, sizes)
    ├── FluxConnectionError              no broker could be reached, or connections kept failing
    │                                    until the retry limits ran out; says which addresses
    ├── FluxTimeoutError                 a request or a delivery did not complete in time; the
    │                                    outcome is unknown (a produce may have been written)
    ├── FluxProtocolError                a broker answered with bytes the codec cannot decode
    ├── TableViewError                   a table view stopped following its topic (the cause is
    │                                    chained: its on_change raised, the topic was deleted, ...)
    ├── FluxAuthenticationError          a broker refused this client's credentials (SASL, or
    │                                    the TLS handshake); never retried, never shows a password
    ├── TransactionStateError            a transactional call the producer's state does not allow
    │                                    (produce outside begin_transaction, commit without a
    │                                    transaction; Kafka's IllegalStateException)
    ├── TransactionAbortRequiredError    the transaction cannot commit (a record of it failed, a
    │                                    partition or offsets could not join it): call
    │                                    abort_transaction; the failure is ``__cause__``
    ├── TransactionAbortedError          a record queued in a transaction was dropped unsent
    │                                    because the transaction was aborted
    ├── HttpApiError(status, answer)     the HTTP API refused a request (``flux.sdk.http``):
    │                                    the status and the broker's JSON answer
    └── KafkaError(code, message)        a broker answered with a Kafka error code
        ├── UnknownTopicError                3 UNKNOWN_TOPIC_OR_PARTITION, 100 UNKNOWN_TOPIC_ID
        ├── TopicAlreadyExistsError         36
        ├── InvalidTopicError               17
        ├── InvalidPartitionsError          37
        ├── InvalidReplicationFactorError   38
        ├── InvalidReplicaAssignmentError   39
        ├── InvalidConfigError              40
        ├── InvalidRequestError             42
        ├── PolicyViolationError            44 (alias ``PolicyViolation``)
        ├── TopicDeletionDisabledError      73
        ├── NotLeaderError                   6 NOT_LEADER_OR_FOLLOWER
        ├── LeaderNotAvailableError          5
        ├── FencedLeaderEpochError          74
        ├── UnknownLeaderEpochError         75
        ├── NotControllerError              41
        ├── BrokerNotAvailableError          8
        ├── OffsetOutOfRangeError            1
        ├── NotEnoughReplicasError          19, 20 (…AFTER_APPEND)
        ├── RequestTimedOutError             7
        ├── MessageTooLargeError            10, 18 RECORD_LIST_TOO_LARGE
        ├── CorruptMessageError              2, 87 INVALID_RECORD
        ├── InvalidRequiredAcksError        21
        ├── KafkaStorageError               56
        ├── UnsupportedVersionError         35 (also raised by the SDK itself when a broker
        │                                    does not speak a version this client can use)
        ├── AuthorizationError              29, 30, 31, 53 (topic, group, cluster, transactional
        │                                    id)
        ├── CoordinatorError                14, 15, 16 (load in progress, not available, not
        │                                    coordinator)
        ├── GroupMembershipError            22, 25, 27 (illegal generation, unknown member,
        │                                    rebalance in progress)
        ├── GroupNotEmptyError              68 NON_EMPTY_GROUP (members are active)
        ├── GroupNotFoundError              69 GROUP_ID_NOT_FOUND
        ├── ResourceNotFoundError           91 (e.g. a user without SCRAM credentials)
        ├── ProducerStateError              45, 46, 47, 59 (sequence and epoch errors)
        │   └── ProducerFencedError         90 PRODUCER_FENCED (and 47 INVALID_PRODUCER_EPOCH
        │                                    answered to a transactional producer): fatal, a
        │                                    newer producer with the same transactional id exists
        ├── TransactionError                48 INVALID_TXN_STATE, 49 INVALID_PRODUCER_ID_MAPPING,
        │                                    50 INVALID_TRANSACTION_TIMEOUT, 51
        │                                    CONCURRENT_TRANSACTIONS, 52, 105 (the transaction
        │                                    coordinator refused a call)
        └── UnknownServerError              -1
        (every other code raises a plain ``KafkaError``)

``KafkaError.code`` is the ``flux.protocol.errors.ErrorCode``; ``.retriable`` comes from it
(Kafka's ``RetriableException`` classification), so a class that covers several codes can be
retriable for one and not for another. ``error_for(code, message)`` builds the right class
from the one table ``ERROR_CLASSES``; the message is the broker's ``error_message`` when it sent
one and the code's description otherwise.
"""

from __future__ import annotations

from flux.protocol.errors import ErrorCode

__all__ = [
    "ERROR_CLASSES",
    "AuthorizationError",
    "BrokerNotAvailableError",
    "ConfigurationError",
    "CoordinatorError",
    "CorruptMessageError",
    "ErrorCode",
    "FencedLeaderEpochError",
    "FluxAuthenticationError",
    "FluxConnectionError",
    "FluxError",
    "FluxProtocolError",
    "FluxTimeoutError",
    "GroupMembershipError",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "HttpApiError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidTopicError",
    "KafkaError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "MessageTooLargeError",
    "NotControllerError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "OffsetOutOfRangeError",
    "PolicyViolation",
    "PolicyViolationError",
    "ProducerFencedError",
    "ProducerStateError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "TableViewError",
    "TopicAlreadyExistsError",
    "TopicDeletionDisabledError",
    "TransactionAbortRequiredError",
    "TransactionAbortedError",
    "TransactionError",
    "TransactionStateError",
    "UnknownLeaderEpochError",
    "UnknownServerError",
    "UnknownTopicError",
    "UnsupportedVersionError",
    "error_for",
]


class FluxError(Exception):
    """Base of every error ``flux.sdk`` raises on purpose."""


class ConfigurationError(FluxError):
    """A client was given arguments it cannot work with."""


class FluxConnectionError(FluxError):
    """No broker could be reached, or connections kept failing until the retry limits ran out.

    ``addresses`` lists the ``host:port`` addresses that were tried, in order.
    """

    def __init__(self, message: str, *, addresses: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.addresses = addresses


class FluxTimeoutError(FluxError):
    """A request or a delivery did not complete within its time limit.

    The outcome is unknown, never a failure: a produce that timed out may have been written.
    """


class FluxProtocolError(FluxError):
    """A broker sent a response this client cannot decode (the connection is dropped)."""


class TableViewError(FluxError):
    """A table view (``flux.sdk.table``) stopped following its topic and no longer serves its
    table; ``__cause__`` is what stopped it."""


class FluxAuthenticationError(FluxError):
    """A broker refused this client's credentials: the SASL exchange failed (wrong user name or
    password, a mechanism the listener does not enable, a re-authentication refused), or the
    TLS handshake did (an untrusted certificate, a host name it does not name).

    The message includes the broker's ``error_message`` when it sent one, never the password.
    ``code`` is the Kafka error code the broker answered with (SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE), or None for a TLS failure. Not retried:
    the same credentials would fail again.
    """

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class TransactionStateError(FluxError):
    """A transactional producer method was called in a state that does not allow it:
    ``produce`` or ``send`` outside ``begin_transaction`` ... ``commit_transaction``, a second
    ``begin_transaction``, ``commit_transaction`` without a transaction, a transactional
    method on a producer without ``transactional_id`` (Kafka's ``IllegalStateException``)."""


class TransactionAbortRequiredError(FluxError):
    """The running transaction cannot commit: one of its records failed, or a partition or
    the consumed offsets could not be added to it. Call ``abort_transaction`` and start
    again; until then every transactional call raises this. ``__cause__`` is the failure."""


class TransactionAbortedError(FluxError):
    """A record queued in a transaction was dropped unsent: the transaction was aborted."""


class HttpApiError(FluxError):
    """The HTTP API answered a request with an error status (``flux.sdk.http``).

    ``status`` is the HTTP status; ``answer`` the broker's decoded JSON (``{"error": ...,
    "field": ...}``), or its text when it was not JSON.
    """

    def __init__(self, message: str, *, status: int, answer: object) -> None:
        super().__init__(message)
        self.status = status
        self.answer = answer


class KafkaError(FluxError):
    """A broker answered with a Kafka error code.

    ``code`` is the ``ErrorCode``; ``message`` the broker's ``error_message`` or the code's
    description; ``retriable`` is Kafka's classification of the code.
    """

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        self.code = ErrorCode.from_code(int(code))
        self.message = message or self.code.message
        super().__init__(self.message)

    @property
    def retriable(self) -> bool:
        return self.code.retriable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"

    def __reduce__(self) -> tuple[type[KafkaError], tuple[ErrorCode, str]]:
        return type(self), (self.code, self.message)


class UnknownTopicError(KafkaError):
    """The topic (or partition, or topic id) does not exist."""


class TopicAlreadyExistsError(KafkaError):
    """A topic of that name already exists."""


class InvalidTopicError(KafkaError):
    """The topic name is not legal (characters, length, ``.`` or ``..``)."""


class InvalidPartitionsError(KafkaError):
    """The partition count is out of range (or not larger than the current one)."""


class InvalidReplicationFactorError(KafkaError):
    """The replication factor is below 1 or larger than the number of brokers."""


class InvalidReplicaAssignmentError(KafkaError):
    """A manual replica assignment names unknown brokers or is inconsistent."""


class InvalidConfigError(KafkaError):
    """A topic or broker configuration key or value is not accepted."""


class InvalidRequestError(KafkaError):
    """The broker considers the request malformed or contradictory."""


class PolicyViolationError(KafkaError):
    """The request violates a broker policy."""


PolicyViolation = PolicyViolationError


class TopicDeletionDisabledError(KafkaError):
    """Topic deletion is disabled on the cluster."""


class NotLeaderError(KafkaError):
    """The broker is not the leader of the partition (metadata is stale)."""


class LeaderNotAvailableError(KafkaError):
    """The partition has no leader right now (an election is in progress)."""


class FencedLeaderEpochError(KafkaError):
    """The request's leader epoch is older than the broker's."""


class UnknownLeaderEpochError(KafkaError):
    """The request's leader epoch is newer than the broker's."""


class NotControllerError(KafkaError):
    """The broker is not the controller; metadata is stale."""


class BrokerNotAvailableError(KafkaError):
    """The broker is not available."""


class OffsetOutOfRangeError(KafkaError):
    """The requested offset is outside the partition's log."""


class NotEnoughReplicasError(KafkaError):
    """Fewer in-sync replicas than ``min.insync.replicas`` (before or after the append)."""


class RequestTimedOutError(KafkaError):
    """The broker timed out waiting for the request to complete (e.g. replication)."""


class MessageTooLargeError(KafkaError):
    """A record batch or request is larger than the broker or topic accepts."""


class CorruptMessageError(KafkaError):
    """The broker rejected a batch as corrupt or invalid."""


class InvalidRequiredAcksError(KafkaError):
    """``acks`` is not 0, 1 or -1."""


class KafkaStorageError(KafkaError):
    """The broker could not read or write the partition's log."""


class UnsupportedVersionError(KafkaError):
    """The broker does not support the API version (or the API) a request needs."""


class AuthorizationError(KafkaError):
    """The client is not authorized for the topic, group or cluster operation."""


class CoordinatorError(KafkaError):
    """The group coordinator is loading, not available, or not this broker."""


class GroupMembershipError(KafkaError):
    """The member's generation or id is stale, or the group is rebalancing."""


class GroupNotEmptyError(KafkaError):
    """The group has active members, so it cannot be deleted or have its offsets reset."""


class GroupNotFoundError(KafkaError):
    """The group does not exist (no members and no committed offsets)."""


class ResourceNotFoundError(KafkaError):
    """The request named a resource that does not exist (a user without SCRAM credentials)."""


class ProducerStateError(KafkaError):
    """A producer's sequence number or epoch was rejected."""


class ProducerFencedError(ProducerStateError):
    """A newer producer with the same ``transactional_id`` (or the coordinator, aborting a
    transaction that ran past its timeout) bumped the producer epoch: this producer is a
    zombie. Fatal: every later call of the producer raises it again; close the producer."""


class TransactionError(KafkaError):
    """The transaction coordinator refused a call: the transaction is in the wrong state, the
    producer id does not belong to the transactional id, the timeout is out of range, or
    another call on the same transaction is in progress (retried by the producer)."""


class UnknownServerError(KafkaError):
    """The broker failed in an unexpected way (its log says why)."""


# The one table mapping error codes to exception classes; codes not listed raise KafkaError.
ERROR_CLASSES: dict[ErrorCode, type[KafkaError]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: UnknownServerError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.CORRUPT_MESSAGE: CorruptMessageError,
    ErrorCode.INVALID_RECORD: CorruptMessageError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicError,
    ErrorCode.UNKNOWN_TOPIC_ID: UnknownTopicError,
    ErrorCode.LEADER_NOT_AVAILABLE: LeaderNotAvailableError,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderError,
    ErrorCode.REQUEST_TIMED_OUT: RequestTimedOutError,
    ErrorCode.BROKER_NOT_AVAILABLE: BrokerNotAvailableError,
    ErrorCode.MESSAGE_TOO_LARGE: MessageTooLargeError,
    ErrorCode.RECORD_LIST_TOO_LARGE: MessageTooLargeError,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: CoordinatorError,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: CoordinatorError,
    ErrorCode.NOT_COORDINATOR: CoordinatorError,
    ErrorCode.INVALID_TOPIC_EXCEPTION: InvalidTopicError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: NotEnoughReplicasError,
    ErrorCode.INVALID_REQUIRED_ACKS: InvalidRequiredAcksError,
    ErrorCode.ILLEGAL_GENERATION: GroupMembershipError,
    ErrorCode.UNKNOWN_MEMBER_ID: GroupMembershipError,
    ErrorCode.REBALANCE_IN_PROGRESS: GroupMembershipError,
    ErrorCode.NON_EMPTY_GROUP: GroupNotEmptyError,
    ErrorCode.GROUP_ID_NOT_FOUND: GroupNotFoundError,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: AuthorizationError,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: AuthorizationError,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: AuthorizationError,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: AuthorizationError,
    ErrorCode.UNSUPPORTED_VERSION: UnsupportedVersionError,
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicAlreadyExistsError,
    ErrorCode.INVALID_PARTITIONS: InvalidPartitionsError,
    ErrorCode.INVALID_REPLICATION_FACTOR: InvalidReplicationFactorError,
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: InvalidReplicaAssignmentError,
    ErrorCode.INVALID_CONFIG: InvalidConfigError,
    ErrorCode.NOT_CONTROLLER: NotControllerError,
    ErrorCode.INVALID_REQUEST: InvalidRequestError,
    ErrorCode.POLICY_VIOLATION: PolicyViolationError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: ProducerStateError,
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: ProducerStateError,
    ErrorCode.INVALID_PRODUCER_EPOCH: ProducerStateError,
    ErrorCode.UNKNOWN_PRODUCER_ID: ProducerStateError,
    ErrorCode.PRODUCER_FENCED: ProducerFencedError,
    ErrorCode.INVALID_TXN_STATE: TransactionError,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: TransactionError,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: TransactionError,
    ErrorCode.CONCURRENT_TRANSACTIONS: TransactionError,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: TransactionError,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: TransactionError,
    ErrorCode.KAFKA_STORAGE_ERROR: KafkaStorageError,
    ErrorCode.TOPIC_DELETION_DISABLED: TopicDeletionDisabledError,
    ErrorCode.RESOURCE_NOT_FOUND: ResourceNotFoundError,
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
}


def error_for(code: ErrorCode | int, message: str | None = None) -> KafkaError:
    """The exception for a non-zero error ``code`` (``message`` defaults to its description)."""
    error_code = ErrorCode.from_code(int(code))
    if error_code is ErrorCode.NONE:
        raise ValueError("error code 0 (NONE) is not an error")
    return ERROR_CLASSES.get(error_code, KafkaError)(error_code, message)
