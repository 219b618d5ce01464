"""The Kafka front door: the protocol listener, request dispatch, and the handlers of each
Kafka API family.

``server`` (``KafkaServer``: framing, per-connection request loop), ``apis`` (``KafkaApis``:
dispatch, ApiVersions, ``ADVERTISED_VERSIONS``), ``common`` (state and controller forwarding
the handlers share), ``metadata`` (Metadata, DescribeCluster, auto-creation), ``produce``,
``fetch`` (Fetch, ListOffsets), ``admin`` (CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), ``config_changes`` (the pure change
sets of the two alter APIs), ``groups`` (the group coordinator's APIs), ``producer_ids``
(InitProducerId and ``ProducerIdManager``).
"""
