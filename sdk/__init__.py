"""The Flux Python client, built on flux.protocol.

Synchronous today (the async-first SDK with batching builds on the same pieces):

* ``flux.sdk.admin.Admin`` — topics, partitions, configs, offsets, consumer groups, cluster
  description;
* ``flux.sdk.simple.SimpleProducer`` (optionally idempotent) / ``SimpleConsumer`` — one
  request per call;
* ``flux.sdk.groups.GroupConsumer`` — a consumer-group member (join/sync, heartbeats,
  commits), over ``flux.sdk.consumer_protocol`` (subscription/assignment codec, range
  assignor);
* ``flux.sdk.cluster_client.ClusterClient`` — metadata-driven routing with retries, over
  ``flux.sdk.metadata`` (transport-independent cache, version negotiation, retry budget);
* ``flux.sdk.errors`` — the exception tree; ``flux.sdk.wire.KafkaConnection`` — a blocking
  one-request connection used by fluxctl, tests and benchmarks.
"""

from flux.sdk.admin import (
    Admin,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    MemberDescription,
    PartitionDescription,
    TopicDescription,
)
from flux.sdk.cluster_client import ClusterClient
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
    FluxConnectionError,
    FluxError,
    FluxTimeoutError,
    GroupMembershipError,
    GroupNotEmptyError,
    GroupNotFoundError,
    KafkaError,
)
from flux.sdk.groups import GroupConsumer
from flux.sdk.metadata import RetryPolicy
from flux.sdk.simple import ConsumedRecord, RecordMetadata, SimpleConsumer, SimpleProducer

__all__ = [
    "Admin",
    "Assignment",
    "BrokerDescription",
    "ClusterClient",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigurationError",
    "ConsumedRecord",
    "FluxConnectionError",
    "FluxError",
    "FluxTimeoutError",
    "GroupConsumer",
    "GroupDescription",
    "GroupListing",
    "GroupMembershipError",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "KafkaError",
    "MemberDescription",
    "PartitionDescription",
    "RecordMetadata",
    "RetryPolicy",
    "SimpleConsumer",
    "SimpleProducer",
    "Subscription",
    "TopicDescription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
]
