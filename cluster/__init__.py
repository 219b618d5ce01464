"""The broker (``flux.cluster``): a node's broker role, its assembly and process launch.

This package itself: ``node`` (node process assembly: roles, listeners, signals, the ready
file), ``launcher`` (start, stop and find node processes), ``config`` (the node TOML file and
``FLUX_`` overrides), ``topics`` (topic configs on a broker), ``open_files`` (the process's
open-file limit, raised at start), ``connection_limit`` (``broker.max_connections`` on each
listener, Kafka and HTTP), ``log_throttle`` (one log line per interval about a flood).

Subpackages, one responsibility each:

- ``kafka``: the Kafka front door: the listener, request dispatch (``KafkaApis``) and the
  handlers per API family, producer ids.
- ``metadata``: following the controller: registration, heartbeats, the metadata image, and
  the client of the controller HTTP API.
- ``replication``: the partition replicas (``ReplicaManager``, ``Partition``), follower
  fetching, ISR changes, the replication wire format, HTTP calls to other brokers.
- ``groups``: consumer groups and committed offsets (``__consumer_offsets``, compacted),
  offsets retention and OffsetDelete.
- ``compaction``: the node's log cleaner (``LogCleanerService``) over ``flux.storage.compaction``,
  its worker process and the record codec it decodes batches with.
- ``http``: the broker's HTTP listener and API (the original Flux API and REST), push
  subscriptions, memory topics, message-id dedup and Prometheus metrics.
"""
