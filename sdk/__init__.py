"""The Flux Python client, built on flux.protocol.

Synchronous today (the async-first SDK with batching builds on the same pieces):

* ``flux.sdk.admin.Admin`` — topics, partitions, configs, offsets, cluster description;
* ``flux.sdk.simple.SimpleProducer`` / ``SimpleConsumer`` — one request per call;
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
    PartitionDescription,
    TopicDescription,
)
from flux.sdk.cluster_client import ClusterClient
from flux.sdk.errors import (
    ConfigurationError,
    FluxConnectionError,
    FluxError,
    FluxTimeoutError,
    KafkaError,
)
from flux.sdk.metadata import RetryPolicy
from flux.sdk.simple import ConsumedRecord, RecordMetadata, SimpleConsumer, SimpleProducer

__all__ = [
    "Admin",
    "BrokerDescription",
    "ClusterClient",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigurationError",
    "ConsumedRecord",
    "FluxConnectionError",
    "FluxError",
    "FluxTimeoutError",
    "KafkaError",
    "PartitionDescription",
    "RecordMetadata",
    "RetryPolicy",
    "SimpleConsumer",
    "SimpleProducer",
    "TopicDescription",
]
