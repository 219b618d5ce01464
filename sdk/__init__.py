"""The Flux Python client, built on flux.protocol: async-first, with sync twins of the same
shape.

* ``AsyncProducer`` / ``Producer`` — murmur2 key partitioning, batching (``linger_ms``,
  ``batch_size``), compression, ``acks``, idempotence (on by default), bounded in-flight
  requests and buffer, delivery futures and callbacks, ``flush``, message ids, headers; the
  runtime API ``send(topic, messages, acks=...)``; transactions (``transactional_id``,
  ``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
  ``commit_transaction``, ``abort_transaction``, ``transaction()``).
* ``AsyncConsumer`` / ``Consumer`` — consumer groups with rebalance callbacks or manual
  assignment, ``seek``, ``seek_to_beginning`` / ``seek_to_end``, ``read_old``, sync / async /
  auto commits, ``poll`` / ``getmany``, iteration, and the runtime API
  ``run(each_message=..., each_batch=..., on_assign=..., on_revoke=...)``;
  ``isolation_level="read_committed"`` for transactional topics.
* ``AsyncAdmin`` / ``Admin`` — topics, partitions, configs, offsets, groups, SCRAM users
  (``alter_user_scram_credentials`` / ``describe_user_scram_credentials``), the cluster.
* ``AsyncTableView`` / ``TableView`` — the latest value per key of a (compacted) topic, loaded
  on ``start`` and kept up to date by a background reader, like Kafka Streams' GlobalKTable.
* ``AsyncHttpPublisher`` / ``HttpPublisher`` — ``POST /publish`` over the HTTP API, each
  message sent straight to its partition's leader as ``GET /cluster`` names it
  (``flux.sdk.http``).
* ``ClusterClient`` — metadata-driven routing with bounded retries, under all of them.
* ``ClientSecurity`` — every client's ``security=``: Kafka's security protocols (PLAINTEXT,
  SSL, SASL_PLAINTEXT, SASL_SSL) with SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512, TLS client
  certificates and KIP-368 re-authentication (``flux.sdk.security``).
* ``flux.sdk.errors`` — the exception tree (``KafkaError`` subclasses carry the error code).
* ``SimpleProducer`` / ``SimpleConsumer`` / ``GroupConsumer`` — earlier blocking APIs kept as
  thin wrappers; ``flux.sdk.wire.KafkaConnection`` — a blocking one-request connection for
  tests and tools that speak exact API versions.

See ``docs/sdk.md``.
"""

from flux.sdk.admin import (
    AclBinding,
    AclFilter,
    Admin,
    AsyncAdmin,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    MemberDescription,
    PartitionDescription,
    ScramCredentialDeletion,
    ScramCredentialInfo,
    ScramCredentialUpsertion,
    TopicDescription,
    UserScramCredentials,
)
from flux.sdk.cluster_client import ClusterClient
from flux.sdk.consumer import AsyncConsumer, Consumer
from flux.sdk.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from flux.sdk.errors import (
    ConfigurationError,
    FluxAuthenticationError,
    FluxConnectionError,
    FluxError,
    FluxTimeoutError,
    GroupMembershipError,
    GroupNotEmptyError,
    GroupNotFoundError,
    HttpApiError,
    KafkaError,
    MessageTooLargeError,
    NotLeaderError,
    ProducerFencedError,
    ResourceNotFoundError,
    TableViewError,
    TopicAlreadyExistsError,
    TransactionAbortedError,
    TransactionAbortRequiredError,
    TransactionError,
    TransactionStateError,
    UnknownTopicError,
)
from flux.sdk.groups import GroupConsumer
from flux.sdk.http import AsyncHttpPublisher, HttpPublisher, Published
from flux.sdk.messages import (
    ConsumedRecord,
    ConsumerGroupMetadata,
    Message,
    RecordMetadata,
    TopicPartition,
)
from flux.sdk.metadata import RetryPolicy
from flux.sdk.producer import AsyncProducer, Producer
from flux.sdk.security import ClientSecurity
from flux.sdk.simple import SimpleConsumer, SimpleProducer
from flux.sdk.table import AsyncTableView, TableView

__all__ = [
    "AclBinding",
    "AclFilter",
    "Admin",
    "Assignment",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncHttpPublisher",
    "AsyncProducer",
    "AsyncTableView",
    "BrokerDescription",
    "ClientSecurity",
    "ClusterClient",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigurationError",
    "ConsumedRecord",
    "Consumer",
    "ConsumerGroupMetadata",
    "FluxAuthenticationError",
    "FluxConnectionError",
    "FluxError",
    "FluxTimeoutError",
    "GroupConsumer",
    "GroupDescription",
    "GroupListing",
    "GroupMembershipError",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "HttpApiError",
    "HttpPublisher",
    "KafkaError",
    "MemberDescription",
    "Message",
    "MessageTooLargeError",
    "NotLeaderError",
    "PartitionDescription",
    "Producer",
    "ProducerFencedError",
    "Published",
    "RecordMetadata",
    "ResourceNotFoundError",
    "RetryPolicy",
    "ScramCredentialDeletion",
    "ScramCredentialInfo",
    "ScramCredentialUpsertion",
    "SimpleConsumer",
    "SimpleProducer",
    "Subscription",
    "TableView",
    "TableViewError",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortRequiredError",
    "TransactionAbortedError",
    "TransactionError",
    "TransactionStateError",
    "UnknownTopicError",
    "UserScramCredentials",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
]
